package controllers

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/certpolicy"
)

// subjectKey names a judged certificate: a cert-manager Certificate, or a
// kubernetes.io/tls Secret that no Certificate manages.
type subjectKey struct {
	Kind v1alpha1.CertificateKind
	types.NamespacedName
}

func (k subjectKey) String() string { return string(k.Kind) + "/" + k.Namespace + "/" + k.Name }

func (k subjectKey) ref() v1alpha1.CertificateRef {
	return v1alpha1.CertificateRef{Kind: k.Kind, Namespace: k.Namespace, Name: k.Name}
}

func compareKeys(a, b subjectKey) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Kind, b.Kind))
}

type issuerRef struct{ Name, Kind, Group string }

// subjectFacts is what the operator knows of one certificate: public facts
// only, never key material.
type subjectFacts struct {
	key     subjectKey
	labels  map[string]string
	issuer  issuerRef
	subject certpolicy.Subject

	// Of a Certificate: status.revision, whether its Issuing condition is
	// True, and whether the certificate read from its Secret is the one
	// its status describes.
	revision int
	issuing  bool
	current  bool
}

// differs reports whether a policy that selects the certificate must look
// again: its status or enforcement may change.
func (f *subjectFacts) differs(o *subjectFacts) bool {
	if o == nil {
		return true
	}
	a, b := f.subject, o.subject
	return !a.KeySince.Equal(b.KeySince) || notAfter(a) != notAfter(b) ||
		f.revision != o.revision || f.issuing != o.issuing || f.current != o.current
}

func notAfter(s certpolicy.Subject) time.Time {
	if s.Cert == nil {
		return time.Time{}
	}
	return s.Cert.NotAfter
}

// compiledPolicy is a CertificatePolicy ready to select and judge.
type compiledPolicy struct {
	name       string
	generation int64
	action     v1alpha1.PolicyAction
	namespaces labels.Selector
	labels     labels.Selector
	issuers    []v1alpha1.IssuerRefPattern
	kinds      []v1alpha1.CertificateKind
	rules      certpolicy.Policy
}

func compilePolicy(p *v1alpha1.CertificatePolicy) (compiledPolicy, error) {
	c := compiledPolicy{
		name: p.Name, generation: p.Generation, action: cmp.Or(p.Spec.Action, v1alpha1.ActionAudit),
		issuers: p.Spec.Selector.IssuerRefs, kinds: p.Spec.Selector.Kinds,
	}
	var err error
	if c.namespaces, err = selectorOf(p.Spec.Selector.NamespaceSelector); err != nil {
		return c, fmt.Errorf("spec.selector.namespaceSelector: %w", err)
	}
	if c.labels, err = selectorOf(p.Spec.Selector.LabelSelector); err != nil {
		return c, fmt.Errorf("spec.selector.labelSelector: %w", err)
	}
	rules := p.Spec.Rules
	c.rules = certpolicy.Policy{
		MaxValidity:          durationOf(rules.MaxValidity),
		MinRemainingValidity: durationOf(rules.MinRemainingValidity),
		MaxKeyAge:            durationOf(rules.MaxKeyAge),
		AllowedDNSNames:      rules.AllowedDNSNames,
		RequireKeyRotation:   rules.RequireKeyRotation,
	}
	for _, k := range rules.KeyAlgorithms {
		c.rules.KeyAlgorithms = append(c.rules.KeyAlgorithms, certpolicy.AllowedKey{Algorithm: certpolicy.Algorithm(k.Algorithm), MinSize: int(k.MinSize)})
	}
	for _, r := range rules.AllowedIPRanges {
		prefix, err := netip.ParsePrefix(r)
		if err != nil {
			return c, fmt.Errorf("spec.rules.allowedIPRanges: %w", err)
		}
		c.rules.AllowedIPRanges = append(c.rules.AllowedIPRanges, prefix.Masked())
	}
	return c, nil
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

// selects reports whether the policy judges the certificate, given the
// labels of its namespace.
func (c compiledPolicy) selects(f *subjectFacts, nsLabels labels.Set) bool {
	if len(c.kinds) > 0 && !slices.Contains(c.kinds, f.key.Kind) {
		return false
	}
	if !c.namespaces.Matches(nsLabels) || !c.labels.Matches(labels.Set(f.labels)) {
		return false
	}
	if len(c.issuers) == 0 {
		return true
	}
	return f.issuer.Name != "" && slices.ContainsFunc(c.issuers, func(p v1alpha1.IssuerRefPattern) bool {
		return certpolicy.MatchGlob(p.Name, f.issuer.Name) && certpolicy.MatchGlob(p.Kind, f.issuer.Kind) && certpolicy.MatchGlob(p.Group, f.issuer.Group)
	})
}

// policyState holds one policy's verdicts on the certificates it selects.
type policyState struct {
	compiled compiledPolicy
	// generation is the policy generation the verdicts were made under.
	generation int64
	results    map[subjectKey]certpolicy.Verdict
}

// cpolStore holds the facts of every certificate and every policy's
// verdicts. The controller's single worker writes it; the metrics scraper
// reads it.
type cpolStore struct {
	mu          sync.RWMutex
	subjects    map[subjectKey]*subjectFacts
	byNamespace map[string]map[subjectKey]struct{}
	policies    map[string]*policyState
	ledger      certpolicy.Ledger
}

func newCPolStore() *cpolStore {
	return &cpolStore{
		subjects:    map[subjectKey]*subjectFacts{},
		byNamespace: map[string]map[subjectKey]struct{}{},
		policies:    map[string]*policyState{},
	}
}

// policy returns the state of a policy, holding its newest compiled form.
func (s *cpolStore) policy(c compiledPolicy) *policyState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.policies[c.name]
	if st == nil {
		st = &policyState{results: map[subjectKey]certpolicy.Verdict{}}
		s.policies[c.name] = st
	}
	st.compiled = c
	return st
}

func (s *cpolStore) dropPolicy(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.policies, name)
}

// replaceResults judges every certificate afresh for a policy; judge
// returns false for a certificate the policy does not select.
func (s *cpolStore) replaceResults(st *policyState, judge func(*subjectFacts) (certpolicy.Verdict, bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	results := make(map[subjectKey]certpolicy.Verdict, len(st.results))
	for k, f := range s.subjects {
		if v, ok := judge(f); ok {
			results[k] = v
		}
	}
	st.results, st.generation = results, st.compiled.generation
}

// recheck judges again the certificates whose verdict is due to change.
func (s *cpolStore) recheck(st *policyState, now time.Time, judge func(*subjectFacts) certpolicy.Verdict) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range st.results {
		if !v.Recheck.IsZero() && !v.Recheck.After(now) {
			st.results[k] = judge(s.subjects[k])
		}
	}
}

// upsert stores a certificate's facts, judges it for every policy, and
// returns the policies that must aggregate again.
func (s *cpolStore) upsert(f *subjectFacts, judge func(*policyState) (certpolicy.Verdict, bool)) (changed []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.subjects[f.key]
	s.subjects[f.key] = f
	ns := s.byNamespace[f.key.Namespace]
	if ns == nil {
		ns = map[subjectKey]struct{}{}
		s.byNamespace[f.key.Namespace] = ns
	}
	ns[f.key] = struct{}{}
	for name, st := range s.policies {
		v, selected := judge(st)
		prev, had := st.results[f.key]
		switch {
		case selected && (!had || !sameVerdict(prev, v) || f.differs(old)):
			st.results[f.key] = v
			changed = append(changed, name)
		case !selected && had:
			delete(st.results, f.key)
			changed = append(changed, name)
		}
	}
	return changed
}

// remove forgets a certificate and returns the policies that judged it.
func (s *cpolStore) remove(k subjectKey) (changed []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.subjects[k]; !ok {
		return nil
	}
	delete(s.subjects, k)
	delete(s.byNamespace[k.Namespace], k)
	if len(s.byNamespace[k.Namespace]) == 0 {
		delete(s.byNamespace, k.Namespace)
	}
	for name, st := range s.policies {
		if _, ok := st.results[k]; ok {
			delete(st.results, k)
			changed = append(changed, name)
		}
	}
	return changed
}

func (s *cpolStore) inNamespace(ns string) []subjectKey {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]subjectKey, 0, len(s.byNamespace[ns]))
	for k := range s.byNamespace[ns] {
		out = append(out, k)
	}
	return out
}

func (s *cpolStore) get(k subjectKey, st *policyState) (*subjectFacts, certpolicy.Verdict) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.subjects[k], st.results[k]
}

// violatingKeys lists, in order, the certificates that break a rule.
func (s *cpolStore) violatingKeys(st *policyState) []subjectKey {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []subjectKey
	for k, v := range st.results {
		if len(v.Violations) > 0 {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, compareKeys)
	return out
}

func sameVerdict(a, b certpolicy.Verdict) bool {
	return a.Recheck.Equal(b.Recheck) && slices.Equal(a.Violations, b.Violations)
}

// aggregate is a policy's status summary.
type aggregate struct {
	evaluated, violating int32
	oldestKey            *v1alpha1.KeyAgeRef
	soonestExpiry        *v1alpha1.ExpiryRef
	violations           []v1alpha1.Violation
	omitted              int32
	byRule               map[certpolicy.Rule]int
	recheck              time.Time
}

func (s *cpolStore) aggregate(st *policyState) aggregate {
	s.mu.RLock()
	defer s.mu.RUnlock()
	a := aggregate{byRule: map[certpolicy.Rule]int{}}
	keys := make([]subjectKey, 0, len(st.results))
	for k := range st.results {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys) // ties go to the first in order
	for _, k := range keys {
		v, f := st.results[k], s.subjects[k]
		a.evaluated++
		if !v.Recheck.IsZero() && (a.recheck.IsZero() || v.Recheck.Before(a.recheck)) {
			a.recheck = v.Recheck
		}
		if c := f.subject.Cert; c != nil {
			if since := f.subject.KeySince; !since.IsZero() && (a.oldestKey == nil || since.Before(a.oldestKey.Since.Time)) {
				a.oldestKey = &v1alpha1.KeyAgeRef{CertificateRef: k.ref(), Since: metav1.NewTime(since)}
			}
			if a.soonestExpiry == nil || c.NotAfter.Before(a.soonestExpiry.NotAfter.Time) {
				a.soonestExpiry = &v1alpha1.ExpiryRef{CertificateRef: k.ref(), NotAfter: metav1.NewTime(c.NotAfter)}
			}
		}
		if len(v.Violations) == 0 {
			continue
		}
		a.violating++
		for _, x := range v.Violations {
			a.byRule[x.Rule]++
			if len(a.violations) < maxStatusViolations {
				a.violations = append(a.violations, v1alpha1.Violation{CertificateRef: k.ref(), Rule: string(x.Rule), Message: x.Message})
			} else {
				a.omitted++
			}
		}
	}
	return a
}

// byRuleSummary says how many certificates break each rule, e.g.
// "maxKeyAge (2), keyAlgorithms (1)".
func (a aggregate) byRuleSummary() string {
	var parts []string
	for _, r := range certpolicy.Rules {
		if n := a.byRule[r]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s (%d)", r, n))
		}
	}
	return strings.Join(parts, ", ")
}
