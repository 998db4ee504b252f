//go:build integration

package controller_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
)

var _ = Describe("ClusterTicketKeyRing", func() {
	var (
		ctx  context.Context
		tier string // the label value this spec's namespaces carry
	)

	BeforeEach(func() {
		ctx = context.Background()
		tier = fmt.Sprintf("edge-%d", time.Now().UnixNano())
	})

	labelled := func() string {
		GinkgoHelper()
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "ctkr-", Labels: map[string]string{"tier": tier}}}
		Expect(k8s.Create(ctx, n)).To(Succeed())
		return n.Name
	}
	create := func(name string, mutate func(*v1alpha1.ClusterTicketKeyRing)) *v1alpha1.ClusterTicketKeyRing {
		GinkgoHelper()
		c := &v1alpha1.ClusterTicketKeyRing{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}},
			Spec: v1alpha1.ClusterTicketKeyRingSpec{
				TicketKeyRingSpec: defaultSpec(),
				NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": tier}},
			},
		}
		c.Spec.Distribution.SecretName = "edge-keys"
		if mutate != nil {
			mutate(c)
		}
		Expect(k8s.Create(ctx, c)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(context.Background(), c) })
		return c
	}
	get := func(c *v1alpha1.ClusterTicketKeyRing) *v1alpha1.ClusterTicketKeyRing {
		GinkgoHelper()
		got := &v1alpha1.ClusterTicketKeyRing{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), got)).To(Succeed())
		return got
	}
	epoch := func(c *v1alpha1.ClusterTicketKeyRing) func() int64 {
		return func() int64 { return get(c).Status.Epoch }
	}
	poke := func(c *v1alpha1.ClusterTicketKeyRing) {
		GinkgoHelper()
		Expect(testenv.Update(ctx, k8s, &v1alpha1.ClusterTicketKeyRing{ObjectMeta: metav1.ObjectMeta{Name: c.Name}}, func(got *v1alpha1.ClusterTicketKeyRing) {
			got.Annotations["test.ringmaster.io/poke"] = fmt.Sprint(time.Now().UnixNano())
		})).To(Succeed())
	}
	projection := func(ns string) func() string {
		return func() string { return trySecret(ctx, ns, "edge-keys").Annotations[v1alpha1.EpochAnnotation] }
	}

	It("delivers one ring to every namespace its selector matches, following namespaces as they start and stop matching", func() {
		a, b := labelled(), labelled()
		ring := create(fmt.Sprintf("edge-%d", time.Now().UnixNano()%100000), nil)
		Eventually(epoch(ring), timeout, poll).Should(BeEquivalentTo(1))
		Eventually(projection(a), timeout, poll).Should(Equal("1"))
		Eventually(projection(b), timeout, poll).Should(Equal("1"))

		By("keeping its snapshots in the operator's namespace, owned by the ring")
		snap := getSecret(ctx, testenv.Namespace, ring.Name+"-ce1")
		Expect(snap.Immutable).NotTo(BeNil())
		r := decode(snap)
		Expect(r.Name).To(Equal(ring.Name), "a cluster ring's name has no namespace")
		for _, ns := range []string{a, b} {
			p := getSecret(ctx, ns, "edge-keys")
			Expect(p.Data).To(Equal(snap.Data))
			Expect(metav1.IsControlledBy(p, ring)).To(BeTrue(), "each copy is garbage collected with the ring")
			Expect(*metav1.GetControllerOf(p).BlockOwnerDeletion).To(BeTrue())
		}
		got := get(ring)
		Expect(got.Status.Targets).To(BeEquivalentTo(2))
		Expect(readyReason(got.Status.Conditions)).To(Equal(v1alpha1.ReasonPublished))

		By("a namespace that starts matching gains its copy")
		c := labelled()
		Eventually(projection(c), timeout, poll).Should(Equal("1"))
		Eventually(func() int32 { return get(ring).Status.Targets }, timeout, poll).Should(BeEquivalentTo(3))

		By("a namespace that stops matching loses its copy")
		nsA := &corev1.Namespace{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: a}, nsA)).To(Succeed())
		delete(nsA.Labels, "tier")
		Expect(k8s.Update(ctx, nsA)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: a, Name: "edge-keys"}, &corev1.Secret{}))
		}, timeout, poll).Should(BeTrue())
		Expect(getSecret(ctx, b, "edge-keys").Data).To(Equal(snap.Data))

		By("a namespaced ring of the same name in the operator's namespace takes none of its names")
		tkr := createRing(ctx, testenv.Namespace, ring.Name, nil)
		DeferCleanup(func() { _ = k8s.Delete(context.Background(), tkr) })
		waitEpoch(ctx, tkr, 1)
		Expect(getSecret(ctx, testenv.Namespace, ring.Name+"-ce1").Data).To(Equal(snap.Data))
		Expect(decode(getSecret(ctx, testenv.Namespace, ring.Name+"-e1")).Name).To(Equal(testenv.Namespace + "/" + ring.Name))
	})

	It("delivers to every target it can when some fail, reports each, and destroys expired keys all the same", func() {
		ok, taken, quota := labelled(), labelled(), labelled()
		Expect(k8s.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: taken, Name: "edge-keys"},
			Data:       map[string][]byte{"app": []byte("mine")},
		})).To(Succeed())
		// This namespace is out of quota for Secrets. No quota controller
		// runs here, so the spec plays its part and sets the usage.
		none := corev1.ResourceList{"count/secrets": resource.MustParse("0")}
		rq := &corev1.ResourceQuota{
			ObjectMeta: metav1.ObjectMeta{Namespace: quota, Name: "no-secrets"},
			Spec:       corev1.ResourceQuotaSpec{Hard: none},
		}
		Expect(k8s.Create(ctx, rq)).To(Succeed())
		rq.Status = corev1.ResourceQuotaStatus{Hard: none, Used: none}
		Expect(k8s.Status().Update(ctx, rq)).To(Succeed())
		// The quota admission plugin reads quotas from its own informer, so
		// it may admit a Secret or two before it sees this one.
		Eventually(func() bool {
			probe := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: quota, GenerateName: "probe-"}}
			err := k8s.Create(ctx, probe)
			if err == nil {
				_ = k8s.Delete(ctx, probe)
			}
			return apierrors.IsForbidden(err)
		}, timeout, poll).Should(BeTrue(), "the quota bites")

		ring := create(fmt.Sprintf("partial-%d", time.Now().UnixNano()%100000), func(c *v1alpha1.ClusterTicketKeyRing) {
			c.Spec.RotationInterval = metav1.Duration{Duration: 10 * time.Minute}
			c.Spec.RetainedKeys = 1
			c.Spec.ActivationDelay = metav1.Duration{Duration: time.Minute}
		})
		Eventually(projection(ok), timeout, poll).Should(Equal("1"))
		Eventually(func() []v1alpha1.TargetFailure { return get(ring).Status.FailedTargets }, timeout, poll).Should(ConsistOf(
			And(HaveField("Namespace", taken), HaveField("Reason", v1alpha1.ReasonSecretConflict)),
			And(HaveField("Namespace", quota), HaveField("Reason", v1alpha1.ReasonPublishFailed)),
		))
		ready := meta.FindStatusCondition(get(ring).Status.Conditions, v1alpha1.ConditionReady)
		Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		Expect(ready.Reason).To(Equal(v1alpha1.ReasonDistributionFailed))
		Expect(ready.Message).To(ContainSubstring("reached 1 of 3 namespace(s)"))
		Eventually(func() bool {
			for _, e := range warnings(ctx, "default", v1alpha1.ReasonDistributionFailed)() {
				if e.Regarding.Name == ring.Name && e.Regarding.Kind == v1alpha1.KindClusterTicketKeyRing {
					return true
				}
			}
			return false
		}, timeout, poll).Should(BeTrue(), "a Warning event on the ring")
		Expect(getSecret(ctx, taken, "edge-keys").Data).To(Equal(map[string][]byte{"app": []byte("mine")}), "a foreign Secret is left untouched")

		By("rotating and destroying on time while the failures last")
		first := decode(getSecret(ctx, ok, "edge-keys")).Keys[1]
		fakeClock.Step(10 * time.Minute)
		poke(ring)
		Eventually(projection(ok), timeout, poll).Should(Equal("2"))
		fakeClock.Step(10 * time.Minute) // the first key's expiresAt
		poke(ring)
		Eventually(projection(ok), timeout, poll).Should(Equal("3"))
		_, held := decode(getSecret(ctx, ok, "edge-keys")).Key(first.ID)
		Expect(held).To(BeFalse(), "the expired key left every delivered copy")
		for _, e := range []string{"-ce1", "-ce2"} {
			Eventually(func() bool {
				return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: testenv.Namespace, Name: ring.Name + e}, &corev1.Secret{}))
			}, timeout, poll).Should(BeTrue(), "snapshot %s held the expired key", ring.Name+e)
		}
		Expect(get(ring).Status.FailedTargets).To(HaveLen(2))
	})

	DescribeTable("the API server rejects an invalid cluster ring",
		func(mutate func(*v1alpha1.ClusterTicketKeyRing), message string) {
			c := &v1alpha1.ClusterTicketKeyRing{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: v1alpha1.ClusterTicketKeyRingSpec{TicketKeyRingSpec: defaultSpec()}}
			mutate(c)
			err := k8s.Create(ctx, c)
			Expect(err).To(HaveOccurred())
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("a name too long for the label on its Secrets", func(c *v1alpha1.ClusterTicketKeyRing) { c.Name = strings.Repeat("c", 64) },
			"metadata.name may be at most 63 characters"),
		Entry("a secretName shaped like a snapshot", func(c *v1alpha1.ClusterTicketKeyRing) { c.Spec.Distribution.SecretName = "edge-ce3" },
			"secretName may not end in -e<number> or -ce<number>"),
		Entry("the ring's own rules", func(c *v1alpha1.ClusterTicketKeyRing) { c.Spec.RotationInterval.Duration = 30 * time.Second },
			"rotationInterval must be at least 1m"),
		Entry("confirmation without voterNamespaceSelector", func(c *v1alpha1.ClusterTicketKeyRing) {
			c.Spec.Confirmation = confirmationOf(time.Minute, nil)
		}, "confirmation.voterNamespaceSelector is required on a ClusterTicketKeyRing"),
		Entry("a confirmation ceiling past the 7-day bound", func(c *v1alpha1.ClusterTicketKeyRing) {
			c.Spec.RotationInterval.Duration, c.Spec.RetainedKeys = 24*time.Hour, 6
			c.Spec.Confirmation = confirmationOf(0, &metav1.Duration{Duration: time.Second})
			c.Spec.Confirmation.VoterNamespaceSelector = &metav1.LabelSelector{}
		}, "(retainedKeys + 1) x rotationInterval, plus confirmation.maxDelay"),
		Entry("maxDelay over rotationInterval", func(c *v1alpha1.ClusterTicketKeyRing) {
			c.Spec.Confirmation = confirmationOf(0, &metav1.Duration{Duration: 2 * time.Hour})
			c.Spec.Confirmation.VoterNamespaceSelector = &metav1.LabelSelector{}
		}, "must not exceed rotationInterval"),
	)
})
