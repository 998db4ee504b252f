//go:build integration

package controller_test

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
)

// The ceiling: a voter that never confirms holds a staged key back by at
// most spec.confirmation.maxDelay past its due time, and no snapshot's times
// imply a key life beyond (retainedKeys+1) x rotationInterval + maxDelay.
// Only pods that mount the ring's projection Secret vote; for a cluster
// ring, only in the namespaces its administrator chose.
// confirmationOf is a confirmation of pods app=web on port "status" with a
// timeout and, when not nil, a maxDelay.
func confirmationOf(timeout time.Duration, maxDelay *metav1.Duration) *v1alpha1.Confirmation {
	return &v1alpha1.Confirmation{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		Port:        intstr.FromString("status"), Timeout: metav1.Duration{Duration: timeout}, MaxDelay: maxDelay,
	}
}

// snapshotRing is the ring a snapshot Secret records, with its held key's
// due time (the ringmaster.io/due annotation).
func snapshotRing(ctx context.Context, ns, name string) keyring.Ring {
	GinkgoHelper()
	rec := distribute.Record(getSecret(ctx, ns, name))
	Expect(rec.Err).NotTo(HaveOccurred())
	return rec.Ring
}

var _ = Describe("A silent voter under spec.confirmation", func() {
	const (
		interval = 10 * time.Minute
		retained = 2
		ceiling  = 5 * time.Minute
	)
	var ctx context.Context
	BeforeEach(func() { ctx = context.Background() })

	schedule := func(spec *v1alpha1.TicketKeyRingSpec) {
		spec.RotationInterval = metav1.Duration{Duration: interval}
		spec.RetainedKeys = retained
		spec.ActivationDelay = metav1.Duration{Duration: time.Minute}
		spec.Confirmation = &v1alpha1.Confirmation{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Port:        intstr.FromString("status"),
			Timeout:     metav1.Duration{Duration: 2 * time.Minute},
			OnTimeout:   v1alpha1.ConfirmationWait,
			MaxDelay:    &metav1.Duration{Duration: ceiling},
		}
	}
	// bounded checks a snapshot's times: the held key activates at most the
	// ceiling past its due time, and no key lives beyond the bound.
	bounded := func(r keyring.Ring) {
		GinkgoHelper()
		Expect(r.Due.IsZero()).To(BeFalse(), "the staged key is held")
		Expect(r.Keys[0].ActiveFrom).To(BeTemporally("==", r.Due.Add(ceiling)), "held to its ceiling, no further")
		for _, k := range r.Keys {
			Expect(k.ExpiresAt.Sub(k.ActiveFrom)).To(BeNumerically("<=", (retained+1)*interval+ceiling), "key %s", k.ID)
		}
	}
	counter := func(ns, name string) float64 {
		GinkgoHelper()
		v, _, err := testenv.Metric(registry, "ringmaster_ticketkeyring_unconfirmed_activations_total", map[string]string{"namespace": ns, "name": name})
		Expect(err).NotTo(HaveOccurred())
		return v
	}

	It("in a TicketKeyRing, activates the staged key by the clock at its ceiling and names the pod that lacked it", func() {
		ns := newNamespace(ctx)
		newReplica(ctx, ns, "web-silent") // mounts web-ticket-keys, never receives it
		createPod(ctx, ns, "web-stranger", 1, "")
		ring := createRing(ctx, ns, "web", func(r *v1alpha1.TicketKeyRing) { schedule(&r.Spec) })
		waitEpoch(ctx, ring, 1)
		e1 := snapshotRing(ctx, ns, "web-e1")
		Expect(decode(getSecret(ctx, ns, "web-ticket-keys")).Keys).To(Equal(e1.Keys), "the pods receive what the snapshot records")
		bounded(e1)
		staged := e1.Keys[0]

		By("due: only the pod that mounts the ring's Secret votes, and it holds the key back")
		fakeClock.Step(interval)
		poke(ctx, ring)
		Eventually(func() *v1alpha1.ConfirmationStatus { return getRing(ctx, ring).Status.Confirmation }, timeout, poll).Should(And(Not(BeNil()),
			HaveField("Pods", BeEquivalentTo(1)), HaveField("Holding", BeEquivalentTo(0)),
			HaveField("Missing", ConsistOf(HaveField("Name", "web-silent")))))
		Consistently(func() int64 { return getRing(ctx, ring).Status.Epoch }, time.Second, poll).Should(BeEquivalentTo(1))

		By("at the ceiling: the key activated by every pod's clock; the ring says which pod lacked it")
		fakeClock.Step(ceiling)
		poke(ctx, ring)
		waitEpoch(ctx, ring, 2)
		e2 := snapshotRing(ctx, ns, "web-e2")
		Expect(decode(getSecret(ctx, ns, "web-ticket-keys")).Keys).To(Equal(e2.Keys))
		Expect(e2.Keys[1].ID).To(Equal(staged.ID))
		Expect(e2.Keys[1].ActiveFrom).To(BeTemporally("==", staged.ActiveFrom), "activated at its published ceiling, never pushed further")
		Expect(e2.Keys[1].ActiveFrom.Sub(e1.Due)).To(Equal(ceiling))
		bounded(e2)
		Expect(getRing(ctx, ring).Status.ActiveKey.ID).To(Equal(staged.ID))
		Eventually(func() *metav1.Condition {
			return meta.FindStatusCondition(getRing(ctx, ring).Status.Conditions, v1alpha1.ConditionConfirmationOverdue)
		}, timeout, poll).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionFalse), HaveField("Reason", v1alpha1.ReasonActivatedUnconfirmed),
			HaveField("Message", And(ContainSubstring(staged.ID), ContainSubstring(ns+"/web-silent"), Not(ContainSubstring("web-stranger"))))))
		Eventually(warnings(ctx, ns, v1alpha1.ReasonActivatedUnconfirmed), timeout, poll).Should(ConsistOf(
			HaveField("Note", ContainSubstring(ns+"/web-silent"))))
		Expect(counter(ns, "web")).To(BeEquivalentTo(1))

		By("the next key is held no further than its own ceiling, and the record stays until it falls due")
		poke(ctx, ring)
		Consistently(func() string {
			return meta.FindStatusCondition(getRing(ctx, ring).Status.Conditions, v1alpha1.ConditionConfirmationOverdue).Reason
		}, time.Second, poll).Should(Equal(v1alpha1.ReasonActivatedUnconfirmed))
		Expect(warnings(ctx, ns, v1alpha1.ReasonActivatedUnconfirmed)()).To(HaveLen(1), "one event per activation")
		Expect(counter(ns, "web")).To(BeEquivalentTo(1))
	})

	It("in a ClusterTicketKeyRing, counts only the namespaces its administrator lets vote", func() {
		tier := fmt.Sprintf("ceiling-%d", time.Now().UnixNano())
		labelled := func(labels map[string]string) string {
			GinkgoHelper()
			labels["tier"] = tier
			n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "ctkr-", Labels: labels}}
			Expect(k8s.Create(ctx, n)).To(Succeed())
			return n.Name
		}
		voting, tenant := labelled(map[string]string{"voters": "yes"}), labelled(map[string]string{})
		newReplicaMounting(ctx, voting, "edge-silent", "edge-keys")
		newReplicaMounting(ctx, tenant, "edge-tenant", "edge-keys") // silent too, in a namespace that may not vote

		name := fmt.Sprintf("ceiling-%d", time.Now().UnixNano()%100000)
		c := &v1alpha1.ClusterTicketKeyRing{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}},
			Spec: v1alpha1.ClusterTicketKeyRingSpec{
				TicketKeyRingSpec: defaultSpec(),
				NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": tier}},
			},
		}
		schedule(&c.Spec.TicketKeyRingSpec)
		c.Spec.Distribution.SecretName = "edge-keys"
		c.Spec.Confirmation.VoterNamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"voters": "yes"}}
		Expect(k8s.Create(ctx, c)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(context.Background(), c) })
		get := func() *v1alpha1.ClusterTicketKeyRing {
			GinkgoHelper()
			got := &v1alpha1.ClusterTicketKeyRing{}
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), got)).To(Succeed())
			return got
		}
		poke := func() {
			GinkgoHelper()
			Expect(testenv.Update(ctx, k8s, &v1alpha1.ClusterTicketKeyRing{ObjectMeta: metav1.ObjectMeta{Name: name}}, func(got *v1alpha1.ClusterTicketKeyRing) {
				got.Annotations["test.ringmaster.io/poke"] = fmt.Sprint(time.Now().UnixNano())
			})).To(Succeed())
		}
		projection := func(ns string) func() string {
			return func() string { return trySecret(ctx, ns, "edge-keys").Annotations[v1alpha1.EpochAnnotation] }
		}
		Eventually(projection(voting), timeout, poll).Should(Equal("1"))
		Eventually(projection(tenant), timeout, poll).Should(Equal("1"))
		e1 := snapshotRing(ctx, testenv.Namespace, name+"-ce1")
		Expect(decode(getSecret(ctx, voting, "edge-keys")).Keys).To(Equal(e1.Keys))
		bounded(e1)
		staged := e1.Keys[0]

		By("due: the voting namespace's pod holds the key back; the tenant's pod is not asked")
		fakeClock.Step(interval)
		poke()
		Eventually(func() *v1alpha1.ConfirmationStatus { return get().Status.Confirmation }, timeout, poll).Should(And(Not(BeNil()),
			HaveField("Pods", BeEquivalentTo(1)), HaveField("Holding", BeEquivalentTo(0)),
			HaveField("Missing", ConsistOf(And(HaveField("Namespace", voting), HaveField("Name", "edge-silent"))))))
		Expect(get().Status.Epoch).To(BeEquivalentTo(1))

		By("at the ceiling: activated by the clock in every namespace")
		fakeClock.Step(ceiling)
		poke()
		Eventually(projection(voting), timeout, poll).Should(Equal("2"))
		Eventually(projection(tenant), timeout, poll).Should(Equal("2"))
		e2 := snapshotRing(ctx, testenv.Namespace, name+"-ce2")
		Expect(decode(getSecret(ctx, tenant, "edge-keys")).Keys).To(Equal(e2.Keys))
		Expect(e2.Keys[1].ID).To(Equal(staged.ID))
		Expect(e2.Keys[1].ActiveFrom).To(BeTemporally("==", e1.Due.Add(ceiling)))
		bounded(e2)
		Eventually(func() *metav1.Condition {
			return meta.FindStatusCondition(get().Status.Conditions, v1alpha1.ConditionConfirmationOverdue)
		}, timeout, poll).Should(And(Not(BeNil()), HaveField("Reason", v1alpha1.ReasonActivatedUnconfirmed),
			HaveField("Message", And(ContainSubstring(voting+"/edge-silent"), Not(ContainSubstring(tenant))))))
		Eventually(func() []eventsv1.Event {
			var out []eventsv1.Event
			for _, e := range warnings(ctx, "default", v1alpha1.ReasonActivatedUnconfirmed)() {
				if e.Regarding.Kind == v1alpha1.KindClusterTicketKeyRing && e.Regarding.Name == name {
					out = append(out, e)
				}
			}
			return out
		}, timeout, poll).Should(HaveLen(1))
		Expect(counter("", name)).To(BeEquivalentTo(1))
	})

	DescribeTable("the API server accepts a ring at the edges of the ceiling",
		func(mutate func(*v1alpha1.TicketKeyRingSpec)) {
			ns := newNamespace(ctx)
			spec := defaultSpec()
			schedule(&spec)
			mutate(&spec)
			Expect(k8s.Create(ctx, &v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge"}, Spec: spec})).To(Succeed())
			c := &v1alpha1.ClusterTicketKeyRing{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("edge-%d", time.Now().UnixNano()%100000)},
				Spec: v1alpha1.ClusterTicketKeyRingSpec{TicketKeyRingSpec: spec, NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"none": ns}}}}
			c.Spec.Confirmation.VoterNamespaceSelector = &metav1.LabelSelector{}
			Expect(k8s.Create(ctx, c)).To(Succeed())
			DeferCleanup(func() { _ = k8s.Delete(context.Background(), c) })
		},
		Entry("24h x (6+1) with a ceiling of 0s: 168h exactly", func(s *v1alpha1.TicketKeyRingSpec) {
			s.RotationInterval.Duration, s.RetainedKeys = 24*time.Hour, 6
			s.Confirmation.Timeout.Duration, s.Confirmation.MaxDelay = 0, &metav1.Duration{}
			s.Confirmation.OnTimeout = v1alpha1.ConfirmationPromote
		}),
		Entry("12h x (12+1) + maxDelay 12h: 168h exactly, maxDelay one whole interval", func(s *v1alpha1.TicketKeyRingSpec) {
			s.RotationInterval.Duration, s.RetainedKeys = 12*time.Hour, 12
			s.Confirmation.MaxDelay.Duration = 12 * time.Hour
		}),
		Entry("maxDelay omitted: the timeout is the ceiling, up to one interval", func(s *v1alpha1.TicketKeyRingSpec) {
			s.Confirmation.Timeout.Duration, s.Confirmation.MaxDelay = interval, nil
		}),
		Entry("maxDelay equal to the timeout", func(s *v1alpha1.TicketKeyRingSpec) {
			s.Confirmation.MaxDelay.Duration = s.Confirmation.Timeout.Duration
		}),
	)
})
