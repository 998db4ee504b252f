package agent

import (
	"crypto/fips140"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/echring"
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
	// ech is the ECH ring served; nil without one.
	ech *echSnapshot
	at  time.Time
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

// newSnapshot describes what is served at now: ring's keys, cert, and
// ech's configs, of which those that echDelay (Agent.echDelay) makes due
// are sent as retry configs when no published one is live.
func newSnapshot(ring *keyring.Ring, ech *echring.Ring, echDelay time.Duration, cert *certificate, now time.Time) *snapshot {
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
	h.Write([]byte{0})
	if ech != nil {
		s.ech = newECHSnapshot(ech, echDelay, now, h)
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
	if s.ech != nil {
		ids := make([]string, len(s.ech.configs))
		for i, c := range s.ech.configs {
			ids[i] = fmt.Sprintf("%d/%s", c.id, c.state)
		}
		attrs = append(attrs, "echRing", s.ech.ring, "echEpoch", s.ech.epoch, "echConfigs", ids)
	}
	if s.cert != nil {
		attrs = append(attrs, "certificateSerial", s.cert.tls.Leaf.SerialNumber.String(),
			"certificateNotAfter", s.cert.notAfter.UTC())
	}
	return attrs
}

// extensionPreSharedKey is the id of TLS 1.3's pre_shared_key extension
// (RFC 8446, Section 4.2.11), which a ClientHello carries when it offers a
// ticket.
const extensionPreSharedKey = 41

// configs is what one front serves between two swaps. It is immutable once
// published.
type configs struct {
	full *tls.Config
	// resumed is full with X25519 alone for the key exchange, served to
	// ClientHellos that offer a ticket (Options.ClassicalResumption); nil
	// when the option is off or cannot apply to the front's base.
	resumed *tls.Config
	// fullECH and resumedECH are full and resumed for ClientHellos that
	// attempt ECH, differing only in the VerifyConnection that counts them;
	// nil without an ECH ring.
	fullECH, resumedECH *tls.Config
	// getECH is the GetEncryptedClientHelloKeys of the configs: the ECH
	// ring's keys, or else the base's hook (nil without one).
	getECH func(*tls.ClientHelloInfo) ([]tls.EncryptedClientHelloKey, error)
}

// front is one TLSConfig caller: its base, and the configs currently served
// for it.
type front struct {
	base *tls.Config // a private clone; never served, never mutated
	// classical says whether build makes a resumed config.
	classical bool
	// verify is the VerifyConnection of each config, indexed by whether it
	// is the resumed one and whether it serves ECH attempts.
	verify [2][2]func(tls.ConnectionState) error
	cur    atomic.Pointer[configs]
	// outer is the config TLSConfig returned, whose own ticket keys
	// crypto/tls rotates; they seal tickets while the ring has none.
	outer *tls.Config
	// tickets is the agent's ticketPolicy.
	tickets ticketPolicy
}

// newFront returns the front of base. count is called once per handshake,
// with whether the resumed config served it.
func newFront(base *tls.Config, classical bool, count func(cs tls.ConnectionState, resumedConfig, ech bool)) *front {
	f := &front{base: base.Clone(), classical: classical}
	f.base.GetConfigForClient = nil
	next := base.VerifyConnection
	// Counting in VerifyConnection is per handshake, full or resumed, on
	// the handshake's own goroutine, with atomic counters: no lock.
	// crypto/tls calls it once the server has sent its flight and before it
	// reads the client's Finished, so a handshake the client aborts at the
	// very end is still counted; one refused by base's hook is not.
	verify := func(resumedConfig, ech bool) func(tls.ConnectionState) error {
		return func(cs tls.ConnectionState) error {
			if next != nil {
				if err := next(cs); err != nil {
					return err
				}
			}
			count(cs, resumedConfig, ech)
			return nil
		}
	}
	for _, r := range []bool{false, true} {
		for _, e := range []bool{false, true} {
			f.verify[b2i(r)][b2i(e)] = verify(r, e)
		}
	}
	return f
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// getConfigForClient is the whole per-handshake cost of the agent: one
// atomic load, and with Options.ClassicalResumption a scan of the
// ClientHello's extension ids and then of its groups; with an ECH ring, a
// scan of the extension ids.
func (f *front) getConfigForClient(hello *tls.ClientHelloInfo) (*tls.Config, error) {
	c := f.cur.Load()
	resumed := c.resumed != nil && hello != nil && offersTicketWithX25519(hello)
	if c.fullECH != nil && offersECH(hello) {
		if resumed {
			return c.resumedECH, nil
		}
		return c.fullECH, nil
	}
	if resumed {
		return c.resumed, nil
	}
	return c.full, nil
}

// getECHKeys is the outer config's GetEncryptedClientHelloKeys: crypto/tls
// calls it, for a ClientHello attempting ECH, before GetConfigForClient. It
// returns the keys of the config served now, built with it.
func (f *front) getECHKeys(hello *tls.ClientHelloInfo) ([]tls.EncryptedClientHelloKey, error) {
	if get := f.cur.Load().getECH; get != nil {
		return get(hello)
	}
	return f.base.EncryptedClientHelloKeys, nil
}

// offersTicketWithX25519 reports whether hello offers a TLS 1.3 ticket (a
// pre_shared_key extension) and supports X25519. A client that does not
// list X25519 keeps the full config, whose groups it shares; served
// X25519 alone, it would fail the handshake.
func offersTicketWithX25519(hello *tls.ClientHelloInfo) bool {
	return slices.Contains(hello.Extensions, extensionPreSharedKey) && slices.Contains(hello.SupportedCurves, tls.X25519)
}

// build returns complete configs for s, ready to publish. The caller
// holds Agent.mu, which guards s.secrets.
func (f *front) build(s *snapshot) *configs {
	c := f.base.Clone() // once per change, never per handshake
	c.VerifyConnection = f.verify[0][0]
	if s.ech != nil {
		c.EncryptedClientHelloKeys = nil
		c.GetEncryptedClientHelloKeys = s.ech.get
	}
	if s.cert != nil {
		c.Certificates = []tls.Certificate{s.cert.tls}
		c.GetCertificate = nil
	}
	keys := f.outer
	if len(s.secrets) > 0 {
		// It derives its own keys and keeps no reference to secrets.
		c.SetSessionTicketKeys(s.secrets)
		keys = c
	}
	settle(c)
	if !f.tickets.own {
		// The clones below share the binder: a ticket any of them issued,
		// the others open.
		b := f.tickets.binder(s.ring, f.base, keys)
		c.WrapSession, c.UnwrapSession = b.wrap, b.unwrap
	}
	out := &configs{full: c, getECH: c.GetEncryptedClientHelloKeys}
	if f.classical {
		// The clone shares c's derived ticket keys and its settled
		// SessionTicketKey: a ticket either config issued, the other
		// decrypts, and no handshake writes to it either. Without ticket
		// keys, both fall back to the outer config's own (see TLSConfig).
		r := c.Clone()
		r.VerifyConnection = f.verify[1][0]
		// X25519 alone: crypto/tls ignores the order of CurvePreferences,
		// choosing a post-quantum group first whenever both sides support
		// one.
		r.CurvePreferences = []tls.CurveID{tls.X25519}
		out.resumed = r
	}
	if s.ech != nil {
		out.fullECH = c.Clone()
		out.fullECH.VerifyConnection = f.verify[0][1]
		if out.resumed != nil {
			out.resumedECH = out.resumed.Clone()
			out.resumedECH.VerifyConnection = f.verify[1][1]
		}
	}
	return out
}

// classicalApplies reports whether Options.ClassicalResumption can apply
// to a config built from base, and if not, why.
func classicalApplies(base *tls.Config) (bool, string) {
	switch {
	case fips140.Enabled():
		return false, "FIPS 140-3 mode allows no X25519"
	case base.SessionTicketsDisabled:
		return false, "the base config disables session tickets"
	case base.MaxVersion != 0 && base.MaxVersion < tls.VersionTLS13:
		return false, "the base config's MaxVersion is below TLS 1.3"
	case len(base.CurvePreferences) > 0 && !slices.Contains(base.CurvePreferences, tls.X25519):
		return false, "the base config's CurvePreferences leave X25519 out"
	}
	return true, ""
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
