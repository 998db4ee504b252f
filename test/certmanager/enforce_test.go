//go:build integration

package certmanager_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
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
	"github.com/ringmaster-io/ringmaster/internal/testing/atomicdir"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

const (
	timeout = 60 * time.Second
	poll    = 100 * time.Millisecond
	day     = 24 * time.Hour
)

var _ = Describe("Enforce with a real cert-manager", func() {
	It("re-keys an over-age certificate through cert-manager, and the agent serves the new one", func(ctx SpecContext) {
		start := time.Now()
		By("a self-signed root and a CA ClusterIssuer")
		Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cert-manager"}})).To(Succeed())
		Expect(k8s.Create(ctx, &cmapi.ClusterIssuer{
			ObjectMeta: metav1.ObjectMeta{Name: "selfsigned"},
			Spec:       cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{SelfSigned: &cmapi.SelfSignedIssuer{}}},
		})).To(Succeed())
		Expect(k8s.Create(ctx, &cmapi.Certificate{
			ObjectMeta: metav1.ObjectMeta{Namespace: "cert-manager", Name: "ca"},
			Spec: cmapi.CertificateSpec{
				IsCA: true, CommonName: "ringmaster test CA", SecretName: "ca-tls",
				PrivateKey: &cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm, Size: 256},
				IssuerRef:  cmmeta.IssuerReference{Name: "selfsigned", Kind: cmapi.ClusterIssuerKind, Group: "cert-manager.io"},
			},
		})).To(Succeed())
		Eventually(func() bool { return certificateReady(ctx, "cert-manager", "ca") }, timeout, poll).Should(BeTrue())
		Expect(k8s.Create(ctx, &cmapi.ClusterIssuer{
			ObjectMeta: metav1.ObjectMeta{Name: "ca"},
			Spec:       cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: "ca-tls"}}},
		})).To(Succeed())
		rootReady := time.Since(start)

		By("a Certificate adopting a Secret whose key is 100 days old")
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "shop-"}}
		Expect(k8s.Create(ctx, ns)).To(Succeed())
		old := oldCertificate("web.shop.example.com")
		Expect(k8s.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "web-tls", Annotations: map[string]string{
				cmapi.CertificateNameKey: "web", cmapi.IssuerNameAnnotationKey: "ca",
				cmapi.IssuerKindAnnotationKey: cmapi.ClusterIssuerKind, cmapi.IssuerGroupAnnotationKey: "cert-manager.io",
			}},
			Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: old.crt, corev1.TLSPrivateKeyKey: old.key},
		})).To(Succeed())
		Expect(k8s.Create(ctx, &cmapi.Certificate{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "web"},
			Spec: cmapi.CertificateSpec{
				SecretName: "web-tls", DNSNames: []string{"web.shop.example.com"},
				PrivateKey: &cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm, Size: 256, RotationPolicy: cmapi.RotationPolicyAlways},
				IssuerRef:  cmmeta.IssuerReference{Name: "ca", Kind: cmapi.ClusterIssuerKind, Group: "cert-manager.io"},
			},
		})).To(Succeed())
		Eventually(func() bool { return certificateReady(ctx, ns.Name, "web") }, timeout, poll).Should(BeTrue())
		Consistently(func() []byte { return secretData(ctx, ns.Name, "web-tls")[corev1.TLSCertKey] }, 2*time.Second, poll).Should(Equal(old.crt),
			"cert-manager takes the Secret as it is: nothing is due")

		By("the agent serving it from a kubelet-style volume")
		dir := GinkgoT().TempDir()
		kubelet, err := atomicdir.NewWriter(dir)
		Expect(err).NotTo(HaveOccurred())
		project := func() {
			data := secretData(ctx, ns.Name, "web-tls")
			Expect(kubelet.Write(map[string]atomicdir.File{
				corev1.TLSCertKey: {Data: data[corev1.TLSCertKey]}, corev1.TLSPrivateKeyKey: {Data: data[corev1.TLSPrivateKeyKey], Mode: 0o600},
			})).To(Succeed())
		}
		project()
		a, err := agent.New(agent.Options{Dir: dir, Require: agent.Certificate, ResyncPeriod: time.Second})
		Expect(err).NotTo(HaveOccurred())
		actx, stop := context.WithCancel(context.Background())
		DeferCleanup(stop)
		go func() { _ = a.Start(actx) }()
		addr := serve(actx, a.TLSConfig(&tls.Config{MinVersion: tls.VersionTLS13}))
		Expect(served(addr).Raw).To(Equal(pemDER(old.crt)))

		By("an Enforce policy: maxKeyAge 30 days")
		policy := &v1alpha1.CertificatePolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "rekey"},
			Spec: v1alpha1.CertificatePolicySpec{
				Action:   v1alpha1.ActionEnforce,
				Selector: v1alpha1.CertificateSelector{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns.Name}}},
				Rules:    v1alpha1.CertificateRules{MaxKeyAge: &metav1.Duration{Duration: 30 * day}},
			},
		}
		enforced := time.Now()
		Expect(k8s.Create(ctx, policy)).To(Succeed())

		By("cert-manager re-issuing it with a new key")
		var fresh []byte
		Eventually(func() bool {
			fresh = secretData(ctx, ns.Name, "web-tls")[corev1.TLSCertKey]
			return len(fresh) > 0 && !bytes.Equal(fresh, old.crt)
		}, timeout, poll).Should(BeTrue())
		reissued := time.Since(enforced)
		leaf := parse(fresh)
		Expect(leaf.PublicKey.(*ecdsa.PublicKey).Equal(old.signer.Public())).To(BeFalse(), "a new key")
		ca := secretData(ctx, "cert-manager", "ca-tls")[corev1.TLSCertKey]
		roots := x509.NewCertPool()
		Expect(roots.AppendCertsFromPEM(ca)).To(BeTrue())
		_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "web.shop.example.com"})
		Expect(err).NotTo(HaveOccurred(), "issued by cert-manager's CA")
		Eventually(func() bool { return certificateReady(ctx, ns.Name, "web") }, timeout, poll).Should(BeTrue())
		// cert-manager may write Ready before the revision: wait for both.
		Eventually(func() *int {
			crt := &cmapi.Certificate{}
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "web"}, crt)).To(Succeed())
			return crt.Status.Revision
		}, timeout, poll).Should(HaveValue(Equal(1)))

		By("the policy recording one renewal, and compliance")
		Eventually(func() v1alpha1.CertificatePolicyStatus {
			got := &v1alpha1.CertificatePolicy{}
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(policy), got)).To(Succeed())
			return got.Status
		}, timeout, poll).Should(And(HaveField("Evaluated", BeEquivalentTo(1)), HaveField("Compliant", BeEquivalentTo(1)), HaveField("Violating", BeEquivalentTo(0))))
		Expect(renewals("rekey")).To(BeEquivalentTo(1))
		list := &eventsv1.EventList{}
		Expect(k8s.List(ctx, list, client.InNamespace(ns.Name))).To(Succeed())
		Expect(list.Items).To(ContainElement(And(HaveField("Reason", v1alpha1.ReasonRenewalTriggered), HaveField("Regarding.Name", "web"))))

		By("the kubelet delivering it: new handshakes get the new certificate")
		project()
		Eventually(func() []byte { return served(addr).Raw }, timeout, poll).Should(Equal(leaf.Raw))
		Expect(a.Status().CertificateNotAfter).To(BeTemporally("==", leaf.NotAfter))

		report := fmt.Sprintf("root CA ready in %v; old certificate re-issued by cert-manager %v after the policy was created", rootReady.Round(time.Millisecond), reissued.Round(time.Millisecond))
		AddReportEntry("timings", report)
		GinkgoWriter.Println(report)
	}, NodeTimeout(3*time.Minute))
})

func certificateReady(ctx context.Context, ns, name string) bool {
	c := &cmapi.Certificate{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, c); err != nil {
		return false
	}
	for _, cond := range c.Status.Conditions {
		if cond.Type == cmapi.CertificateConditionReady {
			return cond.Status == cmmeta.ConditionTrue
		}
	}
	return false
}

func secretData(ctx context.Context, ns, name string) map[string][]byte {
	s := &corev1.Secret{}
	_ = k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s)
	return s.Data
}

type pair struct {
	crt, key []byte
	signer   crypto.Signer
}

// oldCertificate is a certificate for name issued 100 days ago, valid for
// 400 days: cert-manager sees nothing due, a 30-day maxKeyAge does.
func oldCertificate(name string) pair {
	GinkgoHelper()
	ca, err := testpki.NewCA("an old CA")
	Expect(err).NotTo(HaveOccurred())
	now := time.Now()
	c, err := ca.Issue(testpki.Leaf{DNSNames: []string{name}, NotBefore: now.Add(-100 * day), NotAfter: now.Add(300 * day)})
	Expect(err).NotTo(HaveOccurred())
	return pair{crt: c.CertPEM, key: c.KeyPEM, signer: c.Key}
}

func pemDER(data []byte) []byte {
	GinkgoHelper()
	b, _ := pem.Decode(data)
	Expect(b).NotTo(BeNil())
	return b.Bytes
}

func parse(data []byte) *x509.Certificate {
	GinkgoHelper()
	c, err := x509.ParseCertificate(pemDER(data))
	Expect(err).NotTo(HaveOccurred())
	return c
}

// serve accepts TLS connections on loopback until ctx ends, completing each
// handshake.
func serve(ctx context.Context, cfg *tls.Config) string {
	GinkgoHelper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	Expect(err).NotTo(HaveOccurred())
	go func() { <-ctx.Done(); _ = ln.Close() }()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.(*tls.Conn).HandshakeContext(ctx)
			}()
		}
	}()
	return ln.Addr().String()
}

// served is the leaf certificate a new handshake with addr presents.
func served(addr string) *x509.Certificate {
	GinkgoHelper()
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{InsecureSkipVerify: true, ServerName: "web.shop.example.com"})
	Expect(err).NotTo(HaveOccurred())
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0]
}

func renewals(policy string) float64 {
	GinkgoHelper()
	v, _, err := testenv.Metric(registry, "ringmaster_certificatepolicy_renewals_triggered_total", map[string]string{"policy": policy})
	Expect(err).NotTo(HaveOccurred())
	return v
}
