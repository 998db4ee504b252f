//go:build integration

package controller_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/miekg/dns"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/dnszone"
	"github.com/ringmaster-io/ringmaster/internal/echring"
	"github.com/ringmaster-io/ringmaster/internal/testing/knot"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
)

// sharedZone creates a ClusterDNSZone for srv allowing www.example.test to
// every namespace given, with its TSIG Secret in the operator's namespace.
func sharedZone(ctx context.Context, name, primary string, key knot.Key, namespaces ...string) *v1alpha1.ClusterDNSZone {
	GinkgoHelper()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testenv.Namespace, Name: name + "-tsig"}, Data: map[string][]byte{
		"name": []byte(key.Name), "algorithm": []byte(key.Algorithm), "secret": []byte(base64.StdEncoding.EncodeToString(key.Secret)),
	}}
	Expect(k8s.Create(ctx, secret)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { _ = k8s.Delete(ctx, secret) })
	z := &v1alpha1.ClusterDNSZone{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.ClusterDNSZoneSpec{
		Zone: "example.test", Primary: primary, TSIGSecretRef: &v1alpha1.SecretReference{Name: secret.Name},
		NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: namespaces}}},
		AllowedNames: []string{"www.example.test"},
	}}
	Expect(k8s.Create(ctx, z)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { _ = k8s.Delete(ctx, z) })
	return z
}

func zoneNames(ctx context.Context, z *v1alpha1.ClusterDNSZone) []v1alpha1.DNSNameOwner {
	got := &v1alpha1.ClusterDNSZone{}
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(z), got)).To(Succeed())
	return got.Status.Names
}

// sampleECH asks srv for www.example.test's ech value every 20 ms until
// the function it returns is called, which returns every distinct value
// seen (nil for none) and how many answers it took.
func sampleECH(srv *knot.Server) func() ([][]byte, int) {
	ctx, cancel := context.WithCancel(context.Background())
	var seen [][]byte
	answers := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if rrs, err := srv.Query(ctx, "www.example.test.", dns.TypeHTTPS); err == nil && len(rrs) == 1 {
				var v []byte
				for _, kv := range rrs[0].(*dns.HTTPS).Value {
					if e, ok := kv.(*dns.SVCBECHConfig); ok {
						v = e.ECH
					}
				}
				answers++
				if !slices.ContainsFunc(seen, func(s []byte) bool { return bytes.Equal(s, v) }) {
					seen = append(seen, v)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return func() ([][]byte, int) { cancel(); <-done; return seen, answers }
}

// dnsRecords are the records of a DNS name: the Leases labelled as such
// in the operator's namespace whose annotation names it.
func dnsRecords(ctx context.Context, name string) []coordinationv1.Lease {
	GinkgoHelper()
	list := &coordinationv1.LeaseList{}
	Expect(k8s.List(ctx, list, client.InNamespace(testenv.Namespace), client.MatchingLabels{v1alpha1.ComponentLabel: v1alpha1.ComponentDNSName})).To(Succeed())
	var out []coordinationv1.Lease
	for _, l := range list.Items {
		if l.Annotations[v1alpha1.DNSNameAnnotation] == name {
			out = append(out, l)
		}
	}
	return out
}

func getZone(ctx context.Context, z *v1alpha1.ClusterDNSZone) *v1alpha1.ClusterDNSZone {
	GinkgoHelper()
	got := &v1alpha1.ClusterDNSZone{}
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(z), got)).To(Succeed())
	return got
}

// silentDNS is a DNS server that takes queries and never answers.
func silentDNS() string {
	GinkgoHelper()
	for range 20 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		Expect(err).NotTo(HaveOccurred())
		l, err := net.Listen("tcp", pc.LocalAddr().String())
		if err != nil {
			_ = pc.Close()
			continue
		}
		var mu sync.Mutex
		var conns []net.Conn
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		}()
		DeferCleanup(func() {
			_ = pc.Close()
			_ = l.Close()
			mu.Lock()
			defer mu.Unlock()
			for _, c := range conns {
				_ = c.Close()
			}
		})
		return pc.LocalAddr().String()
	}
	Fail("no free port for a silent DNS server")
	return ""
}

var _ = Describe("ECHKeyRing names", func() {
	var ctx context.Context
	BeforeEach(func() { ctx = context.Background() })

	It("belong to one ring at a time: a second ring publishes nothing, strips nothing, and takes the name once the owner is deleted and has let it go", func() {
		srv := knot.Run(GinkgoT(), "example.test.", knot.Key{})
		_, params := echAnswer(ctx, srv)
		nsA, nsB := newNamespace(ctx), newNamespace(ctx)
		z := sharedZone(ctx, "shared-"+nsB, srv.Addr, srv.Key, nsA, nsB)
		a := newECHReplica(ctx, nsA, "web-a")
		b := newECHReplica(ctx, nsB, "web-b")
		answer := func() []byte { l, _ := echAnswer(ctx, srv); return l }

		owner := &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "web", Annotations: map[string]string{}}, Spec: echSpec(z.Name)}
		Expect(k8s.Create(ctx, owner)).To(Succeed())
		Eventually(func() []string { return configStates(getECH(ctx, owner)) }, timeout, poll).Should(Equal([]string{"1:staged"}))
		a.deliver(getSecret(ctx, nsA, "web-ech-keys"))
		fakeClock.Step(5 * time.Minute)
		pokeECH(ctx, owner)
		Eventually(func() []string { return configStates(getECH(ctx, owner)) }, timeout, poll).Should(Equal([]string{"1:published"}))
		c1 := decodeECH(getSecret(ctx, nsA, "web-ech-keys")).Configs[0]
		published := echring.ConfigList([]echring.Config{c1})
		Eventually(answer, timeout, poll).Should(Equal(published))
		Expect(getECH(ctx, owner).Finalizers).To(ContainElement(v1alpha1.ECHDNSFinalizer))
		Expect(getECH(ctx, owner).Status.DNSRecord).To(HaveField("ECHConfigList", base64.StdEncoding.EncodeToString(published)))

		By("a second ring in another namespace on the same name: claimed, nothing staged or written, and the owner undisturbed")
		rival := &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: nsB, Name: "web", Annotations: map[string]string{}}, Spec: echSpec(z.Name)}
		rival.Spec.DNS.TTL = 1800
		Expect(k8s.Create(ctx, rival)).To(Succeed())
		Eventually(func() string { return readyReason(getECH(ctx, rival).Status.Conditions) }, timeout, poll).Should(Equal(v1alpha1.ReasonDNSNameClaimed))
		msg := meta.FindStatusCondition(getECH(ctx, rival).Status.Conditions, v1alpha1.ConditionReady).Message
		Expect(msg).To(ContainSubstring(z.Name))
		Expect(msg).NotTo(ContainSubstring(nsA), "the owner's namespace is the administrator's to see")
		Eventually(warnings(ctx, nsB, v1alpha1.ReasonDNSNameClaimed), timeout, poll).ShouldNot(BeEmpty())
		Eventually(func() []v1alpha1.DNSNameOwner { return zoneNames(ctx, z) }, timeout, poll).Should(ConsistOf(And(
			HaveField("Name", "www.example.test"), HaveField("Ring.Namespace", nsA), HaveField("State", v1alpha1.DNSNameOwned), HaveField("Waiting", BeEquivalentTo(1)))))
		for range 3 {
			pokeECH(ctx, rival)
			fakeClock.Step(time.Minute)
		}
		Consistently(answer, 3*time.Second, poll).Should(Equal(published), "the rival never writes or strips the owner's ech")
		rrs, err := srv.Query(ctx, "www.example.test.", 65)
		Expect(err).NotTo(HaveOccurred())
		Expect(rrs[0].Header().Ttl).To(BeEquivalentTo(300), "the rival's TTL is not the record's")
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: nsB, Name: "web-ech-e1"}, &corev1.Secret{})).To(Satisfy(apierrors.IsNotFound), "the rival stages nothing")
		Expect(getECH(ctx, owner).Status.Conditions).To(ContainElement(And(HaveField("Type", v1alpha1.ConditionReady), HaveField("Status", metav1.ConditionTrue))))

		By("the owner deleted while DNS is down: it stays, and says it waits to remove its value")
		Expect(srv.Stop()).To(Succeed())
		Expect(k8s.Delete(ctx, owner)).To(Succeed())
		Eventually(func() string { return readyReason(getECH(ctx, owner).Status.Conditions) }, timeout, poll).Should(Equal(v1alpha1.ReasonDNSNameReleasing))
		Eventually(func() string {
			return meta.FindStatusCondition(getECH(ctx, owner).Status.Conditions, v1alpha1.ConditionReady).Message
		}, timeout, poll).Should(ContainSubstring("being removed from DNS"))
		Consistently(func() error { return k8s.Get(ctx, client.ObjectKeyFromObject(owner), &v1alpha1.ECHKeyRing{}) }, 2*time.Second, poll).Should(Succeed())
		Expect(getSecret(ctx, nsA, "web-ech-keys").Data).To(HaveKey(echring.FileName), "its keys keep decrypting meanwhile")

		By("DNS back: the owner's value, and only it, leaves the record; the name passes on after the TTL and the margin")
		Expect(srv.Restart(ctx)).To(Succeed())
		Eventually(answer, timeout, poll).Should(BeNil())
		_, after := echAnswer(ctx, srv)
		Expect(after).To(Equal(params), "the record's other params are kept")
		Eventually(func() []v1alpha1.DNSNameOwner { return zoneNames(ctx, z) }, timeout, poll).Should(ConsistOf(And(
			HaveField("Ring.Namespace", nsA), HaveField("State", v1alpha1.DNSNameReleasing), HaveField("ReleaseAt", Not(BeNil())))))
		Expect(readyReason(getECH(ctx, rival).Status.Conditions)).To(Equal(v1alpha1.ReasonDNSNameClaimed))
		fakeClock.Step(5*time.Minute + 10*time.Minute + time.Second) // dns.ttl + retirementMargin
		pokeECH(ctx, rival)
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(owner), &v1alpha1.ECHKeyRing{}))
		}, timeout, poll).Should(BeTrue(), "the deleted ring goes once it let its name go")
		Eventually(func() []v1alpha1.DNSNameOwner { return zoneNames(ctx, z) }, timeout, poll).Should(ConsistOf(And(
			HaveField("Ring.Namespace", nsB), HaveField("State", v1alpha1.DNSNameOwned))))
		pokeECH(ctx, rival)
		Eventually(func() []string { return configStates(getECH(ctx, rival)) }, timeout, poll).Should(Equal([]string{"1:staged"}))
		b.deliver(getSecret(ctx, nsB, "web-ech-keys"))
	})

	It("have one owner across every zone that allows them: two zones over one DNS zone and server, one ring each, and the record only ever carries the owner's configs", func() {
		srv := knot.Run(GinkgoT(), "example.test.", knot.Key{})
		nsA, nsB := newNamespace(ctx), newNamespace(ctx)
		// An administrator gives each team a zone object of its own over the
		// same DNS zone and server; their allowedNames overlap on www.
		zA := sharedZone(ctx, "team-a-"+nsA, srv.Addr, srv.Key, nsA)
		zB := sharedZone(ctx, "team-b-"+nsB, srv.Addr, srv.Key, nsB)
		Expect(testenv.Update(ctx, k8s, &v1alpha1.ClusterDNSZone{ObjectMeta: metav1.ObjectMeta{Name: zB.Name}}, func(z *v1alpha1.ClusterDNSZone) {
			z.Spec.AllowedNames = []string{"*.example.test"}
		})).To(Succeed())
		a := newECHReplica(ctx, nsA, "web-a")
		newECHReplica(ctx, nsB, "web-b")

		owner := &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "web", Annotations: map[string]string{}}, Spec: echSpec(zA.Name)}
		Expect(k8s.Create(ctx, owner)).To(Succeed())
		Eventually(func() []coordinationv1.Lease { return dnsRecords(ctx, "www.example.test") }, timeout, poll).Should(ConsistOf(
			HaveField("Spec.HolderIdentity", HaveValue(Equal(nsA+"/web")))))
		rival := &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: nsB, Name: "web", Annotations: map[string]string{}}, Spec: echSpec(zB.Name)}
		rival.Spec.DNS.TTL = 600
		Expect(k8s.Create(ctx, rival)).To(Succeed())

		By("one record of the name, the owner's, through the zone that admitted it; the rival is told the name is claimed")
		Eventually(func() string { return readyReason(getECH(ctx, rival).Status.Conditions) }, timeout, poll).Should(Equal(v1alpha1.ReasonDNSNameClaimed))
		msg := meta.FindStatusCondition(getECH(ctx, rival).Status.Conditions, v1alpha1.ConditionReady).Message
		Expect(msg).To(ContainSubstring(zB.Name))
		Expect(msg).NotTo(ContainSubstring(nsA), "the owner's namespace is the administrator's to see")
		records := dnsRecords(ctx, "www.example.test")
		Expect(records).To(HaveLen(1))
		Expect(records[0].Name).To(Equal(dnszone.LeaseName("www.example.test")))
		Expect(records[0].Labels).To(HaveKeyWithValue(v1alpha1.DNSOwnerUIDLabel, string(getECH(ctx, owner).UID)))
		Expect(records[0].Labels).To(HaveKeyWithValue(v1alpha1.DNSZoneLabel, zA.Name))
		Expect(records[0].Annotations).To(HaveKeyWithValue(v1alpha1.DNSStateAnnotation, string(v1alpha1.DNSNameOwned)))

		By("each zone shows the overlap, its counts and the names owned through it")
		Eventually(func() *v1alpha1.ClusterDNSZoneStatus { return &getZone(ctx, zA).Status }, timeout, poll).Should(And(
			HaveField("NameCounts", HaveValue(Equal(v1alpha1.DNSNameCounts{Owned: 1}))),
			HaveField("Names", ConsistOf(And(HaveField("Name", "www.example.test"), HaveField("Ring.Namespace", nsA),
				HaveField("State", v1alpha1.DNSNameOwned), HaveField("Waiting", BeEquivalentTo(1))))),
			HaveField("Conditions", ContainElement(And(HaveField("Type", v1alpha1.ConditionNamesOverlap), HaveField("Status", metav1.ConditionTrue),
				HaveField("Reason", v1alpha1.ReasonZonesOverlap), HaveField("Message", ContainSubstring(zB.Name)))))))
		Eventually(func() *v1alpha1.ClusterDNSZoneStatus { return &getZone(ctx, zB).Status }, timeout, poll).Should(And(
			HaveField("NameCounts", HaveValue(Equal(v1alpha1.DNSNameCounts{Waiting: 1}))), HaveField("Names", BeEmpty()),
			HaveField("Conditions", ContainElement(And(HaveField("Type", v1alpha1.ConditionNamesOverlap), HaveField("Status", metav1.ConditionTrue),
				HaveField("Message", ContainSubstring(zA.Name)))))))
		for _, z := range []*v1alpha1.ClusterDNSZone{zA, zB} {
			Eventually(func() []eventsv1.Event {
				var out []eventsv1.Event
				for _, e := range warnings(ctx, "default", v1alpha1.ReasonZonesOverlap)() {
					if e.Regarding.Name == z.Name {
						out = append(out, e)
					}
				}
				return out
			}, timeout, poll).Should(HaveLen(1), "one Warning event as %s came to overlap", z.Name)
		}

		By("the owner publishes; over several rotations, with the rival asked to look again throughout, DNS only ever answers the owner's configs")
		states := func() []string { return configStates(getECH(ctx, owner)) }
		projection := func() *corev1.Secret { return getSecret(ctx, nsA, "web-ech-keys") }
		config := func(id uint8) echring.Config {
			GinkgoHelper()
			for _, c := range decodeECH(projection()).Configs {
				if c.ID == id {
					return c
				}
			}
			Fail(fmt.Sprintf("config %d is not in the projection", id))
			return echring.Config{}
		}
		answer := func() []byte { l, _ := echAnswer(ctx, srv); return l }
		Eventually(states, timeout, poll).Should(Equal([]string{"1:staged"}))
		a.deliver(projection())
		fakeClock.Step(5 * time.Minute)
		pokeECH(ctx, owner)
		Eventually(states, timeout, poll).Should(Equal([]string{"1:published"}))
		allowed := [][]byte{echring.ConfigList([]echring.Config{config(1)})}
		Eventually(answer, timeout, poll).Should(Equal(allowed[0]))
		stop := sampleECH(srv)
		for id := uint8(2); id <= 4; id++ {
			fakeClock.Step(55 * time.Minute)
			pokeECH(ctx, owner)
			pokeECH(ctx, rival)
			Eventually(states, timeout, poll).Should(ContainElement(fmt.Sprintf("%d:staged", id)))
			a.deliver(projection())
			allowed = append(allowed, echring.ConfigList([]echring.Config{config(id)}))
			fakeClock.Step(5 * time.Minute)
			pokeECH(ctx, owner)
			pokeECH(ctx, rival)
			Eventually(answer, timeout, poll).Should(Equal(allowed[len(allowed)-1]))
			// The record can answer before the ring's status says so; the
			// next rotation is due from the publication the status records,
			// so the clock moves on only once it is recorded.
			Eventually(states, timeout, poll).Should(ContainElement(fmt.Sprintf("%d:published", id)))
			for range 5 {
				pokeECH(ctx, rival)
				time.Sleep(100 * time.Millisecond)
			}
			Expect(readyReason(getECH(ctx, rival).Status.Conditions)).To(Equal(v1alpha1.ReasonDNSNameClaimed))
		}
		Consistently(answer, 2*time.Second, poll).Should(Equal(allowed[len(allowed)-1]))
		seen, answers := stop()
		Expect(answers).To(BeNumerically(">", 50), "DNS was sampled throughout")
		for _, v := range seen {
			Expect(allowed).To(ContainElement(v), "DNS answered an ech value that is none of the owner's configs")
		}
		rrs, err := srv.Query(ctx, "www.example.test.", dns.TypeHTTPS)
		Expect(err).NotTo(HaveOccurred())
		Expect(rrs[0].Header().Ttl).To(BeEquivalentTo(300), "the rival's TTL is not the record's")
		Expect(getECH(ctx, rival).Status.Configs).To(BeEmpty(), "the rival stages nothing")
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: nsB, Name: "web-ech-e1"}, &corev1.Secret{})).To(Satisfy(apierrors.IsNotFound))
		Expect(getECH(ctx, rival).Finalizers).NotTo(ContainElement(v1alpha1.ECHDNSFinalizer))
		Expect(dnsRecords(ctx, "www.example.test")).To(ConsistOf(HaveField("Spec.HolderIdentity", HaveValue(Equal(nsA+"/web")))))
	})

	It("are recorded, on upgrade, as the zone's status listed them, before any other ring can take them", func() {
		srv := knot.Run(GinkgoT(), "example.test.", knot.Key{})
		nsA, nsB := newNamespace(ctx), newNamespace(ctx)
		By("an operator of before names had records: stopped, its zone's status naming the owner of www")
		// Names are the cluster's: the previous spec's owner has let www go
		// (its zone deleted) before this spec starts.
		Eventually(func() []coordinationv1.Lease { return dnsRecords(ctx, "www.example.test") }, timeout, poll).Should(BeEmpty())
		stopManager()
		running := false
		DeferCleanup(func() {
			if !running {
				startManager()
			}
		})
		z := sharedZone(ctx, "legacy-"+nsA, srv.Addr, srv.Key, nsA, nsB)
		// The rival is older: were the name free, it would take it.
		rival := &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: nsB, Name: "web", Annotations: map[string]string{}}, Spec: echSpec(z.Name)}
		Expect(k8s.Create(ctx, rival)).To(Succeed())
		time.Sleep(1100 * time.Millisecond) // creation times are to the second
		owner := &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "web", Annotations: map[string]string{}}, Spec: echSpec(z.Name)}
		Expect(k8s.Create(ctx, owner)).To(Succeed())
		legacy := getZone(ctx, z)
		legacy.Status.Names = []v1alpha1.DNSNameOwner{{Name: "www.example.test", State: v1alpha1.DNSNameOwned, Since: metav1.NewTime(fakeClock.Now().Add(-time.Hour)),
			Ring: v1alpha1.ECHKeyRingReference{Namespace: nsA, Name: "web", UID: string(getECH(ctx, owner).UID)}}}
		Expect(k8s.Status().Update(ctx, legacy)).To(Succeed())

		By("the operator upgraded: the record says what the status said, the older rival waits, and the zone's status is summarised")
		startManager()
		running = true
		Eventually(func() []coordinationv1.Lease { return dnsRecords(ctx, "www.example.test") }, timeout, poll).Should(ConsistOf(And(
			HaveField("Spec.HolderIdentity", HaveValue(Equal(nsA+"/web"))),
			HaveField("Annotations", HaveKeyWithValue(v1alpha1.DNSZoneAnnotation, z.Name)))))
		Eventually(func() string { return readyReason(getECH(ctx, rival).Status.Conditions) }, timeout, poll).Should(Equal(v1alpha1.ReasonDNSNameClaimed))
		Eventually(func() *v1alpha1.ClusterDNSZoneStatus { return &getZone(ctx, z).Status }, timeout, poll).Should(And(
			HaveField("NameCounts", HaveValue(Equal(v1alpha1.DNSNameCounts{Owned: 1, Waiting: 1}))),
			HaveField("Names", ConsistOf(And(HaveField("Name", "www.example.test"), HaveField("Ring.Namespace", nsA), HaveField("Waiting", BeEquivalentTo(1)))))))
		Eventually(func() []string { return configStates(getECH(ctx, owner)) }, timeout, poll).Should(Equal([]string{"1:staged"}))
		Consistently(func() []coordinationv1.Lease { return dnsRecords(ctx, "www.example.test") }, 2*time.Second, poll).Should(ConsistOf(
			HaveField("Spec.HolderIdentity", HaveValue(Equal(nsA+"/web")))))
		Expect(getECH(ctx, rival).Status.Configs).To(BeEmpty())
	})

	It("refuses a literal wildcard name", func() {
		ns := newNamespace(ctx)
		spec := echSpec("zone")
		spec.DNS.Name = "*.example.test"
		err := k8s.Create(ctx, &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wild"}, Spec: spec})
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("spec.dns.name"))
	})

	It("does its DNS off the reconcile path: a zone whose server never answers delays no other zone's ring, nor a ticket ring's rotate-now", func() {
		srv := knot.Run(GinkgoT(), "example.test.", knot.Key{})
		nsDead, nsLive, nsTickets := newNamespace(ctx), newNamespace(ctx), newNamespace(ctx)
		dead := sharedZone(ctx, "dead-"+nsDead, silentDNS(), srv.Key, nsDead)
		live := sharedZone(ctx, "live-"+nsLive, srv.Addr, srv.Key, nsLive)
		// A name has one owner across zones: the dead zone's rings name
		// names of their own, each its owner, each with DNS work.
		Expect(testenv.Update(ctx, k8s, &v1alpha1.ClusterDNSZone{ObjectMeta: metav1.ObjectMeta{Name: dead.Name}}, func(z *v1alpha1.ClusterDNSZone) {
			z.Spec.AllowedNames = []string{"*.dead.example.test"}
		})).To(Succeed())
		var stuck []*v1alpha1.ECHKeyRing
		for _, name := range []string{"a", "b", "c", "d", "e", "f"} {
			r := &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: nsDead, Name: name, Annotations: map[string]string{}}, Spec: echSpec(dead.Name)}
			r.Spec.DNS.Name = name + ".dead.example.test"
			r.Spec.Distribution.SecretName = "web-ech-keys-" + name
			Expect(k8s.Create(ctx, r)).To(Succeed())
			stuck = append(stuck, r)
		}
		ok := newECHReplica(ctx, nsLive, "web-a")
		ring := &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: nsLive, Name: "web", Annotations: map[string]string{}}, Spec: echSpec(live.Name)}
		Expect(k8s.Create(ctx, ring)).To(Succeed())
		tkr := createRing(ctx, nsTickets, "web", nil)
		waitEpoch(ctx, tkr, 1)

		Eventually(func() []string { return configStates(getECH(ctx, ring)) }, timeout, poll).Should(Equal([]string{"1:staged"}))
		ok.deliver(getSecret(ctx, nsLive, "web-ech-keys"))
		fakeClock.Step(5 * time.Minute)
		for _, r := range stuck {
			pokeECH(ctx, r)
		}
		pokeECH(ctx, ring)
		requestRotation(ctx, tkr, fakeClock.Now().UTC().Format(time.RFC3339))
		Eventually(func() []string { return configStates(getECH(ctx, ring)) }, timeout, poll).Should(Equal([]string{"1:published"}))
		waitEpoch(ctx, tkr, 2)
		for _, r := range stuck {
			Expect(getECH(ctx, r).Status.PublishedConfig).To(BeNil(), "the dead zone's rings publish nothing")
		}
	})
})
