package keyring

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// FileName is the name of the file that carries a ring to pods.
const FileName = "ticketkeys.json"

// Version is the only ticketkeys.json version this package reads and writes.
const Version = 1

// ErrInvalidRing is wrapped by every error Decode returns, so callers can
// tell bad input from other failures with errors.Is.
var ErrInvalidRing = errors.New("invalid ticket key ring")

type fileRing struct {
	Version  int       `json:"version"`
	Ring     string    `json:"ring"`
	Epoch    int64     `json:"epoch"`
	IssuedAt time.Time `json:"issuedAt"`
	Keys     []fileKey `json:"keys"`
}

type fileKey struct {
	ID         string    `json:"id"`
	ActiveFrom time.Time `json:"activeFrom"`
	RetireAt   time.Time `json:"retireAt"`
	ExpiresAt  time.Time `json:"expiresAt"`
	Secret     string    `json:"secret"`
}

// Encode writes r as ticketkeys.json version 1. It validates r first, so a
// ring that Decode would refuse is never written.
func Encode(r Ring) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	f := fileRing{Version: Version, Ring: r.Name, Epoch: r.Epoch, IssuedAt: r.IssuedAt.UTC(), Keys: make([]fileKey, len(r.Keys))}
	for i, k := range r.Keys {
		f.Keys[i] = fileKey{
			ID:         k.ID,
			ActiveFrom: k.ActiveFrom.UTC(),
			RetireAt:   k.RetireAt.UTC(),
			ExpiresAt:  k.ExpiresAt.UTC(),
			Secret:     base64.StdEncoding.EncodeToString(k.Secret[:]),
		}
	}
	return json.MarshalIndent(f, "", "  ")
}

// Decode reads ticketkeys.json. It is strict: an unknown version or field,
// bad base64, a secret that is not 32 bytes, an id that does not match its
// secret, duplicate ids, keys out of order or with times out of order, and a
// ring without keys are all refused with an error naming the problem (and
// the key id, never its bytes).
func Decode(data []byte) (Ring, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f fileRing
	if err := dec.Decode(&f); err != nil {
		return Ring{}, invalid("parse %s: %v", FileName, err)
	}
	// Token, not More: More reports a trailing "}" or "]" as no more data.
	if _, err := dec.Token(); err != io.EOF {
		return Ring{}, invalid("parse %s: trailing data after the ring", FileName)
	}
	if f.Version != Version {
		return Ring{}, invalid("unsupported version %d (this reader knows version %d)", f.Version, Version)
	}
	r := Ring{Name: f.Ring, Epoch: f.Epoch, IssuedAt: f.IssuedAt, Keys: make([]Key, len(f.Keys))}
	for i, fk := range f.Keys {
		raw, err := base64.StdEncoding.DecodeString(fk.Secret)
		if err != nil {
			return Ring{}, invalid("key %d (id %q): secret is not valid base64", i, fk.ID)
		}
		if len(raw) != SecretSize {
			return Ring{}, invalid("key %d (id %q): secret is %d bytes, want %d", i, fk.ID, len(raw), SecretSize)
		}
		k := Key{ID: fk.ID, ActiveFrom: fk.ActiveFrom, RetireAt: fk.RetireAt, ExpiresAt: fk.ExpiresAt}
		copy(k.Secret[:], raw)
		r.Keys[i] = k
	}
	if err := r.Validate(); err != nil {
		return Ring{}, err
	}
	return r, nil
}

// Validate checks the invariants every published ring keeps.
func (r Ring) Validate() error {
	if r.Name == "" {
		return invalid("ring name is empty")
	}
	if r.Epoch < 1 {
		return invalid("epoch %d is not positive", r.Epoch)
	}
	if r.IssuedAt.IsZero() {
		return invalid("issuedAt is missing")
	}
	if !writable(r.IssuedAt) {
		return invalid("issuedAt is outside years 0-9999")
	}
	if len(r.Keys) == 0 {
		return invalid("ring has no keys")
	}
	seen := make(map[string]bool, len(r.Keys))
	for i, k := range r.Keys {
		if k.ID != KeyID(k.Secret) {
			return invalid("key %d (id %q): id does not match its secret", i, k.ID)
		}
		if seen[k.ID] {
			return invalid("key %d: duplicate id %q", i, k.ID)
		}
		seen[k.ID] = true
		if k.Secret == (Secret{}) {
			return invalid("key %d (id %q): secret is all zero", i, k.ID)
		}
		if k.ActiveFrom.IsZero() || !k.ActiveFrom.Before(k.RetireAt) || k.ExpiresAt.Before(k.RetireAt) {
			return invalid("key %d (id %q): times out of order: want activeFrom < retireAt <= expiresAt", i, k.ID)
		}
		if !writable(k.ActiveFrom) || !writable(k.ExpiresAt) { // retireAt lies between
			return invalid("key %d (id %q): times outside years 0-9999", i, k.ID)
		}
		if i > 0 && !k.ActiveFrom.Before(r.Keys[i-1].ActiveFrom) {
			return invalid("key %d (id %q): activeFrom not before that of key %d: keys must be newest first", i, k.ID, i-1)
		}
	}
	return nil
}

// writable reports whether Encode can write t: JSON carries RFC 3339 times
// in UTC, whose years run from 0 to 9999. Decode accepts other offsets, so
// "9999-12-31T23:30:00-01:00" reads but could not be written back.
func writable(t time.Time) bool {
	y := t.UTC().Year()
	return y >= 0 && y <= 9999
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidRing, fmt.Sprintf(format, args...))
}
