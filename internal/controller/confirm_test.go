//go:build integration

package controller_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/testing/atomicdir"
	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

// Confirmed promotion and emergency revoke, with real agents: each replica
// is a pkg/agent serving TLS on loopback, fed the projection by the spec as
// the kubelet would (when the spec decides), and answering the operator on
// its status port; a Pod object stands for it, ready, with that port.

// replica is one server of a fleet.
type replica struct {
	name   string
	path   string
	dir    *atomicdir.Writer
	cert   *testpki.Issued
	agent  atomic.Pointer[agent.Agent]
	config atomic.Pointer[tls.Config] // the agent's, for the TLS listener
	tls    string                     // TLS address
	status string                     // the status port's number
}

var replicaCA = func() *testpki.CA {
	ca, err := testpki.NewCA("replica CA")
	if err != nil {
		panic(err)
	}
	return ca
}()

// newReplica starts a replica that holds no ring yet, and the ready Pod
// that stands for it in ns, labelled app=web and mounting the projection
// Secret of ring web.
func newReplica(ctx context.Context, ns, name string) *replica {
	GinkgoHelper()
	return newReplicaMounting(ctx, ns, name, "web-ticket-keys")
}

// newReplicaMounting is newReplica for a pod that mounts Secret secret.
func newReplicaMounting(ctx context.Context, ns, name, secret string) *replica {
	GinkgoHelper()
	r := &replica{name: name}
	var err error
	r.path = GinkgoT().TempDir()
	r.dir, err = atomicdir.NewWriter(r.path)
	Expect(err).NotTo(HaveOccurred())
	// The agent judges the certificate by the suite's fake clock, which
	// specs run earlier may have moved days ahead of the real one, and the
	// spec's client by the real clock: it is valid by both.
	from, to := time.Now(), fakeClock.Now()
	if to.Before(from) {
		from, to = to, from
	}
	r.cert, err = replicaCA.Issue(testpki.Leaf{DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: from.Add(-time.Hour), NotAfter: to.Add(7 * 24 * time.Hour)})
	Expect(err).NotTo(HaveOccurred())

	// The status port answers 503 until the agent has a ring, as a pod
	// whose agent has not started does.
	status := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if a := r.agent.Load(); a != nil {
			a.StatusHandler().ServeHTTP(w, req)
			return
		}
		http.Error(w, "no ring yet", http.StatusServiceUnavailable)
	}))
	DeferCleanup(status.Close)
	_, r.status, _ = net.SplitHostPort(status.Listener.Addr().String())

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	r.tls = ln.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { fmt.Fprint(w, "ok") }),
		TLSConfig: &tls.Config{GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			if c := r.config.Load(); c != nil {
				return c.GetConfigForClient(hello)
			}
			return nil, fmt.Errorf("replica %s has no ring yet", name)
		}}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	DeferCleanup(srv.Close)

	port, _ := strconv.Atoi(r.status)
	createPod(ctx, ns, name, port, secret)
	return r
}

// createPod creates the ready Pod of a replica: labelled app=web, serving
// the agent's status on port "status", and mounting Secret secret (none
// when empty) through a projected volume beside its certificate.
func createPod(ctx context.Context, ns, name string, port int, secret string) {
	GinkgoHelper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: "node-" + name, Containers: []corev1.Container{{
			Name: "server", Image: "examples/server", Ports: []corev1.ContainerPort{{Name: "status", ContainerPort: int32(port)}},
		}}},
	}
	if secret != "" {
		pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "ticket-keys", MountPath: "/var/run/ringmaster", ReadOnly: true}}
		pod.Spec.Volumes = []corev1.Volume{{Name: "ticket-keys", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: secret}}},
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: name + "-tls"}}},
			},
		}}}}
	}
	Expect(k8s.Create(ctx, pod)).To(Succeed())
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	Expect(k8s.Status().Update(ctx, pod)).To(Succeed())
}

// deliver writes the projection's files into the replica's volume, as the
// kubelet does, and starts its agent on the first delivery.
func (r *replica) deliver(projection *corev1.Secret) {
	GinkgoHelper()
	files := map[string]atomicdir.File{
		corev1.TLSCertKey:       {Data: r.cert.CertPEM},
		corev1.TLSPrivateKeyKey: {Data: r.cert.KeyPEM, Mode: 0o600},
	}
	for k, v := range projection.Data {
		files[k] = atomicdir.File{Data: v}
	}
	Expect(r.dir.Write(files)).To(Succeed())
	want := decode(projection).Epoch
	if r.agent.Load() == nil {
		a, err := agent.New(agent.Options{Dir: r.path, Require: agent.TicketKeys | agent.Certificate, Clock: fakeClock})
		Expect(err).NotTo(HaveOccurred())
		ctx, cancel := context.WithCancel(context.Background())
		go func() { _ = a.Start(ctx) }()
		DeferCleanup(cancel)
		r.config.Store(a.TLSConfig(&tls.Config{}))
		r.agent.Store(a)
	}
	Eventually(func() int64 { return r.agent.Load().Status().Epoch }, timeout, poll).Should(Equal(want), "replica %s takes epoch %d", r.name, want)
}

// dial connects to the replica with the client's session cache and says
// whether the session resumed.
func (r *replica) dial(cache tls.ClientSessionCache) bool {
	GinkgoHelper()
	c, err := tls.Dial("tcp", r.tls, &tls.Config{RootCAs: replicaCA.Pool(), ServerName: "localhost", ClientSessionCache: cache, MaxVersion: tls.VersionTLS12})
	Expect(err).NotTo(HaveOccurred())
	defer c.Close()
	return c.ConnectionState().DidResume
}

var _ = Describe("TicketKeyRing confirmed by its fleet", func() {
	var (
		ctx context.Context
		ns  string
	)

	BeforeEach(func() {
		ctx = context.Background()
		ns = newNamespace(ctx)
	})

	// Under Wait, a key waits up to 30m past its due time; under Promote,
	// it activates at the 10m timeout.
	confirmation := func(onTimeout v1alpha1.ConfirmationTimeoutPolicy) func(*v1alpha1.TicketKeyRing) {
		return func(r *v1alpha1.TicketKeyRing) {
			r.Spec.Confirmation = &v1alpha1.Confirmation{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				Port:        intstr.FromString("status"),
				Timeout:     metav1.Duration{Duration: 10 * time.Minute},
				OnTimeout:   onTimeout,
			}
			if onTimeout == v1alpha1.ConfirmationWait {
				r.Spec.Confirmation.MaxDelay = &metav1.Duration{Duration: 30 * time.Minute}
			}
		}
	}
	projection := func() *corev1.Secret { return getSecret(ctx, ns, "web-ticket-keys") }
	confirmationOf := func(ring *v1alpha1.TicketKeyRing) func() *v1alpha1.ConfirmationStatus {
		return func() *v1alpha1.ConfirmationStatus { return getRing(ctx, ring).Status.Confirmation }
	}

	It("promotes a staged key only once a lagging replica holds it, and resumes through it", func() {
		a, b := newReplica(ctx, ns, "web-a"), newReplica(ctx, ns, "web-b")
		ring := createRing(ctx, ns, "web", confirmation(v1alpha1.ConfirmationWait))
		waitEpoch(ctx, ring, 1)
		e1 := decode(projection())
		staged, active := e1.Keys[0], e1.Keys[1]
		due := distribute.Record(getSecret(ctx, ns, "web-e1")).Ring.Due
		Expect(due).To(BeTemporally("==", active.ActiveFrom.Add(time.Hour)))
		Expect(staged.ActiveFrom).To(BeTemporally("==", due.Add(30*time.Minute)), "the staged key is held to its ceiling: no replica activates it sooner by the clock")
		a.deliver(projection())

		By("the staged key falls due while replica b lacks it: it waits, and the active key keeps encrypting")
		fakeClock.Step(time.Hour)
		poke(ctx, ring)
		Eventually(confirmationOf(ring), timeout, poll).Should(And(Not(BeNil()),
			HaveField("Pods", BeEquivalentTo(2)), HaveField("Holding", BeEquivalentTo(1)),
			HaveField("Missing", ConsistOf(And(HaveField("Name", "web-b"), HaveField("Node", "node-web-b")))),
		))
		Consistently(func() int64 { return getRing(ctx, ring).Status.Epoch }, 2*time.Second, poll).Should(BeEquivalentTo(1))
		Expect(getRing(ctx, ring).Status.ActiveKey.ID).To(Equal(active.ID))

		By("past its timeout, the ring says so in a condition, an event and a metric")
		fakeClock.Step(11 * time.Minute)
		poke(ctx, ring)
		Eventually(func() bool {
			return meta.IsStatusConditionTrue(getRing(ctx, ring).Status.Conditions, v1alpha1.ConditionConfirmationOverdue)
		}, timeout, poll).Should(BeTrue())
		Expect(meta.FindStatusCondition(getRing(ctx, ring).Status.Conditions, v1alpha1.ConditionConfirmationOverdue).Message).To(ContainSubstring("web-b"))
		Eventually(warnings(ctx, ns, v1alpha1.ConditionConfirmationOverdue), timeout, poll).Should(HaveLen(1))
		Expect(gaugeValue("ringmaster_ticketkeyring_confirmation_overdue_seconds", ns, "web")).To(BeNumerically(">=", 60))
		Expect(getRing(ctx, ring).Status.Epoch).To(BeEquivalentTo(1))

		By("replica b receives it: the operator sees it and promotes the key at once")
		b.deliver(projection())
		Eventually(func() int64 { return getRing(ctx, ring).Status.Epoch }, timeout, poll).Should(BeEquivalentTo(2))
		e2 := decode(projection())
		Expect(e2.Keys[1].ID).To(Equal(staged.ID))
		Expect(e2.Keys[1].ActiveFrom).To(BeTemporally("==", fakeClock.Now().Truncate(time.Second)), "activated when confirmed")
		Eventually(func() bool {
			return meta.IsStatusConditionFalse(getRing(ctx, ring).Status.Conditions, v1alpha1.ConditionConfirmationOverdue)
		}, timeout, poll).Should(BeTrue())

		By("a ticket under the promoted key, from a replica that took the promotion, resumes on one that has not yet")
		a.deliver(projection())
		Expect(a.agent.Load().Status().ActiveKeyID).To(Equal(staged.ID))
		Expect(b.agent.Load().Status().Epoch).To(BeEquivalentTo(1))
		for range 5 {
			cache := tls.NewLRUClientSessionCache(1)
			Expect(a.dial(cache)).To(BeFalse())
			Expect(b.dial(cache)).To(BeTrue(), "resumed on the lagging replica")
		}
	})

	It("does not wait forever for a lost pod when told to promote at the timeout", func() {
		a := newReplica(ctx, ns, "web-a")
		newReplica(ctx, ns, "web-lost") // never receives anything
		ring := createRing(ctx, ns, "web", confirmation(v1alpha1.ConfirmationPromote))
		waitEpoch(ctx, ring, 1)
		staged := decode(projection()).Keys[0]
		a.deliver(projection())
		fakeClock.Step(time.Hour)
		poke(ctx, ring)
		Eventually(confirmationOf(ring), timeout, poll).Should(And(Not(BeNil()),
			HaveField("Holding", BeEquivalentTo(1)), HaveField("Missing", ConsistOf(HaveField("Name", "web-lost")))))
		Expect(getRing(ctx, ring).Status.Epoch).To(BeEquivalentTo(1))

		fakeClock.Step(10 * time.Minute) // the timeout: the held key activates by the clock
		poke(ctx, ring)
		waitEpoch(ctx, ring, 2)
		e2 := decode(projection())
		Expect(e2.Keys[1].ID).To(Equal(staged.ID))
		Expect(getRing(ctx, ring).Status.ActiveKey.ID).To(Equal(staged.ID))
		Eventually(func() *metav1.Condition {
			return meta.FindStatusCondition(getRing(ctx, ring).Status.Conditions, v1alpha1.ConditionConfirmationOverdue)
		}, timeout, poll).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionFalse), HaveField("Reason", v1alpha1.ReasonActivatedUnconfirmed),
			HaveField("Message", And(ContainSubstring(staged.ID), ContainSubstring("onTimeout Promote"), ContainSubstring(ns+"/web-lost"))),
		))
	})
})

var _ = Describe("Emergency revoke", func() {
	It("destroys every key at once: a ticket issued a second before resumes nowhere, new connections succeed", func() {
		ctx := context.Background()
		ns := newNamespace(ctx)
		a, b := newReplica(ctx, ns, "web-a"), newReplica(ctx, ns, "web-b")
		ring := createRing(ctx, ns, "web", nil)
		waitEpoch(ctx, ring, 1)
		before := decode(getSecret(ctx, ns, "web-ticket-keys"))
		a.deliver(getSecret(ctx, ns, "web-ticket-keys"))
		b.deliver(getSecret(ctx, ns, "web-ticket-keys"))
		old := tls.NewLRUClientSessionCache(1)
		Expect(a.dial(old)).To(BeFalse())
		Expect(b.dial(old)).To(BeTrue(), "the fleet shares its keys")
		// One copy of the old session per replica: a full handshake on one
		// would otherwise replace it before the other is tried.
		session, ok := old.Get("localhost")
		Expect(ok).To(BeTrue())
		oldA, oldB := tls.NewLRUClientSessionCache(1), tls.NewLRUClientSessionCache(1)
		oldA.Put("localhost", session)
		oldB.Put("localhost", session)

		fakeClock.Step(time.Second)
		requested := fakeClock.Now().UTC().Format(time.RFC3339)
		patchRing(ctx, ring, func(r *v1alpha1.TicketKeyRing) { r.Annotations[v1alpha1.RevokeRequestedAtAnnotation] = requested })
		waitEpoch(ctx, ring, 2)
		after := decode(getSecret(ctx, ns, "web-ticket-keys"))
		for _, k := range before.Keys {
			_, held := after.Key(k.ID)
			Expect(held).To(BeFalse(), "revoked key %s is gone", k.ID)
		}
		Expect(after.Keys[1].ActiveFrom).To(BeTemporally("==", fakeClock.Now()), "a fresh key encrypts at once")
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-e1"}, &corev1.Secret{}))
		}, timeout, poll).Should(BeTrue(), "the snapshot holding the revoked keys is deleted")
		got := getRing(ctx, ring)
		Expect(got.Status.LastRevokeRequestedAt).To(Equal(requested))
		Expect(got.Status.Revocations).To(ConsistOf(And(HaveField("RequestedAt", requested), HaveField("Epoch", BeEquivalentTo(2)),
			HaveField("Keys", ConsistOf(before.Keys[0].ID, before.Keys[1].ID)), HaveField("RequestedBy", Not(BeEmpty())))))
		Eventually(warnings(ctx, ns, v1alpha1.ReasonRevoked), timeout, poll).Should(ConsistOf(HaveField("Note", ContainSubstring(requested))))

		By("once delivered, the old ticket resumes on no replica; new sessions work")
		a.deliver(getSecret(ctx, ns, "web-ticket-keys"))
		b.deliver(getSecret(ctx, ns, "web-ticket-keys"))
		Expect(a.dial(oldA)).To(BeFalse(), "the old ticket resumes on a")
		Expect(b.dial(oldB)).To(BeFalse(), "the old ticket resumes on b")
		fresh := tls.NewLRUClientSessionCache(1)
		Expect(b.dial(fresh)).To(BeFalse())
		Expect(a.dial(fresh)).To(BeTrue())

		By("the same request is not carried out twice")
		poke(ctx, ring)
		Consistently(func() int64 { return getRing(ctx, ring).Status.Epoch }, 2*time.Second, poll).Should(BeEquivalentTo(2))
	})
})
