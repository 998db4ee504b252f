// Package sharedring is the pure domain of a ring shared across clusters
// through one Vault KV v2 entry: the entry's encoding, which ring a
// cluster plans from, whether its policy agrees with the entry's, whether
// it must write or only adopt, and which old versions of the entry must be
// destroyed.
//
// The entry's version is the shared epoch. Writers use check-and-set on the
// version they read, so that two clusters can never write different keys
// for the same version: the loser reads the winner's version and adopts it.
// It imports nothing from Kubernetes or Vault; every function takes what it
// needs as values.
package sharedring

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

// The fields of an entry's data. Vault holds the ring exactly as a snapshot
// Secret does (ticketkeys.json), so the same strict codec reads both.
const (
	RingField     = "ticketkeys.json"
	RequestsField = "requests.json"
	PolicyField   = "policy.json"
)

// MaxRequests bounds how many carried-out requests of each kind an entry
// remembers: enough for a cluster that lags a few versions to see that a
// request it was also given has been carried out elsewhere.
const MaxRequests = 10

// Record is one version of a ring's shared entry.
type Record struct {
	// Version is the entry's version in Vault: the shared epoch.
	Version int64
	// Created is when Vault recorded the version.
	Created time.Time
	// Ring is the ring the version holds.
	Ring keyring.Ring
	// Requests are the rotate-now and revoke requests carried out by this
	// version and the ones before it, newest first.
	Requests Requests
	// Policy is the policy of the ring that wrote the version; nil for a
	// version written before entries recorded one.
	Policy *Policy
	// Deleted says the version was deleted or destroyed by hand: it holds
	// no ring, and the next write seeds the entry again.
	Deleted bool
}

// Requests are carried-out requests, newest first, at most MaxRequests of
// each kind.
type Requests struct {
	Rotate []string `json:"rotate,omitempty"`
	Revoke []string `json:"revoke,omitempty"`
}

// Handled reports whether a version carried out the rotate-now request.
func (r *Record) Handled(request string) bool {
	return r != nil && request != "" && slices.Contains(r.Requests.Rotate, request)
}

// Revoked reports whether a version carried out the revoke request.
func (r *Record) Revoked(request string) bool {
	return r != nil && request != "" && slices.Contains(r.Requests.Revoke, request)
}

// Next is the record to write after r (nil: the entry does not exist yet):
// ring, planned under policy, carrying out the given requests ("" for
// none). Its Version is the one the write creates when it wins.
func (r *Record) Next(ring keyring.Ring, policy Policy, rotate, revoke string) Record {
	next := Record{Version: 1, Ring: ring, Policy: &policy}
	var prev Requests
	if r != nil {
		next.Version, prev = r.Version+1, r.Requests
	}
	next.Requests = prev
	next = next.Remember(rotate, revoke)
	next.Ring.Epoch = next.Version
	return next
}

// Remember is r also carrying out the given requests ("" for none): a
// version that carries out a FleetRequest as well as an annotation's
// request remembers both.
func (r Record) Remember(rotate, revoke string) Record {
	r.Requests.Rotate = remember(r.Requests.Rotate, rotate)
	r.Requests.Revoke = remember(r.Requests.Revoke, revoke)
	return r
}

func remember(list []string, request string) []string {
	if request == "" || slices.Contains(list, request) {
		return slices.Clone(list)
	}
	out := append([]string{request}, list...)
	return out[:min(len(out), MaxRequests)]
}

// Encode returns the entry's data for Vault. It fails when the ring cannot
// be encoded (keyring.Encode's checks); the error names no key material.
func Encode(r Record) (map[string]any, error) {
	ring, err := keyring.Encode(r.Ring)
	if err != nil {
		return nil, err
	}
	req, err := json.Marshal(r.Requests)
	if err != nil {
		return nil, err
	}
	data := map[string]any{RingField: string(ring), RequestsField: string(req)}
	if r.Policy != nil {
		pol, err := json.Marshal(r.Policy.wire())
		if err != nil {
			return nil, err
		}
		data[PolicyField] = string(pol)
	}
	return data, nil
}

// Decode reads an entry's data, refusing anything but the fields Encode
// writes, a ring that keyring.Decode refuses, a ring of another name than
// want, oversized request lists and a policy that is not one. An entry
// without a policy (written before entries recorded one) is read with a
// nil Policy. Errors name the problem, never key material.
func Decode(data map[string]any, want string) (Record, error) {
	var rec Record
	for k := range data {
		if k != RingField && k != RequestsField && k != PolicyField {
			return rec, errors.New("the entry holds an unknown field")
		}
	}
	ring, ok := data[RingField].(string)
	if !ok {
		return rec, fmt.Errorf("field %s is missing or not a string", RingField)
	}
	r, err := keyring.Decode([]byte(ring))
	if err != nil {
		return rec, fmt.Errorf("field %s: %w", RingField, err)
	}
	if r.Name != want {
		return rec, fmt.Errorf("field %s holds another ring than %s", RingField, want)
	}
	rec.Ring = r
	if raw, ok := data[RequestsField]; ok {
		s, ok := raw.(string)
		if !ok {
			return rec, fmt.Errorf("field %s is not a string", RequestsField)
		}
		dec := json.NewDecoder(bytes.NewReader([]byte(s)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rec.Requests); err != nil {
			return rec, fmt.Errorf("field %s is not a list of requests", RequestsField)
		}
		if len(rec.Requests.Rotate) > MaxRequests || len(rec.Requests.Revoke) > MaxRequests {
			return rec, fmt.Errorf("field %s lists more than %d requests of a kind", RequestsField, MaxRequests)
		}
	}
	if raw, ok := data[PolicyField]; ok {
		s, ok := raw.(string)
		if !ok {
			return rec, fmt.Errorf("field %s is not a string", PolicyField)
		}
		p, err := decodePolicy(s)
		if err != nil {
			return rec, fmt.Errorf("field %s: %w", PolicyField, err)
		}
		rec.Policy = &p
	}
	return rec, nil
}

// ErrRolledBack is the error of an entry older than the version a cluster
// already serves.
var ErrRolledBack = errors.New("shared ring rolled back")

// Local is what a cluster holds of a shared ring: its newest published
// ring and the entry's version that ring serves (0 for none).
type Local struct {
	Ring    keyring.Ring
	Version int64
}

// ErrPolicyMismatch is the error of an entry whose recorded policy
// differs from the ring's own (see Mismatch).
var ErrPolicyMismatch = errors.New("shared ring policy mismatch")

// Mismatch is the error of a ring whose policy differs from its entry's:
// Fields are the spec fields that differ.
type Mismatch struct {
	Fields       []string
	Mine, Theirs Policy
}

func (m *Mismatch) Error() string {
	var diffs []string
	for _, f := range m.Fields {
		diffs = append(diffs, fmt.Sprintf("%s is %s here and %s in the entry", f, m.Mine.field(f), m.Theirs.field(f)))
	}
	return "the ring's policy differs from the one its shared entry records: " + strings.Join(diffs, ", ")
}

func (m *Mismatch) Unwrap() error { return ErrPolicyMismatch }

// Base is the ring a cluster plans from under its policy mine: the entry's
// ring when the entry exists, else the cluster's own (which its first write
// then seeds the entry with). It refuses:
//   - an entry older than the version the cluster serves, with
//     ErrRolledBack: going back could bring back a revoked key;
//   - an entry recording a policy other than mine, with a *Mismatch: the
//     entry's keys carry times planned under another policy, which this
//     ring's bounds may not allow, and planning from them under mine would
//     rewrite them at every pass.
//
// An entry that records no policy is planned from; the next real rotation
// records the writer's.
func Base(local Local, mine Policy, entry *Record) (keyring.Ring, error) {
	if entry == nil {
		return local.Ring, nil
	}
	if entry.Version < local.Version {
		return keyring.Ring{}, fmt.Errorf("%w: Vault holds version %d, older than version %d this cluster serves", ErrRolledBack, entry.Version, local.Version)
	}
	if entry.Deleted {
		return local.Ring, nil
	}
	if entry.Policy != nil {
		if fields := mine.Diff(*entry.Policy); len(fields) > 0 {
			return keyring.Ring{}, &Mismatch{Fields: fields, Mine: mine, Theirs: *entry.Policy}
		}
	}
	return entry.Ring, nil
}

// Change is what a plan did to the ring it was planned from, as far as the
// shared entry is concerned.
type Change struct {
	// Minted is how many keys the plan minted.
	Minted int
	// Dropped is how many keys it dropped: expired, revoked or beyond
	// retainedKeys.
	Dropped int
	// Request says it carried out a rotate-now or revoke request.
	Request bool
}

// Real reports whether the change is a real rotation, one that every
// cluster must see: a key minted or dropped, or a request carried out.
// Anything else that moved the entry's keys is a reader's view of their
// times, which it must not write.
func (c Change) Real() bool { return c.Minted > 0 || c.Dropped > 0 || c.Request }

// Decide says what a cluster does with next, planned from the entry by a
// plan that made change: write it as the entry's next version, or not; and
// which ring it serves. A cluster writes only a real rotation (or seeds a
// missing entry); otherwise it serves the entry's ring with its keys' times
// as written, never its own reading of them. So clusters that see the same
// entry differently stop rewriting it: at most one version per real
// rotation.
func Decide(next keyring.Ring, change Change, entry *Record) (write bool, serve keyring.Ring) {
	switch {
	case entry == nil || entry.Deleted:
		return len(next.Keys) > 0, next
	case Same(next, entry.Ring):
		return false, entry.Ring
	case change.Real():
		return true, next
	}
	return false, entry.Ring
}

// Same reports whether two rings serve the same keys with the same times:
// what replicas go by. Epochs, names and publication times may differ.
func Same(a, b keyring.Ring) bool {
	return slices.EqualFunc(a.Keys, b.Keys, func(x, y keyring.Key) bool {
		return x.ID == y.ID && x.ActiveFrom.Equal(y.ActiveFrom) && x.RetireAt.Equal(y.RetireAt) && x.ExpiresAt.Equal(y.ExpiresAt)
	}) && a.Due.Equal(b.Due)
}

// Stale reports whether an older version holding old must be destroyed
// now that current is the newest: it holds a key current no longer has,
// that is one that expired or was revoked or dropped. Forward secrecy
// needs its bytes gone from Vault, not only unused.
func Stale(old, current keyring.Ring) bool {
	return slices.ContainsFunc(old.Keys, func(k keyring.Key) bool {
		_, ok := current.Key(k.ID)
		return !ok
	})
}

// SyncPeriod is how often an operator reads a shared ring's entry: a
// quarter of its activationDelay, between 1s and 30s, so that a version
// another cluster wrote reaches this cluster's pods well within the delay.
func SyncPeriod(activationDelay time.Duration) time.Duration {
	return min(max(activationDelay/4, time.Second), 30*time.Second)
}

// Policy is what a ring's spec says of its keys' times: what every cluster
// sharing the ring must agree on, and what each version of the entry
// records of the ring that wrote it.
type Policy struct {
	RotationInterval time.Duration
	RetainedKeys     int
	ActivationDelay  time.Duration
	// Confirmation is nil for a ring without spec.confirmation.
	Confirmation *Confirmation
}

// Confirmation is a ring's spec.confirmation, as far as its times go.
type Confirmation struct {
	Timeout time.Duration
	Promote bool
}

// PolicyOf is the shared policy of a ring planned under p.
func PolicyOf(p keyring.Policy) Policy {
	out := Policy{RotationInterval: p.RotationInterval, RetainedKeys: p.RetainedKeys, ActivationDelay: p.ActivationDelay}
	if c := p.Confirm; c != nil {
		out.Confirmation = &Confirmation{Timeout: c.Timeout, Promote: c.Promote}
	}
	return out
}

// Diff names the spec fields in which p and q differ, in spec order.
func (p Policy) Diff(q Policy) []string {
	var out []string
	if p.RotationInterval != q.RotationInterval {
		out = append(out, "rotationInterval")
	}
	if p.RetainedKeys != q.RetainedKeys {
		out = append(out, "retainedKeys")
	}
	if p.ActivationDelay != q.ActivationDelay {
		out = append(out, "activationDelay")
	}
	if (p.Confirmation == nil) != (q.Confirmation == nil) || (p.Confirmation != nil && *p.Confirmation != *q.Confirmation) {
		out = append(out, "confirmation")
	}
	return out
}

// field is the value of one of Diff's fields, as a message shows it.
func (p Policy) field(name string) string {
	switch name {
	case "rotationInterval":
		return p.RotationInterval.String()
	case "retainedKeys":
		return strconv.Itoa(p.RetainedKeys)
	case "activationDelay":
		return p.ActivationDelay.String()
	case "confirmation":
		if c := p.Confirmation; c != nil {
			on := "Wait"
			if c.Promote {
				on = "Promote"
			}
			return fmt.Sprintf("{timeout %s, onTimeout %s}", c.Timeout, on)
		}
		return "unset"
	}
	return ""
}

// policyWire is a Policy as the entry holds it: durations as Go writes
// them, field names as the spec's.
type policyWire struct {
	RotationInterval string `json:"rotationInterval"`
	RetainedKeys     int    `json:"retainedKeys"`
	ActivationDelay  string `json:"activationDelay"`
	Confirmation     *struct {
		Timeout   string `json:"timeout"`
		OnTimeout string `json:"onTimeout"`
	} `json:"confirmation,omitempty"`
}

func (p Policy) wire() policyWire {
	w := policyWire{RotationInterval: p.RotationInterval.String(), RetainedKeys: p.RetainedKeys, ActivationDelay: p.ActivationDelay.String()}
	if c := p.Confirmation; c != nil {
		w.Confirmation = &struct {
			Timeout   string `json:"timeout"`
			OnTimeout string `json:"onTimeout"`
		}{Timeout: c.Timeout.String(), OnTimeout: "Wait"}
		if c.Promote {
			w.Confirmation.OnTimeout = "Promote"
		}
	}
	return w
}

// maxPolicyDuration bounds the durations an entry's policy may hold: no
// ring's time reaches past a ticket's lifetime.
const maxPolicyDuration = keyring.MaxTicketLifetime

func decodePolicy(s string) (Policy, error) {
	var w policyWire
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return Policy{}, errors.New("not a policy object of the known fields")
	}
	duration := func(name, v string) (time.Duration, error) {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > maxPolicyDuration {
			return 0, fmt.Errorf("%s is not a duration between 0 and %s", name, maxPolicyDuration)
		}
		return d, nil
	}
	var p Policy
	var err error
	if p.RotationInterval, err = duration("rotationInterval", w.RotationInterval); err != nil {
		return p, err
	}
	if p.ActivationDelay, err = duration("activationDelay", w.ActivationDelay); err != nil {
		return p, err
	}
	if w.RetainedKeys < 0 || w.RetainedKeys > keyring.MaxRetainedKeys {
		return p, fmt.Errorf("retainedKeys %d is outside 0-%d", w.RetainedKeys, keyring.MaxRetainedKeys)
	}
	p.RetainedKeys = w.RetainedKeys
	if c := w.Confirmation; c != nil {
		p.Confirmation = &Confirmation{}
		if p.Confirmation.Timeout, err = duration("confirmation.timeout", c.Timeout); err != nil {
			return p, err
		}
		switch c.OnTimeout {
		case "Wait":
		case "Promote":
			p.Confirmation.Promote = true
		default:
			return p, errors.New("confirmation.onTimeout is neither Wait nor Promote")
		}
	}
	return p, nil
}
