//go:build e2e

package e2e_test

import (
	"context"
	"crypto/tls"
	"errors"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/agentstatus"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
	"github.com/ringmaster-io/ringmaster/internal/testing/knot"
)

// The frozen pod: a replica whose volume stops updating just after the
// epoch that stages config N, before the one that publishes it, holds N
// only as staged. Its published config then expires by its own clock, and
// N+1, which it never receives, is published at its ceiling without its
// vote. A client with N+1 from DNS is rejected there, and must be sent
// retry configs (N, which the whole fleet holds) and be accepted on retry.
var _ = Describe("An ECH pod whose volume froze", Ordered, func() {
	const (
		ns, ringName = "ech-frozen", "web"
		interval     = 10 * time.Second
		frozen       = 1 // the replica whose volume freezes
	)
	var (
		f   *fleet.Fleet
		srv *knot.Server
	)
	dumpOnFailure(&f)

	getRing := func(ctx context.Context) *v1alpha1.ECHKeyRing {
		GinkgoHelper()
		r := &v1alpha1.ECHKeyRing{}
		Expect(env.Cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ringName}, r)).To(Succeed())
		return r
	}
	health := func(ctx context.Context, i int) []agentstatus.ECHConfigStatus {
		st, err := fleet.ReadHealth(ctx, statusClient, f.Replicas[i].StatusAddr)
		if err != nil || st.ECH == nil {
			return nil
		}
		return st.ECH.Configs
	}
	stateOf := func(cs []agentstatus.ECHConfigStatus, id uint8) string {
		if i := slices.IndexFunc(cs, func(c agentstatus.ECHConfigStatus) bool { return c.ID == id }); i >= 0 {
			return cs[i].State
		}
		return ""
	}

	BeforeAll(func(ctx SpecContext) {
		srv = knot.Run(GinkgoT(), "frozen.test.", knot.Key{})
		Expect(env.Cluster.CreateNamespace(ctx, ns)).To(Succeed())
		createZone(ctx, srv, ns)
		Expect(env.Cluster.Client.Create(ctx, &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ringName}, Spec: v1alpha1.ECHKeyRingSpec{
			PublicName:       fleet.ServerName,
			RotationInterval: metav1.Duration{Duration: interval},
			DeliveryDelay:    metav1.Duration{Duration: 2 * time.Second},
			RetirementMargin: metav1.Duration{Duration: 2 * time.Second},
			RetainedConfigs:  1,
			Confirmation: v1alpha1.Confirmation{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"fleet": ns}},
				Port:        intstr.FromString(fleet.StatusPort),
				Timeout:     metav1.Duration{Duration: 2 * time.Second},
				MaxDelay:    &metav1.Duration{Duration: 3 * time.Second},
			},
			DNS: v1alpha1.ECHDNS{ZoneRef: v1alpha1.DNSZoneReference{Name: "frozen-test"}, Name: "www.frozen.test", TTL: 2},
		}})).To(Succeed())
		Eventually(func() int64 { return getRing(ctx).Status.Epoch }, time.Minute, 100*time.Millisecond).Should(BeNumerically(">=", 1))
		var err error
		f, err = env.StartFleet(ctx, fleet.Config{Name: ns, Delays: []time.Duration{0, 0}, Namespace: ns, Secret: ringName + "-ech-keys", ECH: true})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(f.Stop)
		Expect(f.RegisterPods(ctx, env.Cluster, ns, map[string]string{"fleet": ns})).To(Succeed())
	}, NodeTimeout(2*time.Minute))

	It("rejects a client with the config published without its vote, with retry configs the client is then accepted under", func(ctx SpecContext) {
		By("freezing a replica's volume once it holds a staged config N beside its published one")
		var n uint8
		Eventually(func() bool {
			cs := health(ctx, frozen)
			i := slices.IndexFunc(cs, func(c agentstatus.ECHConfigStatus) bool { return c.State == "staged" })
			if i < 0 || !slices.ContainsFunc(cs, func(c agentstatus.ECHConfigStatus) bool { return c.State == "published" }) {
				return false
			}
			f.Syncer.Hold(frozen)
			n = cs[i].ID
			return true
		}, 2*time.Minute, 20*time.Millisecond).Should(BeTrue())
		Expect(stateOf(health(ctx, frozen), n)).To(Equal("staged"), "the epoch publishing config %d reached the replica before its volume froze", n)

		By("waiting for N's successor to be published at its ceiling, without the frozen replica")
		var next uint8
		Eventually(func(g Gomega) {
			r := getRing(ctx)
			g.Expect(r.Status.PublishedConfig).NotTo(BeNil())
			id := uint8(*r.Status.PublishedConfig)
			g.Expect(id).NotTo(Equal(n))
			g.Expect(slices.ContainsFunc(r.Status.Configs, func(c v1alpha1.ECHConfigStatus) bool {
				return uint8(c.ID) == n && c.State == v1alpha1.ECHConfigState("retired")
			})).To(BeTrue(), "config %d is not retired yet", n)
			c := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ConditionConfirmationOverdue)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonPublishedUnconfirmed))
			next = id
		}, 3*interval, 100*time.Millisecond).Should(Succeed())
		Expect(stateOf(health(ctx, frozen), next)).To(BeEmpty(), "the frozen replica holds config %d", next)

		By("the frozen replica's published config expires by its own clock, leaving N staged")
		Eventually(func() []agentstatus.ECHConfigStatus { return health(ctx, frozen) }, 2*interval, 100*time.Millisecond).
			Should(And(Not(ContainElement(HaveField("State", "published"))), ContainElement(And(HaveField("ID", n), HaveField("State", "staged"), HaveField("Retry", true)))))

		By("a client with the record's config: accepted by the fresh replica, rejected with retry configs by the frozen one, and accepted on retry")
		list, err := lookupECH(ctx, srv)
		Expect(err).NotTo(HaveOccurred())
		Expect(list).NotTo(BeEmpty())
		fresh := connectECH(ctx, f.Replicas[0].Addr, list)
		Expect(fresh.err).NotTo(HaveOccurred())
		Expect(fresh.accepted).To(BeTrue())
		first := connectECH(ctx, f.Replicas[frozen].Addr, list)
		var rej *tls.ECHRejectionError
		Expect(errors.As(first.err, &rej)).To(BeTrue(), "the frozen replica did not reject config %d with an ECH rejection: %v", next, first.err)
		Expect(rej.RetryConfigList).NotTo(BeEmpty(), "rejected without retry configs")
		for _, addr := range []string{f.Replicas[frozen].Addr, f.Replicas[0].Addr} {
			retried := connectECH(ctx, addr, rej.RetryConfigList)
			Expect(retried.err).NotTo(HaveOccurred())
			Expect(retried.accepted).To(BeTrue(), "the retry with config %d was not accepted at %s", n, addr)
		}
		GinkgoWriter.Printf("frozen pod: config %d staged at the freeze, config %d published unconfirmed; a client with %d rejected by the frozen replica with retry configs, accepted on retry by both replicas\n", n, next, next)
	}, NodeTimeout(3*time.Minute))
})
