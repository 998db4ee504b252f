package mint

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"
)

// Forgetting a key source revokes the token the operator logged in for
// (auth/token/revoke-self, with that token), in the background; a token
// given to it (tokenSecretRef) is never revoked.
func TestForgetRevokesTheLoginToken(t *testing.T) {
	var mu sync.Mutex
	var revoked []string
	addr, ca := serveTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/auth/approle/login":
			fmt.Fprint(w, `{"auth":{"client_token":"s.login-token","lease_duration":3600,"renewable":true}}`)
		case "/v1/auth/token/lookup-self":
			fmt.Fprint(w, `{"data":{"ttl":3600,"renewable":false}}`)
		case "/v1/auth/token/revoke-self":
			mu.Lock()
			revoked = append(revoked, r.Header.Get("X-Vault-Token"))
			mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
		case "/v1/sys/tools/random/32":
			fmt.Fprint(w, randomBody(fixed('r')))
		default:
			http.NotFound(w, r)
		}
	}))
	ctx := context.Background()
	approle := AppRoleLogin{Mount: "approle", RoleID: "r", SecretID: func(context.Context) (string, error) { return "s", nil }}
	revokedTokens := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), revoked...)
	}

	for _, tc := range []struct {
		name  string
		login Login
		want  []string
	}{
		{"a login token", approle, []string{"s.login-token"}},
		{"a token of the key source's Secret", tokenLogin(standinToken), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			revoked = nil
			mu.Unlock()
			v, err := NewVault(VaultOptions{Address: addr, CABundle: ca, Login: tc.login})
			if err != nil {
				t.Fatal(err)
			}
			if err := v.Check(ctx); err != nil {
				t.Fatal(err)
			}
			s := &Sources{Timeout: 5 * time.Second, vault: map[string]cachedVault{"vault-prod": {key: "k", source: v}}}
			s.Forget("vault-prod")
			deadline := time.Now().Add(10 * time.Second)
			for len(revokedTokens()) < len(tc.want) && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			// Room for a revoke that should not come.
			time.Sleep(100 * time.Millisecond)
			if got := revokedTokens(); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("revoked %q, want %q", got, tc.want)
			}
			if len(s.vault) != 0 {
				t.Errorf("Forget kept %d clients", len(s.vault))
			}
		})
	}
}
