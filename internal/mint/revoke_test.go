//go:build integration

package mint

import (
	"context"
	"testing"
	"time"
)

// A token the operator logged in for is revoked once its key source is
// forgotten (deleted, or changed): it would otherwise stay valid for its
// TTL, unused. A token given to it in a Secret is its owner's.
func TestVaultRevokesItsTokenWhenForgotten(t *testing.T) {
	srv, approle := startVault(t)
	ctx := context.Background()
	v, err := NewVault(VaultOptions{Address: srv.Addr, CABundle: srv.CA, Login: approle})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Mint(ctx, 1); err != nil {
		t.Fatal(err)
	}
	token := v.token
	if _, err := srv.Root.Auth().Token().Lookup(token); err != nil {
		t.Fatalf("the operator's token does not look up before the revoke: %v", err)
	}

	s := &Sources{vault: map[string]cachedVault{"vault-prod": {key: "k", source: v}}}
	s.Forget("vault-prod")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := srv.Root.Auth().Token().Lookup(token); err != nil {
			break // revoked
		}
		if time.Now().After(deadline) {
			t.Fatal("the token of a forgotten key source is still valid")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := v.Mint(ctx, 1); err != nil {
		t.Errorf("a client whose token was revoked does not log in again: %v", err)
	}

	given, err := srv.Root.Auth().Token().Create(nil)
	if err != nil {
		t.Fatal(err)
	}
	owned, err := NewVault(VaultOptions{Address: srv.Addr, CABundle: srv.CA,
		Login: TokenLogin{Token: func(context.Context) (string, error) { return given.Auth.ClientToken, nil }}})
	if err != nil {
		t.Fatal(err)
	}
	if err := owned.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if err := owned.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Root.Auth().Token().Lookup(given.Auth.ClientToken); err != nil {
		t.Errorf("a token read from a Secret was revoked: it is its owner's: %v", err)
	}
}
