package agent

import (
	"time"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

// Secret is the 32 bytes of a ticket key. In text it is [redacted]: in
// every fmt verb, in log/slog, logr and encoding/json. Slice it
// (s[:]) for its bytes.
type Secret = keyring.Secret

// TicketKey is one ticket key the agent serves, secret included: what a
// program needs to hand the ring to a TLS server not written in Go, as the
// ringmaster-agent sidecar does for nginx, HAProxy and Envoy. A Go server
// never needs it: TLSConfig serves the keys.
type TicketKey struct {
	// ID, State, ActiveFrom and ExpiresAt are as in KeyStatus.
	ID         string
	State      string
	ActiveFrom time.Time
	ExpiresAt  time.Time
	// Secret is the key's 32-byte secret, as ticketkeys.json carries it.
	Secret Secret
}

// ExportTicketKeys calls f with what the agent serves at this instant: its
// Status, and the ticket keys in the order of Status.Keys (the active key,
// then staged keys soonest first, then decrypt-only keys newest first),
// secrets included. They are the very keys the configs of TLSConfig hold,
// under the same refusals, pins and expiry.
//
// The keys are a copy made for f, and overwritten when f returns: f must
// derive or write what it needs before it returns, and keep no reference to
// them. f runs on the caller's goroutine and holds no lock of the agent's.
// keys is empty without a ring, and once every key has expired.
func (a *Agent) ExportTicketKeys(f func(st Status, keys []TicketKey)) {
	// Under mu, publish cannot overwrite the snapshot's secrets meanwhile.
	a.mu.Lock()
	s := a.snap.Load()
	keys := make([]TicketKey, len(s.keys))
	for i, k := range s.keys {
		keys[i] = TicketKey{ID: k.id, State: string(k.state), ActiveFrom: k.activeFrom, ExpiresAt: k.expiresAt, Secret: s.secrets[i]}
	}
	a.mu.Unlock()
	defer func() {
		for i := range keys {
			clear(keys[i].Secret[:])
		}
	}()
	f(a.statusOf(s), keys)
}
