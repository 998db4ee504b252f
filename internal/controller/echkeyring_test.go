//go:build integration

package controller_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/agentstatus"
	"github.com/ringmaster-io/ringmaster/internal/echring"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/testing/knot"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
)

// ECHKeyRings against the real API server and a real authoritative DNS
// server (Debian's knotd on loopback, updated with TSIG). Each replica is
// a stand-in for a pod's agent: its status port reports the ECH configs of
// the projection the spec last delivered to it, as pkg/agent's does.

// echReplica is one pod of an ECH fleet.
type echReplica struct {
	name   string
	status atomic.Pointer[agentstatus.Status]
}

// newECHReplica starts a replica holding nothing yet and the ready Pod,
// labelled app=web and mounting Secret web-ech-keys, that stands for it.
func newECHReplica(ctx context.Context, ns, name string) *echReplica {
	GinkgoHelper()
	r := &echReplica{name: name}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		st := r.status.Load()
		if st == nil {
			http.Error(w, "no ring yet", http.StatusServiceUnavailable)
			return
		}
		_ = json.NewEncoder(w).Encode(st)
	}))
	DeferCleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	createPod(ctx, ns, name, p, "web-ech-keys")
	return r
}

// deliver hands the replica the projection's echkeys.json, as the kubelet
// and the agent would.
func (r *echReplica) deliver(projection *corev1.Secret) {
	GinkgoHelper()
	ring := decodeECH(projection)
	st := &agentstatus.Status{ECH: &agentstatus.ECHStatus{Ring: ring.Ring, Epoch: ring.Epoch}}
	for _, c := range ring.Configs {
		st.ECH.Configs = append(st.ECH.Configs, agentstatus.ECHConfigStatus{ID: c.ID, State: string(c.State), Retry: c.State == echring.Published, ExpiresAt: c.ExpiresAt})
	}
	r.status.Store(st)
}

func decodeECH(s *corev1.Secret) echring.Ring {
	GinkgoHelper()
	r, err := echring.Decode(s.Data[echring.FileName])
	Expect(err).NotTo(HaveOccurred())
	seenMu.Lock()
	defer seenMu.Unlock()
	for _, c := range r.Configs {
		var k keyring.Secret
		if len(c.PrivateKey) == len(k) {
			copy(k[:], c.PrivateKey)
			seen[k] = true // AfterSuite finds no private key in the log
		}
	}
	return r
}

// echSpec is a ring publishing www.example.test through zone, with an
// hourly rotation, a 5m delivery delay, a 300s TTL and a 10m margin,
// confirmed by the pods labelled app=web within 10m.
func echSpec(zone string) v1alpha1.ECHKeyRingSpec {
	return v1alpha1.ECHKeyRingSpec{
		PublicName:       "public.example.test",
		RotationInterval: metav1.Duration{Duration: time.Hour},
		DeliveryDelay:    metav1.Duration{Duration: 5 * time.Minute},
		RetirementMargin: metav1.Duration{Duration: 10 * time.Minute},
		RetainedConfigs:  1,
		Confirmation: v1alpha1.Confirmation{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Port:        intstr.FromString("status"),
			Timeout:     metav1.Duration{Duration: 10 * time.Minute},
		},
		DNS: v1alpha1.ECHDNS{ZoneRef: v1alpha1.DNSZoneReference{Name: zone}, Name: "www.example.test", TTL: 300},
	}
}

// createZone creates a ClusterDNSZone for the knot server, allowing
// www.example.test to namespace ns, with its TSIG Secret in the operator's
// namespace.
func createZone(ctx context.Context, ns string, srv *knot.Server) string {
	GinkgoHelper()
	name := "zone-" + ns
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testenv.Namespace, Name: name + "-tsig"}, Data: map[string][]byte{
		"name": []byte(srv.Key.Name), "algorithm": []byte(srv.Key.Algorithm), "secret": []byte(base64.StdEncoding.EncodeToString(srv.Key.Secret)),
	}}
	Expect(k8s.Create(ctx, secret)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { _ = k8s.Delete(ctx, secret) })
	z := &v1alpha1.ClusterDNSZone{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.ClusterDNSZoneSpec{
		Zone: "example.test", Primary: srv.Addr, TSIGSecretRef: &v1alpha1.SecretReference{Name: secret.Name},
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
		AllowedNames:      []string{"www.example.test"},
	}}
	Expect(k8s.Create(ctx, z)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { _ = k8s.Delete(ctx, z) })
	return name
}

func getECH(ctx context.Context, ring *v1alpha1.ECHKeyRing) *v1alpha1.ECHKeyRing {
	GinkgoHelper()
	got := &v1alpha1.ECHKeyRing{}
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(ring), got)).To(Succeed())
	return got
}

func pokeECH(ctx context.Context, ring *v1alpha1.ECHKeyRing) {
	GinkgoHelper()
	Expect(testenv.Update(ctx, k8s, &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ring.Namespace, Name: ring.Name}}, func(r *v1alpha1.ECHKeyRing) {
		r.Annotations["test.ringmaster.io/poke"] = fmt.Sprint(time.Now().UnixNano())
	})).To(Succeed())
}

// echAnswer is the ech SvcParam of www.example.test's HTTPS record as the
// server answers it (nil without one), and the record's other params.
func echAnswer(ctx context.Context, srv *knot.Server) ([]byte, string) {
	GinkgoHelper()
	rrs, err := srv.Query(ctx, "www.example.test.", dns.TypeHTTPS)
	Expect(err).NotTo(HaveOccurred())
	Expect(rrs).To(HaveLen(1))
	var list []byte
	var others []string
	for _, kv := range rrs[0].(*dns.HTTPS).Value {
		if e, ok := kv.(*dns.SVCBECHConfig); ok {
			list = e.ECH
			continue
		}
		others = append(others, kv.Key().String()+"="+kv.String())
	}
	return list, fmt.Sprint(others)
}

// configState is "id:state" of each config in a ring's status.
func configStates(ring *v1alpha1.ECHKeyRing) []string {
	var out []string
	for _, c := range ring.Status.Configs {
		out = append(out, fmt.Sprintf("%d:%s", c.ID, c.State))
	}
	return out
}

var _ = Describe("ECHKeyRing", func() {
	var (
		ctx context.Context
		ns  string
	)
	BeforeEach(func() {
		ctx = context.Background()
		ns = newNamespace(ctx)
	})

	It("publishes each config to DNS once every pod holds it or at its ceiling, retires the one it replaces, and keeps everything while DNS is down", func() {
		srv := knot.Run(GinkgoT(), "example.test.", knot.Key{})
		_, params := echAnswer(ctx, srv)
		zone := createZone(ctx, ns, srv)
		a, b := newECHReplica(ctx, ns, "web-a"), newECHReplica(ctx, ns, "web-b")
		spec := echSpec(zone)
		spec.Confirmation.MaxDelay = &metav1.Duration{Duration: 20 * time.Minute}
		// The life of every config: deliveryDelay + rotationInterval + 2 x
		// maxDelay + ttl + retirementMargin.
		life := 5*time.Minute + time.Hour + 40*time.Minute + 5*time.Minute + 10*time.Minute
		ring := &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Annotations: map[string]string{}}, Spec: spec}
		Expect(k8s.Create(ctx, ring)).To(Succeed())
		projection := func() *corev1.Secret { return getSecret(ctx, ns, "web-ech-keys") }
		states := func() []string { return configStates(getECH(ctx, ring)) }
		answer := func() []byte { l, _ := echAnswer(ctx, srv); return l }

		By("the first config is staged and delivered, and stays out of DNS")
		Eventually(states, timeout, poll).Should(Equal([]string{"1:staged"}))
		snap := getSecret(ctx, ns, "web-ech-e1")
		Expect(snap.Immutable).To(HaveValue(BeTrue()))
		Expect(snap.Type).To(BeEquivalentTo("ringmaster.io/ticket-keys"))
		Expect(snap.Labels).To(HaveKeyWithValue(v1alpha1.ECHRingLabel, "web"))
		Expect(metav1.IsControlledBy(snap, getECH(ctx, ring))).To(BeTrue())
		e1 := decodeECH(projection())
		Expect(e1.Ring).To(Equal(ns + "/web"))
		c1 := e1.Configs[0]
		Expect(c1.ExpiresAt).To(BeTemporally("==", c1.CreatedAt.Add(life)), "a staged config expires by the pods' clocks")
		Expect(getECH(ctx, ring).Status.Configs[0].ExpiresAt).To(HaveField("Time", BeTemporally("==", c1.ExpiresAt)))
		Expect(readyReason(getECH(ctx, ring).Status.Conditions)).To(Equal(v1alpha1.ReasonAwaitingDNS))
		Expect(answer()).To(BeNil())

		By("delivered to every pod and past the delivery delay: published, and DNS answers it")
		a.deliver(projection())
		b.deliver(projection())
		fakeClock.Step(5 * time.Minute)
		pokeECH(ctx, ring)
		Eventually(states, timeout, poll).Should(Equal([]string{"1:published"}))
		Expect(answer()).To(Equal(echring.ConfigList([]echring.Config{c1})))
		_, after := echAnswer(ctx, srv)
		Expect(after).To(Equal(params), "the record's other parameters are kept")
		got := getECH(ctx, ring)
		Expect(readyReason(got.Status.Conditions)).To(Equal(v1alpha1.ReasonPublished))
		Expect(got.Status.PublishedConfig).To(HaveValue(BeEquivalentTo(1)))
		Expect(got.Status.Configs[0].PublishedAt).NotTo(BeNil())
		Expect(got.Status.DNSVerifiedAt).NotTo(BeNil())

		By("another system dropping the ech parameter: the ring writes it back")
		Expect(srv.Replace(ctx, "www", dns.TypeHTTPS, knot.DefaultRecords[0])).To(Succeed())
		Expect(answer()).To(BeNil())
		pokeECH(ctx, ring)
		Eventually(answer, timeout, poll).Should(Equal(echring.ConfigList([]echring.Config{c1})))

		By("deliveryDelay before the next rotation, the next config is staged; a lagging pod holds its publication back")
		fakeClock.Step(55 * time.Minute)
		pokeECH(ctx, ring)
		Eventually(states, timeout, poll).Should(Equal([]string{"2:staged", "1:published"}))
		a.deliver(projection())
		c2 := decodeECH(projection()).Configs[0]
		Expect(c2.ID).To(BeEquivalentTo(2))
		fakeClock.Step(5 * time.Minute)
		pokeECH(ctx, ring)
		Eventually(func() *v1alpha1.ConfirmationStatus { return getECH(ctx, ring).Status.Confirmation }, timeout, poll).Should(And(Not(BeNil()),
			HaveField("StagedKey", "2"), HaveField("Pods", BeEquivalentTo(2)), HaveField("Holding", BeEquivalentTo(1)),
			HaveField("Missing", ConsistOf(HaveField("Name", "web-b")))))
		Consistently(states, 2*time.Second, poll).Should(Equal([]string{"2:staged", "1:published"}))
		Expect(answer()).To(Equal(echring.ConfigList([]echring.Config{c1})))

		By("past the confirmation timeout it is still held back, and the ring says so")
		fakeClock.Step(11 * time.Minute)
		pokeECH(ctx, ring)
		Eventually(func() bool {
			return meta.IsStatusConditionTrue(getECH(ctx, ring).Status.Conditions, v1alpha1.ConditionConfirmationOverdue)
		}, timeout, poll).Should(BeTrue())
		Expect(meta.FindStatusCondition(getECH(ctx, ring).Status.Conditions, v1alpha1.ConditionConfirmationOverdue).Message).To(ContainSubstring("web-b"))
		Eventually(warnings(ctx, ns, v1alpha1.ReasonAwaitingPods), timeout, poll).ShouldNot(BeEmpty())
		Expect(states()).To(Equal([]string{"2:staged", "1:published"}))
		Expect(answer()).To(Equal(echring.ConfigList([]echring.Config{c1})))

		By("at the ceiling, maxDelay past its due time, config 2 is published unconfirmed and the ring names the pod that lacked it")
		fakeClock.Step(10 * time.Minute)
		pokeECH(ctx, ring)
		Eventually(states, timeout, poll).Should(Equal([]string{"2:published", "1:retired"}))
		Expect(answer()).To(Equal(echring.ConfigList([]echring.Config{c2})))
		got = getECH(ctx, ring)
		Expect(meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionConfirmationOverdue)).To(And(
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", v1alpha1.ReasonPublishedUnconfirmed), HaveField("Message", ContainSubstring("web-b"))))
		Eventually(warnings(ctx, ns, v1alpha1.ReasonPublishedUnconfirmed), timeout, poll).Should(ContainElement(HaveField("Note", ContainSubstring("web-b"))))

		By("config 1 retires for the TTL plus the margin, within the life it was minted with")
		retired := got.Status.Configs[1]
		Expect(retired.ExpiresAt.Time).To(BeTemporally("==", retired.RetiredAt.Add(15*time.Minute)))
		Expect(retired.ExpiresAt.Time).To(BeTemporally("<=", c1.ExpiresAt))
		Expect(got.Status.Configs[0].ExpiresAt).To(HaveField("Time", BeTemporally("==", c2.CreatedAt.Add(life))))
		b.deliver(projection())

		By("DNS down: a retired config still expires on time, the published one stays, nothing new is published")
		Expect(srv.Stop()).To(Succeed())
		fakeClock.Step(15 * time.Minute)
		pokeECH(ctx, ring)
		Eventually(states, timeout, poll).Should(Equal([]string{"2:published"}))
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-ech-e1"}, &corev1.Secret{}))
		}, timeout, poll).Should(BeTrue(), "the snapshot holding the destroyed config is deleted")
		Eventually(func() string { return readyReason(getECH(ctx, ring).Status.Conditions) }, timeout, poll).Should(Equal(v1alpha1.ReasonDNSUnavailable))
		fakeClock.Step(45 * time.Minute)
		pokeECH(ctx, ring)
		Eventually(states, timeout, poll).Should(Equal([]string{"3:staged", "2:published"}))
		a.deliver(projection())
		b.deliver(projection())
		fakeClock.Step(5 * time.Minute)
		pokeECH(ctx, ring)
		Eventually(func() *v1alpha1.ConfirmationStatus { return getECH(ctx, ring).Status.Confirmation }, timeout, poll).Should(And(Not(BeNil()),
			HaveField("StagedKey", "3"), HaveField("Holding", BeEquivalentTo(2))))
		pokeECH(ctx, ring)
		Consistently(states, 3*time.Second, poll).Should(Equal([]string{"3:staged", "2:published"}))
		Expect(meta.FindStatusCondition(getECH(ctx, ring).Status.Conditions, v1alpha1.ConditionReady)).To(And(
			HaveField("Reason", v1alpha1.ReasonDNSUnavailable), HaveField("Message", ContainSubstring("Nothing new is published"))))
		Eventually(warnings(ctx, ns, v1alpha1.ReasonDNSUnavailable), timeout, poll).ShouldNot(BeEmpty())

		By("DNS back: config 3 is published")
		Expect(srv.Restart(ctx)).To(Succeed())
		pokeECH(ctx, ring)
		Eventually(states, timeout, poll).Should(Equal([]string{"3:published", "2:retired"}))
		Expect(answer()).To(Equal(echring.ConfigList([]echring.Config{decodeECH(projection()).Configs[0]})))
		Expect(bytes.Contains(getSecret(ctx, ns, "web-ech-keys").Data[echring.FileName], c1.Config)).To(BeFalse(), "config 1 is gone from the projection")

		By("the zone deleted: the ring is refused, and its retired config still expires on time")
		Expect(k8s.Delete(ctx, &v1alpha1.ClusterDNSZone{ObjectMeta: metav1.ObjectMeta{Name: zone}})).To(Succeed())
		Eventually(func() string { return readyReason(getECH(ctx, ring).Status.Conditions) }, timeout, poll).Should(Equal(v1alpha1.ReasonDNSZoneNotFound))
		fakeClock.Step(15 * time.Minute)
		pokeECH(ctx, ring)
		Eventually(states, timeout, poll).Should(Equal([]string{"3:published"}))
		Expect(readyReason(getECH(ctx, ring).Status.Conditions)).To(Equal(v1alpha1.ReasonDNSZoneNotFound))
	})

	It("in a verify-only zone, advances only once another system publishes what it asks for", func() {
		srv := knot.Run(GinkgoT(), "example.test.", knot.Key{})
		z := &v1alpha1.ClusterDNSZone{ObjectMeta: metav1.ObjectMeta{Name: "verify-" + ns}, Spec: v1alpha1.ClusterDNSZoneSpec{
			Zone: "example.test", Servers: []string{srv.Addr},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			AllowedNames:      []string{"www.example.test"},
		}}
		Expect(k8s.Create(ctx, z)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { _ = k8s.Delete(ctx, z) })
		a := newECHReplica(ctx, ns, "web-a")
		ring := &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Annotations: map[string]string{}}, Spec: echSpec(z.Name)}
		Expect(k8s.Create(ctx, ring)).To(Succeed())
		states := func() []string { return configStates(getECH(ctx, ring)) }
		Eventually(states, timeout, poll).Should(Equal([]string{"1:staged"}))
		a.deliver(getSecret(ctx, ns, "web-ech-keys"))
		fakeClock.Step(5 * time.Minute)
		pokeECH(ctx, ring)

		By("confirmed and due, the ring asks for its config in status, and waits: it writes nothing")
		var want string
		Eventually(func() string { want = getECH(ctx, ring).Status.ECHConfigList; return want }, timeout, poll).ShouldNot(BeEmpty())
		c1 := decodeECH(getSecret(ctx, ns, "web-ech-keys")).Configs[0]
		Expect(want).To(Equal(base64.StdEncoding.EncodeToString(echring.ConfigList([]echring.Config{c1}))))
		Consistently(states, 2*time.Second, poll).Should(Equal([]string{"1:staged"}))
		Expect(readyReason(getECH(ctx, ring).Status.Conditions)).To(Equal(v1alpha1.ReasonAwaitingDNS))
		list, _ := echAnswer(ctx, srv)
		Expect(list).To(BeNil())

		By("another system publishes it: the ring sees it and calls it published")
		Expect(srv.Replace(ctx, "www", dns.TypeHTTPS, knot.DefaultRecords[0]+" ech="+want)).To(Succeed())
		pokeECH(ctx, ring)
		Eventually(states, timeout, poll).Should(Equal([]string{"1:published"}))
		Expect(readyReason(getECH(ctx, ring).Status.Conditions)).To(Equal(v1alpha1.ReasonPublished))
	})

	It("refuses a name its zone does not allow", func() {
		srv := knot.Run(GinkgoT(), "example.test.", knot.Key{})
		zone := createZone(ctx, ns, srv)
		spec := echSpec(zone)
		spec.DNS.Name = "shop.example.test"
		ring := &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: spec}
		Expect(k8s.Create(ctx, ring)).To(Succeed())
		Eventually(func() string { return readyReason(getECH(ctx, ring).Status.Conditions) }, timeout, poll).Should(Equal(v1alpha1.ReasonDNSNameNotAllowed))
		Eventually(warnings(ctx, ns, v1alpha1.ReasonDNSNameNotAllowed), timeout, poll).ShouldNot(BeEmpty())
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-ech-e1"}, &corev1.Secret{}))).To(BeTrue(), "nothing is minted")
	})

	DescribeTable("the API server rejects an invalid ECHKeyRing",
		func(mutate func(*v1alpha1.ECHKeyRingSpec), message string) {
			spec := echSpec("zone")
			mutate(&spec)
			err := k8s.Create(ctx, &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad"}, Spec: spec})
			Expect(err).To(HaveOccurred())
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("a rotation under 10s", func(s *v1alpha1.ECHKeyRingSpec) { s.RotationInterval.Duration = 9 * time.Second },
			"rotationInterval must be at least 10s"),
		Entry("a delivery delay as long as the rotation", func(s *v1alpha1.ECHKeyRingSpec) { s.DeliveryDelay.Duration = time.Hour },
			"deliveryDelay must be less than rotationInterval"),
		Entry("retired configs outlived by DNS caches", func(s *v1alpha1.ECHKeyRingSpec) {
			s.RotationInterval.Duration, s.DNS.TTL, s.RetirementMargin.Duration = 10*time.Minute, 600, 5*time.Minute
		}, "retainedConfigs x rotationInterval must be at least dns.ttl + retirementMargin"),
		Entry("more live configs than a ring holds", func(s *v1alpha1.ECHKeyRingSpec) { s.RetainedConfigs = 3 },
			"spec.retainedConfigs in body should be less than or equal to 2"),
		Entry("a key living past 30 days", func(s *v1alpha1.ECHKeyRingSpec) { s.RotationInterval.Duration = 720 * time.Hour },
			"deliveryDelay + rotationInterval + 2 x confirmation.maxDelay (or confirmation.timeout when maxDelay is omitted) + dns.ttl + retirementMargin must not exceed 720h"),
		Entry("a confirmation ceiling stretching a key past 30 days", func(s *v1alpha1.ECHKeyRingSpec) {
			s.RotationInterval.Duration, s.Confirmation.MaxDelay = 600*time.Hour, &metav1.Duration{Duration: 61 * time.Hour}
		}, "2 x confirmation.maxDelay (or confirmation.timeout when maxDelay is omitted) + dns.ttl + retirementMargin must not exceed 720h"),
		Entry("a confirmation timeout stretching a key past 30 days", func(s *v1alpha1.ECHKeyRingSpec) {
			s.RotationInterval.Duration, s.Confirmation.Timeout.Duration = 600*time.Hour, 61*time.Hour
		}, "2 x confirmation.maxDelay (or confirmation.timeout when maxDelay is omitted) + dns.ttl + retirementMargin must not exceed 720h"),
		Entry("publishing unconfirmed", func(s *v1alpha1.ECHKeyRingSpec) { s.Confirmation.OnTimeout = v1alpha1.ConfirmationPromote },
			"spec.confirmation.onTimeout must be Wait"),
		Entry("voters of other namespaces", func(s *v1alpha1.ECHKeyRingSpec) { s.Confirmation.VoterNamespaceSelector = &metav1.LabelSelector{} },
			"an ECHKeyRing's voters are in its own namespace"),
		Entry("a public name of one label", func(s *v1alpha1.ECHKeyRingSpec) { s.PublicName = "localhost" },
			"spec.publicName in body should match"),
		Entry("an unknown KEM", func(s *v1alpha1.ECHKeyRingSpec) { s.KEM = "X448" },
			`spec.kem: Unsupported value: "X448"`),
		Entry("a name past the ECHConfig's limit", func(s *v1alpha1.ECHKeyRingSpec) { s.MaxNameLength = 256 },
			"spec.maxNameLength in body should be less than or equal to 255"),
		Entry("a TTL over a day", func(s *v1alpha1.ECHKeyRingSpec) { s.DNS.TTL = 86401 },
			"spec.dns.ttl in body should be less than or equal to 86400"),
		Entry("a projection named like a snapshot", func(s *v1alpha1.ECHKeyRingSpec) { s.Distribution.SecretName = "web-ech-e3" },
			"secretName may not end in -e<number>"),
	)
})
