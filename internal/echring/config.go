// Package echring holds Encrypted Client Hello (RFC 9849) key rings: the
// ECHConfigs a fleet serves, their private keys and their lifecycle states,
// and echkeys.json, the file that carries them to pods. It imports nothing
// of Kubernetes: the operator writes the file, pkg/agent reads it.
package echring

import (
	"bytes"
	"crypto/hkdf"
	"crypto/hpke"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
)

// FileName is the name of the file that carries an ECH ring to pods, beside
// ticketkeys.json in the directory the agent watches.
const FileName = "echkeys.json"

// State is where a config is in its lifecycle.
type State string

const (
	// Staged: delivered to the fleet, able to decrypt, not in DNS and not
	// sent as a retry config.
	Staged State = "staged"
	// Published: every selected pod holds it and DNS serves it; sent as a
	// retry config.
	Published State = "published"
	// Retired: out of DNS, still decrypting until its ExpiresAt, when
	// readers drop it.
	Retired State = "retired"
)

func (s State) valid() bool { return s == Staged || s == Published || s == Retired }

// HPKE ids (RFC 9180 §7) of the KEMs, KDFs and AEADs that Go's crypto/tls
// server accepts in an EncryptedClientHelloKey.
const (
	KEMP256HKDFSHA256   uint16 = 0x0010
	KEMP384HKDFSHA384   uint16 = 0x0011
	KEMP521HKDFSHA512   uint16 = 0x0012
	KEMX25519HKDFSHA256 uint16 = 0x0020

	KDFHKDFSHA256 uint16 = 0x0001
	KDFHKDFSHA384 uint16 = 0x0002
	KDFHKDFSHA512 uint16 = 0x0003

	AEADAES128GCM        uint16 = 0x0001
	AEADAES256GCM        uint16 = 0x0002
	AEADChaCha20Poly1305 uint16 = 0x0003
)

// ErrInvalidConfig is wrapped by the errors of NewConfig and
// Params.Validate: parameters no config can be made with.
var ErrInvalidConfig = errors.New("invalid ECH config parameters")

// DefaultKEM is the KEM of a config whose Params name none.
const DefaultKEM = KEMX25519HKDFSHA256

// Suite is an HPKE symmetric cipher suite of an ECHConfig.
type Suite struct{ KDF, AEAD uint16 }

// DefaultSuites are the suites of a config whose Params name none: HKDF-
// SHA256 with each AEAD Go accepts.
func DefaultSuites() []Suite {
	return []Suite{{KDFHKDFSHA256, AEADAES128GCM}, {KDFHKDFSHA256, AEADAES256GCM}, {KDFHKDFSHA256, AEADChaCha20Poly1305}}
}

// KEMAccepted reports whether crypto/tls's server accepts the KEM.
func KEMAccepted(id uint16) bool {
	switch id {
	case KEMP256HKDFSHA256, KEMP384HKDFSHA384, KEMP521HKDFSHA512, KEMX25519HKDFSHA256:
		return true
	}
	return false
}

// SuiteAccepted reports whether crypto/tls's server accepts the suite.
func SuiteAccepted(s Suite) bool {
	return s.KDF >= KDFHKDFSHA256 && s.KDF <= KDFHKDFSHA512 && s.AEAD >= AEADAES128GCM && s.AEAD <= AEADChaCha20Poly1305
}

// Params is what an ECHConfig says besides its id and public key.
type Params struct {
	// PublicName is the ECHConfig's public_name: the DNS name a client
	// puts in its outer hello, whose certificate the server must hold.
	PublicName string
	// KEM is the HPKE KEM id; 0 means DefaultKEM (X25519).
	KEM uint16
	// Suites are the cipher suites offered; empty means DefaultSuites.
	Suites []Suite
	// MaxNameLength is the ECHConfig's maximum_name_length: the longest
	// server name a client pads its inner name to.
	MaxNameLength uint8
}

// withDefaults returns p with its defaults filled in.
func (p Params) withDefaults() Params {
	if p.KEM == 0 {
		p.KEM = DefaultKEM
	}
	if len(p.Suites) == 0 {
		p.Suites = DefaultSuites()
	}
	return p
}

// Validate checks that crypto/tls can serve and clients can use a config
// with p (its defaults filled in).
func (p Params) Validate() error {
	if err := p.withDefaults().check(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

func (p Params) check() error {
	if !ValidPublicName(p.PublicName) {
		return fmt.Errorf("public name is not a DNS name of at most %d characters with at least two labels", MaxPublicNameLength)
	}
	if !KEMAccepted(p.KEM) {
		return fmt.Errorf("KEM 0x%04x is not one Go's crypto/tls accepts", p.KEM)
	}
	if len(p.Suites) > MaxSuites {
		return fmt.Errorf("%d cipher suites, more than %d", len(p.Suites), MaxSuites)
	}
	for i, s := range p.Suites {
		if !SuiteAccepted(s) {
			return fmt.Errorf("cipher suite %d (KDF 0x%04x, AEAD 0x%04x) is not one Go's crypto/tls accepts", i, s.KDF, s.AEAD)
		}
		for j := range i {
			if p.Suites[j] == s {
				return fmt.Errorf("cipher suite %d repeats suite %d", i, j)
			}
		}
	}
	return nil
}

// ValidPublicName reports whether name is a public_name crypto/tls's client
// uses: at most 253 characters, two labels or more, of letters, digits and
// inner hyphens. (Go's client skips a config whose name is not.)
func ValidPublicName(name string) bool {
	if len(name) > MaxPublicNameLength {
		return false
	}
	labels := strings.Split(name, ".")
	if len(labels) < 2 {
		return false
	}
	for _, l := range labels {
		if len(l) == 0 || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if (c < '0' || c > '9') && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && c != '-' {
				return false
			}
		}
	}
	return true
}

// Config is one ECHConfig and its private key.
type Config struct {
	// ID is the config_id, unique among the live configs of a ring.
	ID uint8
	// State is the config's lifecycle state.
	State State
	// Config is one ECHConfig in its RFC 9849 wire encoding: what
	// crypto/tls's EncryptedClientHelloKey.Config takes and clients receive.
	Config []byte
	// PrivateKey is the KEM private key, serialized as RFC 9180's
	// SerializePrivateKey does (X25519: 32 bytes). No text shows it.
	PrivateKey []byte
	// CreatedAt is when the config was minted.
	CreatedAt time.Time
	// PublishedAt is when DNS was seen serving it; zero until published.
	PublishedAt time.Time
	// RetiredAt is when it left DNS; zero until retired.
	RetiredAt time.Time
	// ExpiresAt is when readers drop it, whatever its state: set when it
	// is minted, CreatedAt plus the longest life its ring allows
	// (Policy.Life), and only ever shortened, at retirement, to the
	// record's TTL plus a margin after RetiredAt.
	ExpiresAt time.Time
}

// Expired reports whether c is past its ExpiresAt at now.
func (c Config) Expired(now time.Time) bool { return !c.ExpiresAt.IsZero() && !now.Before(c.ExpiresAt) }

// Ring is an ECH key ring as echkeys.json carries it.
type Ring struct {
	// Ring is the ECHKeyRing's "<namespace>/<name>".
	Ring string
	// Epoch is the snapshot's version, increasing by one per change.
	Epoch int64
	// IssuedAt is when the snapshot was written.
	IssuedAt time.Time
	// Configs are the live configs, newest first.
	Configs []Config
}

// Published returns the configs DNS must hold: those published, newest
// Holds reports whether r holds c's key, whatever bytes c's config says:
// a config is its private key, and the same key under another encoding is
// the same config.
func (r Ring) Holds(c Config) bool {
	for _, x := range r.Configs {
		if len(x.PrivateKey) > 0 && subtle.ConstantTimeCompare(x.PrivateKey, c.PrivateKey) == 1 {
			return true
		}
	}
	return false
}

// first.
func (r Ring) Published() []Config {
	var out []Config
	for _, c := range r.Configs {
		if c.State == Published {
			out = append(out, c)
		}
	}
	return out
}

// deriveLabel is the HKDF info of a config's key: changing it changes every
// key a seed gives.
const deriveLabel = "ringmaster ech v1"

// NewConfig makes a staged config with the given id from seed: the private
// key is derived from the seed by HKDF-SHA256 (info "ringmaster ech v1")
// and the KEM's DeriveKeyPair (RFC 9180 §7.1.3), so one seed always gives
// the same config. The seed is SeedSize random bytes from the key source.
// The caller sets CreatedAt.
func NewConfig(id uint8, seed []byte, p Params) (Config, error) {
	if len(seed) != SeedSize {
		return Config{}, fmt.Errorf("%w: seed is %d bytes, want %d", ErrInvalidConfig, len(seed), SeedSize)
	}
	if bytes.Count(seed, []byte{0}) == SeedSize {
		return Config{}, fmt.Errorf("%w: seed is all zero", ErrInvalidConfig)
	}
	if err := p.Validate(); err != nil {
		return Config{}, err
	}
	p = p.withDefaults()
	kem, err := hpke.NewKEM(p.KEM)
	if err != nil {
		return Config{}, fmt.Errorf("%w: KEM 0x%04x is not available", ErrInvalidConfig, p.KEM)
	}
	ikm, err := hkdf.Key(sha256.New, seed, nil, deriveLabel, 64)
	if err != nil {
		return Config{}, fmt.Errorf("derive the key: %w", err)
	}
	defer clear(ikm)
	priv, err := kem.DeriveKeyPair(ikm)
	if err != nil {
		return Config{}, errors.New("derive the key pair failed")
	}
	sk, err := priv.Bytes()
	if err != nil {
		return Config{}, errors.New("serialize the private key failed")
	}
	raw := marshalConfig(echConfig{ID: id, KEM: p.KEM, PublicKey: priv.PublicKey().Bytes(), Suites: p.Suites, MaxNameLength: p.MaxNameLength, PublicName: p.PublicName})
	return Config{ID: id, State: Staged, Config: raw, PrivateKey: sk}, nil
}

// echVersion is the ECHConfig version of RFC 9849 (the extension's code
// point).
const echVersion = 0xfe0d

// echConfig is an ECHConfig's contents (RFC 9849 §4), without extensions:
// ringmaster writes none and reads none.
type echConfig struct {
	ID            uint8
	KEM           uint16
	PublicKey     []byte
	Suites        []Suite
	MaxNameLength uint8
	PublicName    string
}

func marshalConfig(c echConfig) []byte {
	var body []byte
	body = append(body, c.ID)
	body = binary.BigEndian.AppendUint16(body, c.KEM)
	body = binary.BigEndian.AppendUint16(body, uint16(len(c.PublicKey)))
	body = append(body, c.PublicKey...)
	body = binary.BigEndian.AppendUint16(body, uint16(4*len(c.Suites)))
	for _, s := range c.Suites {
		body = binary.BigEndian.AppendUint16(body, s.KDF)
		body = binary.BigEndian.AppendUint16(body, s.AEAD)
	}
	body = append(body, c.MaxNameLength, uint8(len(c.PublicName)))
	body = append(body, c.PublicName...)
	body = binary.BigEndian.AppendUint16(body, 0) // extensions
	out := binary.BigEndian.AppendUint16(nil, echVersion)
	out = binary.BigEndian.AppendUint16(out, uint16(len(body)))
	return append(out, body...)
}

// reader reads big-endian fields off a byte string.
type reader []byte

func (r *reader) u8() (uint8, bool) {
	if len(*r) < 1 {
		return 0, false
	}
	v := (*r)[0]
	*r = (*r)[1:]
	return v, true
}

func (r *reader) u16() (uint16, bool) {
	if len(*r) < 2 {
		return 0, false
	}
	v := binary.BigEndian.Uint16(*r)
	*r = (*r)[2:]
	return v, true
}

func (r *reader) bytes(n int) ([]byte, bool) {
	if len(*r) < n {
		return nil, false
	}
	v := (*r)[:n]
	*r = (*r)[n:]
	return v, true
}

// parseConfig reads one ECHConfig strictly: version RFC 9849's, lengths
// exact, no trailing bytes, no extension, a KEM and suites Go's server
// accepts, a public key the KEM reads, a public name Go's client uses.
// Its errors name the field, never its bytes.
func parseConfig(raw []byte) (echConfig, error) {
	var c echConfig
	if len(raw) > MaxConfigSize {
		return c, fmt.Errorf("%d bytes, more than %d", len(raw), MaxConfigSize)
	}
	r := reader(raw)
	version, ok := r.u16()
	if !ok {
		return c, errors.New("truncated version")
	}
	if version != echVersion {
		return c, fmt.Errorf("version 0x%04x, want 0x%04x (RFC 9849)", version, echVersion)
	}
	n, ok := r.u16()
	if !ok || int(n) != len(r) {
		return c, errors.New("length does not match the config")
	}
	if c.ID, ok = r.u8(); !ok {
		return c, errors.New("truncated config_id")
	}
	if c.KEM, ok = r.u16(); !ok {
		return c, errors.New("truncated kem_id")
	}
	if !KEMAccepted(c.KEM) {
		return c, fmt.Errorf("KEM 0x%04x is not one Go's crypto/tls accepts", c.KEM)
	}
	if n, ok = r.u16(); ok {
		c.PublicKey, ok = r.bytes(int(n))
	}
	if !ok {
		return c, errors.New("truncated public_key")
	}
	kem, err := hpke.NewKEM(c.KEM)
	if err != nil {
		return c, fmt.Errorf("KEM 0x%04x is not available", c.KEM)
	}
	if _, err := kem.NewPublicKey(c.PublicKey); err != nil {
		return c, errors.New("public_key is not a key of its KEM")
	}
	var suites []byte
	if n, ok = r.u16(); ok {
		suites, ok = r.bytes(int(n))
	}
	if !ok {
		return c, errors.New("truncated cipher_suites")
	}
	if len(suites) == 0 || len(suites)%4 != 0 || len(suites)/4 > MaxSuites {
		return c, fmt.Errorf("cipher_suites is not 1 to %d suites", MaxSuites)
	}
	for s := reader(suites); len(s) > 0; {
		kdf, _ := s.u16()
		aead, _ := s.u16()
		c.Suites = append(c.Suites, Suite{kdf, aead})
	}
	if c.MaxNameLength, ok = r.u8(); !ok {
		return c, errors.New("truncated maximum_name_length")
	}
	var name []byte
	if l, ok2 := r.u8(); ok2 {
		name, ok = r.bytes(int(l))
	} else {
		ok = false
	}
	if !ok {
		return c, errors.New("truncated public_name")
	}
	c.PublicName = string(name)
	ext, ok := r.u16()
	if !ok {
		return c, errors.New("truncated extensions")
	}
	if ext != 0 || len(r) != 0 {
		return c, errors.New("extensions or trailing bytes: ringmaster writes none")
	}
	if err := (Params{PublicName: c.PublicName, KEM: c.KEM, Suites: c.Suites}).check(); err != nil {
		return c, err
	}
	return c, nil
}

// ConfigList returns the ECHConfigList of cs (RFC 9849 §4), in their order:
// the value of an HTTPS record's ech SvcParam, and what a crypto/tls client
// takes as EncryptedClientHelloConfigList.
func ConfigList(cs []Config) []byte {
	n := 0
	for _, c := range cs {
		n += len(c.Config)
	}
	out := make([]byte, 2, 2+n)
	binary.BigEndian.PutUint16(out, uint16(n))
	for _, c := range cs {
		out = append(out, c.Config...)
	}
	return out
}
