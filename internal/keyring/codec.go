package keyring

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/ringmaster-io/ringmaster/internal/strictjson"
)

// FileName is the name of the file that carries a ring to pods.
const FileName = "ticketkeys.json"

// Version is the only ticketkeys.json version this package reads and writes.
const Version = 1

// ErrInvalidRing is wrapped by every error Decode returns, so callers can
// tell bad input from other failures with errors.Is.
var ErrInvalidRing = errors.New("invalid ticket key ring")

// fileRing and fileKey are ticketkeys.json as written. The times are read
// as raw JSON and parsed by Decode, so that an error names the field
// rather than quoting the text (time.Parse's errors quote it whole).
type fileRing struct {
	Version  int             `json:"version"`
	Ring     string          `json:"ring"`
	Epoch    int64           `json:"epoch"`
	IssuedAt strictjson.Time `json:"issuedAt"`
	Keys     []fileKey       `json:"keys"`
}

type fileKey struct {
	ID         string            `json:"id"`
	ActiveFrom strictjson.Time   `json:"activeFrom"`
	RetireAt   strictjson.Time   `json:"retireAt"`
	ExpiresAt  strictjson.Time   `json:"expiresAt"`
	Secret     strictjson.Secret `json:"secret"`
}

// Encode writes r as ticketkeys.json version 1. It validates r first, so a
// ring that Decode would refuse is never written.
func Encode(r Ring) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	// Readers refuse a larger ring (the agent as ring_too_large): the
	// operator must never publish one.
	if len(r.Keys) > MaxKeys {
		return nil, invalid("ring has %d keys, more than the %d any ring holds", len(r.Keys), MaxKeys)
	}
	f := fileRing{Version: Version, Ring: r.Name, Epoch: r.Epoch, IssuedAt: strictjson.TimeOf(r.IssuedAt), Keys: make([]fileKey, len(r.Keys))}
	for i, k := range r.Keys {
		f.Keys[i] = fileKey{
			ID:         k.ID,
			ActiveFrom: strictjson.TimeOf(k.ActiveFrom),
			RetireAt:   strictjson.TimeOf(k.RetireAt),
			ExpiresAt:  strictjson.TimeOf(k.ExpiresAt),
			Secret:     strictjson.Secret(base64.StdEncoding.EncodeToString(k.Secret[:])),
		}
	}
	return json.MarshalIndent(f, "", "  ")
}

// Decode reads ticketkeys.json. It is strict: invalid UTF-8, a field name
// in another case than the one Encode writes, a field given twice, an
// unknown version or field, a ring name the API cannot produce, base64
// other than Encode's, a secret that is not 32 bytes, an id that does not
// match its secret, duplicate ids, keys out of order or with times out of
// order, and a ring without keys are all refused with an error naming the
// field and the problem. An error never quotes the file: any field may
// hold key bytes in a corrupt or hostile file, so it names a key by its
// index, and by its id only once the id is known to be its secret's.
// What Decode accepts, Encode writes back with the same meaning.
//
// A ring may hold no key, given as an empty list: the record of a ring whose
// every key expired while none could be minted (Plan.WithoutMint). A null or
// missing list is refused.
func Decode(data []byte) (Ring, error) {
	// encoding/json would replace invalid UTF-8, match field names
	// regardless of case and keep the last of duplicate fields: checkStrict
	// refuses all three before the decoder sees the input, and malformed
	// JSON too.
	if !utf8.Valid(data) {
		return Ring{}, invalid("parse %s: not valid UTF-8", FileName)
	}
	if err := checkStrict(data); err != nil {
		return Ring{}, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f fileRing
	if err := dec.Decode(&f); err != nil {
		return Ring{}, invalid("parse %s: %s", FileName, strictjson.Problem(err, "the ring", "not a ring"))
	}
	// Token, not More: More reports a trailing "}" or "]" as no more data.
	if _, err := dec.Token(); err != io.EOF {
		return Ring{}, invalid("parse %s: trailing data after the ring", FileName)
	}
	if f.Version != Version {
		return Ring{}, invalid("unsupported version: this reader knows version %d only", Version)
	}
	issuedAt, ok := f.IssuedAt.Parse()
	if !ok {
		return Ring{}, invalid("issuedAt is not an RFC 3339 time")
	}
	if f.Keys == nil {
		return Ring{}, invalid("ring has no keys list")
	}
	r := Ring{Name: f.Ring, Epoch: f.Epoch, IssuedAt: issuedAt, Keys: make([]Key, len(f.Keys))}
	for i, fk := range f.Keys {
		if !validKeyID(fk.ID) {
			return Ring{}, invalid("key %d: id is not %d lowercase hex digits", i, keyIDLength)
		}
		var k Key
		for _, t := range []struct {
			name string
			from strictjson.Time
			to   *time.Time
		}{{"activeFrom", fk.ActiveFrom, &k.ActiveFrom}, {"retireAt", fk.RetireAt, &k.RetireAt}, {"expiresAt", fk.ExpiresAt, &k.ExpiresAt}} {
			if *t.to, ok = t.from.Parse(); !ok {
				return Ring{}, invalid("key %d: %s is not an RFC 3339 time", i, t.name)
			}
		}
		raw, err := base64.StdEncoding.DecodeString(string(fk.Secret))
		if err != nil {
			return Ring{}, invalid("key %d: secret is not valid base64", i)
		}
		// DecodeString skips newlines and ignores the padding bits, so
		// several texts give one secret: only the one Encode writes reads.
		canonical := base64.StdEncoding.EncodeToString(raw) == string(fk.Secret)
		n := len(raw)
		if n == SecretSize {
			copy(k.Secret[:], raw)
		}
		clear(raw)
		if !canonical {
			return Ring{}, invalid("key %d: secret is not in standard padded base64", i)
		}
		if n != SecretSize {
			return Ring{}, invalid("key %d: secret is %d bytes, want %d", i, n, SecretSize)
		}
		k.ID = fk.ID
		r.Keys[i] = k
	}
	if err := r.Validate(); err != nil {
		for i := range r.Keys {
			clear(r.Keys[i].Secret[:])
		}
		return Ring{}, err
	}
	return r, nil
}

// Validate checks the invariants every published ring keeps. A ring without
// keys is valid: it is how a ring whose every key expired, with none minted
// to follow, is published, so that no expired key's bytes stay behind.
func (r Ring) Validate() error {
	if r.Name == "" {
		return invalid("ring name is empty")
	}
	if !ValidRingName(r.Name) {
		return invalid("ring name is not \"<namespace>/<name>\" or \"<name>\" as the API names rings")
	}
	if r.Epoch < 1 {
		return invalid("epoch is not positive")
	}
	if r.IssuedAt.IsZero() {
		return invalid("issuedAt is missing")
	}
	if !writable(r.IssuedAt) {
		return invalid("issuedAt is outside years 0-9999")
	}
	seen := make(map[string]bool, len(r.Keys))
	for i, k := range r.Keys {
		// Until the id is known to be its secret's, the key is named by
		// its index alone: a corrupt file may hold anything in the id.
		if k.ID != KeyID(k.Secret) {
			return invalid("key %d: id does not match its secret", i)
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

// keyIDLength is the length of KeyID's hex text.
const keyIDLength = 8

func validKeyID(id string) bool {
	if len(id) != keyIDLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
