package agent

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/echring"
)

// TestECHKeysCostNoAllocation: the hooks crypto/tls calls per handshake,
// the outer config's and the served config's GetEncryptedClientHelloKeys,
// return the slice built at the swap: no allocation, the published config
// first (what clients hold), the staged one after it, retry only for the
// published config.
func TestECHKeysCostNoAllocation(t *testing.T) {
	now := time.Now()
	var cs []echring.Config
	for i, st := range []echring.State{echring.Staged, echring.Published} {
		c, err := echring.NewConfig(uint8(9-i), bytes.Repeat([]byte{byte(i + 1)}, echring.SeedSize), echring.Params{PublicName: "public.example.test"})
		if err != nil {
			t.Fatal(err)
		}
		c.State, c.CreatedAt, c.ExpiresAt = st, now.Add(-time.Duration(i)*time.Hour), now.Add(time.Hour)
		if st == echring.Published {
			c.PublishedAt = c.CreatedAt
		}
		cs = append(cs, c)
	}
	s := newSnapshot(nil, &echring.Ring{Ring: "shop/web", Epoch: 1, IssuedAt: now, Configs: cs}, nil, now)
	f := newFront(&tls.Config{}, false, func(tls.ConnectionState, bool, bool) {})
	f.cur.Store(f.build(s))
	served := f.cur.Load().full
	hello := &tls.ClientHelloInfo{}
	var keys []tls.EncryptedClientHelloKey
	allocs := testing.AllocsPerRun(100, func() {
		keys, _ = f.getECHKeys(hello)
		keys, _ = served.GetEncryptedClientHelloKeys(hello)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per handshake, want 0", allocs)
	}
	if len(keys) != 2 {
		t.Fatalf("%d keys served, want 2", len(keys))
	}
	if !bytes.Equal(keys[0].Config, cs[1].Config) || !bytes.Equal(keys[1].Config, cs[0].Config) || !keys[0].SendAsRetry || keys[1].SendAsRetry {
		t.Errorf("keys served: first the published config %t, then the staged %t, retry %t/%t; want true, true, true/false",
			bytes.Equal(keys[0].Config, cs[1].Config), bytes.Equal(keys[1].Config, cs[0].Config), keys[0].SendAsRetry, keys[1].SendAsRetry)
	}
}

// TestECHWordedErrors: an ECH refusal is still its sentinel to errors.Is,
// and its text speaks of the ECH key ring alone.
func TestECHWordedErrors(t *testing.T) {
	for _, tc := range []struct {
		err, sentinel error
	}{
		{errECHForeign, ErrForeignRing},
		{errECHRollback, ErrRollback},
		{errECHEpochConflict, ErrEpochConflict},
	} {
		wrapped := fmt.Errorf("%s: %w: more", echring.FileName, tc.err)
		if !errors.Is(wrapped, tc.sentinel) {
			t.Errorf("%q is not %v to errors.Is", wrapped, tc.sentinel)
		}
		if msg := wrapped.Error(); !strings.Contains(msg, "ECH key ring") || strings.Contains(msg, "ticket") {
			t.Errorf("%q does not speak of the ECH key ring alone", msg)
		}
	}
}
