package mint

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
)

// A loopback stand-in for Vault answers what a broken or hostile Vault might;
// every answer but a fresh 32-byte key must fail the whole mint with the
// reason the ring reports, and without echoing the token.

const standinToken = "s.standin-token-never-shown"

// standin serves on loopback over TLS; it returns its address and the PEM
// of the CA its certificate chains to.
func standin(t *testing.T, random func(n int) (int, string)) (string, []byte) {
	t.Helper()
	var calls atomic.Int64
	return serveTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
}

// serveTLS serves h on loopback over TLS, with a certificate from a CA of
// its own, and returns its URL and that CA's PEM.
func serveTLS(t *testing.T, h http.Handler) (string, []byte) {
	t.Helper()
	ca, err := testpki.NewCA("stand-in Vault CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Localhost()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{leaf.TLS}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL, ca.PEM
}

func tokenLogin(token string) Login {
	return TokenLogin{Token: func(context.Context) (string, error) { return token, nil }}
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
			addr, ca := standin(t, tt.random)
			v, err := NewVault(VaultOptions{Address: addr, CABundle: ca, Login: tokenLogin(tt.token)})
			if err != nil {
				t.Fatal(err)
			}
			secrets, err := v.Mint(context.Background(), 2)
			if got := CarriedReason(err); got != tt.reason {
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
	addr := "https://" + l.Addr().String()
	l.Close() // nothing listens there now
	v, err := NewVault(VaultOptions{Address: addr, Login: tokenLogin(standinToken)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Mint(context.Background(), 1); CarriedReason(err) != v1alpha1.ReasonVaultUnavailable {
		t.Fatalf("Mint against a closed port: reason %q (%v), want %s", CarriedReason(err), err, v1alpha1.ReasonVaultUnavailable)
	}
}

// Only https, only to a server the CA bundle vouches for, never redirected
// elsewhere, and never swayed by the operator's environment: the token goes
// where the key source says, or nowhere.
func TestVaultSendsCredentialsOnlyWhereTheKeySourceSays(t *testing.T) {
	good := func(int) (int, string) { return 200, randomBody(fixed('a')) }

	if _, err := NewVault(VaultOptions{Address: "http://127.0.0.1:8200", Login: tokenLogin(standinToken)}); CarriedReason(err) != v1alpha1.ReasonVaultConfig {
		t.Errorf("an http:// address: reason %q (%v), want %s", CarriedReason(err), err, v1alpha1.ReasonVaultConfig)
	}

	t.Run("a server the CA bundle does not vouch for", func(t *testing.T) {
		addr, _ := standin(t, good)
		_, otherCA := standin(t, good)
		t.Setenv("VAULT_SKIP_VERIFY", "true") // ignored
		v, err := NewVault(VaultOptions{Address: addr, CABundle: otherCA, Login: tokenLogin(standinToken)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = v.Mint(context.Background(), 1)
		if CarriedReason(err) != v1alpha1.ReasonVaultUnavailable || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("Mint: reason %q (%v), want %s naming the certificate", CarriedReason(err), err, v1alpha1.ReasonVaultUnavailable)
		}
	})

	t.Run("a redirect", func(t *testing.T) {
		var elsewhere atomic.Int64
		thief, thiefCA := serveTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			elsewhere.Add(1)
			fmt.Fprint(w, randomBody(fixed('t')))
		}))
		redirector, ca := serveTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, thief+r.URL.Path, http.StatusTemporaryRedirect)
		}))
		// Trust both, so that only the refusal to follow can stop it.
		v, err := NewVault(VaultOptions{Address: redirector, CABundle: append(ca, thiefCA...), Login: tokenLogin(standinToken)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Mint(context.Background(), 1); err == nil {
			t.Error("a mint through a redirect succeeded")
		}
		if n := elsewhere.Load(); n != 0 {
			t.Errorf("the redirect was followed %d time(s): the token went elsewhere", n)
		}
	})

	t.Run("a token in the environment", func(t *testing.T) {
		addr, ca := standin(t, good)
		t.Setenv("VAULT_TOKEN", standinToken) // would pass the stand-in's check
		v, err := NewVault(VaultOptions{Address: addr, CABundle: ca, Login: tokenLogin("s.wrong")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Mint(context.Background(), 1); CarriedReason(err) != v1alpha1.ReasonVaultPermissionDenied {
			t.Errorf("Mint: reason %q (%v): the environment's token was used", CarriedReason(err), err)
		}
	})
}

// A Vault that never answers holds a mint only until the deadline.
func TestSourcesFillHasADeadline(t *testing.T) {
	release := make(chan struct{})
	hang, ca := serveTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/auth/token/lookup-self" {
			fmt.Fprint(w, `{"data":{"ttl":3600}}`)
			return
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release) }) // before the server closes: cleanups run last first
	v, err := NewVault(VaultOptions{Address: hang, CABundle: ca, Login: tokenLogin(standinToken)})
	if err != nil {
		t.Fatal(err)
	}
	s := &Sources{Timeout: 200 * time.Millisecond}
	plan := keyring.Next(time.Now(), keyring.Policy{RotationInterval: time.Hour, RetainedKeys: 1, ActivationDelay: time.Minute}, keyring.Ring{}, keyring.Inputs{})
	_, err = s.Fill(context.Background(), v, plan)
	if CarriedReason(err) != v1alpha1.ReasonVaultUnavailable || !strings.Contains(err.Error(), "in time") {
		t.Fatalf("Fill against a Vault that never answers: reason %q (%v), want %s saying it did not answer in time", CarriedReason(err), err, v1alpha1.ReasonVaultUnavailable)
	}
}
