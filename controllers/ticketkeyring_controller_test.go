package controllers_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

const (
	timeout = 20 * time.Second
	poll    = 100 * time.Millisecond
)

var _ = Describe("TicketKeyRing", func() {
	var (
		ctx context.Context
		ns  string
	)

	BeforeEach(func() {
		ctx = context.Background()
		ns = newNamespace(ctx)
	})

	It("publishes a snapshot and a projection with an active and a staged key", func() {
		t0 := fakeClock.Now()
		ring := createRing(ctx, ns, "web", nil)
		waitEpoch(ctx, ring, 1)

		snap := getSecret(ctx, ns, "web-e1")
		Expect(snap.Immutable).To(Equal(ptr.To(true)))
		Expect(metav1.IsControlledBy(snap, ring)).To(BeTrue())
		Expect(snap.Labels).To(HaveKeyWithValue(v1alpha1.RingLabel, "web"))
		Expect(snap.Labels).To(HaveKeyWithValue(v1alpha1.EpochLabel, "1"))

		r := decode(getSecret(ctx, ns, "web-ticket-keys"))
		Expect(r.Name).To(Equal(ns + "/web"))
		Expect(r.Epoch).To(BeEquivalentTo(1))
		Expect(r.Keys).To(HaveLen(2))
		staged, active := r.Keys[0], r.Keys[1]
		Expect(active.ActiveFrom).To(BeTemporally("==", t0))
		Expect(active.RetireAt).To(BeTemporally("==", t0.Add(time.Hour)))
		Expect(active.ExpiresAt).To(BeTemporally("==", t0.Add(4*time.Hour)))
		Expect(staged.ActiveFrom).To(BeTemporally("==", t0.Add(time.Hour)))
		Expect(staged.StateAt(t0)).To(Equal(keyring.Staged))
		Expect(active.StateAt(t0)).To(Equal(keyring.Active))
		Expect(decode(snap)).To(Equal(r), "the projection is a copy of the newest snapshot")

		got := getRing(ctx, ring)
		Expect(got.Status.Snapshot).To(Equal("web-e1"))
		Expect(got.Status.ActiveKey.ID).To(Equal(active.ID))
		Expect(got.Status.NextRotation.Time).To(BeTemporally("==", staged.ActiveFrom))
		Expect(got.Status.Keys).To(HaveLen(2))
		Expect(got.Status.Keys[0].State).To(BeEquivalentTo("staged"))
		ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
		Expect(ready.Status).To(Equal(metav1.ConditionTrue))
		Expect(ready.ObservedGeneration).To(Equal(got.Generation))

		By("never showing key bytes in status or events")
		statusJSON, err := json.Marshal(got.Status)
		Expect(err).NotTo(HaveOccurred())
		evs := events(ctx, ns)
		for _, k := range r.Keys {
			for _, enc := range []string{base64.StdEncoding.EncodeToString(k.Secret[:]), fmt.Sprintf("%x", k.Secret[:])} {
				Expect(string(statusJSON)).NotTo(ContainSubstring(enc))
				for _, e := range evs {
					Expect(e.Note).NotTo(ContainSubstring(enc))
				}
			}
		}
		Expect(evs).To(ContainElement(HaveField("Reason", "Rotated")))

		By("exporting the epoch and the active key's age")
		Expect(gaugeValue("ringmaster_ticketkeyring_epoch", ns, "web")).To(BeEquivalentTo(1))
		Expect(gaugeValue("ringmaster_ticketkeyring_active_key_age_seconds", ns, "web")).To(BeNumerically(">=", 0))
		fakeClock.Step(90 * time.Second)
		Expect(gaugeValue("ringmaster_ticketkeyring_active_key_age_seconds", ns, "web")).To(BeNumerically(">=", 90), "the age grows between reconciles")
	})

	It("promotes the staged key when its time comes and stages a new one", func() {
		ring := createRing(ctx, ns, "web", nil)
		waitEpoch(ctx, ring, 1)
		before := decode(getSecret(ctx, ns, "web-ticket-keys"))

		fakeClock.Step(time.Hour)
		poke(ctx, ring)
		waitEpoch(ctx, ring, 2)

		after := decode(getSecret(ctx, ns, "web-ticket-keys"))
		now := fakeClock.Now()
		Expect(after.Keys).To(HaveLen(3))
		Expect(after.Keys[1].ID).To(Equal(before.Keys[0].ID), "the staged key is now the active one")
		Expect(after.Keys[1].StateAt(now)).To(Equal(keyring.Active))
		Expect(after.Keys[2].StateAt(now)).To(Equal(keyring.DecryptOnly))
		Expect(after.Keys[0].StateAt(now)).To(Equal(keyring.Staged))
		Expect(after.Keys[0].ActiveFrom).To(BeTemporally("==", before.Keys[0].ActiveFrom.Add(time.Hour)))
		Expect(getRing(ctx, ring).Status.ActiveKey.ID).To(Equal(before.Keys[0].ID))
		getSecret(ctx, ns, "web-e2")
	})

	It("destroys an expired key: it leaves the projection and its snapshots are deleted", func() {
		ring := createRing(ctx, ns, "short", func(r *v1alpha1.TicketKeyRing) {
			r.Spec.RotationInterval = metav1.Duration{Duration: 10 * time.Minute}
			r.Spec.RetainedKeys = 1
			r.Spec.ActivationDelay = metav1.Duration{Duration: time.Minute}
		})
		waitEpoch(ctx, ring, 1)
		first := decode(getSecret(ctx, ns, "short-ticket-keys")).Keys[1]

		fakeClock.Step(10 * time.Minute)
		poke(ctx, ring)
		waitEpoch(ctx, ring, 2)
		held, ok := decode(getSecret(ctx, ns, "short-ticket-keys")).Key(first.ID)
		Expect(ok).To(BeTrue())
		Expect(held.StateAt(fakeClock.Now())).To(Equal(keyring.DecryptOnly))

		fakeClock.Step(10 * time.Minute) // the first key's expiresAt
		poke(ctx, ring)
		waitEpoch(ctx, ring, 3)
		r := decode(getSecret(ctx, ns, "short-ticket-keys"))
		_, stillHeld := r.Key(first.ID)
		Expect(stillHeld).To(BeFalse(), "the expired key is gone from the projection")
		for _, name := range []string{"short-e1", "short-e2"} {
			Eventually(func() bool {
				return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.Secret{}))
			}, timeout, poll).Should(BeTrue(), "snapshot %s held the expired key", name)
		}
		getSecret(ctx, ns, "short-e3")
	})

	It("keeps the epoch across an operator restart", func() {
		ring := createRing(ctx, ns, "web", nil)
		waitEpoch(ctx, ring, 1)
		before := getSecret(ctx, ns, "web-ticket-keys")

		stopManager()
		fakeClock.Step(10 * time.Minute) // inside the rotation interval: nothing is due
		startManager()
		poke(ctx, ring)

		Consistently(func() int64 { return getRing(ctx, ring).Status.Epoch }, 2*time.Second, poll).Should(BeEquivalentTo(1))
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-e2"}, &corev1.Secret{}))).To(BeTrue())
		Expect(getSecret(ctx, ns, "web-ticket-keys").Data).To(Equal(before.Data))

		By("and rotating from the recovered state when due")
		fakeClock.Step(50 * time.Minute)
		poke(ctx, ring)
		waitEpoch(ctx, ring, 2)
		Expect(decode(getSecret(ctx, ns, "web-ticket-keys")).Keys[1].ID).To(Equal(decode(before).Keys[0].ID))
	})

	It("restores a projection deleted or edited by hand", func() {
		ring := createRing(ctx, ns, "web", nil)
		waitEpoch(ctx, ring, 1)
		want := getSecret(ctx, ns, "web-ticket-keys").Data

		Expect(k8s.Delete(ctx, getSecret(ctx, ns, "web-ticket-keys"))).To(Succeed())
		Eventually(func() map[string][]byte { return trySecret(ctx, ns, "web-ticket-keys").Data }, timeout, poll).Should(Equal(want))

		edited := getSecret(ctx, ns, "web-ticket-keys")
		edited.Data[keyring.FileName] = []byte(`{"version":1}`)
		Expect(k8s.Update(ctx, edited)).To(Succeed())
		Eventually(func() map[string][]byte { return trySecret(ctx, ns, "web-ticket-keys").Data }, timeout, poll).Should(Equal(want))
	})

	It("never overwrites a Secret it does not own", func() {
		foreign := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-ticket-keys"},
			Data:       map[string][]byte{"app": []byte("mine")},
		}
		Expect(k8s.Create(ctx, foreign)).To(Succeed())
		ring := createRing(ctx, ns, "web", nil)

		Eventually(func() string {
			c := meta.FindStatusCondition(getRing(ctx, ring).Status.Conditions, v1alpha1.ConditionReady)
			if c == nil || c.Status != metav1.ConditionFalse {
				return ""
			}
			return c.Reason
		}, timeout, poll).Should(Equal(v1alpha1.ReasonSecretConflict))
		Eventually(func() []eventsv1.Event { return events(ctx, ns) }, timeout, poll).Should(ContainElement(And(
			HaveField("Reason", v1alpha1.ReasonSecretConflict), HaveField("Type", corev1.EventTypeWarning))))

		got := getSecret(ctx, ns, "web-ticket-keys")
		Expect(got.Data).To(Equal(foreign.Data))
		Expect(got.OwnerReferences).To(BeEmpty())
		Expect(got.Labels).To(BeEmpty())
	})

	It("rotates now on request, once, no sooner than the activation delay", func() {
		ring := createRing(ctx, ns, "web", nil) // activationDelay 3m
		waitEpoch(ctx, ring, 1)
		staged := decode(getSecret(ctx, ns, "web-ticket-keys")).Keys[0]

		By("a request one minute in: the staged key activates 3m after it was published")
		t0 := fakeClock.Now()
		fakeClock.Step(time.Minute)
		requestRotation(ctx, ring, "r1")
		waitEpoch(ctx, ring, 2)
		r := decode(getSecret(ctx, ns, "web-ticket-keys"))
		Expect(r.Keys[0].ID).To(Equal(staged.ID))
		// 3m after it was published, plus the second its truncated
		// publication time may hide.
		Expect(r.Keys[0].ActiveFrom).To(BeTemporally("==", t0.Add(3*time.Minute+time.Second)))
		Expect(getRing(ctx, ring).Status.LastRotateRequestedAt).To(Equal("r1"))

		By("the same request again changes nothing")
		poke(ctx, ring)
		Consistently(func() int64 { return getRing(ctx, ring).Status.Epoch }, time.Second, poll).Should(BeEquivalentTo(2))

		By("at the promised instant, the staged key is active and a new one is staged")
		fakeClock.Step(2*time.Minute + time.Second)
		poke(ctx, ring)
		waitEpoch(ctx, ring, 3)
		r = decode(getSecret(ctx, ns, "web-ticket-keys"))
		Expect(r.Keys[1].ID).To(Equal(staged.ID))
		Expect(r.Keys[1].StateAt(fakeClock.Now())).To(Equal(keyring.Active))
		Expect(r.Keys[0].ActiveFrom).To(BeTemporally("==", fakeClock.Now().Add(time.Hour)))

		By("a request once the staged key has waited long enough promotes it at once")
		newStaged := r.Keys[0]
		fakeClock.Step(5 * time.Minute)
		requestRotation(ctx, ring, "r2")
		waitEpoch(ctx, ring, 4)
		r = decode(getSecret(ctx, ns, "web-ticket-keys"))
		Expect(r.Keys[1].ID).To(Equal(newStaged.ID))
		Expect(r.Keys[1].ActiveFrom).To(BeTemporally("==", fakeClock.Now()))
		Expect(getRing(ctx, ring).Status.ActiveKey.ID).To(Equal(newStaged.ID))
	})

	It("publishes nothing when the key source fails, and keeps serving", func() {
		ring := createRing(ctx, ns, "web", nil)
		waitEpoch(ctx, ring, 1)
		before := getSecret(ctx, ns, "web-ticket-keys").Data

		patchRing(ctx, ring, func(r *v1alpha1.TicketKeyRing) { r.Annotations[mintFailsAnnotation] = "true" })
		fakeClock.Step(time.Hour)
		poke(ctx, ring)
		Eventually(func() string {
			c := meta.FindStatusCondition(getRing(ctx, ring).Status.Conditions, v1alpha1.ConditionReady)
			return c.Reason
		}, timeout, poll).Should(Equal(v1alpha1.ReasonMintFailed))
		Expect(getRing(ctx, ring).Status.Epoch).To(BeEquivalentTo(1))
		Expect(getSecret(ctx, ns, "web-ticket-keys").Data).To(Equal(before))
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-e2"}, &corev1.Secret{}))).To(BeTrue())

		By("recovering by itself once the source works again")
		patchRing(ctx, ring, func(r *v1alpha1.TicketKeyRing) { delete(r.Annotations, mintFailsAnnotation) })
		waitEpoch(ctx, ring, 2)
	})

	It("destroys expired keys on time while the key source is down, and catches up when it is back", func() {
		ring := createRing(ctx, ns, "outage", func(r *v1alpha1.TicketKeyRing) {
			r.Spec.RotationInterval = metav1.Duration{Duration: 10 * time.Minute}
			r.Spec.RetainedKeys = 1
			r.Spec.ActivationDelay = metav1.Duration{Duration: time.Minute}
		})
		waitEpoch(ctx, ring, 1)
		first, second := decode(getSecret(ctx, ns, "outage-ticket-keys")).Keys[1], decode(getSecret(ctx, ns, "outage-ticket-keys")).Keys[0]
		patchRing(ctx, ring, func(r *v1alpha1.TicketKeyRing) { r.Annotations[mintFailsAnnotation] = "true" })

		By("a rotation falls due and cannot be minted")
		fakeClock.Step(10 * time.Minute)
		poke(ctx, ring)
		Eventually(func() *metav1.Condition {
			return meta.FindStatusCondition(getRing(ctx, ring).Status.Conditions, v1alpha1.ConditionRotationOverdue)
		}, timeout, poll).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue)))
		Expect(getRing(ctx, ring).Status.Epoch).To(BeEquivalentTo(1))

		By("the first key expires: it is destroyed all the same, leaving only the active key")
		fakeClock.Step(10 * time.Minute)
		poke(ctx, ring)
		waitEpoch(ctx, ring, 2)
		r := decode(getSecret(ctx, ns, "outage-ticket-keys"))
		Expect(r.Keys).To(HaveLen(1))
		Expect(r.Keys[0].ID).To(Equal(second.ID))
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "outage-e1"}, &corev1.Secret{}))
		}, timeout, poll).Should(BeTrue(), "the snapshot holding %s is deleted", first.ID)
		got := getRing(ctx, ring)
		Expect(meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady).Reason).To(Equal(v1alpha1.ReasonMintFailed))
		Expect(meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionRotationOverdue)).To(BeTrue())
		Expect(gaugeValue("ringmaster_ticketkeyring_rotation_overdue_seconds", ns, "outage")).To(BeNumerically(">=", 600))

		By("the source is back: one new key, on schedule again")
		patchRing(ctx, ring, func(r *v1alpha1.TicketKeyRing) { delete(r.Annotations, mintFailsAnnotation) })
		waitEpoch(ctx, ring, 3)
		r = decode(getSecret(ctx, ns, "outage-ticket-keys"))
		Expect(r.Keys).To(HaveLen(2))
		Expect(r.Keys[1].ID).To(Equal(second.ID))
		Expect(r.Keys[0].ActiveFrom).To(BeTemporally("==", fakeClock.Now().Add(time.Minute)), "staged for activationDelay, not a burst")
		Eventually(func() bool {
			return meta.IsStatusConditionFalse(getRing(ctx, ring).Status.Conditions, v1alpha1.ConditionRotationOverdue)
		}, timeout, poll).Should(BeTrue())
	})

	It("copies the projection to other namespaces and removes the copies with the ring", func() {
		other := newNamespace(ctx)
		ring := createRing(ctx, ns, "web", func(r *v1alpha1.TicketKeyRing) {
			r.Spec.Distribution.Namespaces = []string{other}
			r.Spec.Distribution.SecretName = "tickets"
			r.Spec.Distribution.Formats = []v1alpha1.KeyFormat{"go", "nginx", "haproxy"}
		})
		waitEpoch(ctx, ring, 1)
		home := getSecret(ctx, ns, "tickets")
		Expect(home.Data).To(HaveKey("nginx.0.key"))
		Expect(home.Data["nginx.0.key"]).To(HaveLen(keyring.FormatKeySize))
		Expect(home.Data).To(HaveKey("haproxy.keys"))
		var copy *corev1.Secret
		Eventually(func() map[string][]byte { copy = trySecret(ctx, other, "tickets"); return copy.Data }, timeout, poll).Should(Equal(home.Data))
		Expect(copy.Labels).To(HaveKeyWithValue(v1alpha1.RingNamespaceLabel, ns))
		Expect(getRing(ctx, ring).Finalizers).To(ContainElement(v1alpha1.CleanupFinalizer))

		Expect(k8s.Delete(ctx, getRing(ctx, ring))).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: other, Name: "tickets"}, &corev1.Secret{}))
		}, timeout, poll).Should(BeTrue())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(ring), &v1alpha1.TicketKeyRing{}))
		}, timeout, poll).Should(BeTrue(), "the finalizer is released")
	})

	It("removes a copy when its namespace is no longer targeted", func() {
		other := newNamespace(ctx)
		ring := createRing(ctx, ns, "web", func(r *v1alpha1.TicketKeyRing) { r.Spec.Distribution.Namespaces = []string{other} })
		waitEpoch(ctx, ring, 1)
		Eventually(func() map[string][]byte { return trySecret(ctx, other, "web-ticket-keys").Data }, timeout, poll).ShouldNot(BeEmpty())

		patchRing(ctx, ring, func(r *v1alpha1.TicketKeyRing) { r.Spec.Distribution.Namespaces = nil })
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: other, Name: "web-ticket-keys"}, &corev1.Secret{}))
		}, timeout, poll).Should(BeTrue())
		Eventually(func() []string { return getRing(ctx, ring).Finalizers }, timeout, poll).ShouldNot(ContainElement(v1alpha1.CleanupFinalizer))
	})

	DescribeTable("the API server rejects an invalid ring",
		func(mutate func(*v1alpha1.TicketKeyRing), message string) {
			ring := &v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad"}}
			ring.Spec = defaultSpec()
			mutate(ring)
			err := k8s.Create(ctx, ring)
			Expect(err).To(HaveOccurred())
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("interval under a minute", func(r *v1alpha1.TicketKeyRing) { r.Spec.RotationInterval.Duration = 30 * time.Second },
			"rotationInterval must be at least 1m"),
		Entry("activation delay equal to the interval", func(r *v1alpha1.TicketKeyRing) { r.Spec.ActivationDelay.Duration = time.Hour },
			"activationDelay must be at least 0s and less than rotationInterval"),
		Entry("negative activation delay", func(r *v1alpha1.TicketKeyRing) { r.Spec.ActivationDelay.Duration = -time.Minute },
			"activationDelay must be at least 0s"),
		Entry("too many retained keys", func(r *v1alpha1.TicketKeyRing) { r.Spec.RetainedKeys = 17 },
			"spec.retainedKeys: Invalid value: 17: spec.retainedKeys in body should be less than or equal to 16"),
		Entry("negative retained keys", func(r *v1alpha1.TicketKeyRing) { r.Spec.RetainedKeys = -1 },
			"should be greater than or equal to 0"),
		Entry("tickets outliving 7 days", func(r *v1alpha1.TicketKeyRing) {
			r.Spec.RotationInterval.Duration = 24 * time.Hour
			r.Spec.RetainedKeys = 7
		}, "(retainedKeys + 1) x rotationInterval must not exceed 168h"),
		Entry("secret name not DNS-1123", func(r *v1alpha1.TicketKeyRing) { r.Spec.Distribution.SecretName = "Web_Keys" },
			"spec.distribution.secretName in body should match"),
		Entry("duplicate namespaces", func(r *v1alpha1.TicketKeyRing) { r.Spec.Distribution.Namespaces = []string{"a", "a"} },
			"Duplicate value"),
		Entry("too many namespaces", func(r *v1alpha1.TicketKeyRing) {
			for i := range 65 {
				r.Spec.Distribution.Namespaces = append(r.Spec.Distribution.Namespaces, fmt.Sprintf("ns-%d", i))
			}
		}, "must have at most 64 items"),
		Entry("unknown format", func(r *v1alpha1.TicketKeyRing) { r.Spec.Distribution.Formats = []v1alpha1.KeyFormat{"iis"} },
			`Unsupported value: "iis"`),
	)

	It("defaults an empty spec to 1h / 3 / 3m and the go format", func() {
		// A manifest without spec, as kubectl sends it; a Go client would send
		// the zero values of the spec's fields instead.
		bare := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": v1alpha1.GroupVersion.String(), "kind": "TicketKeyRing",
			"metadata": map[string]any{"namespace": ns, "name": "defaults"},
		}}
		Expect(k8s.Create(ctx, bare)).To(Succeed())
		got := getRing(ctx, &v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "defaults"}})
		Expect(got.Spec.RotationInterval.Duration).To(Equal(time.Hour))
		Expect(got.Spec.RetainedKeys).To(BeEquivalentTo(3))
		Expect(got.Spec.ActivationDelay.Duration).To(Equal(3 * time.Minute))
		Expect(got.Spec.Distribution.Formats).To(Equal([]v1alpha1.KeyFormat{"go"}))
	})
})

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
	Eventually(func() error {
		got := getRing(ctx, ring)
		if got.Annotations == nil {
			got.Annotations = map[string]string{}
		}
		mutate(got)
		return k8s.Update(ctx, got)
	}, timeout, poll).Should(Succeed())
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
	Eventually(func() int64 { return getRing(ctx, ring).Status.Epoch }, timeout, poll).Should(Equal(epoch))
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
	families, err := registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["namespace"] == ns && labels["name"] == ring {
				return m.GetGauge().GetValue()
			}
		}
	}
	Fail(fmt.Sprintf("no %s series for %s/%s", name, ns, ring))
	return 0
}
