package certpolicy

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

// ID names a judged certificate: a cert-manager Certificate, or a
// kubernetes.io/tls Secret that no Certificate manages.
type ID struct {
	Kind      v1alpha1.CertificateKind
	Namespace string
	Name      string
}

func (k ID) String() string { return string(k.Kind) + "/" + k.Namespace + "/" + k.Name }

// Ref is the ID as the API's status carries it.
func (k ID) Ref() v1alpha1.CertificateRef {
	return v1alpha1.CertificateRef{Kind: k.Kind, Namespace: k.Namespace, Name: k.Name}
}

func compareIDs(a, b ID) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Kind, b.Kind))
}

// IssuerRef names the issuer of a certificate, as cert-manager does.
type IssuerRef struct{ Name, Kind, Group string }

// Facts is what the operator knows of one certificate: public facts only,
// never key material.
type Facts struct {
	ID      ID
	Labels  map[string]string
	Issuer  IssuerRef
	Subject Subject

	// Of a Certificate: status.revision, whether its Issuing condition is
	// True, and whether the certificate read from its Secret is the one its
	// status describes (the cache of Secrets may lag the Certificate).
	Revision int
	Issuing  bool
	Current  bool

	// SignerName is a ClusterTrustBundle's signer; empty for other kinds
	// (a pod certificate's is in Subject.Pod).
	SignerName string
}

// differs reports whether a policy that selects the certificate must look
// again: its status or enforcement may change.
func (f *Facts) differs(o *Facts) bool {
	if o == nil {
		return true
	}
	a, b := f.Subject, o.Subject
	return !a.KeySince.Equal(b.KeySince) || notAfter(a) != notAfter(b) ||
		f.Revision != o.Revision || f.Issuing != o.Issuing || f.Current != o.Current ||
		(a.Pod == nil) != (b.Pod == nil) || (a.Pod != nil && *a.Pod != *b.Pod) ||
		!slices.EqualFunc(a.CAs.Certs, b.CAs.Certs, func(x, y Certificate) bool { return x.KeyID == y.KeyID && x.NotAfter.Equal(y.NotAfter) })
}

func notAfter(s Subject) time.Time {
	if s.Cert == nil {
		return time.Time{}
	}
	return s.Cert.NotAfter
}

// Compiled is a CertificatePolicy ready to select and judge certificates.
type Compiled struct {
	Name       string
	Generation int64
	Action     v1alpha1.PolicyAction
	Rules      Policy

	namespaces      labels.Selector
	labels          labels.Selector
	issuers         []v1alpha1.IssuerRefPattern
	kinds           []v1alpha1.CertificateKind
	signers         []string
	serviceAccounts []string
}

// DefaultKinds are the kinds a policy that names none judges: pod
// certificates and trust bundles are judged only by a policy that names
// them, so that policies written for cert-manager's certificates keep
// their meaning.
var DefaultKinds = []v1alpha1.CertificateKind{v1alpha1.KindCertificate, v1alpha1.KindSecret}

// Judges reports whether the policy judges objects of a kind at all.
func (c Compiled) Judges(kind v1alpha1.CertificateKind) bool {
	kinds := c.kinds
	if len(kinds) == 0 {
		kinds = DefaultKinds
	}
	return slices.Contains(kinds, kind)
}

// Compile turns a CertificatePolicy into its selectors and rules. It fails
// on what the API's validation lets through and cannot be used: a selector
// or an IP range that does not parse.
func Compile(p *v1alpha1.CertificatePolicy) (Compiled, error) {
	c := Compiled{
		Name: p.Name, Generation: p.Generation, Action: cmp.Or(p.Spec.Action, v1alpha1.ActionAudit),
		issuers: p.Spec.Selector.IssuerRefs, kinds: p.Spec.Selector.Kinds,
		signers: p.Spec.Selector.SignerNames, serviceAccounts: p.Spec.Selector.ServiceAccountNames,
	}
	var err error
	if c.namespaces, err = selectorOf(p.Spec.Selector.NamespaceSelector); err != nil {
		return c, fmt.Errorf("spec.selector.namespaceSelector: %w", err)
	}
	if c.labels, err = selectorOf(p.Spec.Selector.LabelSelector); err != nil {
		return c, fmt.Errorf("spec.selector.labelSelector: %w", err)
	}
	rules := p.Spec.Rules
	c.Rules = Policy{
		MaxValidity:          durationOf(rules.MaxValidity),
		MinRemainingValidity: durationOf(rules.MinRemainingValidity),
		MaxKeyAge:            durationOf(rules.MaxKeyAge),
		AllowedDNSNames:      rules.AllowedDNSNames,
		RequiredDNSNames:     rules.RequiredDNSNames,
		RequireKeyRotation:   rules.RequireKeyRotation,
		DeniedDNSNames:       rules.DeniedDNSNames,
		AllowedSignerNames:   rules.AllowedSignerNames,
		RefreshOverdueAfter:  durationOf(rules.RefreshOverdueAfter),
		KeyAlgorithms:        allowedKeys(rules.KeyAlgorithms),
	}
	if rules.MaxExpirationSeconds != nil {
		c.Rules.MaxExpirationSeconds = *rules.MaxExpirationSeconds
	}
	if ca := p.Spec.CARules; ca != nil {
		c.Rules.CA = &CAPolicy{
			MaxValidity: durationOf(ca.MaxValidity), MinValidity: durationOf(ca.MinValidity),
			MinRemainingValidity: durationOf(ca.MinRemainingValidity), KeyAlgorithms: allowedKeys(ca.KeyAlgorithms),
		}
	}
	for _, r := range rules.AllowedIPRanges {
		prefix, err := netip.ParsePrefix(r)
		if err != nil {
			return c, fmt.Errorf("spec.rules.allowedIPRanges: %w", err)
		}
		c.Rules.AllowedIPRanges = append(c.Rules.AllowedIPRanges, prefix.Masked())
	}
	return c, nil
}

func allowedKeys(rules []v1alpha1.KeyAlgorithmRule) []AllowedKey {
	var out []AllowedKey
	for _, k := range rules {
		out = append(out, AllowedKey{Algorithm: Algorithm(k.Algorithm), MinSize: int(k.MinSize)})
	}
	return out
}

func selectorOf(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return labels.Everything(), nil
	}
	return metav1.LabelSelectorAsSelector(s)
}

func durationOf(d *metav1.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.Duration
}

// Selects reports whether the policy judges the certificate, given the
// labels of its namespace. A ClusterTrustBundle has no namespace: the
// namespace selector does not apply to it. A PodCertificateRequest is
// chosen by namespace, signer and service account: the label and issuer
// selectors (of cert-manager's objects) do not apply to it.
func (c Compiled) Selects(f *Facts, nsLabels labels.Set) bool {
	if !c.Judges(f.ID.Kind) {
		return false
	}
	switch f.ID.Kind {
	case v1alpha1.KindPodCertificateRequest:
		r := f.Subject.Pod
		return r != nil && c.namespaces.Matches(nsLabels) &&
			(len(c.signers) == 0 || matchAny(c.signers, r.SignerName)) &&
			(len(c.serviceAccounts) == 0 || matchAny(c.serviceAccounts, r.ServiceAccount))
	case v1alpha1.KindClusterTrustBundle:
		return c.labels.Matches(labels.Set(f.Labels)) &&
			(len(c.signers) == 0 || (f.SignerName != "" && matchAny(c.signers, f.SignerName)))
	}
	if !c.namespaces.Matches(nsLabels) || !c.labels.Matches(labels.Set(f.Labels)) {
		return false
	}
	if len(c.issuers) == 0 {
		return true
	}
	return f.Issuer.Name != "" && slices.ContainsFunc(c.issuers, func(p v1alpha1.IssuerRefPattern) bool {
		return MatchGlob(p.Name, f.Issuer.Name) && MatchGlob(p.Kind, f.Issuer.Kind) && MatchGlob(p.Group, f.Issuer.Group)
	})
}
