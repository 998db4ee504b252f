// Package keyring is the pure domain of session ticket key rings: the ring
// and its keys, how a ring rotates (Plan), the ticketkeys.json snapshot codec
// (Encode, Decode) and the key formats derived for other servers.
//
// It imports nothing from Kubernetes, controller-runtime or Vault, so the
// in-pod agent shares the very same codec and time rules as the operator.
// Every function takes the current time as a value.
package keyring

import (
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"time"
)

// SecretSize is the size in bytes of a ticket key secret.
const SecretSize = 32

// Secret is the key material of one ticket key. It never leaves this package
// in a log line or error: use the key's ID.
type Secret [SecretSize]byte

// State is where a key stands in its life at a given instant.
type State string

// The states of a key, in the order a key goes through them.
const (
	// Staged keys are delivered and can decrypt, but encrypt nothing yet.
	Staged State = "staged"
	// Active is the key that encrypts new tickets.
	Active State = "active"
	// DecryptOnly keys are retired: they only decrypt tickets issued earlier.
	DecryptOnly State = "decrypt-only"
	// Expired keys must be destroyed and never decrypt again.
	Expired State = "expired"
)

// Key is one ticket encryption key and its three times.
type Key struct {
	// ID identifies the key in logs, events and status; see KeyID.
	ID string
	// ActiveFrom is when the key starts to encrypt new tickets.
	ActiveFrom time.Time
	// RetireAt is when the next key takes over; the key then only decrypts.
	RetireAt time.Time
	// ExpiresAt is when the key is destroyed.
	ExpiresAt time.Time
	// Secret is the 32-byte key material.
	Secret Secret
}

// Ring is one epoch of a ticket key ring: its keys, newest first.
type Ring struct {
	// Name is "<namespace>/<name>" of the TicketKeyRing.
	Name string
	// Epoch counts the snapshots published for the ring, from 1.
	Epoch int64
	// IssuedAt is when this epoch was published.
	IssuedAt time.Time
	// Keys are ordered newest (latest ActiveFrom) first.
	Keys []Key
	// Due, when set, is when the staged key Keys[0] fell or falls due while
	// it is held for confirmation (see Confirm). It is the operator's
	// record, kept beside the ring file, not in it: replicas go by the keys'
	// times alone.
	Due time.Time
}

// KeyID derives the public identifier of a secret: the first four bytes of
// HKDF-SHA256 under a label of its own, in hex. It reveals nothing of the
// secret or of any derived format key, yet is stable across every replica.
func KeyID(s Secret) string {
	id, err := hkdf.Key(sha256.New, s[:], nil, "ringmaster.io/v1 key-id", 4)
	if err != nil {
		panic(err) // unreachable: 4 bytes is far below HKDF's limit
	}
	return hex.EncodeToString(id)
}

// NewKey returns a key for secret s with its ID set.
func NewKey(s Secret) Key { return Key{ID: KeyID(s), Secret: s} }

// StateAt is the state of k at now.
func (k Key) StateAt(now time.Time) State {
	switch {
	case !now.Before(k.ExpiresAt):
		return Expired
	case now.Before(k.ActiveFrom):
		return Staged
	case now.Before(k.RetireAt):
		return Active
	default:
		return DecryptOnly
	}
}

// Active returns the key that encrypts at now: the newest key whose
// ActiveFrom has passed and that has not expired. A replica reaches this by
// its own clock, so every replica agrees within their clock skew.
//
// When no key has activated yet by this clock (a replica whose clock lags the
// operator's), the oldest unexpired key stands in, so the replica still
// encrypts with a key every peer holds. ok is false only when every key has
// expired.
func (r Ring) Active(now time.Time) (k Key, ok bool) {
	var fallback *Key
	for i := range r.Keys {
		key := r.Keys[i]
		if !now.Before(key.ExpiresAt) {
			continue
		}
		if !now.Before(key.ActiveFrom) {
			return key, true
		}
		fallback = &r.Keys[i]
	}
	if fallback != nil {
		return *fallback, true
	}
	return Key{}, false
}

// StateOf is the state of k, a key of r, at now as a replica sees it: like
// k.StateAt, except that the key Active stands in for is active.
func (r Ring) StateOf(k Key, now time.Time) State {
	if active, ok := r.Active(now); ok && active.ID == k.ID {
		return Active
	}
	return k.StateAt(now)
}

// TicketKeys returns the unexpired keys in the order a TLS server wants them
// at now: the active key first (it encrypts), then the staged keys soonest
// first, then the decrypt-only keys newest to oldest. crypto/tls tries every
// key's MAC in order, so the keys most tickets carry come first.
func (r Ring) TicketKeys(now time.Time) []Key {
	active, ok := r.Active(now)
	if !ok {
		return nil
	}
	keys := []Key{active}
	var staged, older []Key
	for _, k := range r.Keys { // newest first
		switch {
		case k.ID == active.ID || !now.Before(k.ExpiresAt):
		case k.ActiveFrom.After(active.ActiveFrom):
			staged = append(staged, k)
		default:
			older = append(older, k)
		}
	}
	slices.Reverse(staged)
	keys = append(keys, staged...)
	return append(keys, older...)
}

// NextChange returns the first instant after now at which the order or the
// set of TicketKeys changes: a staged key activating or a key expiring. ok is
// false when nothing is scheduled.
func (r Ring) NextChange(now time.Time) (t time.Time, ok bool) {
	for _, k := range r.Keys {
		for _, c := range []time.Time{k.ActiveFrom, k.ExpiresAt} {
			if c.After(now) && (!ok || c.Before(t)) {
				t, ok = c, true
			}
		}
	}
	return t, ok
}

// Key returns the key with the given id.
func (r Ring) Key(id string) (Key, bool) {
	for _, k := range r.Keys {
		if k.ID == id {
			return k, true
		}
	}
	return Key{}, false
}
