package agent

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"sync/atomic"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

// snapshot is the material one generation of configs is built from. It
// is immutable once published, but for secrets, which publish overwrites
// when the next snapshot replaces it.
type snapshot struct {
	hasRing bool // false when no ring was ever taken
	ring    string
	epoch   int64
	// keys describe the unexpired keys in serving order; empty when none
	// is usable.
	keys []keyInfo
	// secrets parallels keys. It is read and overwritten only under
	// Agent.mu: Status and metrics never touch it.
	secrets [][32]byte
	cert    *certificate
	at      time.Time
	// sum identifies what a config built from the snapshot serves, so that
	// a re-read finding nothing new publishes nothing.
	sum [sha256.Size]byte
}

// keyInfo is what Status and the logs show of a key: never its bytes.
type keyInfo struct {
	id                    string
	activeFrom, expiresAt time.Time
	state                 keyring.State
}

func newSnapshot(ring *keyring.Ring, cert *certificate, now time.Time) *snapshot {
	s := &snapshot{cert: cert, at: now}
	h := sha256.New()
	if ring != nil {
		s.hasRing, s.ring, s.epoch = true, ring.Name, ring.Epoch
		ordered := ring.TicketKeys(now) // copies, overwritten below
		s.keys = make([]keyInfo, len(ordered))
		s.secrets = make([][32]byte, len(ordered))
		h.Write([]byte(ring.Name))
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(ring.Epoch)))
		for i := range ordered {
			k := &ordered[i]
			// StateOf, not StateAt: the first key encrypts whatever its own
			// schedule says, since a replica whose clock lags may encrypt
			// with a key it would call staged (see keyring.Ring.Active).
			s.keys[i] = keyInfo{id: k.ID, activeFrom: k.ActiveFrom, expiresAt: k.ExpiresAt, state: ring.StateOf(*k, now)}
			s.secrets[i] = k.Secret
			h.Write([]byte(s.keys[i].state))
			h.Write(k.Secret[:])
			for _, t := range []time.Time{k.ActiveFrom, k.RetireAt, k.ExpiresAt} {
				h.Write(appendTime(nil, t))
			}
			clear(k.Secret[:])
		}
	}
	h.Write([]byte{0})
	if cert != nil {
		h.Write(cert.sum[:])
	}
	h.Sum(s.sum[:0])
	return s
}

// wipe overwrites the snapshot's secrets. Callers hold Agent.mu, or own a
// snapshot never published.
func (s *snapshot) wipe() {
	for i := range s.secrets {
		clear(s.secrets[i][:])
	}
}

func (s *snapshot) logAttrs() []any {
	var attrs []any
	if s.hasRing {
		ids := make([]string, len(s.keys))
		for i, k := range s.keys {
			ids[i] = k.id
		}
		attrs = append(attrs, "ring", s.ring, "epoch", s.epoch, "keyIDs", ids)
		if len(s.keys) > 0 {
			attrs = append(attrs, "activeKeyID", s.keys[0].id)
		}
	}
	if s.cert != nil {
		attrs = append(attrs, "certificateSerial", s.cert.tls.Leaf.SerialNumber.String(),
			"certificateNotAfter", s.cert.notAfter.UTC())
	}
	return attrs
}

// front is one TLSConfig caller: its base, and the config currently served
// for it.
type front struct {
	base   *tls.Config // a private clone; never served, never mutated
	verify func(tls.ConnectionState) error
	cur    atomic.Pointer[tls.Config]
}

func newFront(base *tls.Config, count func(tls.ConnectionState)) *front {
	f := &front{base: base.Clone()}
	f.base.GetConfigForClient = nil
	next := base.VerifyConnection
	// Counting in VerifyConnection is per handshake, full or resumed, on
	// the handshake's own goroutine, with atomic counters: no lock.
	// crypto/tls calls it once the server has sent its flight and before it
	// reads the client's Finished, so a handshake the client aborts at the
	// very end is still counted; one refused by base's hook is not.
	f.verify = func(cs tls.ConnectionState) error {
		if next != nil {
			if err := next(cs); err != nil {
				return err
			}
		}
		count(cs)
		return nil
	}
	return f
}

// getConfigForClient is the whole per-handshake cost of the agent: one
// atomic load.
func (f *front) getConfigForClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	return f.cur.Load(), nil
}

// build returns a complete config for s, ready to publish. The caller
// holds Agent.mu, which guards s.secrets.
func (f *front) build(s *snapshot) *tls.Config {
	c := f.base.Clone() // once per change, never per handshake
	c.VerifyConnection = f.verify
	if s.cert != nil {
		c.Certificates = []tls.Certificate{s.cert.tls}
		c.GetCertificate = nil
	}
	if len(s.secrets) > 0 {
		// It derives its own keys and keeps no reference to secrets.
		c.SetSessionTicketKeys(s.secrets)
	}
	settle(c)
	return c
}

// settle does, before publication, the one write crypto/tls would otherwise
// make on a config's first handshake: with SessionTicketKey zero, that
// handshake takes the config's write lock and reads crypto/rand to fill the
// deprecated field with a marked random value (Config.ticketKeys, via
// initLegacySessionTicketKeyRLocked). Filling it the same way here means no
// handshake ever writes to a published config.
func settle(c *tls.Config) {
	if c.SessionTicketKey == ([32]byte{}) {
		_, _ = rand.Read(c.SessionTicketKey[:]) // never fails (crypto/rand)
		copy(c.SessionTicketKey[:], "DEPRECATED")
	}
}
