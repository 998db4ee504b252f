package keyring

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
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
	// Readers refuse a larger ring (the agent as ring_too_large): the
	// operator must never publish one.
	if len(r.Keys) > MaxKeys {
		return nil, invalid("ring has %d keys, more than the %d any ring holds", len(r.Keys), MaxKeys)
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

// Decode reads ticketkeys.json. It is strict: invalid UTF-8, a field name
// in another case than the one Encode writes, a field given twice, an
// unknown version or field, a ring name the API cannot produce, base64
// other than Encode's, a secret that is not 32 bytes, an id that does not
// match its secret, duplicate ids, keys out of order or with times out of
// order, and a ring without keys are all refused with an error naming the
// problem (and the key id, never its bytes; text from the file is quoted
// cut short). What Decode accepts, Encode writes back with the same meaning.
//
// A ring may hold no key, given as an empty list: the record of a ring whose
// every key expired while none could be minted (Plan.WithoutMint). A null or
// missing list is refused.
func Decode(data []byte) (Ring, error) {
	// encoding/json would replace invalid UTF-8, match field names
	// regardless of case and keep the last of duplicate fields: checkStrict
	// refuses all three before the decoder sees the input.
	if !utf8.Valid(data) {
		return Ring{}, invalid("parse %s: not valid UTF-8", FileName)
	}
	strictErr := checkStrict(data)
	if strictErr != nil && !errors.Is(strictErr, errMalformed) {
		return Ring{}, strictErr
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f fileRing
	if err := dec.Decode(&f); err != nil {
		// A bad time quotes the text it could not parse, at any length.
		return Ring{}, invalid("parse %s: %s", FileName, clipMessage(err.Error()))
	}
	// Token, not More: More reports a trailing "}" or "]" as no more data.
	if _, err := dec.Token(); err != io.EOF {
		return Ring{}, invalid("parse %s: trailing data after the ring", FileName)
	}
	if strictErr != nil { // unreachable: what checkStrict cannot walk, the decoder refuses
		return Ring{}, invalid("parse %s: malformed", FileName)
	}
	if f.Version != Version {
		return Ring{}, invalid("unsupported version %d (this reader knows version %d)", f.Version, Version)
	}
	if f.Keys == nil {
		return Ring{}, invalid("ring has no keys list")
	}
	r := Ring{Name: f.Ring, Epoch: f.Epoch, IssuedAt: f.IssuedAt, Keys: make([]Key, len(f.Keys))}
	for i, fk := range f.Keys {
		if !validKeyID(fk.ID) {
			return Ring{}, invalid("key %d: id %s is not %d lowercase hex digits", i, clip(fk.ID), keyIDLength)
		}
		raw, err := base64.StdEncoding.DecodeString(fk.Secret)
		if err != nil {
			return Ring{}, invalid("key %d (id %q): secret is not valid base64", i, fk.ID)
		}
		// DecodeString skips newlines and ignores the padding bits, so
		// several texts give one secret: only the one Encode writes reads.
		canonical := base64.StdEncoding.EncodeToString(raw) == fk.Secret
		n := len(raw)
		var k Key
		if n == SecretSize {
			copy(k.Secret[:], raw)
		}
		clear(raw)
		if !canonical {
			return Ring{}, invalid("key %d (id %q): secret is not in standard padded base64", i, fk.ID)
		}
		if n != SecretSize {
			return Ring{}, invalid("key %d (id %q): secret is %d bytes, want %d", i, fk.ID, n, SecretSize)
		}
		k.ID, k.ActiveFrom, k.RetireAt, k.ExpiresAt = fk.ID, fk.ActiveFrom, fk.RetireAt, fk.ExpiresAt
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
		return invalid("ring name %s is not \"<namespace>/<name>\" or \"<name>\" as the API names rings", clip(r.Name))
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

// clip quotes s for an error message, in ASCII and cut to a few dozen bytes:
// the text comes from the file, and a message ends up in logs and Status,
// where a look-alike character ("\u212aeys" for "keys") must show.
func clip(s string) string {
	const most = 40
	if len(s) <= most {
		return strconv.QuoteToASCII(s)
	}
	return strconv.QuoteToASCII(s[:most]) + "..."
}

// clipMessage cuts an error message of the JSON decoder, which may quote
// the file, to a couple hundred bytes of printable ASCII, with '?' for
// anything else.
func clipMessage(msg string) string {
	const most = 200
	cut := len(msg) > most
	if cut {
		msg = msg[:most]
	}
	msg = strings.Map(func(r rune) rune {
		if r < ' ' || r > '~' {
			return '?'
		}
		return r
	}, msg)
	if cut {
		msg += "..."
	}
	return msg
}
