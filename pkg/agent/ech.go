package agent

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/echring"
)

// extensionECH is the id of the encrypted_client_hello extension (RFC
// 9849), which a ClientHello carries when it attempts ECH (or sends GREASE
// ECH, as browsers without a config do).
const extensionECH = 0xfe0d

// echInfo is what Status and the logs show of an ECH config: never its key.
type echInfo struct {
	id        uint8
	state     echring.State
	retry     bool
	expiresAt time.Time
}

// echSnapshot is the ECH part of a snapshot: the ring's configs unexpired
// at the snapshot's instant, in servingOrder, and the keys crypto/tls gets,
// built once here, so that a handshake costs one slice return.
type echSnapshot struct {
	ring    string
	epoch   int64
	configs []echInfo
	// keys parallels configs. Its bytes are copies of the snapshot's own,
	// never overwritten: a handshake may read them until it ends, so that
	// the garbage collector reclaims them once no config holds them.
	keys []tls.EncryptedClientHelloKey
	// get is the GetEncryptedClientHelloKeys of the configs built from the
	// snapshot: it returns keys, allocating nothing.
	get func(*tls.ClientHelloInfo) ([]tls.EncryptedClientHelloKey, error)
}

// newECHSnapshot describes r at now, writing what it serves into h;
// delay is Agent.echDelay.
func newECHSnapshot(r *echring.Ring, delay time.Duration, now time.Time, h interface{ Write([]byte) (int, error) }) *echSnapshot {
	s := &echSnapshot{ring: r.Ring, epoch: r.Epoch}
	_, _ = h.Write([]byte(r.Ring))
	_, _ = h.Write(binary.BigEndian.AppendUint64(nil, uint64(r.Epoch)))
	live := slices.DeleteFunc(servingOrder(r.Configs), func(c echring.Config) bool { return c.Expired(now) })
	retries := retryConfigs(live, now, delay)
	for i, c := range live {
		retry := retries[i]
		s.configs = append(s.configs, echInfo{id: c.ID, state: c.State, retry: retry, expiresAt: c.ExpiresAt})
		s.keys = append(s.keys, tls.EncryptedClientHelloKey{Config: bytes.Clone(c.Config), PrivateKey: bytes.Clone(c.PrivateKey), SendAsRetry: retry})
		_, _ = h.Write([]byte{c.ID, byte(b2i(retry))})
		_, _ = h.Write([]byte(c.State))
		_, _ = h.Write(c.Config)
		_, _ = h.Write(appendTime(nil, c.ExpiresAt))
	}
	if s.keys == nil {
		s.keys = []tls.EncryptedClientHelloKey{} // crypto/tls wants a non-nil slice
	}
	keys := s.keys
	s.get = func(*tls.ClientHelloInfo) ([]tls.EncryptedClientHelloKey, error) { return keys, nil }
	return s
}

// servingOrder returns cs in the order crypto/tls is to try their keys:
// the published configs, then the staged, then the retired, each newest
// first. crypto/tls tries every key in turn, each trial costing an HPKE
// decapsulation (make bench: about a third of a full handshake), and what
// clients hold is what DNS serves: the published config. The staged one,
// in no client's hands until it is published, would otherwise make every
// client pay a failed trial for as long as it waits.
func servingOrder(cs []echring.Config) []echring.Config {
	out := make([]echring.Config, 0, len(cs))
	for _, st := range []echring.State{echring.Published, echring.Staged, echring.Retired} {
		for _, c := range cs {
			if c.State == st {
				out = append(out, c)
			}
		}
	}
	return out
}

// unknownDelay is Agent.echDelay before the agent has seen a config
// published: no staged config is known to be due.
const unknownDelay time.Duration = -1

// retryConfigs says which of cs, the configs live at now in serving order,
// are sent as retry configs to a client whose ECH attempt this server
// rejects. A client gets them only on a rejection, uses them for one retry,
// and is accepted wherever that retry lands on a server holding the config.
// So the rule: never reject without retry configs while this server holds
// a config the rest of the fleet very likely holds too. In turn:
//
//   - the published configs: what DNS serves, which every server held
//     before it was published (or its ceiling passed);
//   - with none live (its published config expired by its clock while its
//     volume stopped updating, or the operator stopped), the newest
//     retired config: it was published, so every server that took an
//     epoch since its publication holds it, at least until this same
//     expiresAt (retirement shortens a config's life in every later epoch
//     alike);
//   - else the newest staged config that is due: staged for at least
//     delay, a bound from above on the ring's deliveryDelay that the
//     server learns from the configs it saw published (no config is
//     published staged for less). The operator gives a config that long to
//     reach every server before it may be published (a published config's
//     expiresAt lies past its successor's ceiling, so by the time a
//     server's last published config expires, the one staged after it has
//     been published, confirmed or at its ceiling);
//   - else none: nothing this server holds is known to be held elsewhere.
//
// Advertising such a config is never worse than no retry configs. A client
// rejected without them may take it as the server's word that ECH is off
// (RFC 9849, section 6.1.6; crypto/tls's ECHRejectionError says as much)
// and connect again with its server name in the clear. With them it
// retries with ECH: accepted by this server and by any that holds the
// config; rejected again by one that lacks it, at the cost of one round
// trip, its server name never sent in the clear.
func retryConfigs(cs []echring.Config, now time.Time, delay time.Duration) []bool {
	retry := make([]bool, len(cs))
	published := false
	for i, c := range cs {
		if c.State == echring.Published {
			retry[i], published = true, true
		}
	}
	if published {
		return retry
	}
	// cs is in serving order: each state's configs newest first.
	if i := slices.IndexFunc(cs, func(c echring.Config) bool { return c.State == echring.Retired }); i >= 0 {
		retry[i] = true
		return retry
	}
	if i := slices.IndexFunc(cs, func(c echring.Config) bool { return c.State == echring.Staged && due(c, now, delay) }); i >= 0 {
		retry[i] = true
	}
	return retry
}

// due reports whether the staged config c has been staged for delay at
// now, delay being Agent.echDelay.
func due(c echring.Config, now time.Time, delay time.Duration) bool {
	return delay >= 0 && !now.Before(c.CreatedAt.Add(delay))
}

// learnDelay lowers the agent's bound on the ring's deliveryDelay with the
// configs of r, a ring it takes, that were published: each spent at least
// deliveryDelay staged.
func (a *Agent) learnDelay(r *echring.Ring) {
	for _, c := range r.Configs {
		if c.PublishedAt.IsZero() {
			continue
		}
		if d := c.PublishedAt.Sub(c.CreatedAt); a.echDelay < 0 || d < a.echDelay {
			a.echDelay = d
		}
	}
}

// offersECH reports whether hello carries the encrypted_client_hello
// extension.
func offersECH(hello *tls.ClientHelloInfo) bool {
	return hello != nil && slices.Contains(hello.Extensions, extensionECH)
}

// keyDigest identifies an ECH config's key across epochs, whatever bytes
// carry it: config ids are reused, and a config's other fields
// (public_name, maximum_name_length, suites) may change around one key.
// The agent remembers destruction by it, so that a key it destroyed never
// comes back under a config one byte different. Every config the agent
// holds passed echring.Decode, whose Validate parses it; a config that
// does not parse (never) is named by its bytes instead.
func keyDigest(c echring.Config) [sha256.Size]byte {
	if d, err := c.KeyDigest(); err == nil {
		return d
	}
	return sha256.Sum256(c.Config)
}

// echWorded is one of the sentinel errors of agent.go (ErrForeignRing,
// ErrRollback, ErrEpochConflict) as an ECH refusal says it: errors.Is
// finds the sentinel, and the text speaks of the ECH key ring, never of
// the ticket ring the sentinels' own texts name.
type echWorded struct {
	sentinel error
	text     string
}

func (e echWorded) Error() string { return e.text }
func (e echWorded) Unwrap() error { return e.sentinel }

var (
	errECHForeign       = echWorded{ErrForeignRing, "agent: ECH key ring of another name"}
	errECHRollback      = echWorded{ErrRollback, "agent: ECH key ring epoch went back"}
	errECHEpochConflict = echWorded{ErrEpochConflict, "agent: ECH key ring epoch reused with other content"}
)

// acceptECH takes r, an ECH ring just decoded, if it is the ring the agent
// serves, does not go back, and holds a config unexpired at now. It keeps a
// copy of r's usable configs, and overwrites r's keys.
func (a *Agent) acceptECH(now time.Time, r *echring.Ring) *loadError {
	defer wipeECH(r)
	if a.echPin.name != "" && r.Ring != a.echPin.name {
		which := "the first this agent took"
		if a.expectedECH != "" {
			which = "the one Options.ECHRing names"
		}
		return &loadError{reasonECHForeign, fmt.Errorf("%s: %w: holds another ECH ring than %s, %s",
			echring.FileName, errECHForeign, a.echPin.name, which)}
	}
	d := echDigest(r)
	if a.echPin.epoch > 0 {
		if r.Epoch < a.echPin.epoch {
			return &loadError{reasonECHRollback, fmt.Errorf("%s: %w: ECH ring %s epoch %d is older than epoch %d, already served",
				echring.FileName, errECHRollback, r.Ring, r.Epoch, a.echPin.epoch)}
		}
		if r.Epoch == a.echPin.epoch && d != a.echPin.digest {
			return &loadError{reasonECHEpochConflict, fmt.Errorf("%s: %w: ECH ring %s epoch %d differs from the epoch %d already served",
				echring.FileName, errECHEpochConflict, r.Ring, r.Epoch, a.echPin.epoch)}
		}
	}
	configs := make([]echring.Config, 0, len(r.Configs))
	for _, c := range r.Configs {
		if c.Expired(now) || a.echDestroyed[keyDigest(c)] {
			continue
		}
		c.Config, c.PrivateKey = bytes.Clone(c.Config), bytes.Clone(c.PrivateKey)
		configs = append(configs, c)
	}
	if len(configs) == 0 {
		// The file's ring name is printed only when it is the name pinned,
		// as for ticketkeys.json: a hostile file may hold anything of the
		// API's alphabet there.
		name := "the ECH ring"
		if r.Ring == a.echPin.name {
			name = "ECH ring " + r.Ring
		}
		return &loadError{reasonECHExpired, fmt.Errorf("%s: %s epoch %d: every config has expired or was destroyed here", echring.FileName, name, r.Epoch)}
	}
	next := &echring.Ring{Ring: r.Ring, Epoch: r.Epoch, IssuedAt: r.IssuedAt, Configs: configs}
	if a.ech != nil {
		// A key that a newer epoch left out was removed on purpose: it
		// never comes back, under whatever config.
		for _, old := range a.ech.Configs {
			d := keyDigest(old)
			if !slices.ContainsFunc(configs, func(c echring.Config) bool { return keyDigest(c) == d }) {
				a.echDestroyed[d] = true
			}
		}
		wipeECH(a.ech)
	}
	a.ech = next
	a.echPin = pin{name: r.Ring, epoch: r.Epoch, digest: d}
	a.learnDelay(r)
	return nil
}

// echGone judges echkeys.json absent at now. Without an ECH ring served,
// that is no ECH, as it always was. With one, it is an error that keeps
// the ring: the operator never removes the file from the projection of a
// ring that exists, so a file gone is a Secret source taken out of the
// volume, a kubelet half-way through, or worse, and dropping the keys
// would reject every client, retry configs and all. So the configs serve
// on until each expires by its own expiresAt, as they would with the
// operator stopped; with the last of them gone, ECH stops, and the file's
// absence is no error any more.
func (a *Agent) echGone(now time.Time) *loadError {
	if a.ech == nil {
		return nil
	}
	var last time.Time
	for _, c := range a.ech.Configs {
		if !c.Expired(now) && c.ExpiresAt.After(last) {
			last = c.ExpiresAt
		}
	}
	if last.IsZero() {
		a.log.Info("Stopped serving ECH: "+echring.FileName+" is gone and its last config expired", "echRing", a.ech.Ring, "echEpoch", a.ech.Epoch)
		wipeECH(a.ech)
		a.ech = nil
		return nil
	}
	return &loadError{reasonECHMissing, fmt.Errorf("%s: gone from the directory while ECH ring %s epoch %d is served: its configs keep serving until each expires, the last at %s",
		echring.FileName, a.ech.Ring, a.ech.Epoch, last.UTC().Format(time.RFC3339))}
}

// expireECH destroys the configs of the ECH ring served whose expiresAt
// has come: they are never taken again, and their keys are overwritten.
func (a *Agent) expireECH(now time.Time) {
	if a.ech == nil || !slices.ContainsFunc(a.ech.Configs, func(c echring.Config) bool { return c.Expired(now) }) {
		return
	}
	keep := make([]echring.Config, 0, len(a.ech.Configs))
	for _, c := range a.ech.Configs {
		if !c.Expired(now) {
			keep = append(keep, c)
			continue
		}
		a.echDestroyed[keyDigest(c)] = true
		clear(c.PrivateKey)
		a.log.Info("Destroyed expired ECH config", "ring", a.ech.Ring, "configID", c.ID, "expiresAt", c.ExpiresAt.UTC())
	}
	a.ech.Configs = keep
}

// nextECHChange is the next instant after from a config of the ECH ring
// served expires, or a staged one falls due (which may make it a retry
// config).
func (a *Agent) nextECHChange(from time.Time) (time.Time, bool) {
	var next time.Time
	if a.ech == nil {
		return next, false
	}
	at := func(t time.Time) {
		if !t.IsZero() && t.After(from) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, c := range a.ech.Configs {
		at(c.ExpiresAt)
		if c.State == echring.Staged && a.echDelay >= 0 {
			at(c.CreatedAt.Add(a.echDelay))
		}
	}
	return next, !next.IsZero()
}

func wipeECH(r *echring.Ring) {
	if r == nil {
		return
	}
	for i := range r.Configs {
		clear(r.Configs[i].PrivateKey)
	}
}

// echDigest identifies the content of an ECH ring.
func echDigest(r *echring.Ring) [sha256.Size]byte {
	h := sha256.New()
	b := binary.BigEndian.AppendUint64(nil, uint64(len(r.Ring)))
	b = append(b, r.Ring...)
	b = binary.BigEndian.AppendUint64(b, uint64(r.Epoch))
	b = appendTime(b, r.IssuedAt)
	h.Write(b)
	for _, c := range r.Configs {
		b = append(b[:0], c.ID)
		b = append(b, c.State...)
		for _, t := range []time.Time{c.CreatedAt, c.PublishedAt, c.RetiredAt, c.ExpiresAt} {
			b = appendTime(b, t)
		}
		b = binary.BigEndian.AppendUint64(b, uint64(len(c.Config)))
		h.Write(b)
		h.Write(c.Config)
		h.Write(c.PrivateKey)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// echStatus describes s's ECH part; nil without one.
func echStatus(s *echSnapshot) *ECHStatus {
	if s == nil {
		return nil
	}
	st := &ECHStatus{Ring: s.ring, Epoch: s.epoch, Configs: make([]ECHConfigStatus, len(s.configs))}
	for i, c := range s.configs {
		st.Configs[i] = ECHConfigStatus{ID: c.id, State: string(c.state), Retry: c.retry, ExpiresAt: c.expiresAt}
	}
	return st
}
