package mint

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

// A loopback stand-in for Vault answers what a broken or hostile Vault might;
// every answer but a fresh 32-byte key must fail the whole mint with the
// reason the ring reports, and without echoing the token.

const standinToken = "s.standin-token-never-shown"

func standin(t *testing.T, random func(n int) (int, string)) string {
	t.Helper()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/auth/token/lookup-self":
			fmt.Fprint(w, `{"data":{"ttl":3600,"renewable":false}}`)
		case strings.HasSuffix(r.URL.Path, "/random/32"):
			if r.Header.Get("X-Vault-Token") != standinToken {
				w.WriteHeader(http.StatusForbidden)
				fmt.Fprint(w, `{"errors":["permission denied"]}`)
				return
			}
			status, body := random(int(calls.Add(1)))
			w.WriteHeader(status)
			fmt.Fprint(w, body)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func randomBody(b []byte) string {
	return fmt.Sprintf(`{"data":{"random_bytes":%q}}`, base64.StdEncoding.EncodeToString(b))
}

func fixed(b byte) []byte { return []byte(strings.Repeat(string(rune(b)), keyring.SecretSize)) }

func TestVaultStandIn(t *testing.T) {
	tests := []struct {
		name   string
		random func(n int) (int, string)
		token  string
		reason string
	}{
		{"fresh keys", func(n int) (int, string) { return 200, randomBody(fixed(byte('a' + n))) }, standinToken, ""},
		{"not JSON", func(int) (int, string) { return 200, "<html>proxy error</html>" }, standinToken, v1alpha1.ReasonVaultBadResponse},
		{"no random_bytes", func(int) (int, string) { return 200, `{"data":{}}` }, standinToken, v1alpha1.ReasonVaultBadResponse},
		{"random_bytes not base64", func(int) (int, string) { return 200, `{"data":{"random_bytes":"%%%"}}` }, standinToken, v1alpha1.ReasonVaultBadResponse},
		{"31 bytes", func(int) (int, string) { return 200, randomBody(make([]byte, 31)) }, standinToken, v1alpha1.ReasonVaultBadResponse},
		{"33 bytes", func(int) (int, string) { return 200, randomBody(append(fixed('x'), 'y')) }, standinToken, v1alpha1.ReasonVaultBadResponse},
		{"all zero", func(int) (int, string) { return 200, randomBody(make([]byte, 32)) }, standinToken, v1alpha1.ReasonVaultBadResponse},
		{"the same key twice", func(int) (int, string) { return 200, randomBody(fixed('k')) }, standinToken, v1alpha1.ReasonVaultBadResponse},
		{"sealed (503)", func(int) (int, string) { return 503, `{"errors":["Vault is sealed"]}` }, standinToken, v1alpha1.ReasonVaultUnavailable},
		{"second key fails (500)", func(n int) (int, string) {
			if n == 2 {
				return 500, `{"errors":["internal error"]}`
			}
			return 200, randomBody(fixed('a'))
		}, standinToken, v1alpha1.ReasonVaultUnavailable},
		{"wrong token", nil, "s.wrong", v1alpha1.ReasonVaultPermissionDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := standin(t, tt.random)
			v, err := NewVault(VaultOptions{Address: addr, Login: TokenLogin{Token: func(context.Context) (string, error) { return tt.token, nil }}})
			if err != nil {
				t.Fatal(err)
			}
			secrets, err := v.Mint(context.Background(), 2)
			if got := Reason(err); got != tt.reason {
				t.Fatalf("Mint reason = %q (%v), want %q", got, err, tt.reason)
			}
			if tt.reason != "" {
				if secrets != nil {
					t.Fatalf("a failed mint returned %d secrets", len(secrets))
				}
				if strings.Contains(err.Error(), tt.token) {
					t.Fatalf("the error shows the token: %v", err)
				}
				return
			}
			if len(secrets) != 2 || secrets[0] == secrets[1] {
				t.Fatalf("Mint = %d secrets, want 2 distinct", len(secrets))
			}
		})
	}
}

func TestVaultUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "http://" + l.Addr().String()
	l.Close() // nothing listens there now
	v, err := NewVault(VaultOptions{Address: addr, Login: TokenLogin{Token: func(context.Context) (string, error) { return standinToken, nil }}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Mint(context.Background(), 1); Reason(err) != v1alpha1.ReasonVaultUnavailable {
		t.Fatalf("Mint against a closed port: reason %q (%v), want %s", Reason(err), err, v1alpha1.ReasonVaultUnavailable)
	}
}
