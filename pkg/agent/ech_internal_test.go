package agent

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
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
	s := newSnapshot(nil, &echring.Ring{Ring: "shop/web", Epoch: 1, IssuedAt: now, Configs: cs}, unknownDelay, nil, now)
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

// TestRetryConfigs: the published configs are the retry configs; with none
// live, the newest retired config, or else the newest staged config staged
// for at least the bound on the ring's deliveryDelay; else none.
func TestRetryConfigs(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	cfg := func(id uint8, st echring.State, age time.Duration) echring.Config {
		return echring.Config{ID: id, State: st, CreatedAt: now.Add(-age)}
	}
	const delay = 5 * time.Minute
	for _, tc := range []struct {
		name  string
		cs    []echring.Config // in serving order
		delay time.Duration
		want  []uint8 // ids sent as retry configs
	}{
		{"published, staged and retired: the published", []echring.Config{cfg(2, echring.Published, time.Hour), cfg(3, echring.Staged, time.Hour), cfg(1, echring.Retired, 2*time.Hour)}, delay, []uint8{2}},
		{"two published: both", []echring.Config{cfg(3, echring.Published, time.Hour), cfg(2, echring.Published, 2*time.Hour)}, delay, []uint8{3, 2}},
		{"a published one and a due staged one: the published", []echring.Config{cfg(2, echring.Published, time.Hour), cfg(3, echring.Staged, time.Hour)}, delay, []uint8{2}},
		{"no published, a due staged one: the staged", []echring.Config{cfg(3, echring.Staged, time.Hour)}, delay, []uint8{3}},
		{"no published, staged exactly the delay: the staged", []echring.Config{cfg(3, echring.Staged, delay)}, delay, []uint8{3}},
		{"no published, staged for less than the delay: none", []echring.Config{cfg(3, echring.Staged, delay-time.Second)}, delay, nil},
		{"no published, no delay known: none", []echring.Config{cfg(3, echring.Staged, time.Hour)}, unknownDelay, nil},
		{"a zero delay: the staged at once", []echring.Config{cfg(3, echring.Staged, 0)}, 0, []uint8{3}},
		{"no published, retired and a due staged: the newest retired", []echring.Config{cfg(4, echring.Staged, time.Hour), cfg(3, echring.Retired, 2*time.Hour), cfg(2, echring.Retired, 3*time.Hour)}, delay, []uint8{3}},
		{"no published, retired and a staged not due: the retired", []echring.Config{cfg(4, echring.Staged, 0), cfg(3, echring.Retired, 2*time.Hour)}, delay, []uint8{3}},
		{"nothing", nil, delay, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []uint8
			for i, r := range retryConfigs(tc.cs, now, tc.delay) {
				if r {
					got = append(got, tc.cs[i].ID)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("retry configs %v, want %v", got, tc.want)
			}
		})
	}
}

// TestLearnDelay: the bound on deliveryDelay is the least time a config
// the agent saw published spent staged, over every ring taken, and stays
// unknown until one was.
func TestLearnDelay(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	a := &Agent{echDelay: unknownDelay}
	a.learnDelay(&echring.Ring{Configs: []echring.Config{{State: echring.Staged, CreatedAt: t0}}})
	if a.echDelay != unknownDelay {
		t.Fatalf("delay %s learnt from a staged config alone", a.echDelay)
	}
	a.learnDelay(&echring.Ring{Configs: []echring.Config{
		{State: echring.Published, CreatedAt: t0, PublishedAt: t0.Add(7 * time.Minute)},
		{State: echring.Retired, CreatedAt: t0.Add(-time.Hour), PublishedAt: t0.Add(-time.Hour + 9*time.Minute), RetiredAt: t0},
	}})
	if a.echDelay != 7*time.Minute {
		t.Fatalf("delay %s, want 7m", a.echDelay)
	}
	a.learnDelay(&echring.Ring{Configs: []echring.Config{{State: echring.Published, CreatedAt: t0, PublishedAt: t0.Add(30 * time.Minute)}}})
	if a.echDelay != 7*time.Minute {
		t.Fatalf("delay %s after a slower publication, want 7m still", a.echDelay)
	}
}
