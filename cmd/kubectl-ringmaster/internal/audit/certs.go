package audit

import (
	"fmt"
	"slices"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/certpolicy"
)

// TLSSecret is what the audit keeps of a kubernetes.io/tls Secret: its
// identity, labels, cert-manager's annotations and tls.crt. Never tls.key.
type TLSSecret struct {
	Namespace, Name string
	Labels          map[string]string
	// Annotations are cert-manager's (cert-manager.io/...) only.
	Annotations map[string]string
	Cert        []byte
}

// Facts are the certificates the operator judges, with their keys dated as
// it dates them: one per cert-manager Certificate (with the certificate in
// its Secret), and one per TLS Secret that no Certificate manages.
// certificatesRead says whether Certificates could be listed; when not, a
// Secret cert-manager annotated with a Certificate's name is taken to be
// managed by it.
//
// The operator's ledger remembers keys across renewals; this one sees only
// the certificates in use now. A key carried by several of them is dated
// by the earliest, as the operator dates it; a key kept across renewals
// (rotationPolicy Never, a Secret renewed by hand) looks as young as its
// current certificate, as it does to the operator after a restart.
func Facts(crts []cmapi.Certificate, secrets []TLSSecret, certificatesRead bool) []*certpolicy.Facts {
	byName := map[types.NamespacedName]*TLSSecret{}
	for i := range secrets {
		byName[types.NamespacedName{Namespace: secrets[i].Namespace, Name: secrets[i].Name}] = &secrets[i]
	}
	managers := map[types.NamespacedName]*cmapi.Certificate{}
	for i := range crts {
		managers[types.NamespacedName{Namespace: crts[i].Namespace, Name: crts[i].Name}] = &crts[i]
	}

	type reading struct {
		facts  *certpolicy.Facts
		secret *TLSSecret
	}
	var readings []reading
	for i := range crts {
		crt := &crts[i]
		if !crt.DeletionTimestamp.IsZero() {
			continue
		}
		readings = append(readings, reading{certpolicy.CertificateFacts(crt), byName[types.NamespacedName{Namespace: crt.Namespace, Name: crt.Spec.SecretName}]})
	}
	for i := range secrets {
		s := &secrets[i]
		if key, ok := certpolicy.CertificateOfSecret(s.Namespace, s.Annotations); ok {
			crt, found := managers[key]
			if !certificatesRead || (found && certpolicy.Manages(crt, s.Name)) {
				continue // judged as its Certificate
			}
		}
		readings = append(readings, reading{&certpolicy.Facts{
			ID:     certpolicy.ID{Kind: v1alpha1.KindSecret, Namespace: s.Namespace, Name: s.Name},
			Labels: s.Labels, Issuer: certpolicy.IssuerOfSecret(s.Annotations),
		}, s})
	}

	// Two passes: the first shows the ledger every certificate, so that
	// the second dates each key by the earliest certificate carrying it,
	// whatever the order of the lists.
	var ledger certpolicy.Ledger
	for range 2 {
		for _, r := range readings {
			if r.secret != nil {
				r.facts.Subject = ledger.Read(r.facts.ID, r.secret.Namespace, r.secret.Name, r.secret.Cert, r.facts.Subject.CertManager)
			}
		}
	}
	out := make([]*certpolicy.Facts, len(readings))
	for i, r := range readings {
		out[i] = r.facts
	}
	return out
}

// verdict is one policy's verdict on one certificate, from its status.
type verdict struct {
	policy string
	v1alpha1.Violation
}

// policyIndex is what the policies' status says of each certificate.
type policyIndex struct {
	compiled   []certpolicy.Compiled
	violations map[certpolicy.ID][]verdict
	// oldestKey and soonestExpiry are the policies' oldest key and
	// soonest expiry, by certificate.
	oldestKey     map[certpolicy.ID]time.Time
	soonestExpiry map[certpolicy.ID]time.Time
	// judgedBy are the policies whose status names a certificate.
	judgedBy map[certpolicy.ID][]string
}

func indexPolicies(policies []v1alpha1.CertificatePolicy) policyIndex {
	ix := policyIndex{
		violations: map[certpolicy.ID][]verdict{}, oldestKey: map[certpolicy.ID]time.Time{},
		soonestExpiry: map[certpolicy.ID]time.Time{}, judgedBy: map[certpolicy.ID][]string{},
	}
	judged := func(ref v1alpha1.CertificateRef, policy string) certpolicy.ID {
		id := certpolicy.ID{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name}
		if !slices.Contains(ix.judgedBy[id], policy) {
			ix.judgedBy[id] = append(ix.judgedBy[id], policy)
		}
		return id
	}
	for i := range policies {
		p := &policies[i]
		if c, err := certpolicy.Compile(p); err == nil {
			ix.compiled = append(ix.compiled, c)
		}
		for _, v := range p.Status.Violations {
			id := judged(v.CertificateRef, p.Name)
			ix.violations[id] = append(ix.violations[id], verdict{policy: p.Name, Violation: v})
		}
		if o := p.Status.OldestKey; o != nil {
			id := judged(o.CertificateRef, p.Name)
			if t, ok := ix.oldestKey[id]; !ok || o.Since.Time.Before(t) {
				ix.oldestKey[id] = o.Since.Time
			}
		}
		if e := p.Status.SoonestExpiry; e != nil {
			ix.soonestExpiry[judged(e.CertificateRef, p.Name)] = e.NotAfter.Time
		}
	}
	return ix
}

// maxKeyAge is the least maxKeyAge of the policies named; nil when none
// sets one.
func (ix policyIndex) maxKeyAge(policies []string) *metav1.Duration {
	var least time.Duration
	for _, c := range ix.compiled {
		if m := c.Rules.MaxKeyAge; m > 0 && slices.Contains(policies, c.Name) && (least == 0 || m < least) {
			least = m
		}
	}
	if least == 0 {
		return nil
	}
	return durationPtr(least)
}

// certificateRows are the rows of the certificates some policy selects:
// those read, judged against each policy's selector as the operator judges
// them, and those the policies' status names, read or not.
func certificateRows(in Input) []Row {
	ix := indexPolicies(in.Policies)
	inScope := func(id certpolicy.ID) bool { return in.Namespace == "" || id.Namespace == in.Namespace }
	seen := map[certpolicy.ID]bool{}
	var rows []Row
	facts := Facts(in.Certificates, in.TLSSecrets, in.CertificatesRead)
	facts = append(facts, podCertificateFacts(in.PodCertificateRequests)...)
	facts = append(facts, trustBundleFacts(in.TrustBundles)...)
	for _, f := range facts {
		if !inScope(f.ID) {
			continue
		}
		nsLabels := namespaceLabels(in.NamespaceLabels, f.ID.Namespace)
		var selecting []string
		for _, c := range ix.compiled {
			if c.Selects(f, nsLabels) {
				selecting = append(selecting, c.Name)
			}
		}
		for _, p := range ix.judgedBy[f.ID] {
			if !slices.Contains(selecting, p) {
				selecting = append(selecting, p)
			}
		}
		if len(selecting) == 0 {
			continue
		}
		slices.Sort(selecting)
		seen[f.ID] = true
		row := Row{Kind: string(f.ID.Kind), Namespace: f.ID.Namespace, Name: f.ID.Name, Policies: selecting, MaxKeyAge: ix.maxKeyAge(selecting)}
		switch c := f.Subject.Cert; {
		case podRow(&row, f, ix.refreshMargin(selecting), in.Now):
		case c != nil:
			since := f.Subject.KeySince
			if t, ok := ix.oldestKey[f.ID]; ok && t.Before(since) {
				since = t // the operator remembers an older certificate with this key
			}
			row.KeyID, row.KeySince, row.KeyAge = c.KeyID, timePtr(since), durationPtr(in.Now.Sub(since))
			row.Expires = timePtr(c.NotAfter)
			row.Detail = c.Key()
		case f.Subject.ReadError != "":
			row.Detail = f.Subject.ReadError
		default:
			row.Detail = "not issued yet: its Secret does not exist"
		}
		row.Problems = certificateProblems(row, ix.violations[f.ID], in.Now, in.ExpiryWindow)
		rows = append(rows, row)
	}

	// What the operator says of certificates the audit could not read.
	var named []certpolicy.ID
	for id := range ix.judgedBy {
		if inScope(id) && !seen[id] {
			named = append(named, id)
		}
	}
	for _, id := range named {
		policies := slices.Sorted(slices.Values(ix.judgedBy[id]))
		row := Row{Kind: string(id.Kind), Namespace: id.Namespace, Name: id.Name, Policies: policies, MaxKeyAge: ix.maxKeyAge(policies),
			Detail: "not read: as the CertificatePolicies' status reports it"}
		if t, ok := ix.oldestKey[id]; ok {
			row.KeySince, row.KeyAge = timePtr(t), durationPtr(in.Now.Sub(t))
		}
		if t, ok := ix.soonestExpiry[id]; ok {
			row.Expires = timePtr(t)
		}
		row.Problems = certificateProblems(row, ix.violations[id], in.Now, in.ExpiryWindow)
		rows = append(rows, row)
	}
	return rows
}

// certificateProblems are the policies' violations, and what the audit
// finds of the key's age and the expiry where no violation says it already.
func certificateProblems(row Row, violations []verdict, now time.Time, window time.Duration) []Problem {
	var out []Problem
	var ageReported, expiryReported bool
	for _, v := range violations {
		cats := []Category{Violations}
		switch certpolicy.Rule(v.Rule) {
		case certpolicy.MaxKeyAge:
			cats, ageReported = append(cats, KeyAge), true
		case certpolicy.Validity, certpolicy.MinRemainingValidity:
			cats, expiryReported = append(cats, ExpiredSoon), true
		}
		out = append(out, problem(fmt.Sprintf("%s/%s: %s", v.policy, v.Rule, v.Message), cats...))
	}
	if row.KeyAge != nil && row.MaxKeyAge != nil && row.KeyAge.Duration > row.MaxKeyAge.Duration && !ageReported {
		out = append(out, problem(fmt.Sprintf("key %s is %s old, over maxKeyAge %s", row.KeyID,
			duration.HumanDuration(row.KeyAge.Duration), duration.HumanDuration(row.MaxKeyAge.Duration)), KeyAge))
	}
	if row.Expires != nil && !expiryReported {
		switch left := row.Expires.Sub(now); {
		case left < 0:
			out = append(out, problem(fmt.Sprintf("expired %s ago, at %s", duration.HumanDuration(-left), stamp(row.Expires.Time)), ExpiredSoon))
		case left < window:
			out = append(out, problem(fmt.Sprintf("expires in %s, at %s", duration.HumanDuration(left), stamp(row.Expires.Time)), ExpiredSoon))
		}
	}
	return out
}

// namespaceLabels are a namespace's labels; when unknown, the one label the
// API server gives every namespace.
func namespaceLabels(known map[string]map[string]string, ns string) labels.Set {
	if l, ok := known[ns]; ok {
		return l
	}
	return labels.Set{"kubernetes.io/metadata.name": ns}
}
