//go:build integration

package controller_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest/komega"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
)

const (
	timeout = 20 * time.Second
	poll    = 100 * time.Millisecond
)

func defaultSpec() v1alpha1.TicketKeyRingSpec {
	return v1alpha1.TicketKeyRingSpec{
		RotationInterval: metav1.Duration{Duration: time.Hour},
		RetainedKeys:     3,
		ActivationDelay:  metav1.Duration{Duration: 3 * time.Minute},
		Distribution:     v1alpha1.Distribution{Formats: []v1alpha1.KeyFormat{"go"}},
	}
}

func newNamespace(ctx context.Context) string {
	n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "tkr-"}}
	Expect(k8s.Create(ctx, n)).To(Succeed())
	return n.Name
}

func createRing(ctx context.Context, ns, name string, mutate func(*v1alpha1.TicketKeyRing)) *v1alpha1.TicketKeyRing {
	ring := &v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{}}, Spec: defaultSpec()}
	if mutate != nil {
		mutate(ring)
	}
	Expect(k8s.Create(ctx, ring)).To(Succeed())
	return ring
}

func getRing(ctx context.Context, ring *v1alpha1.TicketKeyRing) *v1alpha1.TicketKeyRing {
	got := &v1alpha1.TicketKeyRing{}
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(ring), got)).To(Succeed())
	return got
}

func patchRing(ctx context.Context, ring *v1alpha1.TicketKeyRing, mutate func(*v1alpha1.TicketKeyRing)) {
	GinkgoHelper()
	Expect(testenv.Update(ctx, k8s, &v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ring.Namespace, Name: ring.Name}}, mutate)).To(Succeed())
}

// poke makes the controller reconcile now, as its own requeue would once
// the fake clock's time arrives in real time.
func poke(ctx context.Context, ring *v1alpha1.TicketKeyRing) {
	patchRing(ctx, ring, func(r *v1alpha1.TicketKeyRing) {
		r.Annotations["test.ringmaster.io/poke"] = fmt.Sprint(time.Now().UnixNano())
	})
}

func requestRotation(ctx context.Context, ring *v1alpha1.TicketKeyRing, at string) {
	patchRing(ctx, ring, func(r *v1alpha1.TicketKeyRing) { r.Annotations[v1alpha1.RotateRequestedAtAnnotation] = at })
}

func waitEpoch(ctx context.Context, ring *v1alpha1.TicketKeyRing, epoch int64) {
	GinkgoHelper()
	got := &v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ring.Namespace, Name: ring.Name}}
	Eventually(komega.New(k8s).WithContext(ctx).Object(got), timeout, poll).Should(HaveField("Status.Epoch", epoch))
	Eventually(func() string {
		return trySecret(ctx, ring.Namespace, getRing(ctx, ring).ProjectionSecretName()).Annotations[v1alpha1.EpochAnnotation]
	}, timeout, poll).Should(Equal(fmt.Sprint(epoch)))
}

func getSecret(ctx context.Context, ns, name string) *corev1.Secret {
	GinkgoHelper()
	s := &corev1.Secret{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s)).To(Succeed())
	return s
}

func trySecret(ctx context.Context, ns, name string) *corev1.Secret {
	s := &corev1.Secret{}
	_ = k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s)
	return s
}

func decode(s *corev1.Secret) keyring.Ring {
	GinkgoHelper()
	r, err := keyring.Decode(s.Data[keyring.FileName])
	Expect(err).NotTo(HaveOccurred())
	seenMu.Lock()
	defer seenMu.Unlock()
	for _, k := range r.Keys {
		seen[k.Secret] = true
	}
	return r
}

func events(ctx context.Context, ns string) []eventsv1.Event {
	list := &eventsv1.EventList{}
	Expect(k8s.List(ctx, list, client.InNamespace(ns))).To(Succeed())
	return list.Items
}

// gaugeValue reads one ring's series of a gauge from the suite's registry.
func gaugeValue(name, ns, ring string) float64 {
	GinkgoHelper()
	v, ok, err := testenv.Metric(registry, name, map[string]string{"namespace": ns, "name": ring})
	Expect(err).NotTo(HaveOccurred())
	Expect(ok).To(BeTrue(), "no %s series for %s/%s", name, ns, ring)
	return v
}

// readyReason is the reason of an object's Ready condition, or "".
func readyReason(conds []metav1.Condition) string {
	if c := meta.FindStatusCondition(conds, v1alpha1.ConditionReady); c != nil {
		return c.Reason
	}
	return ""
}

func ringReason(ctx context.Context, ring *v1alpha1.TicketKeyRing) func() string {
	return func() string { return readyReason(getRing(ctx, ring).Status.Conditions) }
}

// warnings are the Warning events of a reason in a namespace ("default" for
// cluster-scoped objects).
func warnings(ctx context.Context, ns, reason string) func() []eventsv1.Event {
	return func() []eventsv1.Event {
		var out []eventsv1.Event
		for _, e := range events(ctx, ns) {
			if e.Reason == reason && e.Type == corev1.EventTypeWarning {
				out = append(out, e)
			}
		}
		return out
	}
}

// standinVault answers on loopback, over TLS with a CA of its own, what a
// Vault would to the operator's mints and checks, and can be told to fail
// (answering 503, as a sealed Vault does) or to hang (never answering a
// mint). The specs about Vault itself use a real one (vault_test.go).
type standinVault struct {
	URL string
	CA  []byte

	fail     atomic.Bool
	hang     atomic.Bool
	short    atomic.Bool  // answers 5 random bytes, not 32
	inflight atomic.Int64 // mints the server holds while hanging
	mints    atomic.Int64
	release  chan struct{}
}

const standinToken = "s.standin-token"

func newStandinVault() *standinVault {
	GinkgoHelper()
	v := &standinVault{release: make(chan struct{})}
	ca, err := testpki.NewCA("stand-in Vault CA")
	Expect(err).NotTo(HaveOccurred())
	leaf, err := ca.Localhost()
	Expect(err).NotTo(HaveOccurred())
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Vault-Token") != standinToken {
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"errors":["permission denied"]}`)
			return
		}
		if v.fail.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"errors":["Vault is sealed"]}`)
			return
		}
		if r.URL.Path == "/v1/auth/token/lookup-self" {
			fmt.Fprint(w, `{"data":{"ttl":3600,"renewable":false}}`)
			return
		}
		if v.hang.Load() {
			v.inflight.Add(1)
			defer v.inflight.Add(-1)
			select {
			case <-v.release:
			case <-r.Context().Done():
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if v.short.Load() {
			fmt.Fprint(w, `{"data":{"random_bytes":"c2hvcnQ="}}`)
			return
		}
		var b [keyring.SecretSize]byte
		_, _ = rand.Read(b[:])
		v.mints.Add(1)
		fmt.Fprintf(w, `{"data":{"random_bytes":%q}}`, base64.StdEncoding.EncodeToString(b[:]))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{leaf.TLS}}
	srv.StartTLS()
	DeferCleanup(func() {
		close(v.release)
		srv.Close()
	})
	v.URL, v.CA = srv.URL, ca.PEM
	return v
}

// createKeySource creates a ClusterKeySource for a Vault at addr that
// trusts ca and logs in with token, both kept in Secrets of the operator's
// namespace. A nil selector allows no TicketKeyRing.
func createKeySource(ctx context.Context, addr string, ca []byte, token string, selector *metav1.LabelSelector) *v1alpha1.ClusterKeySource {
	GinkgoHelper()
	name := fmt.Sprintf("vault-%d", time.Now().UnixNano())
	Expect(k8s.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: testenv.Namespace, Name: name},
		Data:       map[string][]byte{"token": []byte(token), "ca.crt": ca},
	})).To(Succeed())
	cks := &v1alpha1.ClusterKeySource{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ClusterKeySourceSpec{
			NamespaceSelector: selector,
			Vault: &v1alpha1.VaultSource{
				Address:  addr,
				CABundle: &v1alpha1.CABundleSource{SecretKeyRef: &v1alpha1.KeyRef{Name: name, Key: "ca.crt"}},
				Auth:     v1alpha1.VaultAuth{TokenSecretRef: &v1alpha1.KeyRef{Name: name, Key: "token"}},
			},
		},
	}
	Expect(k8s.Create(ctx, cks)).To(Succeed())
	return cks
}

func getKeySource(ctx context.Context, name string) *v1alpha1.ClusterKeySource {
	GinkgoHelper()
	cks := &v1alpha1.ClusterKeySource{}
	Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, cks)).To(Succeed())
	return cks
}

func keySourceReady(ctx context.Context, name string) func() string {
	return func() string {
		c := meta.FindStatusCondition(getKeySource(ctx, name).Status.Conditions, v1alpha1.ConditionReady)
		if c == nil {
			return ""
		}
		return string(c.Status) + " " + c.Reason
	}
}

// allNamespaces is a selector allowing every namespace.
var allNamespaces = &metav1.LabelSelector{}

func sourceRef(name string) *v1alpha1.KeySourceReference {
	return &v1alpha1.KeySourceReference{Name: name}
}
