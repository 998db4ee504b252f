// Package sharedring is the pure domain of a ring shared across clusters
// through one Vault KV v2 entry: the entry's encoding, which ring a
// cluster plans from, whether it must write or publish, and which old
// versions of the entry must be destroyed.
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
	"time"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

// The fields of an entry's data. Vault holds the ring exactly as a snapshot
// Secret does (ticketkeys.json), so the same strict codec reads both.
const (
	RingField     = "ticketkeys.json"
	RequestsField = "requests.json"
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
// ring, carrying out the given requests ("" for none). Its Version is the
// one the write creates when it wins.
func (r *Record) Next(ring keyring.Ring, rotate, revoke string) Record {
	next := Record{Version: 1, Ring: ring}
	var prev Requests
	if r != nil {
		next.Version, prev = r.Version+1, r.Requests
	}
	next.Requests.Rotate = remember(prev.Rotate, rotate)
	next.Requests.Revoke = remember(prev.Revoke, revoke)
	next.Ring.Epoch = next.Version
	return next
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
	return map[string]any{RingField: string(ring), RequestsField: string(req)}, nil
}

// Decode reads an entry's data, refusing anything but exactly the two
// fields Encode writes, a ring that keyring.Decode refuses, a ring of
// another name than want, and oversized request lists. Errors name the
// problem, never key material.
func Decode(data map[string]any, want string) (Record, error) {
	var rec Record
	for k := range data {
		if k != RingField && k != RequestsField {
			return rec, fmt.Errorf("unknown field %q", clip(k))
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
		return rec, fmt.Errorf("field %s holds ring %q, not %q", RingField, clip(r.Name), want)
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
			return rec, fmt.Errorf("field %s is not a list of requests: %w", RequestsField, err)
		}
		if len(rec.Requests.Rotate) > MaxRequests || len(rec.Requests.Revoke) > MaxRequests {
			return rec, fmt.Errorf("field %s lists more than %d requests of a kind", RequestsField, MaxRequests)
		}
	}
	return rec, nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
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

// Base is the ring a cluster plans from: the entry's ring when the entry
// exists, else the cluster's own (which its first write then seeds the
// entry with). An entry older than the version the cluster serves is
// refused with ErrRolledBack: going back could bring back a revoked key.
func Base(local Local, entry *Record) (keyring.Ring, error) {
	if entry == nil {
		return local.Ring, nil
	}
	if entry.Version < local.Version {
		return keyring.Ring{}, fmt.Errorf("%w: Vault holds version %d, older than version %d this cluster serves", ErrRolledBack, entry.Version, local.Version)
	}
	if entry.Deleted {
		return local.Ring, nil
	}
	return entry.Ring, nil
}

// MustWrite reports whether next, planned from the entry, must be written
// to it: it differs from the entry's ring, or there is no entry yet and
// next holds keys.
func MustWrite(next keyring.Ring, entry *Record) bool {
	if entry == nil || entry.Deleted {
		return len(next.Keys) > 0
	}
	return !Same(next, entry.Ring)
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
