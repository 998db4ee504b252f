//go:build integration

package certificatepolicy_test

import (
	"context"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

var _ = Describe("CertificatePolicy in Enforce mode", func() {
	var (
		ctx context.Context
		ns  string
	)
	BeforeEach(func() {
		ctx = context.Background()
		ns = newNamespace(ctx, nil)
		fakeClock.Step(time.Minute) // a full renewal budget for each spec
	})

	renewed := func(names ...string) int {
		n := 0
		for _, name := range names {
			if c := issuing(ctx, ns, name); c != nil && c.Status == cmmeta.ConditionTrue {
				n++
			}
		}
		return n
	}

	It("re-issues over-age Certificates within the rate limit, and only reports what it cannot mend", func() {
		for _, name := range []string{"a", "b", "c"} {
			crt := certificate(ctx, ns, name, name+"-tls", nil)
			issued(ctx, crt, issue(certSpec{from: -40 * day, to: 50 * day}), 1)
		}
		kept := certificate(ctx, ns, "kept", "kept-tls", func(c *cmapi.Certificate) {
			c.Spec.PrivateKey = &cmapi.CertificatePrivateKey{RotationPolicy: cmapi.RotationPolicyNever}
		})
		issued(ctx, kept, issue(certSpec{from: -40 * day, to: 50 * day}), 1)
		foreign := tlsSecret(ctx, ns, "foreign", issue(certSpec{from: -40 * day, to: 50 * day}), nil)

		policy := createPolicy(ctx, "enforce-"+ns, v1alpha1.CertificatePolicySpec{
			Selector: v1alpha1.CertificateSelector{NamespaceSelector: onlyNamespace(ns)},
			Rules:    v1alpha1.CertificateRules{MaxKeyAge: dur(30 * day)},
			Action:   v1alpha1.ActionEnforce,
		})
		waitCounts(ctx, policy.Name, counts{Evaluated: 5, Violating: 5})

		By("renewing as many as the rate limit allows, in order")
		Eventually(func() int { return renewed("a", "b", "c") }, timeout, poll).Should(Equal(maxRenewals))
		Consistently(func() int { return renewed("a", "b", "c") }, time.Second, poll).Should(Equal(maxRenewals))
		Expect(renewed("c")).To(BeZero())
		Expect(metricValue("ringmaster_certificatepolicy_renewals_triggered_total", map[string]string{"policy": policy.Name})).To(BeEquivalentTo(maxRenewals))
		cond := issuing(ctx, ns, "a")
		Expect(cond.Reason).To(Equal(v1alpha1.IssuingReason))
		Expect(cond.Message).To(Equal("Re-issuance triggered by CertificatePolicy " + policy.Name + ": breaks maxKeyAge"))
		Eventually(func() []eventsv1.Event { return eventsAbout(ctx, "Certificate", "a") }, timeout, poll).Should(ContainElement(And(
			HaveField("Reason", v1alpha1.ReasonRenewalTriggered), HaveField("Related.Name", policy.Name))))
		Eventually(func() []eventsv1.Event { return eventsAbout(ctx, "CertificatePolicy", policy.Name) }, timeout, poll).Should(ContainElement(And(
			HaveField("Reason", v1alpha1.ReasonRenewalTriggered), HaveField("Note", "Re-issuing Certificate "+ns+"/a: breaks maxKeyAge"))))

		By("reporting, never changing, what re-issuing cannot mend")
		Eventually(func() []eventsv1.Event { return eventsAbout(ctx, "Certificate", "kept") }, timeout, poll).Should(ContainElement(And(
			HaveField("Reason", v1alpha1.ReasonCannotEnforce), HaveField("Type", corev1.EventTypeWarning),
			HaveField("Note", ContainSubstring("rotationPolicy is Never")))))
		Eventually(func() []eventsv1.Event { return eventsAbout(ctx, "Secret", "foreign") }, timeout, poll).Should(ContainElement(And(
			HaveField("Reason", v1alpha1.ReasonCannotEnforce), HaveField("Note", ContainSubstring("no cert-manager Certificate manages this Secret")))))
		Expect(issuing(ctx, ns, "kept")).To(BeNil())
		now := &corev1.Secret{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(foreign), now)).To(Succeed())
		Expect(now.ResourceVersion).To(Equal(foreign.ResourceVersion))
		cannot := func() int {
			n := 0
			for _, e := range eventsAbout(ctx, "CertificatePolicy", policy.Name) {
				if e.Reason == v1alpha1.ReasonCannotEnforce {
					n++
				}
			}
			return n
		}
		Eventually(cannot, timeout, poll).Should(Equal(2))

		By("renewing the rest once the budget refills")
		fakeClock.Step(30 * time.Second) // one renewal's worth at 2 a minute
		poke(ctx, policy.Name)           // its requeue, due in 30 (real) seconds
		Eventually(func() int { return renewed("c") }, timeout, poll).Should(Equal(1))
		// The count follows the write the test just saw.
		Eventually(func() float64 {
			return metricValue("ringmaster_certificatepolicy_renewals_triggered_total", map[string]string{"policy": policy.Name})
		}, timeout, poll).Should(BeEquivalentTo(3))
		Expect(cannot()).To(Equal(2), "what it cannot mend is reported once")

		By("cert-manager issuing a new key: the Certificate complies, and is left alone")
		issued(ctx, getCertificate(ctx, ns, "a"), issue(certSpec{from: 0, to: 90 * day}), 2)
		waitCounts(ctx, policy.Name, counts{Evaluated: 5, Compliant: 1, Violating: 4})
		poke(ctx, policy.Name)
		Consistently(func() *cmapi.CertificateCondition { return issuing(ctx, ns, "a") }, time.Second, poll).Should(BeNil())
		Expect(metricValue("ringmaster_certificatepolicy_renewals_triggered_total", map[string]string{"policy": policy.Name})).To(BeEquivalentTo(3))
	})

	It("gives up on a renewal that comes back still breaking the rule", func() {
		crt := certificate(ctx, ns, "long", "long-tls", func(c *cmapi.Certificate) { c.Spec.Duration = &metav1.Duration{Duration: 30 * day} })
		issued(ctx, crt, issue(certSpec{from: -day, to: 89 * day}), 1)
		policy := createPolicy(ctx, "stubborn-"+ns, v1alpha1.CertificatePolicySpec{
			Selector: v1alpha1.CertificateSelector{NamespaceSelector: onlyNamespace(ns)},
			Rules:    v1alpha1.CertificateRules{MaxValidity: dur(30 * day)},
			Action:   v1alpha1.ActionEnforce,
		})
		Eventually(func() int { return renewed("long") }, timeout, poll).Should(Equal(1))

		By("an issuer that ignores spec.duration")
		issued(ctx, getCertificate(ctx, ns, "long"), issue(certSpec{from: 0, to: 90 * day}), 2)
		Eventually(func() []eventsv1.Event { return eventsAbout(ctx, "Certificate", "long") }, timeout, poll).Should(ContainElement(And(
			HaveField("Reason", v1alpha1.ReasonCannotEnforce), HaveField("Note", ContainSubstring("re-issued at revision 2")))))
		poke(ctx, policy.Name)
		Consistently(func() int { return renewed("long") }, time.Second, poll).Should(BeZero())
		Expect(metricValue("ringmaster_certificatepolicy_renewals_triggered_total", map[string]string{"policy": policy.Name})).To(BeEquivalentTo(1))
	})

	It("dates a key kept across renewals by its first certificate", func() {
		key := newKey(p256)
		crt := certificate(ctx, ns, "kept", "kept-tls", func(c *cmapi.Certificate) {
			c.Spec.PrivateKey = &cmapi.CertificatePrivateKey{RotationPolicy: cmapi.RotationPolicyNever}
		})
		issued(ctx, crt, issue(certSpec{signer: key, from: -50 * day, to: 10 * day}), 1)
		policy := createPolicy(ctx, "reuse-"+ns, v1alpha1.CertificatePolicySpec{
			Selector: v1alpha1.CertificateSelector{NamespaceSelector: onlyNamespace(ns)},
			Rules:    v1alpha1.CertificateRules{MaxKeyAge: dur(90 * day)},
		})
		waitCounts(ctx, policy.Name, counts{Evaluated: 1, Compliant: 1})

		By("a renewal that keeps the key")
		issued(ctx, getCertificate(ctx, ns, "kept"), issue(certSpec{signer: key, from: 0, to: 60 * day}), 2)
		Eventually(func() time.Time {
			return getPolicy(ctx, policy.Name).Status.SoonestExpiry.NotAfter.Time
		}, timeout, poll).Should(BeTemporally("==", fakeClock.Now().Add(60*day).Truncate(time.Second)))
		Expect(getPolicy(ctx, policy.Name).Status.OldestKey.Since.Time).To(BeTemporally("==", fakeClock.Now().Add(-50*day).Truncate(time.Second)))

		fakeClock.Step(41 * day)
		poke(ctx, policy.Name)
		waitCounts(ctx, policy.Name, counts{Evaluated: 1, Violating: 1})
	})
})
