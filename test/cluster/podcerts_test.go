//go:build cluster

package cluster_test

import (
	"context"
	"crypto/x509"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
)

// The signer of the pod certificates spec: a root and an intermediate of
// the spec's own, and the signer name they issue for.
const (
	podCertNS     = "podcerts"
	podCertSigner = "ringmaster.test/cluster"
	podCertPolicy = "cluster-pod-certificates"
)

// podCertificatesGoverned runs with the chart installed (certificatePolicy
// and its admission policy on, by default): pods with podCertificate
// volumes, whose kubelet makes the keys and the PodCertificateRequests, and
// a signer of the spec's own that issues them. A CertificatePolicy audits
// the requests and their issued certificates, compliant and violating;
// in Enforce, the API server refuses a pod whose volume the policy forbids,
// naming the policy and the rule.
func podCertificatesGoverned(ctx SpecContext) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: podCertNS, Labels: map[string]string{"pod-certificates": "governed"}}}
	Expect(cl.Client.Create(ctx, ns)).To(Succeed())
	DeferCleanup(func(ctx context.Context) { _ = cl.Client.Delete(ctx, ns) })

	root, err := testpki.NewCAWith(testpki.CAOptions{Name: "cluster pod root", NotAfter: time.Now().Add(365 * 24 * time.Hour)})
	Expect(err).NotTo(HaveOccurred())
	inter, err := testpki.NewCAWith(testpki.CAOptions{Name: "cluster pod intermediate", NotAfter: time.Now().Add(180 * 24 * time.Hour), Parent: root})
	Expect(err).NotTo(HaveOccurred())
	signerCtx, stopSigner := context.WithCancel(context.Background())
	var signerDone sync.WaitGroup
	signerDone.Go(func() { runPodSigner(signerCtx, inter) })
	DeferCleanup(func() { stopSigner(); signerDone.Wait() })

	policy := &v1alpha1.CertificatePolicy{
		ObjectMeta: metav1.ObjectMeta{Name: podCertPolicy},
		Spec: v1alpha1.CertificatePolicySpec{
			Action: v1alpha1.ActionAudit,
			Selector: v1alpha1.CertificateSelector{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pod-certificates": "governed"}},
				Kinds:             []v1alpha1.CertificateKind{v1alpha1.KindPodCertificateRequest},
			},
			Rules: v1alpha1.CertificateRules{
				AllowedSignerNames:   []string{podCertSigner},
				KeyAlgorithms:        []v1alpha1.KeyAlgorithmRule{{Algorithm: v1alpha1.KeyAlgorithmECDSA, MinSize: 256}, {Algorithm: v1alpha1.KeyAlgorithmEd25519}},
				MaxExpirationSeconds: ptr.To[int32](86400),
				DeniedDNSNames:       []string{"**.internal.example.com"},
				RefreshOverdueAfter:  &metav1.Duration{Duration: 30 * time.Minute},
			},
			CARules: &v1alpha1.CARules{MinRemainingValidity: &metav1.Duration{Duration: 24 * time.Hour}},
		},
	}
	Expect(cl.Client.Create(ctx, policy)).To(Succeed())
	DeferCleanup(func(ctx context.Context) { _ = cl.Client.Delete(ctx, policy) })

	By("pods whose kubelet asks the spec's signer: one compliant, one with an RSA key, one whose certificate names an internal host")
	for _, p := range []*corev1.Pod{
		certPod("good", "ECDSAP256", podCertSigner),
		certPod("rsa", "RSA3072", podCertSigner),
		certPod("internal", "ED25519", podCertSigner),
	} {
		Expect(cl.Client.Create(ctx, p)).To(Succeed())
	}
	Eventually(func(g Gomega) {
		for _, name := range []string{"good", "rsa", "internal"} {
			p := &corev1.Pod{}
			g.Expect(cl.Client.Get(ctx, key(podCertNS, name), p)).To(Succeed())
			g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "pod %s runs with its certificate mounted", name)
		}
	}, 3*time.Minute, time.Second).Should(Succeed())

	By("the policy audits the kubelet's requests and the certificates the signer issued")
	requestOf := func(pod string) string {
		list := &certificatesv1.PodCertificateRequestList{}
		Expect(cl.Client.List(ctx, list, client.InNamespace(podCertNS))).To(Succeed())
		for _, r := range list.Items {
			if r.Spec.PodName == pod {
				return r.Name
			}
		}
		return ""
	}
	Eventually(func(g Gomega) {
		got := &v1alpha1.CertificatePolicy{}
		g.Expect(cl.Client.Get(ctx, client.ObjectKey{Name: podCertPolicy}, got)).To(Succeed())
		ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(got.Status.Evaluated).To(BeNumerically(">=", 3))
		g.Expect(got.Status.PodCertificates).NotTo(BeNil())
		g.Expect(got.Status.PodCertificates.Fresh).To(BeNumerically(">=", 3))
		rules := map[string][]string{}
		for _, v := range got.Status.Violations {
			rules[v.Name] = append(rules[v.Name], v.Rule)
		}
		g.Expect(rules[requestOf("good")]).To(BeEmpty())
		g.Expect(rules[requestOf("rsa")]).To(ConsistOf("keyAlgorithms"))
		g.Expect(rules[requestOf("internal")]).To(ConsistOf("deniedDNSNames"))
	}, 2*time.Minute, time.Second).Should(Succeed())

	By("in Enforce, the API server refuses a pod whose podCertificate volume the policy forbids, naming the policy and the rule")
	Eventually(func() error {
		got := &v1alpha1.CertificatePolicy{}
		if err := cl.Client.Get(ctx, client.ObjectKey{Name: podCertPolicy}, got); err != nil {
			return err
		}
		got.Spec.Action = v1alpha1.ActionEnforce
		return cl.Client.Update(ctx, got)
	}, time.Minute, time.Second).Should(Succeed())
	for _, tc := range []struct {
		pod        *corev1.Pod
		rule, says string
	}{
		{certPod("refused-rsa", "RSA4096", podCertSigner), "keyAlgorithms", "key of type RSA4096"},
		{certPod("refused-signer", "ECDSAP256", "ringmaster.test/other"), "allowedSignerNames", "may not ask signer ringmaster.test/other"},
	} {
		Eventually(func() string {
			try := tc.pod.DeepCopy()
			try.GenerateName, try.Name = tc.pod.Name+"-", ""
			if err := cl.Client.Create(ctx, try); err != nil {
				return err.Error()
			}
			_ = cl.Client.Delete(ctx, try)
			return "admitted"
		}, time.Minute, time.Second).Should(And(
			ContainSubstring("CertificatePolicy "+podCertPolicy+", rule "+tc.rule+": a pod in namespace "+podCertNS),
			ContainSubstring(tc.says)))
	}
	Expect(cl.Client.Create(ctx, certPod("allowed", "ECDSAP384", podCertSigner))).To(Succeed(), "what the policy allows is admitted in Enforce")
}

// certPod is a pod with a podCertificate volume of keyType from signer.
func certPod(name, keyType, signer string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: podCertNS, Name: name},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "pause", Image: "localhost/ringmaster-pause:dev", ImagePullPolicy: corev1.PullNever,
				VolumeMounts: []corev1.VolumeMount{{Name: "cert", MountPath: "/var/run/cert", ReadOnly: true}}}},
			Volumes: []corev1.Volume{{Name: "cert", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{PodCertificate: &corev1.PodCertificateProjection{
					SignerName: signer, KeyType: keyType, MaxExpirationSeconds: ptr.To[int32](3600 * 6), CredentialBundlePath: "credentialbundle.pem"}}}}}}},
		},
	}
}

// runPodSigner issues every pending PodCertificateRequest of the spec's
// signer in the spec's namespace, as a signer controller would: to the
// request's public key, for its maxExpirationSeconds, refreshing half way.
// A pod named internal gets a certificate for an internal host.
func runPodSigner(ctx context.Context, ca *testpki.CA) {
	defer GinkgoRecover()
	for ctx.Err() == nil {
		list := &certificatesv1.PodCertificateRequestList{}
		if err := cl.Client.List(ctx, list, client.InNamespace(podCertNS)); err == nil {
			for i := range list.Items {
				signPodRequest(ctx, ca, &list.Items[i])
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func signPodRequest(ctx context.Context, ca *testpki.CA, pcr *certificatesv1.PodCertificateRequest) {
	if pcr.Spec.SignerName != podCertSigner || len(pcr.Status.Conditions) > 0 {
		return
	}
	csr, err := x509.ParseCertificateRequest(pcr.Spec.StubPKCS10Request)
	if err != nil {
		return
	}
	dns := pcr.Spec.PodName + "." + podCertNS + ".svc"
	if strings.HasPrefix(pcr.Spec.PodName, "internal") {
		dns = "db.internal.example.com"
	}
	nb := time.Now().Truncate(time.Second)
	na := nb.Add(time.Duration(*pcr.Spec.MaxExpirationSeconds) * time.Second)
	leaf, err := ca.Issue(testpki.Leaf{CommonName: pcr.Spec.PodName, DNSNames: []string{dns}, PublicKey: csr.PublicKey, NotBefore: nb, NotAfter: na})
	if err != nil {
		return
	}
	pcr.Status = certificatesv1.PodCertificateRequestStatus{
		Conditions: []metav1.Condition{{Type: certificatesv1.PodCertificateRequestConditionTypeIssued, Status: metav1.ConditionTrue,
			Reason: "Signed", Message: "signed by the cluster suite", LastTransitionTime: metav1.Now()}},
		CertificateChain: string(leaf.CertPEM) + string(ca.PEM),
		NotBefore:        &metav1.Time{Time: nb}, NotAfter: &metav1.Time{Time: na},
		BeginRefreshAt: &metav1.Time{Time: nb.Add(na.Sub(nb) / 2)},
	}
	_ = cl.Client.Status().Update(ctx, pcr)
}
