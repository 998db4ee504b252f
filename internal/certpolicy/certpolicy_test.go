package certpolicy_test

import (
	"crypto"
	"encoding/pem"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/certpolicy"
	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
)

const (
	hour = time.Hour
	day  = 24 * time.Hour
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// The key types the tests use; each is generated once per test binary.
const (
	rsa1024 = testpki.RSA1024
	rsa2048 = testpki.RSA2048
	p256    = testpki.ECDSAP256
	p384    = testpki.ECDSAP384
	ed      = testpki.Ed25519
)

var (
	keysMu sync.Mutex
	keys   = map[testpki.KeyType]crypto.Signer{}
	testCA = func() *testpki.CA {
		ca, err := testpki.NewCA("certpolicy test CA")
		if err != nil {
			panic(err)
		}
		return ca
	}()
)

func key(t testing.TB, k testpki.KeyType) crypto.Signer {
	t.Helper()
	keysMu.Lock()
	defer keysMu.Unlock()
	if s, ok := keys[k]; ok {
		return s
	}
	s, err := testpki.NewKey(k)
	if err != nil {
		t.Fatalf("generate %s key: %v", k, err)
	}
	keys[k] = s
	return s
}

// spec describes a test certificate; times are offsets from t0.
type spec struct {
	key      testpki.KeyType
	from, to time.Duration
	cn       string
	dns      []string
	ips      []string
}

// issue makes the certificate of s and returns its PEM.
func issue(t testing.TB, s spec) []byte {
	t.Helper()
	if s.key == "" {
		s.key = p256
	}
	if s.from == 0 && s.to == 0 {
		s.from, s.to = -day, 89*day
	}
	leaf := testpki.Leaf{CommonName: s.cn, DNSNames: s.dns, Key: key(t, s.key), NotBefore: t0.Add(s.from), NotAfter: t0.Add(s.to)}
	for _, ip := range s.ips {
		leaf.IPs = append(leaf.IPs, net.ParseIP(ip))
	}
	c, err := testCA.Issue(leaf)
	if err != nil {
		t.Fatalf("create certificate: %v", err)
	}
	return c.CertPEM
}

func parsed(t testing.TB, s spec) *certpolicy.Certificate {
	t.Helper()
	c, err := certpolicy.Parse(issue(t, s))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return &c
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		key  testpki.KeyType
		alg  certpolicy.Algorithm
		size int
		desc string
	}{
		{rsa1024, certpolicy.RSA, 1024, "RSA 1024"},
		{rsa2048, certpolicy.RSA, 2048, "RSA 2048"},
		{p256, certpolicy.ECDSA, 256, "ECDSA 256"},
		{p384, certpolicy.ECDSA, 384, "ECDSA 384"},
		{ed, certpolicy.Ed25519, 0, "Ed25519"},
	} {
		t.Run(string(tc.key), func(t *testing.T) {
			c := parsed(t, spec{key: tc.key, cn: "web", dns: []string{"web.example.com"}, ips: []string{"10.0.0.1", "::ffff:10.0.0.2", "fd00::1"}})
			if c.Algorithm != tc.alg || c.Size != tc.size {
				t.Errorf("key = %s %d, want %s %d", c.Algorithm, c.Size, tc.alg, tc.size)
			}
			if got := c.Key(); got != tc.desc {
				t.Errorf("Key() = %q, want %q", got, tc.desc)
			}
			if !c.NotBefore.Equal(t0.Add(-day)) || !c.NotAfter.Equal(t0.Add(89*day)) {
				t.Errorf("validity = %v..%v", c.NotBefore, c.NotAfter)
			}
			wantIPs := []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fd00::1")}
			if !slices.Equal(c.IPAddresses, wantIPs) {
				t.Errorf("IPs = %v, want %v (IPv4-mapped addresses unmapped)", c.IPAddresses, wantIPs)
			}
			if c.CommonName != "web" || !slices.Equal(c.DNSNames, []string{"web.example.com"}) {
				t.Errorf("names = %q %q", c.CommonName, c.DNSNames)
			}
			again := parsed(t, spec{key: tc.key, from: -hour, to: hour})
			if c.KeyID == "" || again.KeyID != c.KeyID {
				t.Errorf("KeyID %q then %q: one key, one id across certificates", c.KeyID, again.KeyID)
			}
		})
	}

	t.Run("distinct keys have distinct ids", func(t *testing.T) {
		if parsed(t, spec{key: p256}).KeyID == parsed(t, spec{key: p384}).KeyID {
			t.Error("same KeyID for two keys")
		}
	})

	t.Run("the leaf is the first certificate of a chain, after other blocks", func(t *testing.T) {
		leaf := issue(t, spec{key: ed, cn: "leaf"})
		ca := issue(t, spec{key: rsa2048, cn: "ca"})
		junk := pem.EncodeToMemory(&pem.Block{Type: "EC PARAMETERS", Bytes: []byte{6, 8, 42}})
		c, err := certpolicy.Parse(slices.Concat(junk, leaf, ca))
		if err != nil || c.CommonName != "leaf" {
			t.Fatalf("Parse = %q, %v; want the leaf", c.CommonName, err)
		}
	})

	for name, data := range map[string][]byte{
		"empty":      nil,
		"not PEM":    []byte("hello"),
		"only a key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("s3cr3t-key-bytes")}),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := certpolicy.Parse(data)
			if !errors.Is(err, certpolicy.ErrNoCertificate) {
				t.Errorf("err = %v, want ErrNoCertificate", err)
			}
		})
	}
	t.Run("bad DER: the error does not quote the data", func(t *testing.T) {
		_, err := certpolicy.Parse(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("s3cr3t-bytes")}))
		if err == nil || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("err = %v", err)
		}
	})
}

// want is an expected violation: its rule and words its message must hold.
type want struct {
	rule certpolicy.Rule
	says []string
}

func TestEvaluate(t *testing.T) {
	always := &certpolicy.CertManager{RotationPolicy: certpolicy.RotateAlways}
	never := &certpolicy.CertManager{RotationPolicy: certpolicy.RotateNever}
	defaulted := &certpolicy.CertManager{}
	strict := certpolicy.Policy{
		KeyAlgorithms: []certpolicy.AllowedKey{{Algorithm: certpolicy.RSA, MinSize: 2048}, {Algorithm: certpolicy.ECDSA, MinSize: 256}, {Algorithm: certpolicy.Ed25519}},
	}

	for _, tc := range []struct {
		name    string
		policy  certpolicy.Policy
		cert    spec
		since   time.Duration // KeySince as an offset from t0; 0: the certificate's notBefore
		cm      *certpolicy.CertManager
		at      time.Duration // now, as an offset from t0
		want    []want
		recheck time.Duration // Recheck as an offset from t0; 0: none expected
	}{
		{name: "RSA 1024 breaks keyAlgorithms RSA>=2048", policy: strict, cert: spec{key: rsa1024},
			want:    []want{{certpolicy.KeyAlgorithms, []string{"key is RSA 1024", "RSA of at least 2048 bits"}}},
			recheck: 89*day + time.Nanosecond},
		{name: "RSA 2048 complies", policy: strict, cert: spec{key: rsa2048}, recheck: 89*day + time.Nanosecond},
		{name: "ECDSA P-256 complies with ECDSA>=256", policy: strict, cert: spec{key: p256}, recheck: 89*day + time.Nanosecond},
		{name: "ECDSA P-256 breaks ECDSA>=384",
			policy: certpolicy.Policy{KeyAlgorithms: []certpolicy.AllowedKey{{Algorithm: certpolicy.ECDSA, MinSize: 384}}},
			cert:   spec{key: p256}, want: []want{{certpolicy.KeyAlgorithms, []string{"key is ECDSA 256", "ECDSA of at least 384 bits"}}}, recheck: 89*day + time.Nanosecond},
		{name: "ECDSA P-384 complies with ECDSA>=384",
			policy: certpolicy.Policy{KeyAlgorithms: []certpolicy.AllowedKey{{Algorithm: certpolicy.ECDSA, MinSize: 384}}},
			cert:   spec{key: p384}, recheck: 89*day + time.Nanosecond},
		{name: "Ed25519 complies when allowed", policy: strict, cert: spec{key: ed}, recheck: 89*day + time.Nanosecond},
		{name: "Ed25519 breaks an RSA/ECDSA-only policy",
			policy: certpolicy.Policy{KeyAlgorithms: []certpolicy.AllowedKey{{Algorithm: certpolicy.RSA, MinSize: 2048}, {Algorithm: certpolicy.ECDSA}}},
			cert:   spec{key: ed}, want: []want{{certpolicy.KeyAlgorithms, []string{"key is Ed25519", "allows RSA, ECDSA"}}}, recheck: 89*day + time.Nanosecond},
		{name: "no rules: a valid certificate complies", cert: spec{key: rsa1024}, recheck: 89*day + time.Nanosecond},

		{name: "expired: validity, always checked", cert: spec{from: -90 * day, to: -2 * day},
			want: []want{{certpolicy.Validity, []string{"expired at 2026-11-28T12:00:00Z"}}}},
		{name: "expired: no minRemainingValidity on top", policy: certpolicy.Policy{MinRemainingValidity: 15 * day},
			cert: spec{from: -90 * day, to: -hour}, want: []want{{certpolicy.Validity, []string{"expired at 2026-11-30T11:00:00Z"}}}},
		{name: "valid up to its notAfter, inclusive", cert: spec{from: -day, to: 0}, recheck: time.Nanosecond},
		{name: "expired a second after its notAfter", cert: spec{from: -day, to: -time.Second}, want: []want{{certpolicy.Validity, []string{"expired at 2026-11-30T11:59:59Z"}}}},
		{name: "not yet valid, rechecked when it becomes valid", cert: spec{from: 2 * hour, to: 30 * day},
			want: []want{{certpolicy.Validity, []string{"not valid until 2026-11-30T14:00:00Z"}}}, recheck: 2 * hour},

		{name: "over-long validity", policy: certpolicy.Policy{MaxValidity: 90 * day}, cert: spec{from: -day, to: 396 * day},
			want: []want{{certpolicy.MaxValidity, []string{"valid for 397d", "maxValidity is 90d"}}}, recheck: 396*day + time.Nanosecond},
		{name: "validity exactly maxValidity complies", policy: certpolicy.Policy{MaxValidity: 90 * day}, cert: spec{from: -day, to: 89 * day}, recheck: 89*day + time.Nanosecond},

		{name: "renewal overdue: under minRemainingValidity", policy: certpolicy.Policy{MinRemainingValidity: 15 * day},
			cert: spec{from: -80 * day, to: 10 * day}, want: []want{{certpolicy.MinRemainingValidity, []string{"expires at 2026-12-10T12:00:00Z, within minRemainingValidity 15d"}}}, recheck: 10*day + time.Nanosecond},
		{name: "minRemainingValidity: rechecked when the remaining time falls under it", policy: certpolicy.Policy{MinRemainingValidity: 15 * day},
			cert: spec{from: -day, to: 89 * day}, recheck: 74 * day},

		{name: "key too old (rotating Certificate: dated by notBefore)", policy: certpolicy.Policy{MaxKeyAge: 30 * day},
			cert: spec{from: -45 * day, to: 45 * day}, cm: always,
			want: []want{{certpolicy.MaxKeyAge, []string{"since 2026-10-16T12:00:00Z is older than maxKeyAge 30d"}}}, recheck: 45*day + time.Nanosecond},
		{name: "key reused across renewals: dated by its first certificate", policy: certpolicy.Policy{MaxKeyAge: 30 * day},
			cert: spec{from: -day, to: 89 * day}, since: -100 * day, cm: never,
			want: []want{{certpolicy.MaxKeyAge, []string{"since 2026-08-22T12:00:00Z"}}}, recheck: 89*day + time.Nanosecond},
		{name: "young key complies and is rechecked when it comes of age", policy: certpolicy.Policy{MaxKeyAge: 30 * day},
			cert: spec{from: -day, to: 89 * day}, cm: defaulted, recheck: 29*day + time.Nanosecond},

		{name: "wildcard SAN allowed by a wildcard pattern", policy: certpolicy.Policy{AllowedDNSNames: []string{"*.example.com"}},
			cert: spec{dns: []string{"*.example.com", "www.example.com"}}, recheck: 89*day + time.Nanosecond},
		{name: "wildcard SAN not allowed by host patterns", policy: certpolicy.Policy{AllowedDNSNames: []string{"www.example.com", "api.example.com"}},
			cert: spec{dns: []string{"*.example.com", "www.example.com"}},
			want: []want{{certpolicy.AllowedDNSNames, []string{`"*.example.com" not allowed`}}}, recheck: 89*day + time.Nanosecond},
		{name: "names outside every pattern are listed", policy: certpolicy.Policy{AllowedDNSNames: []string{"**.svc.cluster.local"}},
			cert: spec{dns: []string{"web.shop.svc.cluster.local", "evil.com", "a.b.evil.com"}},
			want: []want{{certpolicy.AllowedDNSNames, []string{`"evil.com", "a.b.evil.com" not allowed`}}}, recheck: 89*day + time.Nanosecond},
		{name: "a certificate with no SAN is judged by its common name", policy: certpolicy.Policy{AllowedDNSNames: []string{"*.example.com"}},
			cert: spec{cn: "legacy.example.org"}, want: []want{{certpolicy.AllowedDNSNames, []string{`"legacy.example.org"`}}}, recheck: 89*day + time.Nanosecond},
		{name: "the common name does not count beside SANs", policy: certpolicy.Policy{AllowedDNSNames: []string{"*.example.com"}},
			cert: spec{cn: "My Service", dns: []string{"a.example.com"}}, recheck: 89*day + time.Nanosecond},

		{name: "a required name among the SANs complies", policy: certpolicy.Policy{RequiredDNSNames: []string{"public.example.com"}},
			cert: spec{dns: []string{"www.example.com", "Public.Example.com"}}, recheck: 89*day + time.Nanosecond},
		{name: "a required name under a wildcard SAN complies", policy: certpolicy.Policy{RequiredDNSNames: []string{"public.example.com"}},
			cert: spec{dns: []string{"*.example.com"}}, recheck: 89*day + time.Nanosecond},
		{name: "a missing required name is named", policy: certpolicy.Policy{RequiredDNSNames: []string{"public.example.com", "www.example.com"}},
			cert: spec{dns: []string{"www.example.com"}},
			want: []want{{certpolicy.RequiredDNSNames, []string{`"public.example.com" required by requiredDNSNames, not among the DNS names`}}}, recheck: 89*day + time.Nanosecond},
		{name: "every missing required name is listed", policy: certpolicy.Policy{RequiredDNSNames: []string{"public.example.com", "ech.example.net"}},
			cert: spec{dns: []string{"*.public.example.com"}},
			want: []want{{certpolicy.RequiredDNSNames, []string{`"public.example.com", "ech.example.net" required`}}}, recheck: 89*day + time.Nanosecond},
		{name: "the common name does not carry a required name", policy: certpolicy.Policy{RequiredDNSNames: []string{"public.example.com"}},
			cert: spec{cn: "public.example.com"}, want: []want{{certpolicy.RequiredDNSNames, []string{`"public.example.com"`}}}, recheck: 89*day + time.Nanosecond},
		{name: "a required name both missing and beside a disallowed one", policy: certpolicy.Policy{AllowedDNSNames: []string{"*.example.com"}, RequiredDNSNames: []string{"public.example.com"}},
			cert: spec{dns: []string{"www.example.org"}},
			want: []want{
				{certpolicy.AllowedDNSNames, []string{`"www.example.org" not allowed`}},
				{certpolicy.RequiredDNSNames, []string{`"public.example.com"`}},
			}, recheck: 89*day + time.Nanosecond},

		{name: "IP SANs inside the ranges", policy: certpolicy.Policy{AllowedIPRanges: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}},
			cert: spec{ips: []string{"10.1.2.3", "fd00::5"}}, recheck: 89*day + time.Nanosecond},
		{name: "IP SANs outside the ranges", policy: certpolicy.Policy{AllowedIPRanges: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}},
			cert: spec{dns: []string{"a.example.com"}, ips: []string{"10.1.2.3", "192.168.1.1", "2001:db8::1"}},
			want: []want{{certpolicy.AllowedIPRanges, []string{`"192.168.1.1", "2001:db8::1" outside allowedIPRanges`}}}, recheck: 89*day + time.Nanosecond},
		{name: "IP SANs are not DNS names", policy: certpolicy.Policy{AllowedDNSNames: []string{"*.example.com"}},
			cert: spec{ips: []string{"10.1.2.3"}, cn: "10.1.2.3"}, recheck: 89*day + time.Nanosecond},

		{name: "rotationPolicy Never breaks requireKeyRotation", policy: certpolicy.Policy{RequireKeyRotation: true}, cert: spec{}, cm: never,
			want: []want{{certpolicy.RequireKeyRotation, []string{"rotationPolicy is Never"}}}, recheck: 89*day + time.Nanosecond},
		{name: "unset rotationPolicy means Always", policy: certpolicy.Policy{RequireKeyRotation: true}, cert: spec{}, cm: defaulted, recheck: 89*day + time.Nanosecond},
		{name: "requireKeyRotation does not apply to a Secret without a Certificate", policy: certpolicy.Policy{RequireKeyRotation: true}, cert: spec{}, recheck: 89*day + time.Nanosecond},

		{name: "several rules broken, in rule order",
			policy: certpolicy.Policy{MaxValidity: 90 * day, MaxKeyAge: 30 * day, AllowedDNSNames: []string{"*.example.com"}, KeyAlgorithms: strict.KeyAlgorithms, RequireKeyRotation: true},
			cert:   spec{key: rsa1024, from: -40 * day, to: 360 * day, dns: []string{"x.example.org"}}, cm: never,
			want: []want{
				{certpolicy.MaxValidity, []string{"valid for 400d"}},
				{certpolicy.MaxKeyAge, []string{"since 2026-10-21T12:00:00Z"}},
				{certpolicy.KeyAlgorithms, []string{"RSA 1024"}},
				{certpolicy.AllowedDNSNames, []string{`"x.example.org"`}},
				{certpolicy.RequireKeyRotation, nil},
			}, recheck: 360*day + time.Nanosecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := parsed(t, tc.cert)
			s := certpolicy.Subject{Cert: c, CertManager: tc.cm, KeySince: c.NotBefore}
			if tc.since != 0 {
				s.KeySince = t0.Add(tc.since)
			}
			v := certpolicy.Evaluate(tc.policy, s, t0.Add(tc.at))
			checkViolations(t, v.Violations, tc.want)
			var wantRecheck time.Time
			if tc.recheck != 0 {
				wantRecheck = t0.Add(tc.recheck)
			}
			if !v.Recheck.Equal(wantRecheck) {
				t.Errorf("Recheck = %v, want %v", v.Recheck, wantRecheck)
			}
			if !v.Recheck.IsZero() && len(tc.want) == 0 {
				if got := certpolicy.Evaluate(tc.policy, s, v.Recheck); len(got.Violations) == 0 {
					t.Errorf("at Recheck %v the verdict is unchanged", v.Recheck)
				}
			}
		})
	}

	t.Run("a certificate that cannot be read violates readable, and only that", func(t *testing.T) {
		v := certpolicy.Evaluate(certpolicy.Policy{MaxKeyAge: day, RequireKeyRotation: true}, certpolicy.Subject{ReadError: "tls.crt: no PEM CERTIFICATE block", CertManager: always}, t0)
		checkViolations(t, v.Violations, []want{{certpolicy.Readable, []string{"no PEM CERTIFICATE block"}}})
	})
	t.Run("a Certificate not issued yet is judged by its spec alone", func(t *testing.T) {
		v := certpolicy.Evaluate(certpolicy.Policy{MaxKeyAge: day, RequireKeyRotation: true}, certpolicy.Subject{CertManager: never}, t0)
		checkViolations(t, v.Violations, []want{{certpolicy.RequireKeyRotation, nil}})
		if !v.Recheck.IsZero() {
			t.Errorf("Recheck = %v", v.Recheck)
		}
	})
	t.Run("an unknown key age never breaks maxKeyAge", func(t *testing.T) {
		c := parsed(t, spec{})
		v := certpolicy.Evaluate(certpolicy.Policy{MaxKeyAge: hour}, certpolicy.Subject{Cert: c}, t0)
		checkViolations(t, v.Violations, nil)
	})
}

func checkViolations(t *testing.T, got []certpolicy.Violation, want []want) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("violations = %+v, want rules %v", got, want)
	}
	for i, w := range want {
		if got[i].Rule != w.rule {
			t.Errorf("violation %d rule = %s, want %s (%+v)", i, got[i].Rule, w.rule, got)
		}
		for _, s := range w.says {
			if !strings.Contains(got[i].Message, s) {
				t.Errorf("violation %s message %q lacks %q", got[i].Rule, got[i].Message, s)
			}
		}
	}
}

func TestMatchDNSName(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"www.example.com", "www.example.com", true},
		{"www.example.com", "WWW.Example.COM.", true},
		{"www.example.com", "api.example.com", false},
		{"*.example.com", "www.example.com", true},
		{"*.example.com", "example.com", false},
		{"*.example.com", "a.b.example.com", false},
		{"**.example.com", "a.b.example.com", true},
		{"**.example.com", "www.example.com", true},
		{"**.example.com", "example.com", false},
		{"**.example.com", "badexample.com", false},
		{"web-*.example.com", "web-1.example.com", true},
		{"web-*.example.com", "web-.example.com", true},
		{"web-*.example.com", "api-1.example.com", false},
		{"*-*.example.com", "a-b-c.example.com", true},
		{"*", "localhost", true},
		{"*", "a.b", false},
		{"**", "a.b.c", true},
		{"a.**.z", "a.b.c.z", true},
		{"a.**.z", "a.z", false},
		// A wildcard name stands for every name it covers.
		{"*.example.com", "*.example.com", true},
		{"**.example.com", "*.example.com", true},
		{"www.example.com", "*.example.com", false},
		{"w*.example.com", "*.example.com", false},
		{"*.example.com", "*.*.example.com", false},
		{"**.example.com", "*.*.example.com", true},
		{"*.example.com", "", false},
		{"*.example.com", ".example.com", false},
	} {
		if got := certpolicy.MatchDNSName(tc.pattern, tc.name); got != tc.want {
			t.Errorf("MatchDNSName(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}

func TestCoversDNSName(t *testing.T) {
	for _, tc := range []struct {
		san, name string
		want      bool
	}{
		{"public.example.com", "public.example.com", true},
		{"Public.Example.COM.", "public.example.com", true},
		{"www.example.com", "public.example.com", false},
		{"*.example.com", "public.example.com", true},
		{"*.example.com", "example.com", false},
		{"*.example.com", "a.public.example.com", false},
		{"*.public.example.com", "public.example.com", false},
		// Partial and inner wildcards are not honoured by clients.
		{"p*.example.com", "public.example.com", false},
		{"public.*.com", "public.example.com", false},
		{"*.*.com", "public.example.com", false},
		{"*", "localhost", false},
		{"*.", "localhost", false},
		{"*.example.com", ".example.com", false},
		{"example.com", "", false},
	} {
		if got := certpolicy.CoversDNSName(tc.san, tc.name); got != tc.want {
			t.Errorf("CoversDNSName(%q, %q) = %v, want %v", tc.san, tc.name, got, tc.want)
		}
	}
}

func TestMatchGlob(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"", "anything", true},
		{"*", "", true},
		{"vault-*", "vault-prod", true},
		{"vault-*", "ca", false},
		{"*-issuer", "lets-encrypt-issuer", true},
		{"ClusterIssuer", "Issuer", false},
	} {
		if got := certpolicy.MatchGlob(tc.pattern, tc.s); got != tc.want {
			t.Errorf("MatchGlob(%q, %q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

func TestKeySince(t *testing.T) {
	c := parsed(t, spec{from: -day, to: 89 * day})
	first := t0.Add(-200 * day)
	for _, tc := range []struct {
		name      string
		cm        *certpolicy.CertManager
		firstSeen time.Time
		want      time.Time
	}{
		{"rotating Certificate: its certificate's notBefore", &certpolicy.CertManager{}, first, c.NotBefore},
		{"rotationPolicy Never: the key's first certificate", &certpolicy.CertManager{RotationPolicy: certpolicy.RotateNever}, first, first},
		{"a Secret: the key's first certificate", nil, first, first},
		{"nothing seen before", nil, time.Time{}, c.NotBefore},
		{"a first sighting later than notBefore does not rejuvenate", nil, t0, c.NotBefore},
	} {
		if got := certpolicy.KeySince(*c, tc.cm, tc.firstSeen); !got.Equal(tc.want) {
			t.Errorf("%s: KeySince = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestLedger(t *testing.T) {
	var l certpolicy.Ledger
	k1 := certpolicy.Certificate{KeyID: "k1", NotBefore: t0}
	k1renewed := certpolicy.Certificate{KeyID: "k1", NotBefore: t0.Add(60 * day)}
	k2 := certpolicy.Certificate{KeyID: "k2", NotBefore: t0.Add(61 * day)}

	if got := l.Observe("shop/web", k1); !got.Equal(t0) {
		t.Fatalf("first sighting = %v", got)
	}
	if got := l.Observe("shop/web", k1renewed); !got.Equal(t0) {
		t.Errorf("renewed with the same key: since = %v, want the first certificate's %v", got, t0)
	}
	if got := l.Observe("shop/copy", k1renewed); !got.Equal(t0) {
		t.Errorf("a second holder of the key: since = %v, want %v", got, t0)
	}
	if got := l.Observe("shop/web", k2); !got.Equal(k2.NotBefore) {
		t.Errorf("a new key: since = %v", got)
	}
	if l.Len() != 2 {
		t.Errorf("Len = %d, want 2 (k1 still held by shop/copy)", l.Len())
	}
	l.Release("shop/copy")
	if l.Len() != 1 {
		t.Errorf("Len = %d after k1's last holder went, want 1", l.Len())
	}
	if got := l.Observe("shop/other", k1renewed); !got.Equal(k1renewed.NotBefore) {
		t.Errorf("a forgotten key starts over: since = %v", got)
	}
	l.Release("shop/web")
	l.Release("shop/web")
	l.Release("shop/other")
	if l.Len() != 0 {
		t.Errorf("Len = %d, want 0", l.Len())
	}
}

func TestPlan(t *testing.T) {
	always := &certpolicy.CertManager{}
	never := &certpolicy.CertManager{RotationPolicy: certpolicy.RotateNever}
	year := &certpolicy.CertManager{Duration: 365 * day}
	short := &certpolicy.CertManager{Duration: 10 * day}
	p := certpolicy.Policy{MaxKeyAge: 30 * day, MaxValidity: 100 * day, MinRemainingValidity: 15 * day, KeyAlgorithms: []certpolicy.AllowedKey{{Algorithm: certpolicy.ECDSA}}}
	v := func(rules ...certpolicy.Rule) certpolicy.Verdict {
		var out certpolicy.Verdict
		for _, r := range rules {
			out.Violations = append(out.Violations, certpolicy.Violation{Rule: r})
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		cm     *certpolicy.CertManager
		v      certpolicy.Verdict
		mends  []certpolicy.Rule
		cannot map[certpolicy.Rule]string
	}{
		{"old key, rotating: renew", always, v(certpolicy.MaxKeyAge), []certpolicy.Rule{certpolicy.MaxKeyAge}, nil},
		{"old key, rotationPolicy Never: cannot", never, v(certpolicy.MaxKeyAge), nil, map[certpolicy.Rule]string{certpolicy.MaxKeyAge: "rotationPolicy is Never"}},
		{"a foreign Secret: never", nil, v(certpolicy.MaxKeyAge, certpolicy.MinRemainingValidity), nil,
			map[certpolicy.Rule]string{certpolicy.MaxKeyAge: "no cert-manager Certificate", certpolicy.MinRemainingValidity: "no cert-manager Certificate"}},
		{"over-long validity, default 90d request: renew", always, v(certpolicy.MaxValidity), []certpolicy.Rule{certpolicy.MaxValidity}, nil},
		{"over-long validity requested: cannot", year, v(certpolicy.MaxValidity), nil, map[certpolicy.Rule]string{certpolicy.MaxValidity: "spec.duration 365d exceeds maxValidity 100d"}},
		{"renewal overdue: renew", always, v(certpolicy.MinRemainingValidity), []certpolicy.Rule{certpolicy.MinRemainingValidity}, nil},
		{"renewal overdue, duration shorter than the minimum: cannot", short, v(certpolicy.MinRemainingValidity), nil,
			map[certpolicy.Rule]string{certpolicy.MinRemainingValidity: "not longer than minRemainingValidity"}},
		{"spec rules are audit-only", always, v(certpolicy.KeyAlgorithms, certpolicy.AllowedDNSNames, certpolicy.RequiredDNSNames, certpolicy.Validity), nil, nil},
		{"mends what it can, reports the rest", never, v(certpolicy.MaxValidity, certpolicy.MaxKeyAge), []certpolicy.Rule{certpolicy.MaxValidity},
			map[certpolicy.Rule]string{certpolicy.MaxKeyAge: "Never"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := certpolicy.Decide(p, certpolicy.Subject{CertManager: tc.cm}, tc.v)
			if !slices.Equal(r.Mends, tc.mends) || r.Renew != (len(tc.mends) > 0) {
				t.Errorf("Mends = %v (renew %v), want %v", r.Mends, r.Renew, tc.mends)
			}
			if len(r.Cannot) != len(tc.cannot) {
				t.Fatalf("Cannot = %+v, want %v", r.Cannot, tc.cannot)
			}
			for _, c := range r.Cannot {
				if !strings.Contains(c.Message, tc.cannot[c.Rule]) || tc.cannot[c.Rule] == "" {
					t.Errorf("Cannot %s = %q, want it to say %q", c.Rule, c.Message, tc.cannot[c.Rule])
				}
			}
		})
	}
}

func TestUnmended(t *testing.T) {
	p := certpolicy.Policy{MaxKeyAge: 30 * day, MaxValidity: 90 * day, MinRemainingValidity: 15 * day}
	cm := &certpolicy.CertManager{Duration: 60 * day}
	asked := t0
	for _, tc := range []struct {
		rule  certpolicy.Rule
		after time.Duration
		want  bool
	}{
		{certpolicy.MaxKeyAge, hour, true},
		{certpolicy.MaxKeyAge, 30 * day, false},
		{certpolicy.MinRemainingValidity, hour, true},
		{certpolicy.MinRemainingValidity, 45 * day, false},
		{certpolicy.MaxValidity, 400 * day, true},
	} {
		if got := certpolicy.Unmended(p, cm, tc.rule, asked, asked.Add(tc.after)); got != tc.want {
			t.Errorf("Unmended(%s, %v after) = %v, want %v", tc.rule, tc.after, got, tc.want)
		}
	}
}

// BenchmarkEvaluate judges one certificate against a policy using every
// rule: a full evaluation of a policy costs this times the certificates it
// selects.
func BenchmarkEvaluate(b *testing.B) {
	c := parsed(b, spec{key: p256, dns: []string{"a.example.com", "b.example.com"}, ips: []string{"10.0.0.1"}})
	p := certpolicy.Policy{
		MaxValidity: 90 * day, MinRemainingValidity: 15 * day, MaxKeyAge: 90 * day, RequireKeyRotation: true,
		KeyAlgorithms:    []certpolicy.AllowedKey{{Algorithm: certpolicy.RSA, MinSize: 2048}, {Algorithm: certpolicy.ECDSA, MinSize: 256}},
		AllowedDNSNames:  []string{"www.example.org", "**.example.com"},
		RequiredDNSNames: []string{"b.example.com"},
		AllowedIPRanges:  []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
	}
	s := certpolicy.Subject{Cert: c, KeySince: c.NotBefore, CertManager: &certpolicy.CertManager{}}
	for b.Loop() {
		certpolicy.Evaluate(p, s, t0)
	}
}

// BenchmarkParse reads a tls.crt: what observing one changed Secret costs
// besides its evaluations.
func BenchmarkParse(b *testing.B) {
	data := issue(b, spec{key: p256, dns: []string{"a.example.com"}})
	for b.Loop() {
		if _, err := certpolicy.Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}
