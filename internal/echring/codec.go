package echring

import (
	"bytes"
	"crypto/hpke"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/strictjson"
)

// Version is the only echkeys.json version this package reads and writes.
const Version = 1

// ErrInvalidRing is wrapped by every error Decode and Encode return for a
// ring they refuse, so callers can tell bad input with errors.Is.
var ErrInvalidRing = errors.New("invalid ECH key ring")

// fileRing and fileConfig are echkeys.json as written. The times are read
// as raw JSON and parsed by Decode, so that an error names the field rather
// than quoting the text.
type fileRing struct {
	Version  int             `json:"version"`
	Ring     string          `json:"ring"`
	Epoch    int64           `json:"epoch"`
	IssuedAt strictjson.Time `json:"issuedAt"`
	Configs  []fileConfig    `json:"configs"`
}

type fileConfig struct {
	ID          int               `json:"id"`
	State       string            `json:"state"`
	Config      string            `json:"config"`
	PrivateKey  strictjson.Secret `json:"privateKey"`
	CreatedAt   strictjson.Time   `json:"createdAt"`
	PublishedAt strictjson.Time   `json:"publishedAt,omitzero"`
	RetiredAt   strictjson.Time   `json:"retiredAt,omitzero"`
	ExpiresAt   strictjson.Time   `json:"expiresAt,omitzero"`
}

// Encode writes r as echkeys.json version 1. It validates r first, so a ring
// that Decode would refuse is never written.
func Encode(r Ring) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	f := fileRing{Version: Version, Ring: r.Ring, Epoch: r.Epoch, IssuedAt: strictjson.TimeOf(r.IssuedAt), Configs: make([]fileConfig, len(r.Configs))}
	for i, c := range r.Configs {
		f.Configs[i] = fileConfig{
			ID:          int(c.ID),
			State:       string(c.State),
			Config:      base64.StdEncoding.EncodeToString(c.Config),
			PrivateKey:  strictjson.Secret(base64.StdEncoding.EncodeToString(c.PrivateKey)),
			CreatedAt:   strictjson.TimeOf(c.CreatedAt),
			PublishedAt: utcStamp(c.PublishedAt),
			RetiredAt:   utcStamp(c.RetiredAt),
			ExpiresAt:   utcStamp(c.ExpiresAt),
		}
	}
	return json.MarshalIndent(f, "", "  ")
}

func utcStamp(t time.Time) strictjson.Time {
	if t.IsZero() {
		return strictjson.Time{}
	}
	return strictjson.TimeOf(t)
}

// Decode reads echkeys.json. It is strict, as keyring.Decode is: invalid
// UTF-8, a field name in another case than Encode's, a field given twice,
// an unknown version or field, a ring name the API cannot produce, base64
// other than Encode's, an ECHConfig that is not RFC 9849's or uses a KEM or
// suite Go's server refuses, an id that is not the config's config_id, a
// private key that is not the config's, duplicate ids, times out of order
// or not matching the state, configs not newest first, more than MaxConfigs
// and a ring without configs are all refused with an error naming the field
// and the problem. An error never quotes the file: it names a config by its
// index, and by its id once the id is known to be the config's.
func Decode(data []byte) (Ring, error) {
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
		return Ring{}, invalid("parse %s: %s", FileName, strictjson.Problem(err, ringNoun, "not an ECH ring"))
	}
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
	if f.Configs == nil {
		return Ring{}, invalid("ring has no configs list")
	}
	// Bounded before any config is read: a hostile file cannot make the
	// reader parse many keys.
	if len(f.Configs) > MaxConfigs {
		return Ring{}, invalid("ring has %d configs, more than the %d any ring holds", len(f.Configs), MaxConfigs)
	}
	r := Ring{Ring: f.Ring, Epoch: f.Epoch, IssuedAt: issuedAt, Configs: make([]Config, len(f.Configs))}
	fail := func(err error) (Ring, error) {
		for i := range r.Configs {
			clear(r.Configs[i].PrivateKey)
		}
		return Ring{}, err
	}
	for i, fc := range f.Configs {
		if fc.ID < 0 || fc.ID > 255 {
			return fail(invalid("config %d: id is not an integer from 0 to 255", i))
		}
		c := Config{ID: uint8(fc.ID), State: State(fc.State)}
		if !c.State.valid() {
			return fail(invalid("config %d: state is not %q, %q or %q", i, Staged, Published, Retired))
		}
		for _, t := range []struct {
			name string
			from strictjson.Time
			to   *time.Time
		}{{"createdAt", fc.CreatedAt, &c.CreatedAt}, {"publishedAt", fc.PublishedAt, &c.PublishedAt}, {"retiredAt", fc.RetiredAt, &c.RetiredAt}, {"expiresAt", fc.ExpiresAt, &c.ExpiresAt}} {
			if *t.to, ok = t.from.Parse(); !ok {
				return fail(invalid("config %d: %s is not an RFC 3339 time", i, t.name))
			}
		}
		var err error
		if c.Config, err = canonical64(fc.Config, MaxConfigSize); err != nil {
			return fail(invalid("config %d: config %s", i, err))
		}
		if c.PrivateKey, err = canonical64(string(fc.PrivateKey), MaxPrivateKeySize); err != nil {
			return fail(invalid("config %d: privateKey %s", i, err))
		}
		r.Configs[i] = c
	}
	if err := r.Validate(); err != nil {
		return fail(err)
	}
	return r, nil
}

// canonical64 decodes s, standard padded base64 as Encode writes it and no
// longer than max bytes decoded, clearing what it decoded when it refuses.
func canonical64(s string, maxLen int) ([]byte, error) {
	if base64.StdEncoding.DecodedLen(len(s)) > maxLen+2 {
		return nil, fmt.Errorf("is longer than %d bytes", maxLen)
	}
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, errors.New("is not valid base64")
	}
	// DecodeString skips newlines and ignores the padding bits: only the
	// text Encode writes reads.
	if base64.StdEncoding.EncodeToString(raw) != s {
		clear(raw)
		return nil, errors.New("is not in standard padded base64")
	}
	if len(raw) > maxLen {
		clear(raw)
		return nil, fmt.Errorf("is longer than %d bytes", maxLen)
	}
	return raw, nil
}

// Validate checks the invariants every ring keeps: a name the API gives, a
// positive epoch, one to MaxConfigs configs, newest first, each an
// ECHConfig Go's server accepts whose config_id is its ID, unique, with its
// own private key and times matching its state.
func (r Ring) Validate() error {
	if r.Ring == "" {
		return invalid("ring name is empty")
	}
	if !ValidRingName(r.Ring) {
		return invalid("ring name is not \"<namespace>/<name>\" as the API names ECHKeyRings")
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
	if len(r.Configs) > MaxConfigs {
		return invalid("ring has %d configs, more than the %d any ring holds", len(r.Configs), MaxConfigs)
	}
	var seen [256]bool
	for i, c := range r.Configs {
		ec, err := parseConfig(c.Config)
		if err != nil {
			return invalid("config %d: ECHConfig: %s", i, err)
		}
		if ec.ID != c.ID {
			return invalid("config %d: id does not match the ECHConfig's config_id", i)
		}
		if seen[c.ID] {
			return invalid("config %d (id %d): duplicate id", i, c.ID)
		}
		seen[c.ID] = true
		if err := checkKey(ec, c.PrivateKey); err != nil {
			return invalid("config %d (id %d): privateKey %s", i, c.ID, err)
		}
		if !c.State.valid() {
			return invalid("config %d (id %d): state is not %q, %q or %q", i, c.ID, Staged, Published, Retired)
		}
		if err := c.checkTimes(); err != nil {
			return invalid("config %d (id %d): %s", i, c.ID, err)
		}
		if i > 0 && c.CreatedAt.After(r.Configs[i-1].CreatedAt) {
			return invalid("config %d (id %d): createdAt after that of config %d: configs must be newest first", i, c.ID, i-1)
		}
	}
	return nil
}

// KeyDigest identifies the key pair of c's ECHConfig, whatever else the
// config's bytes say: a SHA-256 of its KEM id and public key. Configs that
// carry one key under another public_name, maximum_name_length or cipher
// suites, or under another config_id, share it, so a reader that destroyed
// a key can tell it back under any bytes. It holds nothing secret: the
// public key is in DNS. It fails for a config Validate refuses.
func (c Config) KeyDigest() ([sha256.Size]byte, error) {
	ec, err := parseConfig(c.Config)
	if err != nil {
		return [sha256.Size]byte{}, invalid("ECHConfig: %s", err)
	}
	h := sha256.New()
	h.Write(binary.BigEndian.AppendUint16(nil, ec.KEM))
	h.Write(ec.PublicKey)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum, nil
}

// ValidRingName reports whether name is an ECHKeyRing's as echkeys.json
// carries it: "<namespace>/<name>", the kind being namespaced alone.
func ValidRingName(name string) bool {
	return strings.Contains(name, "/") && keyring.ValidRingName(name)
}

// checkKey checks that priv is a private key of ec's KEM whose public key
// is ec's.
func checkKey(ec echConfig, priv []byte) error {
	kem, err := hpke.NewKEM(ec.KEM)
	if err != nil {
		return errors.New("has a KEM that is not available")
	}
	sk, err := kem.NewPrivateKey(priv)
	if err != nil {
		return errors.New("is not a private key of the config's KEM")
	}
	if !bytes.Equal(sk.PublicKey().Bytes(), ec.PublicKey) {
		return errors.New("does not match the config's public key")
	}
	return nil
}

// checkTimes checks that c's times are set as its state wants and in order:
// createdAt <= publishedAt <= retiredAt <= expiresAt, for those set;
// expiresAt, after createdAt, is set in every state.
func (c Config) checkTimes() error {
	if c.CreatedAt.IsZero() {
		return errors.New("createdAt is missing")
	}
	for _, t := range []time.Time{c.CreatedAt, c.PublishedAt, c.RetiredAt, c.ExpiresAt} {
		if !t.IsZero() && !writable(t) {
			return errors.New("times outside years 0-9999")
		}
	}
	if c.ExpiresAt.IsZero() {
		return errors.New("expiresAt is missing: every config expires by the reader's own clock")
	}
	if !c.ExpiresAt.After(c.CreatedAt) {
		return errors.New("expiresAt is not after createdAt")
	}
	switch c.State {
	case Staged:
		if !c.PublishedAt.IsZero() || !c.RetiredAt.IsZero() {
			return errors.New("staged with publishedAt or retiredAt set")
		}
	case Published:
		if c.PublishedAt.IsZero() || !c.RetiredAt.IsZero() {
			return errors.New("published wants publishedAt set, retiredAt not")
		}
	case Retired:
		if c.RetiredAt.IsZero() {
			return errors.New("retired wants retiredAt set")
		}
	}
	prev, prevName := c.CreatedAt, "createdAt"
	for _, t := range []struct {
		name string
		at   time.Time
	}{{"publishedAt", c.PublishedAt}, {"retiredAt", c.RetiredAt}, {"expiresAt", c.ExpiresAt}} {
		if t.at.IsZero() {
			continue
		}
		if t.at.Before(prev) {
			return fmt.Errorf("times out of order: %s before %s", t.name, prevName)
		}
		prev, prevName = t.at, t.name
	}
	return nil
}

// writable reports whether Encode can write t: RFC 3339 years 0 to 9999.
func writable(t time.Time) bool {
	y := t.UTC().Year()
	return y >= 0 && y <= 9999
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidRing, fmt.Sprintf(format, args...))
}
