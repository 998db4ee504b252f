package certpolicy_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/certpolicy"
)

// facts is a certificate valid from t0+from for validity, its key as old as
// the certificate.
func facts(kind v1alpha1.CertificateKind, ns, name string, from, validity time.Duration, lbls map[string]string) *certpolicy.Facts {
	c := &certpolicy.Certificate{NotBefore: t0.Add(from), NotAfter: t0.Add(from + validity), Algorithm: certpolicy.ECDSA, Size: 256, KeyID: name}
	return &certpolicy.Facts{
		ID:      certpolicy.ID{Kind: kind, Namespace: ns, Name: name},
		Labels:  lbls,
		Subject: certpolicy.Subject{Cert: c, KeySince: c.NotBefore},
	}
}

func policy(name string, generation int64, mutate func(*v1alpha1.CertificatePolicy)) *v1alpha1.CertificatePolicy {
	p := &v1alpha1.CertificatePolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: generation}}
	if mutate != nil {
		mutate(p)
	}
	return p
}

func compile(t *testing.T, p *v1alpha1.CertificatePolicy) certpolicy.Compiled {
	t.Helper()
	c, err := certpolicy.Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCompileAndSelect(t *testing.T) {
	web := facts(v1alpha1.KindCertificate, "shop", "web", 0, 90*day, map[string]string{"app": "web"})
	web.Issuer = certpolicy.IssuerRef{Name: "vault-prod", Kind: "ClusterIssuer", Group: "cert-manager.io"}
	legacy := facts(v1alpha1.KindSecret, "legacy", "old", 0, 90*day, nil)
	edge := labels.Set{"tier": "edge"}

	tests := []struct {
		name   string
		mutate func(*v1alpha1.CertificatePolicy)
		f      *certpolicy.Facts
		ns     labels.Set
		want   bool
	}{
		{"no selector selects everything", nil, legacy, nil, true},
		{"kinds", func(p *v1alpha1.CertificatePolicy) {
			p.Spec.Selector.Kinds = []v1alpha1.CertificateKind{v1alpha1.KindCertificate}
		}, legacy, nil, false},
		{"namespace selector, matching", func(p *v1alpha1.CertificatePolicy) {
			p.Spec.Selector.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "edge"}}
		}, web, edge, true},
		{"namespace selector, not matching", func(p *v1alpha1.CertificatePolicy) {
			p.Spec.Selector.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "edge"}}
		}, web, labels.Set{"tier": "core"}, false},
		{"label selector", func(p *v1alpha1.CertificatePolicy) {
			p.Spec.Selector.LabelSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
		}, web, nil, true},
		{"issuer glob", func(p *v1alpha1.CertificatePolicy) {
			p.Spec.Selector.IssuerRefs = []v1alpha1.IssuerRefPattern{{Name: "vault-*", Kind: "ClusterIssuer"}}
		}, web, nil, true},
		{"issuer glob, a Secret with no issuer", func(p *v1alpha1.CertificatePolicy) {
			p.Spec.Selector.IssuerRefs = []v1alpha1.IssuerRefPattern{{Name: "*"}}
		}, legacy, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := compile(t, policy("p", 1, tt.mutate))
			if got := c.Selects(tt.f, tt.ns); got != tt.want {
				t.Errorf("Selects = %v, want %v", got, tt.want)
			}
		})
	}

	c := compile(t, policy("p", 4, func(p *v1alpha1.CertificatePolicy) {
		p.Spec.Rules.MaxKeyAge = &metav1.Duration{Duration: 30 * day}
		p.Spec.Rules.AllowedIPRanges = []string{"10.1.2.3/8"}
		p.Spec.Rules.KeyAlgorithms = []v1alpha1.KeyAlgorithmRule{{Algorithm: "RSA", MinSize: 2048}}
		p.Spec.Rules.RequiredDNSNames = []string{"public.example.com"}
	}))
	if c.Action != v1alpha1.ActionAudit || c.Generation != 4 || c.Rules.MaxKeyAge != 30*day ||
		!slices.Equal(c.Rules.RequiredDNSNames, []string{"public.example.com"}) ||
		c.Rules.AllowedIPRanges[0].String() != "10.0.0.0/8" || c.Rules.KeyAlgorithms[0].MinSize != 2048 {
		t.Errorf("compiled %+v", c)
	}
	for _, bad := range []func(*v1alpha1.CertificatePolicy){
		func(p *v1alpha1.CertificatePolicy) { p.Spec.Rules.AllowedIPRanges = []string{"not a range"} },
		func(p *v1alpha1.CertificatePolicy) {
			p.Spec.Selector.LabelSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Maybe"}}}
		},
	} {
		if _, err := certpolicy.Compile(policy("p", 1, bad)); err == nil {
			t.Error("Compile accepted a spec it cannot use")
		}
	}
}

// The store judges a changed certificate alone, once per policy, and says
// which policies must aggregate again.
func TestStore(t *testing.T) {
	s := certpolicy.NewStore()
	judged := 0
	judge := func(now time.Time) certpolicy.Judge {
		return func(st *certpolicy.PolicyState, f *certpolicy.Facts) (certpolicy.Verdict, bool) {
			if !st.Compiled.Selects(f, nil) {
				return certpolicy.Verdict{}, false
			}
			judged++
			return certpolicy.Evaluate(st.Compiled.Rules, f.Subject, now), true
		}
	}
	keyAge := func(p *v1alpha1.CertificatePolicy) { p.Spec.Rules.MaxKeyAge = &metav1.Duration{Duration: 30 * day} }
	secretsOnly := func(p *v1alpha1.CertificatePolicy) {
		keyAge(p)
		p.Spec.Selector.Kinds = []v1alpha1.CertificateKind{v1alpha1.KindSecret}
	}

	young := facts(v1alpha1.KindCertificate, "shop", "young", -day, 90*day, nil)
	old := facts(v1alpha1.KindSecret, "shop", "old", -40*day, 90*day, nil)
	other := facts(v1alpha1.KindSecret, "eu", "aging", -29*day, 90*day, nil)
	for _, f := range []*certpolicy.Facts{young, old, other} {
		if changed := s.Upsert(f, judge(t0)); len(changed) != 0 {
			t.Errorf("no policy yet, but %v changed", changed)
		}
	}

	all := s.Policy(compile(t, policy("all", 1, keyAge)))
	secrets := s.Policy(compile(t, policy("secrets", 1, secretsOnly)))
	if all.Current() {
		t.Error("a new policy's verdicts are current before any judging")
	}
	s.JudgeAll(all, judge(t0))
	s.JudgeAll(secrets, judge(t0))
	if !all.Current() || judged != 5 {
		t.Errorf("judged %d times, want 3 + 2", judged)
	}

	agg := s.Aggregate(all)
	if agg.Evaluated != 3 || agg.Violating != 1 || agg.ByRule[certpolicy.MaxKeyAge] != 1 || agg.OldestKey.Name != "old" || agg.SoonestExpiry.Name != "old" {
		t.Errorf("aggregate %+v", agg)
	}
	if got := agg.ByRuleSummary(); got != "maxKeyAge (1)" {
		t.Errorf("ByRuleSummary = %q", got)
	}
	if agg.Recheck.Before(t0.Add(day)) || !agg.Recheck.Before(t0.Add(day+time.Second)) {
		t.Errorf("Recheck = %v, want just past t0+1d, when %s turns 30 days old", agg.Recheck, other.ID)
	}
	if got := s.Violating(all); !slices.Equal(got, []certpolicy.ID{old.ID}) {
		t.Errorf("Violating = %v", got)
	}

	step := func(what string) { t.Log(what) }
	step("time passes: a recheck judges only the certificate whose verdict was due to change")
	judged = 0
	s.Recheck(all, agg.Recheck.Add(-time.Nanosecond), judge(agg.Recheck.Add(-time.Nanosecond)))
	if judged != 0 {
		t.Errorf("a recheck before it was due judged %d", judged)
	}
	s.Recheck(all, agg.Recheck, judge(agg.Recheck))
	if judged != 1 || s.Aggregate(all).Violating != 2 {
		t.Errorf("recheck judged %d, violating %d; want 1, 2", judged, s.Aggregate(all).Violating)
	}

	step("an unchanged certificate observed again changes no policy")
	if changed := s.Upsert(facts(v1alpha1.KindCertificate, "shop", "young", -day, 90*day, nil), judge(agg.Recheck)); len(changed) != 0 {
		t.Errorf("changed %v", changed)
	}
	step("a renewed certificate changes the policies that select it")
	renewed := facts(v1alpha1.KindSecret, "shop", "old", 0, 90*day, nil)
	if changed := s.Upsert(renewed, judge(agg.Recheck)); !slices.Equal(changed, []string{"all", "secrets"}) {
		t.Errorf("changed %v, want [all secrets]", changed)
	}
	if got := s.InNamespace("shop"); len(got) != 2 {
		t.Errorf("InNamespace(shop) = %v", got)
	}
	counts := s.ViolationCounts()
	// "secrets" was not rechecked: its verdict on the aging Secret is t0's.
	if counts["all"][certpolicy.MaxKeyAge] != 1 || counts["secrets"][certpolicy.MaxKeyAge] != 0 {
		t.Errorf("ViolationCounts = %v", counts)
	}

	step("a certificate that is gone leaves every policy that judged it")
	if changed := s.Remove(young.ID); !slices.Equal(changed, []string{"all"}) {
		t.Errorf("Remove changed %v", changed)
	}
	if changed := s.Remove(young.ID); changed != nil {
		t.Errorf("a second Remove changed %v", changed)
	}
	f, v := s.Get(other.ID, all)
	if f != other || len(v.Violations) != 1 {
		t.Errorf("Get = %v, %v", f, v)
	}
	s.DropPolicy("all")
	if _, ok := s.ViolationCounts()["all"]; ok {
		t.Error("a dropped policy still counts")
	}
}

func TestAggregateCapsViolations(t *testing.T) {
	s := certpolicy.NewStore()
	st := s.Policy(compile(t, policy("p", 1, func(p *v1alpha1.CertificatePolicy) { p.Spec.Rules.MaxKeyAge = &metav1.Duration{Duration: day} })))
	for i := range certpolicy.MaxStatusViolations + 7 {
		s.Upsert(facts(v1alpha1.KindSecret, "ns", strings.Repeat("x", i+1), -2*day, 90*day, nil), func(st *certpolicy.PolicyState, f *certpolicy.Facts) (certpolicy.Verdict, bool) {
			return certpolicy.Evaluate(st.Compiled.Rules, f.Subject, t0), true
		})
	}
	a := s.Aggregate(st)
	if len(a.Violations) != certpolicy.MaxStatusViolations || a.Omitted != 7 || a.Violating != int32(certpolicy.MaxStatusViolations+7) {
		t.Errorf("violations %d, omitted %d, violating %d", len(a.Violations), a.Omitted, a.Violating)
	}
}

func TestRenewals(t *testing.T) {
	rules := certpolicy.Policy{MaxKeyAge: 30 * day}
	crt := func(revision int, issuing, current bool) *certpolicy.Facts {
		f := facts(v1alpha1.KindCertificate, "shop", "web", -40*day, 90*day, nil)
		f.Subject.CertManager = &certpolicy.CertManager{RotationPolicy: certpolicy.RotateAlways}
		f.Revision, f.Issuing, f.Current = revision, issuing, current
		return f
	}
	mends := certpolicy.Remedy{Renew: true, Mends: []certpolicy.Rule{certpolicy.MaxKeyAge}}

	tests := []struct {
		name      string
		asked     *time.Duration // a renewal asked at revision 3, this long before now
		f         *certpolicy.Facts
		wantRenew bool
		wantWhy   string
	}{
		{"never asked: renew", nil, crt(3, false, true), true, ""},
		{"cert-manager is issuing: wait", nil, crt(3, true, true), false, ""},
		{"asked, not re-issued yet: wait", ptr.To(time.Minute), crt(3, false, true), false, ""},
		{"asked an hour ago, still not re-issued: ask again", ptr.To(certpolicy.RenewalPatience), crt(3, false, true), true, ""},
		{"re-issued, but the cache has not seen the new certificate: wait", ptr.To(time.Minute), crt(4, false, false), false, ""},
		{"re-issued and still too old right after: the issuer ignored it", ptr.To(time.Minute), crt(4, false, true), false, "still breaks maxKeyAge"},
		{"re-issued long ago and old again: renew", ptr.To(31 * day), crt(4, false, true), true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r certpolicy.Renewals
			if tt.asked != nil {
				r.Asked(tt.f.ID, 3, mends.Mends, t0.Add(-*tt.asked))
			}
			why, renew := r.Decide(rules, tt.f, mends, t0)
			if renew != tt.wantRenew || !strings.Contains(why, tt.wantWhy) || (tt.wantWhy == "") != (why == "") {
				t.Errorf("Decide = %q, %v; want %q, %v", why, renew, tt.wantWhy, tt.wantRenew)
			}
		})
	}

	var r certpolicy.Renewals
	id := certpolicy.ID{Kind: v1alpha1.KindSecret, Namespace: "legacy", Name: "old"}
	cannot := []certpolicy.Violation{{Rule: certpolicy.MaxKeyAge, Message: "no Certificate manages it"}}
	if note, ok := r.Report("p", id, cannot); !ok || note != "maxKeyAge: no Certificate manages it" {
		t.Errorf("first report = %q, %v", note, ok)
	}
	if _, ok := r.Report("p", id, cannot); ok {
		t.Error("the same note was reported twice")
	}
	if _, ok := r.Report("q", id, cannot); !ok {
		t.Error("another policy's note was not reported")
	}
	r.Resolved("p", func(certpolicy.ID) bool { return false })
	if _, ok := r.Report("p", id, cannot); !ok {
		t.Error("a relapse after the violation was resolved was not reported")
	}
	if _, ok := r.Report("p", id, nil); ok {
		t.Error("an empty note was reported")
	}
}

func TestCertManagerFacts(t *testing.T) {
	notAfter := metav1.NewTime(t0.Add(90 * day))
	crt := &cmapi.Certificate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: cmapi.CertificateSpec{
			SecretName: "web-tls", IssuerRef: cmmeta.IssuerReference{Name: "ca"},
			Duration: &metav1.Duration{Duration: 30 * day},
		},
		Status: cmapi.CertificateStatus{Revision: ptr.To(7), NotAfter: &notAfter},
	}
	f := certpolicy.CertificateFacts(crt)
	if f.ID.Kind != v1alpha1.KindCertificate || f.Issuer != (certpolicy.IssuerRef{Name: "ca", Kind: "Issuer", Group: "cert-manager.io"}) ||
		f.Revision != 7 || f.Issuing || !f.Subject.CertManager.RotatesKey() || f.Subject.CertManager.Duration != 30*day {
		t.Errorf("facts %+v, cert-manager %+v", f, f.Subject.CertManager)
	}
	if !certpolicy.IsCurrent(crt, &certpolicy.Certificate{NotAfter: t0.Add(90 * day)}) || certpolicy.IsCurrent(crt, &certpolicy.Certificate{NotAfter: t0}) || certpolicy.IsCurrent(crt, nil) {
		t.Error("IsCurrent does not compare the status's notAfter with the certificate read")
	}
	crt.Spec.PrivateKey = &cmapi.CertificatePrivateKey{RotationPolicy: cmapi.RotationPolicyNever}
	if certpolicy.CertManagerSpec(crt).RotatesKey() {
		t.Error("rotationPolicy Never rotates the key")
	}

	certpolicy.SetIssuing(crt, "breaks maxKeyAge", metav1.NewTime(t0))
	certpolicy.SetIssuing(crt, "breaks maxKeyAge again", metav1.NewTime(t0))
	if len(crt.Status.Conditions) != 1 || !certpolicy.IsIssuing(crt) || crt.Status.Conditions[0].Reason != v1alpha1.IssuingReason || crt.Status.Conditions[0].Message != "breaks maxKeyAge again" {
		t.Errorf("conditions %+v", crt.Status.Conditions)
	}

	ann := map[string]string{cmapi.IssuerNameAnnotationKey: "vault", cmapi.CertificateNameKey: "web"}
	if got := certpolicy.IssuerOfSecret(ann); got != (certpolicy.IssuerRef{Name: "vault", Kind: "Issuer", Group: "cert-manager.io"}) {
		t.Errorf("IssuerOfSecret = %+v", got)
	}
	if got := certpolicy.IssuerOfSecret(nil); got != (certpolicy.IssuerRef{}) {
		t.Errorf("IssuerOfSecret(none) = %+v", got)
	}
	if key, ok := certpolicy.CertificateOfSecret("shop", ann); !ok || key.Name != "web" || key.Namespace != "shop" {
		t.Errorf("CertificateOfSecret = %v, %v", key, ok)
	}
}

func TestPolicyStatusAndTransitions(t *testing.T) {
	clean := certpolicy.Aggregate{Evaluated: 3}
	dirty := certpolicy.Aggregate{Evaluated: 3, Violating: 1, ByRule: map[certpolicy.Rule]int{certpolicy.MaxKeyAge: 1}}

	first := certpolicy.Status(v1alpha1.CertificatePolicyStatus{}, 1, clean, true)
	if first.Compliant != 3 || !meta.IsStatusConditionTrue(first.Conditions, v1alpha1.ConditionCompliant) || !meta.IsStatusConditionTrue(first.Conditions, v1alpha1.ConditionReady) {
		t.Errorf("clean status %+v", first)
	}
	if ev := certpolicy.Transitions(nil, first.Conditions); len(ev) != 0 {
		t.Errorf("a first clean status calls for %v", ev)
	}
	broken := certpolicy.Status(first, 1, dirty, false)
	c := meta.FindStatusCondition(broken.Conditions, v1alpha1.ConditionCompliant)
	if c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "1 of 3 selected certificate(s) break a rule: maxKeyAge (1)") {
		t.Errorf("Compliant %+v", c)
	}
	if !strings.Contains(meta.FindStatusCondition(broken.Conditions, v1alpha1.ConditionReady).Message, "Certificates are not judged") {
		t.Error("Ready does not say cert-manager Certificates are not judged")
	}
	ev := certpolicy.Transitions(first.Conditions, broken.Conditions)
	if len(ev) != 1 || !ev[0].Warning || ev[0].Reason != v1alpha1.ReasonViolationsFound {
		t.Errorf("turning non-compliant calls for %v", ev)
	}
	if ev := certpolicy.Transitions(broken.Conditions, certpolicy.Status(broken, 1, dirty, false).Conditions); len(ev) != 0 {
		t.Errorf("staying non-compliant calls for %v", ev)
	}
	back := certpolicy.Status(broken, 2, clean, true)
	if ev := certpolicy.Transitions(broken.Conditions, back.Conditions); len(ev) != 1 || ev[0].Warning || ev[0].Reason != v1alpha1.ReasonNoViolations {
		t.Errorf("coming back calls for %v", ev)
	}
	invalid := certpolicy.Invalid(back, 3, errBad{})
	if ev := certpolicy.Transitions(back.Conditions, invalid.Conditions); len(ev) != 1 || ev[0].Reason != v1alpha1.ReasonInvalidSpec {
		t.Errorf("an invalid spec calls for %v", ev)
	}
}

type errBad struct{}

func (errBad) Error() string { return "bad selector" }
