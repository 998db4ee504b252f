// Package dnszone is the pure step between a ClusterDNSZone and
// internal/dnspub: whether a ring's namespace, name and TTL may use a
// zone (Admit), who owns each DNS name across every zone that allows it
// (Record, the Lease that records it; Decide, one name at a time;
// ClaimOf, where a ring stands), a zone's bounded summary of its names
// (Summarize) and the zones that overlap it (Overlapping), the TSIG key a
// zone's Secret holds (TSIG), and the dnspub.Target a ring publishes to
// (Target). It reads nothing itself: the ECHKeyRing, DNS name and
// ClusterDNSZone controllers pass it what they read.
package dnszone

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/dnspub"
)

// The keys of a zone's TSIG Secret.
const (
	SecretKeyName      = "name"
	SecretKeyAlgorithm = "algorithm"
	SecretKeySecret    = "secret"
)

// DefaultAlgorithm is the TSIG algorithm of a Secret that names none.
const DefaultAlgorithm = "hmac-sha256"

// Algorithms are the TSIG algorithms the operator signs with.
var Algorithms = []string{"hmac-sha224", "hmac-sha256", "hmac-sha384", "hmac-sha512"}

// DefaultMaxTTL is the longest TTL a zone without maxTTL allows. Every
// ECH config must outlive the TTL in DNS caches, so the TTL adds to the
// life of each private key; an hour keeps that within the usual
// retirementMargin. An administrator raises it with the zone's maxTTL, up
// to the API's bound of a ring's spec.dns.ttl, 86400.
const DefaultMaxTTL int32 = 3600

// Canonical is name in the form zones and patterns are written in: lower
// case, without the final dot.
func Canonical(name string) string { return strings.TrimSuffix(strings.ToLower(name), ".") }

// NameAllowed reports whether name (with or without the final dot) is one
// of patterns: equal to one, or below the <name> of a "*.<name>" pattern
// (at any depth, not <name> itself).
func NameAllowed(patterns []string, name string) bool {
	name = Canonical(name)
	for _, p := range patterns {
		p = Canonical(p)
		if rest, ok := strings.CutPrefix(p, "*."); ok {
			if strings.HasSuffix(name, "."+rest) {
				return true
			}
			continue
		}
		if name == p {
			return true
		}
	}
	return false
}

// InZone reports whether name is zone or below it.
func InZone(zone, name string) bool {
	zone, name = Canonical(zone), Canonical(name)
	return name == zone || strings.HasSuffix(name, "."+zone)
}

// Unjudged returns nil when z admits a namespace whatever its labels (its
// selector is {}), and otherwise why it cannot judge namespace ns, whose
// labels are over what the operator keeps (max bytes): such a namespace
// is admitted by no selector that reads its labels.
func Unjudged(z *v1alpha1.ClusterDNSZone, ns string, max int) error {
	if s := z.Spec.NamespaceSelector; s != nil && len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0 {
		return nil
	}
	return fmt.Errorf("ClusterDNSZone %s cannot judge namespace %s: its labels are over the %d bytes the operator keeps of a namespace's labels, so no spec.namespaceSelector selects it until they are fewer", z.Name, ns, max)
}

// Admit returns nil when an ECHKeyRing in a namespace labelled
// namespaceLabels may publish the HTTPS record of name with ttl (seconds)
// through z; otherwise an error saying why, for the ring's
// DNSNameNotAllowed condition.
func Admit(z *v1alpha1.ClusterDNSZone, namespaceLabels map[string]string, name string, ttl int32) error {
	s := z.Spec
	if s.NamespaceSelector == nil {
		return fmt.Errorf("ClusterDNSZone %s selects no namespace (spec.namespaceSelector is unset)", z.Name)
	}
	sel, err := metav1.LabelSelectorAsSelector(s.NamespaceSelector)
	if err != nil {
		return fmt.Errorf("ClusterDNSZone %s has an invalid spec.namespaceSelector: %w", z.Name, err)
	}
	if !sel.Matches(labels.Set(namespaceLabels)) {
		return fmt.Errorf("ClusterDNSZone %s does not select the ring's namespace", z.Name)
	}
	if strings.Contains(name, "*") {
		return fmt.Errorf("%s is a wildcard: a ring publishes one name, and a wildcard record would answer for names other rings may own", Canonical(name))
	}
	if !InZone(s.Zone, name) {
		return fmt.Errorf("%s is not inside zone %s of ClusterDNSZone %s", Canonical(name), s.Zone, z.Name)
	}
	if !NameAllowed(s.AllowedNames, name) {
		// The zone's other names are the administrator's to show, not a
		// tenant's to learn.
		return fmt.Errorf("ClusterDNSZone %s does not allow the name %s to this namespace", z.Name, Canonical(name))
	}
	limit := DefaultMaxTTL
	if s.MaxTTL != nil {
		limit = *s.MaxTTL
	}
	if ttl < 1 || ttl > limit {
		return fmt.Errorf("ttl %ds is outside ClusterDNSZone %s's bounds: 1s to %ds (its maxTTL, or %d without one)", ttl, z.Name, limit, DefaultMaxTTL)
	}
	return nil
}

// TSIG is the key a zone's TSIG Secret holds (its data): name, secret
// (base64 text) and algorithm (DefaultAlgorithm when absent). Errors name
// the key that is wrong, never the secret's bytes.
func TSIG(data map[string][]byte) (*dnspub.TSIG, error) {
	name := strings.TrimSpace(string(data[SecretKeyName]))
	if name == "" {
		return nil, fmt.Errorf("the TSIG Secret has no %q key (the key's DNS name)", SecretKeyName)
	}
	alg := strings.ToLower(strings.TrimSuffix(strings.TrimSpace(string(data[SecretKeyAlgorithm])), "."))
	if alg == "" {
		alg = DefaultAlgorithm
	}
	known := false
	for _, a := range Algorithms {
		known = known || a == alg
	}
	if !known {
		return nil, fmt.Errorf("the TSIG Secret's %q key names no algorithm of %s (its value is not shown: it is read from a Secret)", SecretKeyAlgorithm, strings.Join(Algorithms, ", "))
	}
	text := strings.TrimSpace(string(data[SecretKeySecret]))
	if text == "" {
		return nil, fmt.Errorf("the TSIG Secret has no %q key (the key's base64 text)", SecretKeySecret)
	}
	secret, err := base64.StdEncoding.DecodeString(text)
	if err != nil {
		return nil, errors.New("the TSIG Secret's secret is not base64 text (as tsig-keygen or keymgr print it)")
	}
	if len(secret) < 16 {
		return nil, fmt.Errorf("the TSIG Secret's secret is %d bytes, want at least 16", len(secret))
	}
	return &dnspub.TSIG{Name: strings.ToLower(strings.TrimSuffix(name, ".")) + ".", Algorithm: alg, Secret: secret}, nil
}

// Target is where a ring publishing name with ttl through z writes and
// verifies, signed with key (nil for a verify-only zone).
func Target(z *v1alpha1.ClusterDNSZone, name string, ttl int32, key *dnspub.TSIG) dnspub.Target {
	t := dnspub.Target{
		Zone:    Canonical(z.Spec.Zone) + ".",
		Name:    Canonical(name) + ".",
		Primary: z.Spec.Primary,
		Servers: append([]string(nil), z.Spec.Servers...),
		TTL:     uint32(max(ttl, 0)),
	}
	if t.Primary != "" {
		t.TSIG = key
	}
	return t
}
