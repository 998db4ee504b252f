package vaultstore

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/mint"
	"github.com/ringmaster-io/ringmaster/internal/testing/blackhole"
)

// TestSharedBudgetBoundsABlackholedVault has more rings read their entries
// at once than the key source's budget allows, from a Vault that never
// answers: SharedCalls of them reach it and give up at the read timeout;
// the others give up without calling, after SharedWait.
func TestSharedBudgetBoundsABlackholedVault(t *testing.T) {
	hole := blackhole.Listen(t)
	addr := "https://" + hole.Addr
	v, err := mint.NewVault(mint.VaultOptions{Address: addr,
		Login: mint.TokenLogin{Token: func(context.Context) (string, error) { return "s.token", nil }}})
	if err != nil {
		t.Fatal(err)
	}
	s := &Store{vault: v, kv: v.KVv2("secret"), mount: "secret", path: "ringmaster/test", maxVersions: 3,
		readTimeout: 2 * time.Second}
	const rings = 6
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		timedOut int
		busy     int
	)
	for i := range rings {
		wg.Go(func() {
			_, err := s.Read(context.Background(), s.Entry("shop", "web"+string(rune('a'+i))), "shop/web")
			mu.Lock()
			defer mu.Unlock()
			if mint.CarriedReason(err) != v1alpha1.ReasonVaultUnavailable {
				t.Errorf("ring %d: %v, want reason %s", i, err, v1alpha1.ReasonVaultUnavailable)
			}
			switch {
			case err != nil && strings.Contains(err.Error(), "did not answer in time"):
				timedOut++
			case err != nil && strings.Contains(err.Error(), "all in progress"):
				busy++
			}
		})
	}
	wg.Wait()
	if timedOut != SharedCalls || busy != rings-SharedCalls {
		t.Errorf("%d reads timed out and %d gave up without calling; want %d and %d", timedOut, busy, SharedCalls, rings-SharedCalls)
	}
	if n := hole.Accepted(); n > SharedCalls {
		t.Errorf("vault was called on %d connections; the budget is %d", n, SharedCalls)
	}
	for i := range SharedCalls {
		select {
		case v.Slots(SharedCalls) <- struct{}{}:
		default:
			t.Fatalf("slot %d of the budget was not given back", i)
		}
	}
}
