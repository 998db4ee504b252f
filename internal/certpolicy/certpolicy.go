// Package certpolicy is the pure domain of certificate governance:
//   - the facts known about one certificate (Subject, Facts), read from
//     cert-manager's objects as cert-manager means them (certmanager.go);
//   - the rules of a policy (Policy) and what it selects (Compile, Selects);
//   - the verdict of one against the other (Evaluate), kept per policy in a
//     Store that aggregates them into a policy's status (Aggregate, Status);
//   - what Enforce may do about a verdict (Plan, Remedy) and when to ask
//     again (Renewals).
//
// It makes no API call and imports no client-go: the controller reads
// objects, calls it, and writes what it decided. It never sees a private
// key; keys are known by the SHA-256 of their public key (KeyID). Every
// function takes the current time as a value.
package certpolicy

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Rule names a rule in violations, status and metrics. The names of the
// configurable rules are the JSON names of the CertificatePolicy fields.
type Rule string

// The rules. Readable and Validity are always checked.
const (
	// Readable: the certificate cannot be parsed.
	Readable Rule = "readable"
	// Validity: the certificate has expired or is not valid yet.
	Validity             Rule = "validity"
	MaxValidity          Rule = "maxValidity"
	MinRemainingValidity Rule = "minRemainingValidity"
	MaxKeyAge            Rule = "maxKeyAge"
	KeyAlgorithms        Rule = "keyAlgorithms"
	AllowedDNSNames      Rule = "allowedDNSNames"
	RequiredDNSNames     Rule = "requiredDNSNames"
	AllowedIPRanges      Rule = "allowedIPRanges"
	RequireKeyRotation   Rule = "requireKeyRotation"
	DeniedDNSNames       Rule = "deniedDNSNames"

	// Of pod certificates (PodCertificateRequests).
	AllowedSignerNames   Rule = "allowedSignerNames"
	MaxExpirationSeconds Rule = "maxExpirationSeconds"
	// RefreshOverdue: issued, and not refreshed by beginRefreshAt plus
	// refreshOverdueAfter.
	RefreshOverdue Rule = "refreshOverdue"
	// Issued: the signer denied the request, or failed to issue it.
	Issued Rule = "issued"

	// Of CA certificates (spec.caRules). CAValidity is always checked.
	CAValidity             Rule = "caValidity"
	CAMaxValidity          Rule = "caMaxValidity"
	CAMinValidity          Rule = "caMinValidity"
	CAMinRemainingValidity Rule = "caMinRemainingValidity"
	CAKeyAlgorithms        Rule = "caKeyAlgorithms"
)

// Rules lists every rule, in the order Evaluate checks them.
var Rules = []Rule{Readable, Validity, MaxValidity, MinRemainingValidity, MaxKeyAge, KeyAlgorithms, AllowedDNSNames, DeniedDNSNames, RequiredDNSNames, AllowedIPRanges, RequireKeyRotation,
	AllowedSignerNames, MaxExpirationSeconds, Issued, RefreshOverdue,
	CAValidity, CAMaxValidity, CAMinValidity, CAMinRemainingValidity, CAKeyAlgorithms}

// Algorithm is a public key algorithm.
type Algorithm string

// Public key algorithms. Unknown covers every other (DSA, ML-DSA, ...).
const (
	RSA     Algorithm = "RSA"
	ECDSA   Algorithm = "ECDSA"
	Ed25519 Algorithm = "Ed25519"
	Unknown Algorithm = "Unknown"
)

// AllowedKey allows one algorithm with keys of at least MinSize bits (the
// RSA modulus, the ECDSA curve); 0 allows any size.
type AllowedKey struct {
	Algorithm Algorithm
	MinSize   int
}

// Policy is the rules of a CertificatePolicy. Zero values are unset rules.
type Policy struct {
	MaxValidity          time.Duration
	MinRemainingValidity time.Duration
	MaxKeyAge            time.Duration
	// KeyAlgorithms, when not empty, are the only keys allowed.
	KeyAlgorithms []AllowedKey
	// AllowedDNSNames, when not empty, are the patterns every DNS name
	// must match (see MatchDNSName).
	AllowedDNSNames []string
	// RequiredDNSNames are names every certificate must carry among its
	// DNS SANs, or under a wildcard one (see CoversDNSName).
	RequiredDNSNames []string
	// AllowedIPRanges, when not empty, must hold every IP address SAN.
	AllowedIPRanges []netip.Prefix
	// RequireKeyRotation requires cert-manager's rotationPolicy Always.
	RequireKeyRotation bool
	// DeniedDNSNames are patterns no DNS name may match (see DeniesDNSName).
	DeniedDNSNames []string

	// AllowedSignerNames, when not empty, are the patterns (MatchGlob) a
	// pod certificate's signer must match.
	AllowedSignerNames []string
	// MaxExpirationSeconds bounds a pod certificate request's
	// maxExpirationSeconds; 0 is unset.
	MaxExpirationSeconds int32
	// RefreshOverdueAfter is the margin past beginRefreshAt after which an
	// issued pod certificate that no newer one replaced is overdue.
	RefreshOverdueAfter time.Duration

	// CA, when not nil, are the rules of CA certificates.
	CA *CAPolicy
}

// CAPolicy is the rules of CA certificates. Zero values are unset rules.
type CAPolicy struct {
	MaxValidity, MinValidity, MinRemainingValidity time.Duration
	KeyAlgorithms                                  []AllowedKey
}

// Certificate is what is known of one X.509 certificate: public facts only.
type Certificate struct {
	NotBefore, NotAfter time.Time
	Algorithm           Algorithm
	// Size is the RSA modulus or ECDSA curve size in bits; 0 for Ed25519.
	Size        int
	CommonName  string
	DNSNames    []string
	IPAddresses []netip.Addr
	// DNSNameCount and IPAddressCount are how many DNS and IP SANs the
	// certificate carries, when Trim kept fewer (see NamesCut); zero, or
	// the length of the list, when every one is kept.
	DNSNameCount, IPAddressCount int
	// KeyID identifies the public key (see KeyID); equal keys, equal ids.
	KeyID string
	// IsCA: the certificate is a CA (basic constraints). A CA is judged by
	// a policy's CA rules, never by its leaf rules.
	IsCA bool `json:",omitempty"`
}

// Key describes the certificate's key, e.g. "RSA 2048" or "Ed25519".
func (c Certificate) Key() string {
	if c.Size == 0 {
		return string(c.Algorithm)
	}
	return fmt.Sprintf("%s %d", c.Algorithm, c.Size)
}

// RotationPolicy is a cert-manager Certificate's privateKey.rotationPolicy.
type RotationPolicy string

// Rotation policies. The empty value means Always, as it does in
// cert-manager since v1.18.
const (
	RotateAlways RotationPolicy = "Always"
	RotateNever  RotationPolicy = "Never"
)

// CertManager is what a cert-manager Certificate's spec says.
type CertManager struct {
	RotationPolicy RotationPolicy
	// Duration is the requested validity; 0 is cert-manager's default, 90
	// days.
	Duration time.Duration
}

// DefaultDuration is the validity cert-manager requests when a Certificate
// sets none.
const DefaultDuration = 90 * 24 * time.Hour

// RotatesKey reports whether every issuance brings a new private key.
func (c *CertManager) RotatesKey() bool {
	return c != nil && c.RotationPolicy != RotateNever
}

func (c *CertManager) duration() time.Duration {
	return cmp.Or(c.Duration, DefaultDuration)
}

// Subject is everything known about one judged certificate.
type Subject struct {
	// Cert is the certificate in use; nil when there is none yet (a
	// Certificate not issued) or it cannot be read (ReadError).
	Cert *Certificate
	// ReadError says why the certificate could not be read; it never
	// quotes the data.
	ReadError string
	// KeySince is when the key is first known to have existed (see
	// KeySince); zero when unknown.
	KeySince time.Time
	// CertManager is the spec of the cert-manager Certificate the subject
	// is; nil for a Secret that no Certificate manages.
	CertManager *CertManager
	// CAs are the CA certificates that come with the subject: a TLS
	// Secret's ca.crt, the intermediates of a pod certificate's chain, a
	// ClusterTrustBundle's certificates (see Chain).
	CAs Chain
	// Pod is the request of a pod certificate; nil for other kinds.
	Pod *PodRequest
}

// KeySince dates the key of cert: for a cert-manager Certificate that rotates
// its key at each issuance, the certificate's notBefore; otherwise the key
// may outlive its certificate, and firstSeen (the notBefore of the earliest
// certificate seen with the same key, see Ledger) dates it when earlier.
func KeySince(cert Certificate, cm *CertManager, firstSeen time.Time) time.Time {
	if cm.RotatesKey() || firstSeen.IsZero() || cert.NotBefore.Before(firstSeen) {
		return cert.NotBefore
	}
	return firstSeen
}

// Violation is one broken rule and the fact that broke it. Its message
// depends on the certificate and the policy, not on the current time, so
// that a verdict re-made later reads the same.
type Violation struct {
	Rule    Rule
	Message string
}

// Verdict is the outcome of one evaluation.
type Verdict struct {
	// Violations are ordered as Rules.
	Violations []Violation
	// Recheck is the next instant the verdict changes with time alone (a
	// certificate expires, a key grows too old); zero if none.
	Recheck time.Time
	// PodState is the state of a pod certificate, in the kubelet's words;
	// empty for other kinds.
	PodState PodState
}

// Violates reports whether rule is broken.
func (v Verdict) Violates(rule Rule) bool {
	return slices.ContainsFunc(v.Violations, func(x Violation) bool { return x.Rule == rule })
}

// Evaluate judges s against p at now.
func Evaluate(p Policy, s Subject, now time.Time) Verdict {
	var v Verdict
	add := v.add
	// recheckAt notes a future instant at which a rule flips.
	recheckAt := func(t time.Time) {
		if t.After(now) && (v.Recheck.IsZero() || t.Before(v.Recheck)) {
			v.Recheck = t
		}
	}

	if c := s.Cert; c != nil {
		switch {
		case now.Before(c.NotBefore):
			add(Validity, "not valid until %s", stamp(c.NotBefore))
			recheckAt(c.NotBefore)
		case now.After(c.NotAfter): // notAfter itself is valid (RFC 5280)
			add(Validity, "expired at %s", stamp(c.NotAfter))
		default:
			recheckAt(c.NotAfter.Add(time.Nanosecond))
		}
		if c.IsCA {
			// A CA (a cert-manager CA issuer's Secret): judged as one.
			v.judgeCAs(p.CA, Chain{Certs: []Certificate{*c}}, now, recheckAt)
		} else {
			v.judgeLeaf(p, s, now, recheckAt)
		}
	} else if s.ReadError != "" {
		add(Readable, "%s", s.ReadError)
	}
	if s.Pod != nil {
		v.judgePod(p, s, now, recheckAt)
	}
	v.judgeCAs(p.CA, s.CAs, now, recheckAt)
	if p.RequireKeyRotation && s.CertManager != nil && !s.CertManager.RotatesKey() {
		add(RequireKeyRotation, "privateKey.rotationPolicy is Never: the key is kept across renewals")
	}
	slices.SortStableFunc(v.Violations, func(a, b Violation) int { return cmp.Compare(ruleOrder(a.Rule), ruleOrder(b.Rule)) })
	return v
}

func ruleOrder(r Rule) int { return slices.Index(Rules, r) }

// add appends a violation.
func (v *Verdict) add(r Rule, format string, args ...any) {
	v.Violations = append(v.Violations, Violation{Rule: r, Message: fmt.Sprintf(format, args...)})
}

// judgeLeaf applies the leaf rules to s.Cert.
func (v *Verdict) judgeLeaf(p Policy, s Subject, now time.Time, recheckAt func(time.Time)) {
	add, c := v.add, s.Cert
	{
		if validity := c.NotAfter.Sub(c.NotBefore); p.MaxValidity > 0 && validity > p.MaxValidity {
			add(MaxValidity, "valid for %s; maxValidity is %s", human(validity), human(p.MaxValidity))
		}
		if p.MinRemainingValidity > 0 && !now.Before(c.NotBefore) && !now.After(c.NotAfter) {
			deadline := c.NotAfter.Add(-p.MinRemainingValidity)
			if !now.Before(deadline) {
				add(MinRemainingValidity, "expires at %s, within minRemainingValidity %s", stamp(c.NotAfter), human(p.MinRemainingValidity))
			}
			recheckAt(deadline)
		}
		if p.MaxKeyAge > 0 && !s.KeySince.IsZero() {
			deadline := s.KeySince.Add(p.MaxKeyAge)
			if now.After(deadline) {
				add(MaxKeyAge, "key %s since %s is older than maxKeyAge %s", c.KeyID, stamp(s.KeySince), human(p.MaxKeyAge))
			}
			recheckAt(deadline.Add(time.Nanosecond))
		}
		if msg, ok := allowedKey(p.KeyAlgorithms, *c); !ok {
			add(KeyAlgorithms, "%s", msg)
		}
		// A rule over names the operator did not keep all of cannot say
		// they pass: it says what it did not see, as a violation.
		dnsCut, ipCut := c.dnsCutNote(), c.ipCutNote()
		if bad := disallowedNames(p.AllowedDNSNames, c.dnsNames()); len(bad) > 0 {
			add(AllowedDNSNames, "%s not allowed by allowedDNSNames%s", quoteList(bad), also(dnsCut))
		} else if len(p.AllowedDNSNames) > 0 && dnsCut != "" {
			add(AllowedDNSNames, "allowedDNSNames cannot be checked: %s", dnsCut)
		}
		if missing := missingNames(p.RequiredDNSNames, c.DNSNames); len(missing) > 0 && dnsCut == "" {
			add(RequiredDNSNames, "%s required by requiredDNSNames, not among the DNS names", quoteList(missing))
		} else if len(missing) > 0 {
			add(RequiredDNSNames, "%s required by requiredDNSNames, not among the DNS names kept: %s", quoteList(missing), dnsCut)
		}
		if bad := disallowedIPs(p.AllowedIPRanges, c.IPAddresses); len(bad) > 0 {
			add(AllowedIPRanges, "%s outside allowedIPRanges%s", quoteList(bad), also(ipCut))
		} else if len(p.AllowedIPRanges) > 0 && ipCut != "" {
			add(AllowedIPRanges, "allowedIPRanges cannot be checked: %s", ipCut)
		}
		if bad := deniedNames(p.DeniedDNSNames, c.dnsNames()); len(bad) > 0 {
			add(DeniedDNSNames, "%s denied by deniedDNSNames", quoteList(bad))
		} else if len(p.DeniedDNSNames) > 0 && dnsCut != "" {
			add(DeniedDNSNames, "deniedDNSNames cannot be checked: %s", dnsCut)
		}
	}
}

// dnsNames are the names a client checks: the DNS SANs, or the common name
// of a certificate that has no SAN at all (which modern clients reject, but
// which still names the certificate).
func (c Certificate) dnsNames() []string {
	if len(c.DNSNames) > 0 || len(c.IPAddresses) > 0 || c.DNSNameCount > 0 || c.IPAddressCount > 0 {
		return c.DNSNames
	}
	if _, err := netip.ParseAddr(c.CommonName); c.CommonName != "" && err != nil {
		return []string{c.CommonName}
	}
	return nil
}

func allowedKey(allowed []AllowedKey, c Certificate) (string, bool) {
	if len(allowed) == 0 {
		return "", true
	}
	var want []string
	for _, a := range allowed {
		if a.Algorithm == c.Algorithm {
			if c.Size >= a.MinSize {
				return "", true
			}
			return fmt.Sprintf("key is %s; keyAlgorithms requires %s of at least %d bits", c.Key(), a.Algorithm, a.MinSize), false
		}
		want = append(want, string(a.Algorithm))
	}
	return fmt.Sprintf("key is %s; keyAlgorithms allows %s", c.Key(), strings.Join(want, ", ")), false
}

func disallowedNames(patterns, names []string) []string {
	if len(patterns) == 0 {
		return nil
	}
	var bad []string
	for _, n := range names {
		if !slices.ContainsFunc(patterns, func(p string) bool { return MatchDNSName(p, n) }) {
			bad = append(bad, n)
		}
	}
	return bad
}

// missingNames are the required names that no DNS SAN covers. The common
// name never counts: clients verify a name against the SANs alone.
func missingNames(required, sans []string) []string {
	var missing []string
	for _, r := range required {
		if !slices.ContainsFunc(sans, func(san string) bool { return CoversDNSName(san, r) }) {
			missing = append(missing, r)
		}
	}
	return missing
}

func disallowedIPs(ranges []netip.Prefix, ips []netip.Addr) []string {
	if len(ranges) == 0 {
		return nil
	}
	var bad []string
	for _, ip := range ips {
		ip = ip.Unmap()
		if !slices.ContainsFunc(ranges, func(r netip.Prefix) bool { return r.Contains(ip) }) {
			bad = append(bad, ip.String())
		}
	}
	return bad
}

// also appends a note to a message, if there is one.
func also(note string) string {
	if note == "" {
		return ""
	}
	return "; " + note
}

// quoteList quotes up to five items and counts the rest.
func quoteList(items []string) string {
	const show = 5
	var b strings.Builder
	for i, s := range items[:min(len(items), show)] {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", s)
	}
	if len(items) > show {
		fmt.Fprintf(&b, " and %d more", len(items)-show)
	}
	return b.String()
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// human prints a duration the way a reader of a policy thinks of it: whole
// days from two days up, whole hours from two hours up, else Go's format
// to the second.
func human(d time.Duration) string {
	const day = 24 * time.Hour
	switch {
	case d >= 2*day && d%day == 0:
		return fmt.Sprintf("%dd", d/day)
	case d >= 2*day:
		return fmt.Sprintf("%dd%dh", d/day, d%day/time.Hour)
	case d >= 2*time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	default:
		return d.Truncate(time.Second).String()
	}
}
