//go:build integration

package controller_test

import (
	"context"
	"fmt"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
)

// hold is a finalizer of someone else's, which any editor of a ring may
// add: it keeps the ring Terminating for as long as its writer likes.
const hold = "example.com/hold"

// shortSpec rotates every 10 minutes and keeps one decrypt-only key: a key
// is active for 10 minutes and expires 10 minutes after it retires.
func shortSpec(s *v1alpha1.TicketKeyRingSpec) {
	s.RotationInterval = metav1.Duration{Duration: 10 * time.Minute}
	s.RetainedKeys = 1
	s.ActivationDelay = metav1.Duration{Duration: time.Minute}
}

// A ring deleted while a finalizer holds it (an orphan delete waiting for
// the garbage collector, another controller's) stays Terminating: no key
// of it may outlive its expiresAt meanwhile, and it publishes nothing new.
var _ = Describe("A ring held Terminating by a finalizer", func() {
	var ctx context.Context
	BeforeEach(func() { ctx = context.Background() })

	It("destroys each key at its expiresAt, mints nothing, says so, and goes with its Secrets once let go", func() {
		ns := newNamespace(ctx)
		ring := createRing(ctx, ns, "held", func(r *v1alpha1.TicketKeyRing) {
			shortSpec(&r.Spec)
			r.Finalizers = []string{hold}
		})
		waitEpoch(ctx, ring, 1)
		first := decode(getSecret(ctx, ns, "held-ticket-keys"))
		staged, active := first.Keys[0], first.Keys[1]
		minted := []string{staged.ID, active.ID}

		By("deleting it: Ready turns False with RingDeleting, naming the finalizer")
		Expect(k8s.Delete(ctx, getRing(ctx, ring))).To(Succeed())
		Eventually(ringReason(ctx, ring), timeout, poll).Should(Equal(v1alpha1.ReasonRingDeleting))
		got := getRing(ctx, ring)
		ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
		Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		Expect(ready.ObservedGeneration).To(Equal(got.Generation))
		Expect(ready.Message).To(And(ContainSubstring("stages no new key"), ContainSubstring("destroys each key at its expiresAt"), ContainSubstring(hold)))

		By("its staged key's time comes: no successor is minted, and a rotate-now is not carried out")
		fakeClock.SetTime(staged.ActiveFrom)
		requestRotation(ctx, ring, fakeClock.Now().UTC().Format(time.RFC3339))
		Consistently(func() int64 { return getRing(ctx, ring).Status.Epoch }, 2*time.Second, poll).Should(BeEquivalentTo(1))
		Expect(trySecret(ctx, ns, "held-e2").Name).To(BeEmpty())
		Expect(getRing(ctx, ring).Status.LastRotateRequestedAt).To(BeEmpty())

		By("the active key's expiresAt: it is gone from every snapshot and the projection")
		fakeClock.SetTime(active.ExpiresAt)
		poke(ctx, ring)
		waitEpoch(ctx, ring, 2)
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "held-e1"}, &corev1.Secret{}))
		},
			timeout, poll).Should(BeTrue(), "the snapshot holding %s is deleted", active.ID)
		for _, s := range ringSecrets(ctx, ns, "held") {
			Expect(keyIDs(decode(&s))).To(Equal([]string{staged.ID}), "%s holds the staged key alone", s.Name)
			Expect(metav1.IsControlledBy(&s, got)).To(BeTrue(), "%s is still the ring's", s.Name)
		}
		got = getRing(ctx, ring)
		Expect(readyReason(got.Status.Conditions)).To(Equal(v1alpha1.ReasonRingDeleting))
		for _, k := range got.Status.Keys {
			Expect(minted).To(ContainElement(k.ID), "no key was minted while deleting")
		}
		Expect(got.Status.Keys).To(ConsistOf(HaveField("ID", staged.ID)))
		Expect(events(ctx, ns)).NotTo(ContainElement(HaveField("Reason", "Rotated")))

		By("the orphan controller leaves the Secrets of the ring being deleted to it")
		flushOrphans(ctx, ns)
		Expect(ringSecrets(ctx, ns, "held")).To(HaveLen(2))

		By("the finalizer removed: the ring goes, and then its Secrets")
		Expect(testenv.Update(ctx, k8s, &v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "held"}}, func(r *v1alpha1.TicketKeyRing) {
			r.Finalizers = slices.DeleteFunc(r.Finalizers, func(f string) bool { return f == hold })
		})).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(ring), &v1alpha1.TicketKeyRing{}))
		}, timeout, poll).Should(BeTrue())
		// A cluster's garbage collector deletes them now; none runs here,
		// so the orphan controller destroys them when their last key
		// expires, as it would were the collector never to come.
		left := ringSecrets(ctx, ns, "held")
		fakeClock.SetTime(staged.ExpiresAt)
		touch(ctx, secretPointers(left)...)
		Eventually(func() []corev1.Secret { return ringSecrets(ctx, ns, "held") }, timeout, poll).Should(BeEmpty())
	})

	It("and its orphan controller never fight over an orphan delete the collector has not finished: what it stripped goes at its expiry, and nothing comes back", func() {
		ns := newNamespace(ctx)
		ring := createRing(ctx, ns, "web", nil)
		waitEpoch(ctx, ring, 1)
		snapshot, projection := getSecret(ctx, ns, "web-e1"), getSecret(ctx, ns, "web-ticket-keys")
		expiry := firstKeyExpiry(decode(snapshot))

		By("an orphan delete whose collector strips the owner references and stops there")
		live := getRing(ctx, ring)
		Expect(k8s.Delete(ctx, live, client.PropagationPolicy(metav1.DeletePropagationOrphan))).To(Succeed())
		gc, err := env.As("system:serviceaccount:kube-system:generic-garbage-collector", "system:serviceaccounts", "system:serviceaccounts:kube-system")
		Expect(err).NotTo(HaveOccurred())
		for _, s := range []*corev1.Secret{snapshot, projection} {
			s = getSecret(ctx, ns, s.Name)
			patch := client.MergeFrom(s.DeepCopy())
			s.OwnerReferences = nil
			Expect(gc.Patch(ctx, s, patch)).To(Succeed())
		}
		Eventually(ringReason(ctx, ring), timeout, poll).Should(Equal(v1alpha1.ReasonRingDeleting))
		Expect(getRing(ctx, ring).Status.Conditions).To(ContainElement(HaveField("Message", ContainSubstring(metav1.FinalizerOrphanDependents))))

		By("the ring being deleted takes none of them back, and the orphan controller does not take them as superseded")
		poke(ctx, ring)
		flushOrphans(ctx, ns)
		Expect(trySecret(ctx, ns, "web-e1").UID).To(Equal(snapshot.UID))
		left := getSecret(ctx, ns, "web-ticket-keys")
		Expect(left.UID).To(Equal(projection.UID))
		Expect(left.OwnerReferences).To(BeEmpty())
		Expect(left.Data).To(Equal(projection.Data), "pods still mount it")

		By("at their first key's expiry both go, and the ring being deleted writes nothing in their place")
		fakeClock.SetTime(expiry)
		touch(ctx, snapshot, projection)
		Eventually(func() bool { return gone(ctx, snapshot) && gone(ctx, projection) }, timeout, poll).Should(BeTrue())
		poke(ctx, ring)
		flushOrphans(ctx, ns)
		Expect(ringSecrets(ctx, ns, "web")).To(BeEmpty())

		By("the collector done: the ring goes")
		going := getRing(ctx, ring)
		patch := client.MergeFrom(going.DeepCopy())
		going.Finalizers = nil
		Expect(gc.Patch(ctx, going, patch)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(ring), &v1alpha1.TicketKeyRing{}))
		}, timeout, poll).Should(BeTrue())
	})

	It("does the same for a ClusterTicketKeyRing, in every namespace it delivers to", func() {
		tier := fmt.Sprintf("held-%d", time.Now().UnixNano())
		target := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "ctkr-", Labels: map[string]string{"tier": tier}}}
		Expect(k8s.Create(ctx, target)).To(Succeed())
		name := fmt.Sprintf("held-%d", time.Now().UnixNano()%100000)
		ring := &v1alpha1.ClusterTicketKeyRing{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}, Finalizers: []string{hold}},
			Spec: v1alpha1.ClusterTicketKeyRingSpec{
				TicketKeyRingSpec: defaultSpec(),
				NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": tier}},
			},
		}
		shortSpec(&ring.Spec.TicketKeyRingSpec)
		ring.Spec.Distribution.SecretName = "held-keys"
		Expect(k8s.Create(ctx, ring)).To(Succeed())
		key := client.ObjectKeyFromObject(ring)
		get := func() *v1alpha1.ClusterTicketKeyRing {
			got := &v1alpha1.ClusterTicketKeyRing{}
			Expect(k8s.Get(ctx, key, got)).To(Succeed())
			return got
		}
		projection := func() string { return trySecret(ctx, target.Name, "held-keys").Annotations[v1alpha1.EpochAnnotation] }
		Eventually(projection, timeout, poll).Should(Equal("1"))
		first := decode(getSecret(ctx, target.Name, "held-keys"))
		staged, active := first.Keys[0], first.Keys[1]

		Expect(k8s.Delete(ctx, get())).To(Succeed())
		Eventually(func() string { return readyReason(get().Status.Conditions) }, timeout, poll).Should(Equal(v1alpha1.ReasonRingDeleting))

		fakeClock.SetTime(active.ExpiresAt)
		Expect(testenv.Update(ctx, k8s, &v1alpha1.ClusterTicketKeyRing{ObjectMeta: metav1.ObjectMeta{Name: name}}, func(r *v1alpha1.ClusterTicketKeyRing) {
			r.Annotations["test.ringmaster.io/poke"] = fmt.Sprint(time.Now().UnixNano())
		})).To(Succeed())
		Eventually(projection, timeout, poll).Should(Equal("2"))
		Expect(keyIDs(decode(getSecret(ctx, target.Name, "held-keys")))).To(Equal([]string{staged.ID}))
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: testenv.Namespace, Name: name + "-ce1"}, &corev1.Secret{}))
		}, timeout, poll).Should(BeTrue(), "the snapshot holding %s is deleted", active.ID)
		Expect(keyIDs(decode(getSecret(ctx, testenv.Namespace, name+"-ce2")))).To(Equal([]string{staged.ID}))
		Expect(readyReason(get().Status.Conditions)).To(Equal(v1alpha1.ReasonRingDeleting))

		Expect(testenv.Update(ctx, k8s, &v1alpha1.ClusterTicketKeyRing{ObjectMeta: metav1.ObjectMeta{Name: name}}, func(r *v1alpha1.ClusterTicketKeyRing) {
			r.Finalizers = nil
		})).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(k8s.Get(ctx, key, &v1alpha1.ClusterTicketKeyRing{})) }, timeout, poll).Should(BeTrue())
	})
})

// ringSecrets are the snapshot and projection Secrets of a TicketKeyRing.
func ringSecrets(ctx context.Context, ns, name string) []corev1.Secret {
	GinkgoHelper()
	list := &corev1.SecretList{}
	Expect(k8s.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{v1alpha1.RingLabel: name})).To(Succeed())
	return list.Items
}

func secretPointers(list []corev1.Secret) []*corev1.Secret {
	out := make([]*corev1.Secret, len(list))
	for i := range list {
		out[i] = &list[i]
	}
	return out
}
