//go:build integration

package plugin_test

import (
	"context"
	"crypto"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
)

const day = 24 * time.Hour

// The suite's world. Namespace shop (labelled for the cluster ring edge,
// the team's) holds web, on schedule; late, whose key source vanished, so
// that its rotation falls overdue a minute in; and stuck, whose key source
// vanished too. Namespace legacy holds a Secret in the way of edge's
// projection. Namespace quiet (the team's) holds calm, on schedule.
// Namespace certs (tier edge) holds the certificates the policy edge
// judges; dev holds one it does not select.
const (
	edgeLabel = "ringmaster-test/edge"
	missing   = "missing-key-source"
)

func setUpRings(ctx context.Context) {
	GinkgoHelper()
	namespace(ctx, "shop", map[string]string{edgeLabel: "true"})
	namespace(ctx, "legacy", map[string]string{edgeLabel: "true"})
	namespace(ctx, "quiet", nil)
	bindTeam(ctx, "shop")
	bindTeam(ctx, "quiet")
	Expect(k8s.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "legacy", Name: "edge-ticket-keys"},
		StringData: map[string]string{"owner": "someone else"},
	})).To(Succeed())

	for _, r := range []*v1alpha1.TicketKeyRing{
		ring("shop", "web", time.Hour, 2*time.Second),
		ring("shop", "late", time.Minute, time.Second),
		ring("shop", "stuck", time.Hour, time.Second),
		ring("quiet", "calm", time.Hour, time.Second),
	} {
		Expect(k8s.Create(ctx, r)).To(Succeed())
	}
	Expect(k8s.Create(ctx, &v1alpha1.ClusterTicketKeyRing{
		ObjectMeta: metav1.ObjectMeta{Name: "edge"},
		Spec: v1alpha1.ClusterTicketKeyRingSpec{
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{edgeLabel: "true"}},
			TicketKeyRingSpec: v1alpha1.TicketKeyRingSpec{
				RotationInterval: metav1.Duration{Duration: time.Hour}, ActivationDelay: metav1.Duration{Duration: time.Second}, RetainedKeys: 1,
				Distribution: v1alpha1.Distribution{SecretName: "edge-ticket-keys", Formats: []v1alpha1.KeyFormat{"go"}},
			},
		},
	})).To(Succeed())
	for _, name := range []string{"web", "late", "stuck"} {
		published("shop", name)
	}
	published("quiet", "calm")
	for _, name := range []string{"late", "stuck"} {
		patchRing(ctx, "shop", name, func(r *v1alpha1.TicketKeyRing) { r.Spec.SourceRef = &v1alpha1.KeySourceReference{Name: missing} })
	}
}

func namespace(ctx context.Context, name string, labels map[string]string) {
	GinkgoHelper()
	Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})).To(Succeed())
}

func ring(ns, name string, interval, delay time.Duration) *v1alpha1.TicketKeyRing {
	return &v1alpha1.TicketKeyRing{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.TicketKeyRingSpec{
			RotationInterval: metav1.Duration{Duration: interval}, ActivationDelay: metav1.Duration{Duration: delay}, RetainedKeys: 1,
			Distribution: v1alpha1.Distribution{Formats: []v1alpha1.KeyFormat{"go"}},
		},
	}
}

func getRing(ns, name string) *v1alpha1.TicketKeyRing {
	GinkgoHelper()
	r := &v1alpha1.TicketKeyRing{}
	Expect(k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, r)).To(Succeed())
	return r
}

// published waits until the operator has published the ring's generation.
func published(ns, name string) *v1alpha1.TicketKeyRing {
	GinkgoHelper()
	var r *v1alpha1.TicketKeyRing
	Eventually(func(g Gomega) {
		r = getRing(ns, name)
		c := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ConditionReady)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(c.ObservedGeneration).To(Equal(r.Generation))
	}, timeout, poll).Should(Succeed())
	return r
}

func patchRing(ctx context.Context, ns, name string, mutate func(*v1alpha1.TicketKeyRing)) {
	GinkgoHelper()
	r := &v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	Expect(testenv.Update(ctx, k8s, r, mutate)).To(Succeed())
}

// The certificates policy edge judges, with the operator's verdicts:
//   - Secret certs/old: a key 100 days old, over maxKeyAge 90d;
//   - Secrets certs/shared-a and certs/shared-b: one key, in a certificate
//     50 days old and one a day old; both keys are 50 days old;
//   - Certificate certs/api, in its Secret api-tls: 10 days old, expiring in
//     3 days, within minRemainingValidity 7d;
//   - Secret dev/other: not selected.
var certificates = []struct{ Kind, Name string }{
	{"Secret", "old"}, {"Secret", "shared-a"}, {"Secret", "shared-b"}, {"Certificate", "api"},
}

func setUpCertificates(ctx context.Context) {
	GinkgoHelper()
	namespace(ctx, "certs", map[string]string{"tier": "edge"})
	namespace(ctx, "dev", nil)
	Expect(k8s.Create(ctx, &v1alpha1.CertificatePolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "edge"},
		Spec: v1alpha1.CertificatePolicySpec{
			Selector: v1alpha1.CertificateSelector{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "edge"}}},
			Rules: v1alpha1.CertificateRules{
				MaxKeyAge:            &metav1.Duration{Duration: 90 * day},
				MinRemainingValidity: &metav1.Duration{Duration: 7 * day},
			},
		},
	})).To(Succeed())

	ca, err := testpki.NewCA("kubectl-ringmaster suite")
	Expect(err).NotTo(HaveOccurred())
	now := time.Now().Truncate(time.Second)
	issue := func(key crypto.Signer, from, to time.Duration) *testpki.Issued {
		is, err := ca.Issue(testpki.Leaf{DNSNames: []string{"www.example.com"}, NotBefore: now.Add(from), NotAfter: now.Add(to), Key: key})
		Expect(err).NotTo(HaveOccurred())
		return is
	}
	shared, err := testpki.NewKey(testpki.ECDSAP256)
	Expect(err).NotTo(HaveOccurred())

	tlsSecret(ctx, "certs", "old", issue(nil, -100*day, 100*day), nil)
	tlsSecret(ctx, "dev", "other", issue(nil, -400*day, 100*day), nil)
	tlsSecret(ctx, "certs", "shared-a", issue(shared, -50*day, 300*day), nil)
	// The operator dates a key by the earliest certificate it has seen
	// carrying it: let it see shared-a first.
	Eventually(func() bool {
		_, ok := metric("ringmaster_certificate_key_age_seconds", map[string]string{"namespace": "certs", "name": "shared-a"})
		return ok
	}, timeout, poll).Should(BeTrue())
	tlsSecret(ctx, "certs", "shared-b", issue(shared, -day, 300*day), nil)

	api := &cmapi.Certificate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "certs", Name: "api"},
		Spec: cmapi.CertificateSpec{
			SecretName: "api-tls", DNSNames: []string{"www.example.com"},
			IssuerRef: cmmeta.IssuerReference{Name: "ca", Kind: "ClusterIssuer"},
		},
	}
	Expect(k8s.Create(ctx, api)).To(Succeed())
	tlsSecret(ctx, "certs", "api-tls", issue(nil, -10*day, 3*day), map[string]string{
		cmapi.CertificateNameKey: "api", cmapi.IssuerNameAnnotationKey: "ca", cmapi.IssuerKindAnnotationKey: "ClusterIssuer",
		// kubectl apply leaves the whole Secret it applied here, tls.key
		// included; the plugin must never decode it.
		corev1.LastAppliedConfigAnnotation: `{"data":{"tls.key":"` + lastAppliedMarker + `"}}`,
	})

	Eventually(func(g Gomega) {
		p := &v1alpha1.CertificatePolicy{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "edge"}, p)).To(Succeed())
		g.Expect(p.Status.Evaluated).To(BeEquivalentTo(4))
		g.Expect(p.Status.Violating).To(BeEquivalentTo(2))
	}, timeout, poll).Should(Succeed())
}

// lastAppliedMarker stands for key bytes in a last-applied annotation.
const lastAppliedMarker = "S0VZLUJZVEVTLU5FVkVSLVRPLUJFLVNIT1dO"

func tlsSecret(ctx context.Context, ns, name string, is *testpki.Issued, annotations map[string]string) {
	GinkgoHelper()
	Expect(k8s.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: is.CertPEM, corev1.TLSPrivateKeyKey: is.KeyPEM},
	})).To(Succeed())
}

// metric reads one series of the operator's registry.
func metric(name string, labels map[string]string) (float64, bool) {
	GinkgoHelper()
	v, ok, err := testenv.Metric(registry, name, labels)
	Expect(err).NotTo(HaveOccurred())
	return v, ok
}
