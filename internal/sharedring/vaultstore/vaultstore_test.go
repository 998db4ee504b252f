//go:build integration

package vaultstore

import (
	"context"
	"crypto/rand"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/mint"
	"github.com/ringmaster-io/ringmaster/internal/sharedring"
	"github.com/ringmaster-io/ringmaster/internal/testing/vaulttest"
)

// sharedStore is a Store on a fresh dev server, logged in as root.
func sharedStore(t *testing.T) (*Store, *vaulttest.Server) {
	t.Helper()
	srv, err := vaulttest.Start(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	v, err := mint.NewVault(mint.VaultOptions{Address: srv.Addr, CABundle: srv.CA,
		Login: mint.TokenLogin{Token: func(context.Context) (string, error) { return vaulttest.RootToken, nil }}})
	if err != nil {
		t.Fatal(err)
	}
	return &Store{vault: v, kv: v.KVv2("secret"), mount: "secret", path: "ringmaster/test", maxVersions: 3}, srv
}

// ringWith is ring shop/web holding a fresh key per time, newest first.
func ringWith(t *testing.T, n int) keyring.Ring {
	t.Helper()
	now := time.Now().Truncate(time.Second)
	r := keyring.Ring{Name: "shop/web", Epoch: 1, IssuedAt: now}
	for i := range n {
		var s keyring.Secret
		_, _ = rand.Read(s[:])
		k := keyring.NewKey(s)
		k.ActiveFrom = now.Add(time.Duration(1-i) * time.Hour)
		k.RetireAt = k.ActiveFrom.Add(time.Hour)
		k.ExpiresAt = k.RetireAt.Add(3 * time.Hour)
		r.Keys = append(r.Keys, k)
	}
	return r
}

func TestSharedWriteIsCheckAndSet(t *testing.T) {
	s, _ := sharedStore(t)
	ctx := context.Background()
	entry := s.Entry("shop", "web")
	if entry != "ringmaster/test/namespaces/shop/web" || s.Entry("", "edge") != "ringmaster/test/cluster/edge" {
		t.Fatalf("entries %q and %q", entry, s.Entry("", "edge"))
	}
	if rec, err := s.Read(ctx, entry, "shop/web"); err != nil || rec != nil {
		t.Fatalf("Read of a missing entry = %v, %v; want nil, nil", rec, err)
	}
	var none *sharedring.Record
	first, err := s.Write(ctx, entry, 0, none.Next(ringWith(t, 2), sharedring.Policy{}, "r1", ""))
	if err != nil || first.Version != 1 {
		t.Fatalf("first write: version %d, %v", first.Version, err)
	}
	got, err := s.Read(ctx, entry, "shop/web")
	if err != nil || got.Version != 1 || !sharedring.Same(got.Ring, first.Ring) || !got.Handled("r1") {
		t.Fatalf("Read = %+v, %v; want version 1 holding what was written", got, err)
	}
	if _, err := s.Write(ctx, entry, 0, none.Next(ringWith(t, 2), sharedring.Policy{}, "", "")); !errors.Is(err, ErrLostRace) {
		t.Fatalf("a second first write = %v, want ErrLostRace", err)
	}
	if _, err := s.Read(ctx, entry, "shop/api"); mint.CarriedReason(err) != v1alpha1.ReasonVaultBadResponse {
		t.Errorf("Read as another ring = %v, want a VaultBadResponse naming the ring", err)
	}

	// Many rounds of two writers from the same version: exactly one wins
	// each, and the entry gains exactly one version per round.
	cur := *got
	for round := range 20 {
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			wins []sharedring.Record
			lost int
		)
		for range 2 {
			wg.Go(func() {
				rec, err := s.Write(ctx, entry, cur.Version, cur.Next(ringWith(t, 2), sharedring.Policy{}, "", ""))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					wins = append(wins, rec)
				case errors.Is(err, ErrLostRace):
					lost++
				default:
					t.Errorf("round %d: %v", round, err)
				}
			})
		}
		wg.Wait()
		if len(wins) != 1 || lost != 1 {
			t.Fatalf("round %d: %d writers won, %d lost; want exactly one each", round, len(wins), lost)
		}
		now, err := s.Read(ctx, entry, "shop/web")
		if err != nil || now.Version != cur.Version+1 || !sharedring.Same(now.Ring, wins[0].Ring) {
			t.Fatalf("round %d: the entry is at %d, want the winner's version %d", round, now.Version, cur.Version+1)
		}
		cur = *now
	}
}

func TestSharedSweepDestroysVersionsHoldingDroppedKeys(t *testing.T) {
	s, srv := sharedStore(t)
	ctx := context.Background()
	entry := s.Entry("shop", "web")
	var none *sharedring.Record
	v1, err := s.Write(ctx, entry, 0, none.Next(ringWith(t, 3), sharedring.Policy{}, "", ""))
	if err != nil {
		t.Fatal(err)
	}
	// v2 keeps every key of v1 (only its epoch differs); v3 drops v1's
	// oldest key.
	v2, err := s.Write(ctx, entry, 1, v1.Next(v1.Ring, sharedring.Policy{}, "", ""))
	if err != nil {
		t.Fatal(err)
	}
	kept := v2.Ring
	kept.Keys = slices.Clone(kept.Keys[:2])
	v3, err := s.Write(ctx, entry, 2, v2.Next(kept, sharedring.Policy{}, "", ""))
	if err != nil {
		t.Fatal(err)
	}
	destroyed, err := s.Sweep(ctx, entry, v3)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(destroyed, []int64{1, 2}) {
		t.Errorf("Sweep destroyed %v, want [1 2]: both hold the dropped key", destroyed)
	}
	meta, err := srv.Root.KVv2("secret").GetMetadata(ctx, entry)
	if err != nil {
		t.Fatal(err)
	}
	if meta.MaxVersions != 3 || !meta.CASRequired {
		t.Errorf("metadata max_versions %d, cas_required %t; want 3 and true", meta.MaxVersions, meta.CASRequired)
	}
	for v, want := range map[string]bool{"1": true, "2": true, "3": false} {
		if meta.Versions[v].Destroyed != want {
			t.Errorf("version %s destroyed = %t, want %t", v, meta.Versions[v].Destroyed, want)
		}
	}
	// cas_required: a write without check-and-set is refused now.
	if _, err := srv.Root.KVv2("secret").Put(ctx, entry, map[string]any{"x": "y"}); err == nil {
		t.Error("a write without check-and-set was accepted")
	}
	if again, err := s.Sweep(ctx, entry, v3); err != nil || len(again) != 0 {
		t.Errorf("a second sweep destroyed %v (%v), want nothing", again, err)
	}
}
