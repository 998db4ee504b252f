//go:build integration

package mint

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	vault "github.com/hashicorp/vault/api"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/testing/vaulttest"
)

// countingLogin counts the logins of the Login it wraps.
type countingLogin struct {
	inner Login
	n     atomic.Int64
}

func (c *countingLogin) Login(ctx context.Context, client *vault.Client) (*vault.Secret, error) {
	c.n.Add(1)
	return c.inner.Login(ctx, client)
}

// startVault runs a real Vault dev server with an AppRole whose tokens live
// one minute and may read random bytes.
func startVault(t *testing.T) (*vaulttest.Server, AppRoleLogin) {
	t.Helper()
	srv, err := vaulttest.Start(t.TempDir(), func(c *vault.Client) error {
		if err := c.Sys().PutPolicy("random", `path "sys/tools/random/*" { capabilities = ["update"] }`); err != nil {
			return err
		}
		if err := c.Sys().EnableAuthWithOptions("approle", &vault.EnableAuthOptions{Type: "approle"}); err != nil {
			return err
		}
		_, err := c.Logical().Write("auth/approle/role/ringmaster", map[string]any{"token_policies": "random", "token_ttl": "60s", "token_max_ttl": "1h"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	role, err := srv.Root.Logical().Read("auth/approle/role/ringmaster/role-id")
	if err != nil {
		t.Fatal(err)
	}
	sid, err := srv.Root.Logical().Write("auth/approle/role/ringmaster/secret-id", nil)
	if err != nil {
		t.Fatal(err)
	}
	secretID := sid.Data["secret_id"].(string)
	return srv, AppRoleLogin{Mount: "approle", RoleID: role.Data["role_id"].(string),
		SecretID: func(context.Context) (string, error) { return secretID, nil }}
}

func TestVaultTokenLifecycle(t *testing.T) {
	srv, approle := startVault(t)
	login := &countingLogin{inner: approle}
	now := time.Now()
	v, err := NewVault(VaultOptions{Address: srv.Addr, CABundle: srv.CA, Login: login, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mint := func(step string) {
		t.Helper()
		secrets, err := v.Mint(ctx, 2)
		if err != nil || len(secrets) != 2 || secrets[0] == secrets[1] {
			t.Fatalf("%s: Mint = %d secrets, %v", step, len(secrets), err)
		}
	}

	mint("first mint")
	mint("second mint")
	if got := login.n.Load(); got != 1 {
		t.Fatalf("logins after two mints = %d, want 1: the token is reused", got)
	}

	now = now.Add(45 * time.Second) // past two thirds of the 60 s TTL
	mint("mint late in the token's life")
	if got := login.n.Load(); got != 1 {
		t.Fatalf("logins = %d, want 1: a renewable token is renewed, not replaced", got)
	}

	// Revoke every AppRole token behind the source's back, as an expiry or
	// an operator of Vault would: the next mint logs in again by itself.
	if err := srv.Root.Sys().RevokePrefix("auth/approle/login"); err != nil {
		t.Fatal(err)
	}
	mint("mint after revocation")
	if got := login.n.Load(); got != 2 {
		t.Fatalf("logins = %d, want 2: a revoked token means one new login", got)
	}

	now = now.Add(2 * time.Hour) // past the token's max TTL: renewal fails
	if err := srv.Root.Sys().RevokePrefix("auth/approle/login"); err != nil {
		t.Fatal(err)
	}
	mint("mint after expiry")
	if got := login.n.Load(); got != 3 {
		t.Fatalf("logins = %d, want 3", got)
	}
}

func TestVaultAppRoleWrongSecretID(t *testing.T) {
	srv, approle := startVault(t)
	approle.SecretID = func(context.Context) (string, error) { return "not-the-secret-id", nil }
	v, err := NewVault(VaultOptions{Address: srv.Addr, CABundle: srv.CA, Login: approle})
	if err != nil {
		t.Fatal(err)
	}
	_, err = v.Mint(context.Background(), 1)
	if CarriedReason(err) != v1alpha1.ReasonVaultPermissionDenied {
		t.Fatalf("Mint with a wrong secret id: reason %q (%v), want %s", CarriedReason(err), err, v1alpha1.ReasonVaultPermissionDenied)
	}
	if strings.Contains(err.Error(), "not-the-secret-id") {
		t.Fatalf("the error shows the secret id: %v", err)
	}
}
