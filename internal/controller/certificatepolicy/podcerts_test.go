//go:build integration

package certificatepolicy_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
)

// The specs' signer: a root and an intermediate that issue pod
// certificates, as a signer of a cluster's own would, to the public key of
// the request.
var (
	podRoot = func() *testpki.CA {
		ca, err := testpki.NewCAWith(testpki.CAOptions{Name: "pod root", NotAfter: time.Now().Add(3 * 365 * day)})
		if err != nil {
			panic(err)
		}
		return ca
	}()
	podIntermediate = func() *testpki.CA {
		ca, err := testpki.NewCAWith(testpki.CAOptions{Name: "pod intermediate", NotAfter: time.Now().Add(365 * day), Parent: podRoot})
		if err != nil {
			panic(err)
		}
		return ca
	}()
)

// maxPodLifetime is the longest a non-Kubernetes signer may issue for.
const maxPodLifetime = 7862400

// podCertRequest creates a PodCertificateRequest as the kubelet of pod
// would: a new key of kt, a stub PKCS#10 request, maxExpirationSeconds.
func podCertRequest(ctx context.Context, pod *corev1.Pod, name, signer string, kt testpki.KeyType, maxExp int32) *certificatesv1.PodCertificateRequest {
	GinkgoHelper()
	csr, err := testpki.CSR(newKey(kt))
	Expect(err).NotTo(HaveOccurred())
	pcr := &certificatesv1.PodCertificateRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: name},
		Spec: certificatesv1.PodCertificateRequestSpec{
			SignerName: signer, PodName: pod.Name, PodUID: pod.UID, ServiceAccountName: "default", ServiceAccountUID: "uid-default",
			NodeName: "node-1", NodeUID: "uid-node-1", MaxExpirationSeconds: ptr.To(maxExp), StubPKCS10Request: csr,
		},
	}
	Expect(k8s.Create(ctx, pcr)).To(Succeed())
	return pcr
}

// signPod plays the signer: it issues the request's key a certificate for
// dns, valid from now (the API server takes no other notBefore) for the
// request's maxExpirationSeconds, chained to the intermediate, and asks
// the kubelet to refresh it an hour past the fake clock's now, which runs
// ahead of real time (catchUp).
func signPod(ctx context.Context, pcr *certificatesv1.PodCertificateRequest, dns ...string) {
	GinkgoHelper()
	csr, err := x509.ParseCertificateRequest(pcr.Spec.StubPKCS10Request)
	Expect(err).NotTo(HaveOccurred())
	nb := time.Now().Truncate(time.Second)
	na := nb.Add(time.Duration(*pcr.Spec.MaxExpirationSeconds) * time.Second)
	leaf, err := podIntermediate.Issue(testpki.Leaf{CommonName: pcr.Spec.PodName, DNSNames: dns, PublicKey: csr.PublicKey, NotBefore: nb, NotAfter: na})
	Expect(err).NotTo(HaveOccurred())
	setPodStatus(ctx, pcr, func(s *certificatesv1.PodCertificateRequestStatus) {
		s.Conditions = []metav1.Condition{{Type: certificatesv1.PodCertificateRequestConditionTypeIssued, Status: metav1.ConditionTrue, Reason: "Signed", Message: "signed by the suite", LastTransitionTime: metav1.Now()}}
		s.CertificateChain = string(leaf.CertPEM) + string(podIntermediate.PEM)
		s.NotBefore, s.NotAfter = &metav1.Time{Time: nb}, &metav1.Time{Time: na}
		refresh := fakeClock.Now().Add(time.Hour).Truncate(time.Second)
		Expect(refresh.Before(na.Add(-10*time.Minute))).To(BeTrue(), "the fake clock runs %s ahead of real time: more than a pod certificate lives", fakeClock.Since(nb))
		s.BeginRefreshAt = &metav1.Time{Time: refresh}
	})
}

func setPodStatus(ctx context.Context, pcr *certificatesv1.PodCertificateRequest, mutate func(*certificatesv1.PodCertificateRequestStatus)) {
	GinkgoHelper()
	Eventually(func() error {
		got := &certificatesv1.PodCertificateRequest{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pcr), got); err != nil {
			return err
		}
		mutate(&got.Status)
		return k8s.Status().Update(ctx, got)
	}, timeout, poll).Should(Succeed())
}

// catchUp moves the fake clock to real time and a minute past, if it is
// behind: the API server dates pod certificates by its own clock.
func catchUp() {
	if d := time.Until(fakeClock.Now()); d < time.Minute {
		fakeClock.Step(time.Minute - d)
	}
}

var _ = Describe("CertificatePolicy and pod certificates", func() {
	It("judges PodCertificateRequests by signer, key, lifetime, names and state, and keeps a pod's certificate past its request until a newer one replaces it", func(ctx SpecContext) {
		catchUp()
		ns := newNamespace(ctx, nil)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-0"}, Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []corev1.Container{{Name: "web", Image: "example.com/web:1"}}}}
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		db := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-0"}, Spec: pod.Spec}
		Expect(k8s.Create(ctx, db)).To(Succeed())
		kinds := []v1alpha1.CertificateKind{v1alpha1.KindPodCertificateRequest}
		createPolicy(ctx, "pods-"+ns, v1alpha1.CertificatePolicySpec{
			Selector: v1alpha1.CertificateSelector{NamespaceSelector: onlyNamespace(ns), Kinds: kinds},
			Rules: v1alpha1.CertificateRules{
				AllowedSignerNames:  []string{"example.com/mesh"},
				KeyAlgorithms:       []v1alpha1.KeyAlgorithmRule{{Algorithm: v1alpha1.KeyAlgorithmECDSA, MinSize: 256}},
				DeniedDNSNames:      []string{"**.internal.example.com"},
				RefreshOverdueAfter: dur(30 * time.Minute),
			},
		})
		createPolicy(ctx, "lifetime-"+ns, v1alpha1.CertificatePolicySpec{
			Selector: v1alpha1.CertificateSelector{NamespaceSelector: onlyNamespace(ns), Kinds: kinds, SignerNames: []string{"example.com/mesh"}},
			Rules:    v1alpha1.CertificateRules{MaxExpirationSeconds: ptr.To[int32](86400)},
		})

		By("requests the kubelet made: pending, denied, and issued by the suite's signer")
		podCertRequest(ctx, pod, "pending", "example.com/mesh", p256, 86400)
		podCertRequest(ctx, pod, "other-signer", "example.com/other", p256, 86400)
		podCertRequest(ctx, pod, "ed25519", "example.com/mesh", ed, 86400)
		denied := podCertRequest(ctx, pod, "denied", "example.com/mesh", p384, 86400)
		setPodStatus(ctx, denied, func(s *certificatesv1.PodCertificateRequestStatus) {
			s.Conditions = []metav1.Condition{{Type: certificatesv1.PodCertificateRequestConditionTypeDenied, Status: metav1.ConditionTrue, Reason: "UnsupportedKeyType", Message: "use ECDSAP256", LastTransitionTime: metav1.Now()}}
		})
		internal := podCertRequest(ctx, db, "internal-name", "example.com/mesh", p256, maxPodLifetime)
		signPod(ctx, internal, "db.internal.example.com")
		first := podCertRequest(ctx, pod, "first", "example.com/mesh", p256, maxPodLifetime)
		signPod(ctx, first, "web-0.shop.svc")

		waitCounts(ctx, "pods-"+ns, counts{Evaluated: 6, Compliant: 2, Violating: 4})
		p := getPolicy(ctx, "pods-"+ns)
		Expect(violationsOf(p)).To(ConsistOf(
			violation{"PodCertificateRequest", ns, "denied", "issued"},
			violation{"PodCertificateRequest", ns, "ed25519", "keyAlgorithms"},
			violation{"PodCertificateRequest", ns, "internal-name", "deniedDNSNames"},
			violation{"PodCertificateRequest", ns, "other-signer", "allowedSignerNames"},
		))
		Expect(p.Status.PodCertificates).To(Equal(&v1alpha1.PodCertificateStates{Pending: 3, Fresh: 2, Denied: 1}))
		for _, v := range p.Status.Violations {
			switch v.Rule {
			case "issued":
				Expect(v.Message).To(ContainSubstring(`denied by signer "example.com/mesh": UnsupportedKeyType: use ECDSAP256`))
			case "keyAlgorithms":
				Expect(v.Message).To(ContainSubstring("requested key is Ed25519"))
			case "deniedDNSNames":
				Expect(v.Message).To(ContainSubstring(`"db.internal.example.com" denied by deniedDNSNames`))
			}
		}
		By("the lifetime policy selects the signer's requests alone, and judges what they ask for (and, always, whether they were issued)")
		waitCounts(ctx, "lifetime-"+ns, counts{Evaluated: 5, Compliant: 2, Violating: 3})
		Expect(violationsOf(getPolicy(ctx, "lifetime-"+ns))).To(ConsistOf(
			violation{"PodCertificateRequest", ns, "denied", "issued"},
			violation{"PodCertificateRequest", ns, "first", "maxExpirationSeconds"},
			violation{"PodCertificateRequest", ns, "internal-name", "maxExpirationSeconds"},
		))
		Expect(metricValue("ringmaster_certificatepolicy_pod_certificates", map[string]string{"policy": "pods-" + ns, "state": "fresh"})).To(Equal(2.0))

		By("kube-controller-manager deletes the issued request: its pod lives, so its certificate is still judged")
		Expect(k8s.Delete(ctx, first)).To(Succeed())
		Consistently(func() counts { return countsOf(ctx, "pods-"+ns) }, 2*time.Second, poll).Should(Equal(counts{Evaluated: 6, Compliant: 2, Violating: 4}))

		By("the kubelet refreshes: a newer issued request of the same pod and signer replaces the one gone")
		Expect(violationsOf(getPolicy(ctx, "lifetime-"+ns))).To(ContainElement(violation{"PodCertificateRequest", ns, "first", "maxExpirationSeconds"}), "first is still judged")
		second := podCertRequest(ctx, pod, "second", "example.com/mesh", p256, maxPodLifetime)
		signPod(ctx, second, "web-0.shop.svc")
		Eventually(func() []violation { return violationsOf(getPolicy(ctx, "lifetime-"+ns)) }, timeout, poll).Should(ConsistOf(
			violation{"PodCertificateRequest", ns, "denied", "issued"},
			violation{"PodCertificateRequest", ns, "internal-name", "maxExpirationSeconds"},
			violation{"PodCertificateRequest", ns, "second", "maxExpirationSeconds"},
		), "first is forgotten, second judged")
		Expect(countsOf(ctx, "pods-"+ns)).To(Equal(counts{Evaluated: 6, Compliant: 2, Violating: 4}))
		Expect(getPolicy(ctx, "pods-"+ns).Status.PodCertificates).To(Equal(&v1alpha1.PodCertificateStates{Pending: 3, Fresh: 2, Denied: 1}))

		By("past beginRefreshAt plus refreshOverdueAfter with no newer request: overdue for refresh")
		sec := &certificatesv1.PodCertificateRequest{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(second), sec)).To(Succeed())
		fakeClock.SetTime(sec.Status.BeginRefreshAt.Add(31 * time.Minute))
		poke(ctx, "pods-"+ns)
		Eventually(func() []violation { return violationsOf(getPolicy(ctx, "pods-"+ns)) }, timeout, poll).Should(ContainElement(
			violation{"PodCertificateRequest", ns, "second", "refreshOverdue"}))
		Eventually(func() *v1alpha1.PodCertificateStates { return getPolicy(ctx, "pods-"+ns).Status.PodCertificates }, timeout, poll).
			Should(Equal(&v1alpha1.PodCertificateStates{Pending: 3, OverdueForRefresh: 2, Denied: 1}), "db-0's certificate, refreshed by nothing either, is overdue too")
	})
})

var _ = Describe("CertificatePolicy and CA certificates", func() {
	It("judges ClusterTrustBundles as CAs: validity, lifetime, near expiry and key", func(ctx SpecContext) {
		ns := newNamespace(ctx, nil)
		signer := "example.com/bundles-" + ns
		now := fakeClock.Now()
		ca := func(name string, kt testpki.KeyType, from, to time.Duration) *testpki.CA {
			GinkgoHelper()
			c, err := testpki.NewCAWith(testpki.CAOptions{Name: name, KeyType: kt, NotBefore: now.Add(from), NotAfter: now.Add(to)})
			Expect(err).NotTo(HaveOccurred())
			return c
		}
		bundle := func(name string, cas ...*testpki.CA) {
			GinkgoHelper()
			var b strings.Builder
			for _, c := range cas {
				b.Write(c.PEM)
			}
			ctb := &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: strings.ReplaceAll(signer, "/", ":") + ":" + name},
				Spec: certificatesv1.ClusterTrustBundleSpec{SignerName: signer, TrustBundle: b.String()}}
			Expect(k8s.Create(ctx, ctb)).To(Succeed())
			DeferCleanup(func(ctx context.Context) { _ = k8s.Delete(ctx, ctb) })
		}
		createPolicy(ctx, "bundles-"+ns, v1alpha1.CertificatePolicySpec{
			Selector: v1alpha1.CertificateSelector{Kinds: []v1alpha1.CertificateKind{v1alpha1.KindClusterTrustBundle}, SignerNames: []string{signer}},
			Rules:    v1alpha1.CertificateRules{MaxValidity: dur(90 * day)}, // leaf rules: never applied to CAs
			CARules: &v1alpha1.CARules{MaxValidity: dur(3650 * day), MinValidity: dur(30 * day), MinRemainingValidity: dur(30 * day),
				KeyAlgorithms: []v1alpha1.KeyAlgorithmRule{{Algorithm: v1alpha1.KeyAlgorithmECDSA, MinSize: 256}}},
		})
		bundle("good", ca("good root", p256, -day, 365*day), ca("good root 2", p384, -day, 700*day))
		bundle("bad", ca("forever", p256, -day, 7300*day), ca("short", p256, -5*day, 10*day), ca("rsa", rsa2048, -day, 365*day))

		waitCounts(ctx, "bundles-"+ns, counts{Evaluated: 2, Compliant: 1, Violating: 1})
		p := getPolicy(ctx, "bundles-"+ns)
		bad := strings.ReplaceAll(signer, "/", ":") + ":bad"
		Expect(violationsOf(p)).To(ConsistOf(
			violation{"ClusterTrustBundle", "", bad, "caMaxValidity"},
			violation{"ClusterTrustBundle", "", bad, "caMinValidity"},
			violation{"ClusterTrustBundle", "", bad, "caMinRemainingValidity"},
			violation{"ClusterTrustBundle", "", bad, "caKeyAlgorithms"},
		))
		Expect(p.Status.SoonestExpiry).NotTo(BeNil())
		Expect(p.Status.SoonestExpiry.Name).To(Equal(bad))
		Expect(p.Status.SoonestExpiry.NotAfter.Time).To(BeTemporally("~", now.Add(10*day), time.Second))
		Expect(metricValue("ringmaster_trust_bundle_not_after_timestamp_seconds", map[string]string{"name": bad})).To(BeNumerically("~", float64(now.Add(10*day).Unix()), 1))
	})

	It("judges the CAs of TLS Secrets as CAs, and refuses the names the deny-list names", func(ctx SpecContext) {
		ns := newNamespace(ctx, nil)
		now := fakeClock.Now()
		goodCA, err := testpki.NewCAWith(testpki.CAOptions{Name: "good CA", NotBefore: now.Add(-day), NotAfter: now.Add(365 * day)})
		Expect(err).NotTo(HaveOccurred())
		staleCA, err := testpki.NewCAWith(testpki.CAOptions{Name: "stale CA", NotBefore: now.Add(-400 * day), NotAfter: now.Add(-day)})
		Expect(err).NotTo(HaveOccurred())
		issuerCA, err := testpki.NewCAWith(testpki.CAOptions{Name: "issuer CA", KeyType: rsa2048, NotBefore: now.Add(-day), NotAfter: now.Add(365 * day)})
		Expect(err).NotTo(HaveOccurred())
		withCA := func(name string, p pair, caPEM []byte) {
			GinkgoHelper()
			s := tlsSecret(ctx, ns, name, p, nil)
			updateSecret(ctx, ns, s.Name, func(s *corev1.Secret) { s.Data["ca.crt"] = caPEM })
		}
		createPolicy(ctx, "ca-secrets-"+ns, v1alpha1.CertificatePolicySpec{
			Selector: v1alpha1.CertificateSelector{NamespaceSelector: onlyNamespace(ns), Kinds: []v1alpha1.CertificateKind{v1alpha1.KindSecret}},
			Rules:    v1alpha1.CertificateRules{DeniedDNSNames: []string{"localhost", "**.internal.example.com"}, MaxValidity: dur(90 * day)},
			CARules:  &v1alpha1.CARules{KeyAlgorithms: []v1alpha1.KeyAlgorithmRule{{Algorithm: v1alpha1.KeyAlgorithmECDSA}}},
		})
		withCA("web", issue(certSpec{key: p256, dns: []string{"www.example.com"}}), goodCA.PEM)
		withCA("stale", issue(certSpec{key: p256, dns: []string{"api.example.com"}}), staleCA.PEM)
		tlsSecret(ctx, ns, "local", issue(certSpec{key: p256, dns: []string{"localhost"}}), nil)
		tlsSecret(ctx, ns, "wildcard", issue(certSpec{key: p256, dns: []string{"*.internal.example.com"}}), nil)
		// A cert-manager CA issuer's Secret: tls.crt is the CA itself,
		// valid for a year: judged as a CA, not against maxValidity.
		issuerKey := issuerCA.Key
		keyPEM, err := x509.MarshalPKCS8PrivateKey(issuerKey)
		Expect(err).NotTo(HaveOccurred())
		tlsSecret(ctx, ns, "ca-issuer", pair{crt: issuerCA.PEM, key: pemBlock("PRIVATE KEY", keyPEM)}, nil)

		waitCounts(ctx, "ca-secrets-"+ns, counts{Evaluated: 5, Compliant: 1, Violating: 4})
		Expect(violationsOf(getPolicy(ctx, "ca-secrets-"+ns))).To(ConsistOf(
			violation{"Secret", ns, "ca-issuer", "caKeyAlgorithms"},
			violation{"Secret", ns, "local", "deniedDNSNames"},
			violation{"Secret", ns, "stale", "caValidity"},
			violation{"Secret", ns, "wildcard", "deniedDNSNames"},
		))
		Expect(fmt.Sprint(getPolicy(ctx, "ca-secrets-"+ns).Status.Violations)).NotTo(ContainSubstring("BEGIN"), "no certificate or key bytes in status")
	})
})

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

var _ = Describe("CertificatePolicy in Enforce, at admission", func() {
	It("refuses a pod whose podCertificate volume names a signer, key type or lifetime the policy forbids, naming the policy and the rule", func(ctx SpecContext) {
		By("installing the admission policy as config/admission ships it")
		Expect(env.Apply(ctx, filepath.Join(testenv.Root(), "config", "admission", "podcertificates.yaml"))).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			_ = k8s.Delete(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "ringmaster-pod-certificates"}})
			_ = k8s.Delete(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "ringmaster-pod-certificates"}})
		})
		ns := newNamespace(ctx, map[string]string{"mesh": "on"})
		other := newNamespace(ctx, nil)
		name := "pods-enforce-" + ns
		createPolicy(ctx, name, v1alpha1.CertificatePolicySpec{
			Action: v1alpha1.ActionEnforce,
			Selector: v1alpha1.CertificateSelector{
				NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "mesh", Operator: metav1.LabelSelectorOpIn, Values: []string{"on"}}}},
				Kinds:             []v1alpha1.CertificateKind{v1alpha1.KindPodCertificateRequest},
			},
			Rules: v1alpha1.CertificateRules{
				AllowedSignerNames:   []string{"example.com/mesh-*"},
				KeyAlgorithms:        []v1alpha1.KeyAlgorithmRule{{Algorithm: v1alpha1.KeyAlgorithmECDSA, MinSize: 256}, {Algorithm: v1alpha1.KeyAlgorithmEd25519}},
				MaxExpirationSeconds: ptr.To[int32](86400),
			},
		})
		podWith := func(ns, name, signer, keyType string, maxExp *int32) *corev1.Pod {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{
				AutomountServiceAccountToken: ptr.To(false),
				Containers: []corev1.Container{{Name: "web", Image: "example.com/web:1",
					VolumeMounts: []corev1.VolumeMount{{Name: "cert", MountPath: "/var/run/cert"}}}},
				Volumes: []corev1.Volume{{Name: "cert", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
					Sources: []corev1.VolumeProjection{{PodCertificate: &corev1.PodCertificateProjection{
						SignerName: signer, KeyType: keyType, MaxExpirationSeconds: maxExp, CredentialBundlePath: "bundle.pem"}}}}}}},
			}}
		}
		refused := func(p *corev1.Pod, rule, says string) {
			GinkgoHelper()
			Eventually(func() string {
				try := p.DeepCopy()
				try.GenerateName, try.Name = p.Name+"-", "" // a pod admitted before the policy took effect may linger, deleted
				err := k8s.Create(ctx, try)
				if err == nil {
					_ = k8s.Delete(ctx, try)
					return "admitted"
				}
				return err.Error()
			}, timeout, poll).Should(And(
				ContainSubstring("CertificatePolicy "+name+", rule "+rule+": a pod in namespace "+p.Namespace),
				ContainSubstring(says)))
		}
		refused(podWith(ns, "other-signer", "example.com/web", "ECDSAP256", nil), "allowedSignerNames", "may not ask signer example.com/web for a podCertificate; allowed: example.com/mesh-*")
		refused(podWith(ns, "rsa", "example.com/mesh-a", "RSA3072", nil), "keyAlgorithms", "may not have a podCertificate key of type RSA3072; allowed: ECDSA of at least 256 bits, Ed25519")
		refused(podWith(ns, "long", "example.com/mesh-a", "ECDSAP384", ptr.To[int32](7*86400)), "maxExpirationSeconds", "lifetime of 604800s from example.com/mesh-a; at most 86400s")

		By("what the policy allows, and what it does not select, is admitted")
		Expect(k8s.Create(ctx, podWith(ns, "good", "example.com/mesh-a", "ED25519", ptr.To[int32](3600)))).To(Succeed())
		Expect(k8s.Create(ctx, podWith(ns, "defaulted", "example.com/mesh-a", "ECDSAP256", nil))).To(Succeed(), "86400s when unset: within maxExpirationSeconds")
		Expect(k8s.Create(ctx, podWith(other, "elsewhere", "example.com/web", "RSA3072", nil))).To(Succeed(), "a namespace the policy does not select")

		By("in Audit, the policy refuses nothing")
		patchPolicy(ctx, name, func(p *v1alpha1.CertificatePolicy) { p.Spec.Action = v1alpha1.ActionAudit })
		Eventually(func() error { return k8s.Create(ctx, podWith(ns, "audited", "example.com/web", "RSA3072", nil)) }, timeout, poll).Should(Succeed())
	})
})
