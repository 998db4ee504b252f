//go:build integration

package certificatepolicy_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/shape"
)

var _ = Describe("CertificatePolicy in Audit mode", func() {
	var (
		ctx context.Context
		ns  string
	)
	BeforeEach(func() {
		ctx = context.Background()
		ns = newNamespace(ctx, nil)
	})

	baseline := func(ns string) v1alpha1.CertificatePolicySpec {
		return v1alpha1.CertificatePolicySpec{
			Selector: v1alpha1.CertificateSelector{NamespaceSelector: onlyNamespace(ns)},
			Rules: v1alpha1.CertificateRules{
				MaxKeyAge: dur(90 * day),
				KeyAlgorithms: []v1alpha1.KeyAlgorithmRule{
					{Algorithm: v1alpha1.KeyAlgorithmRSA, MinSize: 2048},
					{Algorithm: v1alpha1.KeyAlgorithmECDSA, MinSize: 256},
					{Algorithm: v1alpha1.KeyAlgorithmEd25519},
				},
				AllowedDNSNames:    []string{"**.example.com"},
				RequireKeyRotation: true,
			},
		}
	}

	It("judges a mix of Certificates and TLS Secrets, each once, and reports what breaks which rule", func() {
		By("TLS Secrets that no Certificate manages")
		tlsSecret(ctx, ns, "good-ecdsa", issue(certSpec{key: p256}), nil)
		tlsSecret(ctx, ns, "good-p384", issue(certSpec{key: p384, dns: []string{"*.example.com"}}), nil)
		tlsSecret(ctx, ns, "good-ed25519", issue(certSpec{key: ed}), nil)
		weak := issue(certSpec{key: rsa1024})
		tlsSecret(ctx, ns, "weak", weak, map[string]string{"unrelated.io/note": "dropped from the cache"})
		tlsSecret(ctx, ns, "expired", issue(certSpec{from: -60 * day, to: -day}), nil)
		tlsSecret(ctx, ns, "foreign-name", issue(certSpec{dns: []string{"shop.example.org"}, ips: []string{"10.0.0.1"}}), nil)
		garbage := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "garbage"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: []byte("not a certificate"), corev1.TLSPrivateKeyKey: []byte("nor a key")},
		}
		Expect(k8s.Create(ctx, garbage)).To(Succeed())
		Expect(k8s.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "opaque"},
			Data:       map[string][]byte{corev1.TLSCertKey: weak.crt},
		})).To(Succeed(), "an Opaque Secret is not a TLS Secret: not judged")

		By("cert-manager Certificates, one with its Secret issued long ago, one not issued yet, one keeping its key")
		old := certificate(ctx, ns, "old", "old-tls", nil)
		issued(ctx, old, issue(certSpec{key: rsa2048, from: -100 * day, to: 20 * day}), 3)
		certificate(ctx, ns, "pending", "pending-tls", nil)
		never := certificate(ctx, ns, "never", "never-tls", func(c *cmapi.Certificate) {
			c.Spec.PrivateKey = &cmapi.CertificatePrivateKey{RotationPolicy: cmapi.RotationPolicyNever}
		})
		issued(ctx, never, issue(certSpec{key: p256}), 1)

		policy := createPolicy(ctx, "baseline-"+ns, baseline(ns))
		waitCounts(ctx, policy.Name, counts{Evaluated: 10, Compliant: 4, Violating: 6})

		got := getPolicy(ctx, policy.Name)
		Expect(violationsOf(got)).To(Equal([]violation{
			{"Secret", ns, "expired", "validity"},
			{"Secret", ns, "foreign-name", "allowedDNSNames"},
			{"Secret", ns, "garbage", "readable"},
			{"Certificate", ns, "never", "requireKeyRotation"},
			{"Certificate", ns, "old", "maxKeyAge"},
			{"Secret", ns, "weak", "keyAlgorithms"},
		}), "ordered by namespace and name; a managed Secret is judged as its Certificate")
		Expect(got.Status.Violations[5].Message).To(Equal("key is RSA 1024; keyAlgorithms requires RSA of at least 2048 bits"))
		Expect(got.Status.Violations[1].Message).To(Equal(`"shop.example.org" not allowed by allowedDNSNames`))
		Expect(got.Status.Violations[4].Message).To(MatchRegexp(`^key [0-9a-f]{16} since \S+ is older than maxKeyAge 90d$`))
		Expect(got.Status.ViolationsOmitted).To(BeZero())

		By("naming the oldest key and the soonest expiry")
		Expect(got.Status.OldestKey.CertificateRef).To(Equal(v1alpha1.CertificateRef{Kind: "Certificate", Namespace: ns, Name: "old"}))
		Expect(got.Status.OldestKey.Since.Time).To(BeTemporally("==", fakeClock.Now().Add(-100*day)))
		Expect(got.Status.SoonestExpiry.CertificateRef).To(Equal(v1alpha1.CertificateRef{Kind: "Secret", Namespace: ns, Name: "expired"}))

		By("setting conditions with the observed generation")
		ready, compliant := condition(got, v1alpha1.ConditionReady), condition(got, v1alpha1.ConditionCompliant)
		Expect(ready.Status).To(Equal(metav1.ConditionTrue))
		Expect(ready.Reason).To(Equal(v1alpha1.ReasonEvaluated))
		Expect(ready.ObservedGeneration).To(Equal(got.Generation))
		Expect(compliant.Status).To(Equal(metav1.ConditionFalse))
		Expect(compliant.Reason).To(Equal(v1alpha1.ReasonViolationsFound))
		Expect(compliant.Message).To(Equal("6 of 10 selected certificate(s) break a rule: readable (1), validity (1), maxKeyAge (1), keyAlgorithms (1), allowedDNSNames (1), requireKeyRotation (1)"))
		Expect(compliant.ObservedGeneration).To(Equal(got.Generation))
		Eventually(func() []eventsv1.Event { return eventsAbout(ctx, "CertificatePolicy", policy.Name) }, timeout, poll).Should(ContainElement(And(
			HaveField("Reason", v1alpha1.ReasonViolationsFound), HaveField("Type", corev1.EventTypeWarning))))

		By("exporting metrics")
		Expect(metricValue("ringmaster_certificatepolicy_violations", map[string]string{"policy": policy.Name, "rule": "keyAlgorithms"})).To(BeEquivalentTo(1))
		Expect(metricValue("ringmaster_certificatepolicy_violations", map[string]string{"policy": policy.Name, "rule": "maxValidity"})).To(BeEquivalentTo(0))
		Expect(metricValue("ringmaster_certificate_not_after_timestamp_seconds", map[string]string{"namespace": ns, "name": "weak"})).To(BeEquivalentTo(weak.notAfter.Unix()))
		Expect(metricValue("ringmaster_certificate_key_age_seconds", map[string]string{"namespace": ns, "name": "old"})).To(BeNumerically("~", (100 * day).Seconds(), 1))
		_, ok := metric("ringmaster_certificate_key_age_seconds", map[string]string{"namespace": ns, "name": "old-tls"})
		Expect(ok).To(BeFalse(), "the Certificate's Secret is not a series of its own")
		fakeClock.Step(time.Hour)
		Expect(metricValue("ringmaster_certificate_key_age_seconds", map[string]string{"namespace": ns, "name": "old"})).To(BeNumerically("~", (100*day+time.Hour).Seconds(), 1), "the age grows between evaluations")

		By("never putting key material in status or events")
		statusJSON, err := json.Marshal(getPolicy(ctx, policy.Name).Status)
		Expect(err).NotTo(HaveOccurred())
		for _, secret := range [][]byte{weak.key, []byte("nor a key")} {
			for _, enc := range []string{string(secret), base64.StdEncoding.EncodeToString(secret)} {
				Expect(string(statusJSON)).NotTo(ContainSubstring(enc))
				for _, e := range eventsAbout(ctx, "CertificatePolicy", policy.Name) {
					Expect(e.Note).NotTo(ContainSubstring(enc))
				}
			}
		}
	})

	It("requires the ECH public name on every certificate, and reports those that lack it", func() {
		const publicName = "public.example.com"
		tlsSecret(ctx, ns, "covered", issue(certSpec{dns: []string{"www.example.com", publicName}}), nil)
		tlsSecret(ctx, ns, "wildcard", issue(certSpec{dns: []string{"*.example.com"}}), nil)
		tlsSecret(ctx, ns, "lacking", issue(certSpec{dns: []string{"www.example.com"}}), nil)
		web := certificate(ctx, ns, "web", "web-tls", nil)
		issued(ctx, web, issue(certSpec{dns: []string{"www.example.com"}}), 1)

		policy := createPolicy(ctx, "public-name-"+ns, v1alpha1.CertificatePolicySpec{
			Selector: v1alpha1.CertificateSelector{NamespaceSelector: onlyNamespace(ns)},
			Rules:    v1alpha1.CertificateRules{RequiredDNSNames: []string{publicName}},
		})
		waitCounts(ctx, policy.Name, counts{Evaluated: 4, Compliant: 2, Violating: 2})
		got := getPolicy(ctx, policy.Name)
		Expect(violationsOf(got)).To(Equal([]violation{
			{"Secret", ns, "lacking", "requiredDNSNames"},
			{"Certificate", ns, "web", "requiredDNSNames"},
		}))
		Expect(got.Status.Violations[0].Message).To(Equal(`"public.example.com" required by requiredDNSNames, not among the DNS names`))
		Expect(metricValue("ringmaster_certificatepolicy_violations", map[string]string{"policy": policy.Name, "rule": "requiredDNSNames"})).To(BeEquivalentTo(2))

		By("Enforce leaving the names to whoever issues the certificate: no re-issuance, no CannotEnforce")
		patchPolicy(ctx, policy.Name, func(p *v1alpha1.CertificatePolicy) {
			p.Spec.Action = v1alpha1.ActionEnforce
			p.Spec.Rules.MaxKeyAge = dur(30 * day)
		})
		Eventually(func() int64 {
			p := getPolicy(ctx, policy.Name)
			if c := condition(p, v1alpha1.ConditionReady); c != nil && c.Status == metav1.ConditionTrue {
				return c.ObservedGeneration
			}
			return 0
		}, timeout, poll).Should(Equal(getPolicy(ctx, policy.Name).Generation))
		Expect(countsOf(ctx, policy.Name)).To(Equal(counts{Evaluated: 4, Compliant: 2, Violating: 2}))
		Consistently(func() *cmapi.CertificateCondition { return issuing(ctx, ns, "web") }, time.Second, poll).Should(BeNil())
		for _, e := range eventsAbout(ctx, "CertificatePolicy", policy.Name) {
			Expect(e.Reason).NotTo(Equal(v1alpha1.ReasonCannotEnforce))
		}

		By("the Certificate re-issued with the public name: it complies")
		issued(ctx, web, issue(certSpec{dns: []string{"www.example.com", publicName}}), 2)
		waitCounts(ctx, policy.Name, counts{Evaluated: 4, Compliant: 3, Violating: 1})
	})

	It("keeps neither private key nor certificate in its cache, only the certificate's facts", func() {
		p := issue(certSpec{})
		tlsSecret(ctx, ns, "web-tls", p, map[string]string{
			"cert-manager.io/issuer-name": "ca", "unrelated.io/note": "not needed",
		})
		createPolicy(ctx, "cache-"+ns, baseline(ns))
		Eventually(reconciler.WatchingSecrets, timeout, poll).Should(BeTrue(), "a policy exists: the TLS Secret cache runs")
		cached := &corev1.Secret{}
		Eventually(func() error {
			return reconciler.SecretCache.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-tls"}, cached)
		}, timeout, poll).Should(Succeed())
		Expect(cached.Data).To(HaveLen(1), "tls.key and tls.crt are dropped before caching")
		var facts shape.TLSFacts
		Expect(json.Unmarshal(cached.Data[shape.TLSFactsKey], &facts)).To(Succeed())
		Expect(facts.Error).To(BeEmpty())
		Expect(facts.Cert.DNSNames).To(Equal([]string{"www.example.com"}))
		Expect(facts.Cert.NotAfter).To(BeTemporally("==", p.notAfter))
		for _, held := range [][]byte{p.crt, p.key} {
			Expect(bytes.Contains(cached.Data[shape.TLSFactsKey], held)).To(BeFalse())
		}
		Expect(cached.Annotations).To(Equal(map[string]string{"cert-manager.io/issuer-name": "ca"}))
		Expect(cached.ManagedFields).To(BeEmpty())

		By("and caching no Secret of another type")
		Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "opaque"}, StringData: map[string]string{"password": "hunter2"}})).To(Succeed())
		tlsSecret(ctx, ns, "later-tls", issue(certSpec{}), nil)
		Eventually(func() error {
			return reconciler.SecretCache.Get(ctx, client.ObjectKey{Namespace: ns, Name: "later-tls"}, &corev1.Secret{})
		}, timeout, poll).Should(Succeed())
		list := &corev1.SecretList{}
		Expect(reconciler.SecretCache.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		for _, s := range list.Items {
			Expect(s.Type).To(Equal(corev1.SecretTypeTLS))
			Expect(s.Data).To(HaveKey(shape.TLSFactsKey))
			Expect(s.Data).NotTo(HaveKey(corev1.TLSPrivateKeyKey))
		}
		Expect(list.Items).To(HaveLen(2))
	})

	It("re-evaluates one Secret when it changes, and writes status only when the verdict changes", func() {
		tlsSecret(ctx, ns, "a", issue(certSpec{}), nil)
		tlsSecret(ctx, ns, "b", issue(certSpec{key: rsa1024}), nil)
		policy := createPolicy(ctx, "incremental-"+ns, baseline(ns))
		waitCounts(ctx, policy.Name, counts{Evaluated: 2, Compliant: 1, Violating: 1})
		// Status writes are counted on this policy's own resourceVersion:
		// the suite's other cluster-scoped policies write theirs too.
		version := func() string { return getPolicy(ctx, policy.Name).ResourceVersion }
		Consistently(version, 1500*time.Millisecond, poll).Should(Equal(version()), "settled")

		By("a new key for b: one evaluation, one status write")
		evals, before := evaluations(), version()
		updateSecret(ctx, ns, "b", func(s *corev1.Secret) {
			p := issue(certSpec{key: rsa2048})
			s.Data = map[string][]byte{corev1.TLSCertKey: p.crt, corev1.TLSPrivateKeyKey: p.key}
		})
		waitCounts(ctx, policy.Name, counts{Evaluated: 2, Compliant: 2, Violating: 0})
		Expect(evaluations() - evals).To(BeEquivalentTo(1))
		after := version()
		Expect(after).NotTo(Equal(before))
		Consistently(version, 1500*time.Millisecond, poll).Should(Equal(after), "no second write")
		got := getPolicy(ctx, policy.Name)
		Expect(got.Status.Violations).To(BeEmpty())
		raw := &unstructured.Unstructured{}
		raw.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("CertificatePolicy"))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(policy), raw)).To(Succeed())
		Expect(raw.Object["status"]).To(HaveKeyWithValue("violating", BeEquivalentTo(0)), "a zero count is written, for kubectl get")
		Expect(raw.Object["status"]).NotTo(HaveKey("violations"), "cleared, not left over")
		Expect(condition(got, v1alpha1.ConditionCompliant).Status).To(Equal(metav1.ConditionTrue))
		Eventually(func() []eventsv1.Event { return eventsAbout(ctx, "CertificatePolicy", policy.Name) }, timeout, poll).Should(ContainElement(And(
			HaveField("Reason", v1alpha1.ReasonNoViolations), HaveField("Type", corev1.EventTypeNormal))))

		By("a change that alters no verdict: evaluated, and no status write")
		evals, before = evaluations(), version()
		updateSecret(ctx, ns, "a", func(s *corev1.Secret) { s.Labels = map[string]string{"touched": "yes"} })
		Eventually(evaluations, timeout, poll).Should(BeNumerically(">=", evals+1))
		Consistently(version, 2*time.Second, poll).Should(Equal(before))

		By("a deleted Secret leaves the count")
		Expect(k8s.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a"}})).To(Succeed())
		waitCounts(ctx, policy.Name, counts{Evaluated: 1, Compliant: 1, Violating: 0})
	})

	It("judges again when time alone breaks a rule", func() {
		tlsSecret(ctx, ns, "aging", issue(certSpec{from: -29 * day, to: 60 * day}), nil)
		policy := createPolicy(ctx, "aging-"+ns, v1alpha1.CertificatePolicySpec{
			Selector: v1alpha1.CertificateSelector{NamespaceSelector: onlyNamespace(ns)},
			Rules:    v1alpha1.CertificateRules{MaxKeyAge: dur(30 * day), MinRemainingValidity: dur(15 * day)},
		})
		waitCounts(ctx, policy.Name, counts{Evaluated: 1, Compliant: 1})

		fakeClock.Step(2 * day)
		poke(ctx, policy.Name) // its requeue, due in two (real) days
		waitCounts(ctx, policy.Name, counts{Evaluated: 1, Violating: 1})
		Expect(violationsOf(getPolicy(ctx, policy.Name))).To(Equal([]violation{{"Secret", ns, "aging", "maxKeyAge"}}))

		fakeClock.Step(44 * day)
		poke(ctx, policy.Name)
		Eventually(func() []violation { return violationsOf(getPolicy(ctx, policy.Name)) }, timeout, poll).Should(Equal([]violation{
			{"Secret", ns, "aging", "minRemainingValidity"}, {"Secret", ns, "aging", "maxKeyAge"},
		}))
	})

	It("selects by namespace labels, object labels, issuer and kind, and follows label changes", func() {
		other := newNamespace(ctx, map[string]string{"team": "b"})
		patchNamespace(ctx, ns, map[string]string{"team": "a"})
		crt := certificate(ctx, ns, "vault-signed", "vault-signed-tls", func(c *cmapi.Certificate) {
			c.Labels = map[string]string{"tier": "edge"}
			c.Spec.IssuerRef.Name = "vault-prod"
		})
		issued(ctx, crt, issue(certSpec{}), 1)
		ca := certificate(ctx, ns, "ca-signed", "ca-signed-tls", func(c *cmapi.Certificate) { c.Labels = map[string]string{"tier": "edge"} })
		issued(ctx, ca, issue(certSpec{}), 1)
		tlsSecret(ctx, ns, "plain", issue(certSpec{}), nil)
		tlsSecret(ctx, other, "plain", issue(certSpec{}), nil)

		teamA := &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}
		rules := v1alpha1.CertificateRules{MaxValidity: dur(397 * day)}
		byIssuer := createPolicy(ctx, "issuer-"+ns, v1alpha1.CertificatePolicySpec{Rules: rules, Selector: v1alpha1.CertificateSelector{
			NamespaceSelector: teamA, IssuerRefs: []v1alpha1.IssuerRefPattern{{Name: "vault-*", Kind: "ClusterIssuer"}},
		}})
		byLabel := createPolicy(ctx, "label-"+ns, v1alpha1.CertificatePolicySpec{Rules: rules, Selector: v1alpha1.CertificateSelector{
			NamespaceSelector: teamA, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "edge"}},
		}})
		secretsOnly := createPolicy(ctx, "secrets-"+ns, v1alpha1.CertificatePolicySpec{Rules: rules, Selector: v1alpha1.CertificateSelector{
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}}}},
			Kinds:             []v1alpha1.CertificateKind{v1alpha1.KindSecret},
		}})
		waitCounts(ctx, byIssuer.Name, counts{Evaluated: 1, Compliant: 1})
		waitCounts(ctx, byLabel.Name, counts{Evaluated: 2, Compliant: 2})
		waitCounts(ctx, secretsOnly.Name, counts{Evaluated: 2, Compliant: 2})

		By("a namespace that leaves team a")
		patchNamespace(ctx, ns, map[string]string{"team": "c"})
		waitCounts(ctx, byIssuer.Name, counts{})
		waitCounts(ctx, byLabel.Name, counts{})
		waitCounts(ctx, secretsOnly.Name, counts{Evaluated: 1, Compliant: 1})

		By("a policy whose selector changes is judged afresh")
		patchPolicy(ctx, byLabel.Name, func(p *v1alpha1.CertificatePolicy) { p.Spec.Selector.NamespaceSelector = onlyNamespace(ns) })
		waitCounts(ctx, byLabel.Name, counts{Evaluated: 2, Compliant: 2})
	})

	It("judges a Secret on its own once its Certificate is gone", func() {
		crt := certificate(ctx, ns, "web", "web-tls", nil)
		issued(ctx, crt, issue(certSpec{key: rsa1024}), 1)
		policy := createPolicy(ctx, "orphan-"+ns, baseline(ns))
		Eventually(func() []violation { return violationsOf(getPolicy(ctx, policy.Name)) }, timeout, poll).Should(Equal([]violation{{"Certificate", ns, "web", "keyAlgorithms"}}))

		Expect(k8s.Delete(ctx, crt)).To(Succeed())
		Eventually(func() []violation { return violationsOf(getPolicy(ctx, policy.Name)) }, timeout, poll).Should(Equal([]violation{{"Secret", ns, "web-tls", "keyAlgorithms"}}))
		Expect(countsOf(ctx, policy.Name)).To(Equal(counts{Evaluated: 1, Violating: 1}))
	})

	It("forgets a deleted policy's series", func() {
		tlsSecret(ctx, ns, "x", issue(certSpec{key: rsa1024}), nil)
		policy := createPolicy(ctx, "gone-"+ns, baseline(ns))
		waitCounts(ctx, policy.Name, counts{Evaluated: 1, Violating: 1})
		Expect(metricValue("ringmaster_certificatepolicy_violations", map[string]string{"policy": policy.Name, "rule": "keyAlgorithms"})).To(BeEquivalentTo(1))
		Expect(k8s.Delete(ctx, policy)).To(Succeed())
		Eventually(func() bool {
			_, ok := metric("ringmaster_certificatepolicy_violations", map[string]string{"policy": policy.Name})
			return ok
		}, timeout, poll).Should(BeFalse())
	})

	DescribeTable("the API server rejects an invalid policy",
		func(mutate func(*v1alpha1.CertificatePolicySpec), message string) {
			spec := v1alpha1.CertificatePolicySpec{Rules: v1alpha1.CertificateRules{MaxKeyAge: dur(90 * day)}}
			mutate(&spec)
			err := k8s.Create(ctx, &v1alpha1.CertificatePolicy{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: spec})
			Expect(err).To(HaveOccurred())
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("no rule", func(s *v1alpha1.CertificatePolicySpec) { s.Rules = v1alpha1.CertificateRules{} },
			"rules must set at least one rule"),
		Entry("Enforce with nothing to enforce", func(s *v1alpha1.CertificatePolicySpec) {
			s.Action = v1alpha1.ActionEnforce
			s.Rules = v1alpha1.CertificateRules{KeyAlgorithms: []v1alpha1.KeyAlgorithmRule{{Algorithm: v1alpha1.KeyAlgorithmEd25519}}}
		}, "action Enforce re-issues certificates that break maxKeyAge, maxValidity or minRemainingValidity"),
		Entry("minRemainingValidity not under maxValidity", func(s *v1alpha1.CertificatePolicySpec) {
			s.Rules.MaxValidity, s.Rules.MinRemainingValidity = dur(30*day), dur(30*day)
		}, "minRemainingValidity must be less than maxValidity"),
		Entry("maxKeyAge under an hour", func(s *v1alpha1.CertificatePolicySpec) { s.Rules.MaxKeyAge = dur(time.Minute) },
			"maxKeyAge must be at least 1h"),
		Entry("maxValidity under an hour", func(s *v1alpha1.CertificatePolicySpec) { s.Rules.MaxValidity = dur(time.Minute) },
			"maxValidity must be at least 1h"),
		Entry("minRemainingValidity under a minute", func(s *v1alpha1.CertificatePolicySpec) { s.Rules.MinRemainingValidity = dur(time.Second) },
			"minRemainingValidity must be at least 1m"),
		Entry("an ECDSA size that is no curve", func(s *v1alpha1.CertificatePolicySpec) {
			s.Rules.KeyAlgorithms = []v1alpha1.KeyAlgorithmRule{{Algorithm: v1alpha1.KeyAlgorithmECDSA, MinSize: 300}}
		}, "minSize of ECDSA is a curve size"),
		Entry("an RSA size under 1024", func(s *v1alpha1.CertificatePolicySpec) {
			s.Rules.KeyAlgorithms = []v1alpha1.KeyAlgorithmRule{{Algorithm: v1alpha1.KeyAlgorithmRSA, MinSize: 512}}
		}, "minSize of RSA is a modulus size of at least 1024 bits"),
		Entry("a size for Ed25519", func(s *v1alpha1.CertificatePolicySpec) {
			s.Rules.KeyAlgorithms = []v1alpha1.KeyAlgorithmRule{{Algorithm: v1alpha1.KeyAlgorithmEd25519, MinSize: 256}}
		}, "minSize does not apply to Ed25519"),
		Entry("an algorithm listed twice", func(s *v1alpha1.CertificatePolicySpec) {
			s.Rules.KeyAlgorithms = []v1alpha1.KeyAlgorithmRule{{Algorithm: v1alpha1.KeyAlgorithmRSA}, {Algorithm: v1alpha1.KeyAlgorithmRSA, MinSize: 2048}}
		}, "Duplicate value"),
		Entry("an unknown algorithm", func(s *v1alpha1.CertificatePolicySpec) {
			s.Rules.KeyAlgorithms = []v1alpha1.KeyAlgorithmRule{{Algorithm: "DSA"}}
		}, `Unsupported value: "DSA"`),
		Entry("a range that is no CIDR", func(s *v1alpha1.CertificatePolicySpec) { s.Rules.AllowedIPRanges = []string{"10.0.0.1"} },
			"allowedIPRanges must be CIDRs"),
		Entry("a DNS pattern with a slash", func(s *v1alpha1.CertificatePolicySpec) { s.Rules.AllowedDNSNames = []string{"a/b.example.com"} },
			"spec.rules.allowedDNSNames[0] in body should match"),
		Entry("CA rules that set none", func(s *v1alpha1.CertificatePolicySpec) { s.CARules = &v1alpha1.CARules{} },
			"caRules must set at least one rule"),
		Entry("a CA minValidity over its maxValidity", func(s *v1alpha1.CertificatePolicySpec) {
			s.CARules = &v1alpha1.CARules{MinValidity: dur(400 * day), MaxValidity: dur(365 * day)}
		}, "caRules.minValidity must not exceed caRules.maxValidity"),
		Entry("a CA maxValidity under an hour", func(s *v1alpha1.CertificatePolicySpec) { s.CARules = &v1alpha1.CARules{MaxValidity: dur(time.Minute)} },
			"caRules.maxValidity must be at least 1h"),
		Entry("maxExpirationSeconds under what Kubernetes allows", func(s *v1alpha1.CertificatePolicySpec) { s.Rules.MaxExpirationSeconds = ptr.To[int32](60) },
			"spec.rules.maxExpirationSeconds: Invalid value"),
		Entry("refreshOverdueAfter under a minute", func(s *v1alpha1.CertificatePolicySpec) { s.Rules.RefreshOverdueAfter = dur(time.Second) },
			"refreshOverdueAfter must be at least 1m"),
		Entry("a signer pattern with a character a regular expression reads", func(s *v1alpha1.CertificatePolicySpec) {
			s.Rules.AllowedSignerNames = []string{"example.com/(mesh|web)"}
		}, "spec.rules.allowedSignerNames[0] in body should match"),
		Entry("an unknown kind", func(s *v1alpha1.CertificatePolicySpec) {
			s.Selector.Kinds = []v1alpha1.CertificateKind{"CertificateSigningRequest"}
		},
			`Unsupported value: "CertificateSigningRequest"`),
		Entry("a denied DNS pattern with a slash", func(s *v1alpha1.CertificatePolicySpec) { s.Rules.DeniedDNSNames = []string{"a/b.example.com"} },
			"spec.rules.deniedDNSNames[0] in body should match"),
		Entry("a required name with a wildcard", func(s *v1alpha1.CertificatePolicySpec) { s.Rules.RequiredDNSNames = []string{"*.example.com"} },
			"spec.rules.requiredDNSNames[0] in body should match"),
		Entry("a required name with a label over 63 characters", func(s *v1alpha1.CertificatePolicySpec) {
			s.Rules.RequiredDNSNames = []string{"public.example.com", strings.Repeat("a", 64) + ".example.com"}
		}, "spec.rules.requiredDNSNames[1] in body should match"),
		Entry("a required name listed twice", func(s *v1alpha1.CertificatePolicySpec) {
			s.Rules.RequiredDNSNames = []string{"public.example.com", "public.example.com"}
		}, "Duplicate value"),
		Entry("more than 16 required names", func(s *v1alpha1.CertificatePolicySpec) {
			for i := range 17 {
				s.Rules.RequiredDNSNames = append(s.Rules.RequiredDNSNames, fmt.Sprintf("n%d.example.com", i))
			}
		}, "must have at most 16 items"),
		Entry("an unknown action", func(s *v1alpha1.CertificatePolicySpec) { s.Action = "Revoke" },
			`Unsupported value: "Revoke"`),
		Entry("an unknown kind", func(s *v1alpha1.CertificatePolicySpec) {
			s.Selector.Kinds = []v1alpha1.CertificateKind{"Ingress"}
		}, `Unsupported value: "Ingress"`),
		Entry("an issuer pattern without a name", func(s *v1alpha1.CertificatePolicySpec) {
			s.Selector.IssuerRefs = []v1alpha1.IssuerRefPattern{{Kind: "ClusterIssuer"}}
		}, "spec.selector.issuerRefs[0].name"),
	)

	It("reports a selector the API server accepts but that does not parse, and recovers", func() {
		tlsSecret(ctx, ns, "web", issue(certSpec{}), nil)
		spec := baseline(ns)
		spec.Selector.LabelSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: "Near"}}}
		policy := createPolicy(ctx, "invalid-"+ns, spec)
		Eventually(func() string {
			c := condition(getPolicy(ctx, policy.Name), v1alpha1.ConditionReady)
			if c == nil || c.Status != metav1.ConditionFalse {
				return ""
			}
			return c.Reason + ": " + c.Message
		}, timeout, poll).Should(HavePrefix(v1alpha1.ReasonInvalidSpec + ": Invalid spec: spec.selector.labelSelector:"))
		Eventually(func() []eventsv1.Event { return eventsAbout(ctx, "CertificatePolicy", policy.Name) }, timeout, poll).Should(ContainElement(And(
			HaveField("Reason", v1alpha1.ReasonInvalidSpec), HaveField("Type", corev1.EventTypeWarning))))

		patchPolicy(ctx, policy.Name, func(p *v1alpha1.CertificatePolicy) { p.Spec.Selector.LabelSelector = nil })
		waitCounts(ctx, policy.Name, counts{Evaluated: 1, Compliant: 1})
		Expect(condition(getPolicy(ctx, policy.Name), v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
	})

	It("accepts the baseline sample", func() {
		data, err := os.ReadFile(filepath.Join("..", "..", "..", "config", "samples", "ringmaster_v1alpha1_certificatepolicy.yaml"))
		Expect(err).NotTo(HaveOccurred())
		sample := &v1alpha1.CertificatePolicy{}
		Expect(yaml.UnmarshalStrict(data, sample)).To(Succeed())
		sample.Name += "-" + ns
		sample.Spec.Selector.NamespaceSelector = onlyNamespace(ns)
		Expect(k8s.Create(ctx, sample)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { _ = k8s.Delete(ctx, sample) })
		tlsSecret(ctx, ns, "web", issue(certSpec{from: -day, to: 89 * day}), nil)
		waitCounts(ctx, sample.Name, counts{Evaluated: 1, Compliant: 1})
	})

	It("defaults a bare policy to Audit", func() {
		bare := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": v1alpha1.GroupVersion.String(), "kind": "CertificatePolicy",
			"metadata": map[string]any{"name": "defaults-" + ns},
			"spec":     map[string]any{"rules": map[string]any{"maxKeyAge": "2160h"}},
		}}
		Expect(k8s.Create(ctx, bare)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { _ = k8s.Delete(ctx, bare) })
		Expect(getPolicy(ctx, "defaults-"+ns).Spec.Action).To(Equal(v1alpha1.ActionAudit))
	})
})

func patchNamespace(ctx context.Context, name string, lbls map[string]string) {
	GinkgoHelper()
	Eventually(func() error {
		n := &corev1.Namespace{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			return err
		}
		for k, v := range lbls {
			n.Labels[k] = v
		}
		return k8s.Update(ctx, n)
	}, timeout, poll).Should(Succeed())
}
