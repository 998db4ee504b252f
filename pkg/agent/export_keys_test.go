package agent_test

import (
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

// TestExportTicketKeys: the keys handed out are the ones served, in serving
// order, secrets included; they follow activation and expiry as the configs
// do; and the copy is overwritten once the callback returns.
func TestExportTicketKeys(t *testing.T) {
	s := newSchedule(time.Now())
	clock := newFakeClock(s.t0)
	v := newVolume(t)
	v.write(s.ring(t, 5), nil, nil)
	swaps := make(chan agent.Status, 10)
	a, err := agent.New(agent.Options{Dir: v.dir, Clock: clock, ResyncPeriod: noResync, OnSwap: func(st agent.Status) { swaps <- st }})
	if err != nil {
		t.Fatal(err)
	}

	export := func() (agent.Status, []agent.TicketKey, []agent.TicketKey) {
		t.Helper()
		var st agent.Status
		var kept, copied []agent.TicketKey
		a.ExportTicketKeys(func(s agent.Status, keys []agent.TicketKey) {
			st, kept = s, keys // kept on purpose, to see it overwritten
			copied = append([]agent.TicketKey(nil), keys...)
		})
		return st, kept, copied
	}
	check := func(what string, st agent.Status, keys []agent.TicketKey, want []keyring.Key, states []string) {
		t.Helper()
		if len(keys) != len(want) || len(st.Keys) != len(want) {
			t.Fatalf("%s: %d keys exported, %d in status, want %d", what, len(keys), len(st.Keys), len(want))
		}
		for i, k := range keys {
			w := want[i]
			if k.ID != w.ID || k.State != states[i] || !k.ActiveFrom.Equal(w.ActiveFrom) || !k.ExpiresAt.Equal(w.ExpiresAt) || k.Secret != w.Secret {
				t.Errorf("%s: key %d is %s %s, want %s %s (or its secret differs)", what, i, k.ID, k.State, w.ID, states[i])
			}
			if st.Keys[i].ID != k.ID || st.Keys[i].State != k.State {
				t.Errorf("%s: key %d: status says %s %s, export %s %s", what, i, st.Keys[i].ID, st.Keys[i].State, k.ID, k.State)
			}
		}
	}

	st, kept, keys := export()
	check("at start", st, keys, []keyring.Key{s.k1, s.k2}, []string{"active", "staged"})
	if st.Epoch != 5 || st.ActiveKeyID != s.k1.ID {
		t.Errorf("status epoch %d active %s", st.Epoch, st.ActiveKeyID)
	}
	for i, k := range kept {
		if k.Secret != ([32]byte{}) {
			t.Errorf("key %d (%s): its secret was not overwritten once the callback returned", i, k.ID)
		}
	}

	start(t, a)
	awaitSwap := func(what string) {
		t.Helper()
		select {
		case <-swaps:
		case <-time.After(10 * time.Second):
			t.Fatalf("no swap %s", what)
		}
	}
	clock.Set(s.k2.ActiveFrom)
	awaitSwap("at the staged key's activeFrom")
	st, _, keys = export()
	check("after activation", st, keys, []keyring.Key{s.k2, s.k1}, []string{"active", "decrypt-only"})

	clock.Set(s.k1.ExpiresAt)
	awaitSwap("at the retired key's expiresAt")
	st, _, keys = export()
	check("after expiry", st, keys, []keyring.Key{s.k2}, []string{"active"})

	clock.Set(s.k2.ExpiresAt)
	awaitSwap("once every key expired")
	st, _, keys = export()
	if len(keys) != 0 || st.ActiveKeyID != "" {
		t.Errorf("every key expired: %d keys exported, active %q", len(keys), st.ActiveKeyID)
	}
}

// TestHandshakeMetricsOnlyWhenServing: an agent that only exports its keys
// (the sidecar's) serves no handshake, and reports no handshake count.
func TestHandshakeMetricsOnlyWhenServing(t *testing.T) {
	s := newSchedule(time.Now())
	v := newVolume(t)
	v.write(s.ring(t, 1), nil, nil)
	a, err := agent.New(agent.Options{Dir: v.dir})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics(t, a)
	if _, ok := m["ringmaster_agent_handshakes_total{resumed=true}"]; ok {
		t.Error("handshakes counted by an agent that serves no config")
	}
	if m["ringmaster_agent_epoch"] != 1 {
		t.Errorf("epoch %v, want 1", m["ringmaster_agent_epoch"])
	}
	a.TLSConfig(nil)
	m = metrics(t, a)
	if v, ok := m["ringmaster_agent_handshakes_total{resumed=true}"]; !ok || v != 0 {
		t.Errorf("handshakes_total{resumed=true} = %v (present %v) once serving, want 0", v, ok)
	}
}
