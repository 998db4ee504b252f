//go:build integration

package certificatepolicy_test

import (
	"context"
	"crypto"
	"fmt"
	"net"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
)

const (
	timeout = 20 * time.Second
	poll    = 100 * time.Millisecond
	day     = 24 * time.Hour
)

// The key types the specs use.
const (
	rsa1024 = testpki.RSA1024
	rsa2048 = testpki.RSA2048
	p256    = testpki.ECDSAP256
	p384    = testpki.ECDSAP384
	ed      = testpki.Ed25519
)

// newKey makes a new key for each certificate: the operator dates a key by
// the first certificate it saw carrying it, so reusing keys across specs
// would age them.
func newKey(k testpki.KeyType) crypto.Signer {
	GinkgoHelper()
	s, err := testpki.NewKey(k)
	Expect(err).NotTo(HaveOccurred())
	return s
}

// testCA signs the specs' certificates; the operator judges leaves, whoever
// signed them.
var testCA = func() *testpki.CA {
	ca, err := testpki.NewCA("certificatepolicy suite CA")
	if err != nil {
		panic(err)
	}
	return ca
}()

// certSpec describes a certificate; times are offsets from the fake clock's
// now.
type certSpec struct {
	key      testpki.KeyType
	signer   crypto.Signer // overrides key
	from, to time.Duration
	dns      []string
	ips      []string
}

// pair is a certificate and its private key, in PEM.
type pair struct {
	crt, key  []byte
	notAfter  time.Time
	notBefore time.Time
}

func issue(s certSpec) pair {
	GinkgoHelper()
	if s.from == 0 && s.to == 0 {
		s.from, s.to = -day, 60*day
	}
	if len(s.dns) == 0 && len(s.ips) == 0 {
		s.dns = []string{"www.example.com"}
	}
	leaf := testpki.Leaf{CommonName: "test", DNSNames: s.dns, KeyType: s.key, Key: s.signer,
		NotBefore: fakeClock.Now().Add(s.from), NotAfter: fakeClock.Now().Add(s.to)}
	for _, ip := range s.ips {
		leaf.IPs = append(leaf.IPs, net.ParseIP(ip))
	}
	c, err := testCA.Issue(leaf)
	Expect(err).NotTo(HaveOccurred())
	return pair{crt: c.CertPEM, key: c.KeyPEM, notBefore: c.Cert.NotBefore, notAfter: c.Cert.NotAfter}
}

func newNamespace(ctx context.Context, lbls map[string]string) string {
	GinkgoHelper()
	n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "cpol-", Labels: lbls}}
	Expect(k8s.Create(ctx, n)).To(Succeed())
	return n.Name
}

// onlyNamespace selects the namespace ns alone.
func onlyNamespace(ns string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}
}

func tlsSecret(ctx context.Context, ns, name string, p pair, annotations map[string]string) *corev1.Secret {
	GinkgoHelper()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: p.crt, corev1.TLSPrivateKeyKey: p.key},
	}
	Expect(k8s.Create(ctx, s)).To(Succeed())
	return s
}

func updateSecret(ctx context.Context, ns, name string, mutate func(*corev1.Secret)) {
	GinkgoHelper()
	Eventually(func() error {
		s := &corev1.Secret{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
			return err
		}
		mutate(s)
		return k8s.Update(ctx, s)
	}, timeout, poll).Should(Succeed())
}

// certificate creates a cert-manager Certificate writing to secretName.
func certificate(ctx context.Context, ns, name, secretName string, mutate func(*cmapi.Certificate)) *cmapi.Certificate {
	GinkgoHelper()
	c := &cmapi.Certificate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: cmapi.CertificateSpec{
			SecretName: secretName,
			DNSNames:   []string{"www.example.com"},
			IssuerRef:  cmmeta.IssuerReference{Name: "ca", Kind: "ClusterIssuer"},
		},
	}
	if mutate != nil {
		mutate(c)
	}
	Expect(k8s.Create(ctx, c)).To(Succeed())
	return c
}

// issued plays cert-manager: it writes p into the Certificate's Secret, with
// cert-manager's annotations, and records the issuance in the Certificate's
// status.
func issued(ctx context.Context, c *cmapi.Certificate, p pair, revision int) {
	GinkgoHelper()
	ann := map[string]string{
		"cert-manager.io/certificate-name": c.Name,
		"cert-manager.io/issuer-name":      c.Spec.IssuerRef.Name,
		"cert-manager.io/issuer-kind":      c.Spec.IssuerRef.Kind,
		"cert-manager.io/issuer-group":     "cert-manager.io",
	}
	s := &corev1.Secret{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.Spec.SecretName}, s); err == nil {
		updateSecret(ctx, c.Namespace, c.Spec.SecretName, func(s *corev1.Secret) {
			s.Annotations = ann
			s.Data = map[string][]byte{corev1.TLSCertKey: p.crt, corev1.TLSPrivateKeyKey: p.key}
		})
	} else {
		tlsSecret(ctx, c.Namespace, c.Spec.SecretName, p, ann)
	}
	Eventually(func() error {
		got := getCertificate(ctx, c.Namespace, c.Name)
		got.Status.Revision = ptr.To(revision)
		got.Status.NotBefore = &metav1.Time{Time: p.notBefore}
		got.Status.NotAfter = &metav1.Time{Time: p.notAfter}
		var conds []cmapi.CertificateCondition
		for _, cond := range got.Status.Conditions {
			if cond.Type != cmapi.CertificateConditionIssuing {
				conds = append(conds, cond)
			}
		}
		got.Status.Conditions = conds
		return k8s.Status().Update(ctx, got)
	}, timeout, poll).Should(Succeed())
}

func getCertificate(ctx context.Context, ns, name string) *cmapi.Certificate {
	GinkgoHelper()
	c := &cmapi.Certificate{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, c)).To(Succeed())
	return c
}

func issuing(ctx context.Context, ns, name string) *cmapi.CertificateCondition {
	for _, c := range getCertificate(ctx, ns, name).Status.Conditions {
		if c.Type == cmapi.CertificateConditionIssuing {
			return &c
		}
	}
	return nil
}

func createPolicy(ctx context.Context, name string, spec v1alpha1.CertificatePolicySpec) *v1alpha1.CertificatePolicy {
	GinkgoHelper()
	p := &v1alpha1.CertificatePolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	Expect(k8s.Create(ctx, p)).To(Succeed())
	DeferCleanup(func(ctx context.Context) { _ = k8s.Delete(ctx, p) })
	return p
}

func getPolicy(ctx context.Context, name string) *v1alpha1.CertificatePolicy {
	GinkgoHelper()
	p := &v1alpha1.CertificatePolicy{}
	Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, p)).To(Succeed())
	return p
}

func patchPolicy(ctx context.Context, name string, mutate func(*v1alpha1.CertificatePolicy)) {
	GinkgoHelper()
	Expect(testenv.Update(ctx, k8s, &v1alpha1.CertificatePolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}, mutate)).To(Succeed())
}

// poke makes the controller look at a policy now, as its own requeue would
// once the fake clock's time comes in real time.
func poke(ctx context.Context, name string) {
	GinkgoHelper()
	patchPolicy(ctx, name, func(p *v1alpha1.CertificatePolicy) {
		p.Annotations["test.ringmaster.io/poke"] = fmt.Sprint(time.Now().UnixNano())
	})
}

// counts is what a policy's status counts.
type counts struct{ Evaluated, Compliant, Violating int32 }

func countsOf(ctx context.Context, name string) counts {
	s := getPolicy(ctx, name).Status
	return counts{s.Evaluated, s.Compliant, s.Violating}
}

func waitCounts(ctx context.Context, name string, want counts) {
	GinkgoHelper()
	Eventually(func() counts { return countsOf(ctx, name) }, timeout, poll).Should(Equal(want))
}

func condition(p *v1alpha1.CertificatePolicy, typ string) *metav1.Condition {
	return meta.FindStatusCondition(p.Status.Conditions, typ)
}

// violation is a status violation without its message.
type violation struct{ Kind, Namespace, Name, Rule string }

func violationsOf(p *v1alpha1.CertificatePolicy) []violation {
	out := []violation{}
	for _, v := range p.Status.Violations {
		out = append(out, violation{string(v.Kind), v.Namespace, v.Name, v.Rule})
	}
	return out
}

// eventsAbout lists the events whose regarding object has this name, in any
// namespace (a cluster-scoped policy's events go to "default").
func eventsAbout(ctx context.Context, kind, name string) []eventsv1.Event {
	list := &eventsv1.EventList{}
	Expect(k8s.List(ctx, list)).To(Succeed())
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == kind && e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// metric reads one series from the suite's registry; ok is false when the
// series does not exist.
func metric(name string, labels map[string]string) (value float64, ok bool) {
	GinkgoHelper()
	v, ok, err := testenv.Metric(registry, name, labels)
	Expect(err).NotTo(HaveOccurred())
	return v, ok
}

func metricValue(name string, labels map[string]string) float64 {
	GinkgoHelper()
	v, ok := metric(name, labels)
	Expect(ok).To(BeTrue(), "no series %s%v", name, labels)
	return v
}

func evaluations() float64 {
	GinkgoHelper()
	return metricValue("ringmaster_certificatepolicy_evaluations_total", nil)
}

func statusWrites() float64 {
	GinkgoHelper()
	return metricValue("ringmaster_certificatepolicy_status_writes_total", nil)
}

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
