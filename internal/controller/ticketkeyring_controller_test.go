//go:build integration

package controller_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/types"
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
		Expect(evs).NotTo(ContainElement(HaveField("Reason", "Rotated")), "a new ring's first epoch is routine: no event")

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
		Expect(getRing(ctx, ring).Status.FailedTargets).To(ConsistOf(And(
			HaveField("Namespace", ns), HaveField("Reason", v1alpha1.ReasonSecretConflict))))
	})

	It("rotates now on request, once, no sooner than the activation delay", func() {
		ring := createRing(ctx, ns, "web", nil) // activationDelay 3m
		waitEpoch(ctx, ring, 1)
		staged := decode(getSecret(ctx, ns, "web-ticket-keys")).Keys[0]

		By("a request one minute in: the staged key activates 3m after it was published")
		t0 := fakeClock.Now()
		fakeClock.Step(time.Minute)
		r1 := fakeClock.Now().UTC().Format(time.RFC3339)
		requestRotation(ctx, ring, r1)
		waitEpoch(ctx, ring, 2)
		r := decode(getSecret(ctx, ns, "web-ticket-keys"))
		Expect(r.Keys[0].ID).To(Equal(staged.ID))
		// 3m after it was published, plus the second its truncated
		// publication time may hide.
		Expect(r.Keys[0].ActiveFrom).To(BeTemporally("==", t0.Add(3*time.Minute+time.Second)))
		Expect(getRing(ctx, ring).Status.LastRotateRequestedAt).To(Equal(r1))

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
		requestRotation(ctx, ring, fakeClock.Now().UTC().Add(time.Second).Format(time.RFC3339))
		waitEpoch(ctx, ring, 4)
		r = decode(getSecret(ctx, ns, "web-ticket-keys"))
		Expect(r.Keys[1].ID).To(Equal(newStaged.ID))
		Expect(r.Keys[1].ActiveFrom).To(BeTemporally("==", fakeClock.Now()))
		Expect(getRing(ctx, ring).Status.ActiveKey.ID).To(Equal(newStaged.ID))

		By("announcing each request's epoch, and not the scheduled one between them")
		published := func(epoch int) types.GomegaMatcher {
			return ContainElement(And(HaveField("Reason", "Rotated"), HaveField("Note", HavePrefix(fmt.Sprintf("Published epoch %d ", epoch)))))
		}
		Eventually(func() []eventsv1.Event { return events(ctx, ns) }, timeout, poll).Should(And(published(2), published(4)))
		Expect(events(ctx, ns)).NotTo(published(3), "the events of one ring are emitted in order: epoch 3's would be there by now")
	})

	It("refuses a request annotation that is not a bounded RFC 3339 time, says so, and echoes none of it", func() {
		ring := createRing(ctx, ns, "web", nil)
		waitEpoch(ctx, ring, 1)
		huge := strings.Repeat("\x1b[31m", 200*1024/8)
		patchRing(ctx, ring, func(r *v1alpha1.TicketKeyRing) {
			r.Annotations[v1alpha1.RotateRequestedAtAnnotation] = huge
			r.Annotations[v1alpha1.RevokeRequestedAtAnnotation] = "not a time"
		})
		Eventually(func() *metav1.Condition {
			return meta.FindStatusCondition(getRing(ctx, ring).Status.Conditions, v1alpha1.ConditionRequestRefused)
		}, timeout, poll).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue), HaveField("Reason", v1alpha1.ReasonInvalidRequest),
			HaveField("Message", And(ContainSubstring(v1alpha1.RotateRequestedAtAnnotation), ContainSubstring(v1alpha1.RevokeRequestedAtAnnotation)))))
		Eventually(warnings(ctx, ns, v1alpha1.ReasonInvalidRequest), timeout, poll).ShouldNot(BeEmpty())
		got := getRing(ctx, ring)
		Expect(got.Status.Epoch).To(BeEquivalentTo(1), "nothing was carried out")
		Expect(got.Status.LastRotateRequestedAt).To(BeEmpty())
		status, err := json.Marshal(got.Status)
		Expect(err).NotTo(HaveOccurred())
		Expect(len(status)).To(BeNumerically("<", 8*1024), "no tenant-written value reaches the status")
		Expect(string(status)).NotTo(ContainSubstring("\x1b"))
		for _, e := range events(ctx, ns) {
			Expect(e.Note).NotTo(ContainSubstring("\x1b"))
		}

		By("a valid request clears the condition and is carried out")
		fakeClock.Step(5 * time.Minute)
		at := fakeClock.Now().UTC().Format(time.RFC3339)
		patchRing(ctx, ring, func(r *v1alpha1.TicketKeyRing) {
			r.Annotations[v1alpha1.RotateRequestedAtAnnotation] = at
			delete(r.Annotations, v1alpha1.RevokeRequestedAtAnnotation)
		})
		waitEpoch(ctx, ring, 2)
		Expect(getRing(ctx, ring).Status.LastRotateRequestedAt).To(Equal(at))
		Eventually(func() *metav1.Condition {
			return meta.FindStatusCondition(getRing(ctx, ring).Status.Conditions, v1alpha1.ConditionRequestRefused)
		}, timeout, poll).Should(BeNil())
	})

	It("publishes nothing when the key source fails, and keeps serving", func() {
		vault := newStandinVault()
		cks := createKeySource(ctx, vault.URL, vault.CA, standinToken, allNamespaces)
		ring := createRing(ctx, ns, "web", func(r *v1alpha1.TicketKeyRing) { r.Spec.SourceRef = sourceRef(cks.Name) })
		waitEpoch(ctx, ring, 1)
		Expect(vault.mints.Load()).To(BeEquivalentTo(2), "both keys came from the key source")
		before := getSecret(ctx, ns, "web-ticket-keys").Data

		vault.fail.Store(true)
		fakeClock.Step(time.Hour)
		poke(ctx, ring)
		Eventually(ringReason(ctx, ring), timeout, poll).Should(Equal(v1alpha1.ReasonVaultUnavailable))
		Expect(getRing(ctx, ring).Status.Epoch).To(BeEquivalentTo(1))
		Expect(getSecret(ctx, ns, "web-ticket-keys").Data).To(Equal(before))
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-e2"}, &corev1.Secret{}))).To(BeTrue())
		Eventually(warnings(ctx, ns, v1alpha1.ReasonVaultUnavailable), timeout, poll).Should(HaveLen(1), "one event per transition, not per retry")

		By("recovering by itself once the source works again")
		vault.fail.Store(false)
		Eventually(func() int64 { return getRing(ctx, ring).Status.Epoch }, time.Minute, poll).Should(BeEquivalentTo(2))
		Eventually(ringReason(ctx, ring), timeout, poll).Should(Equal(v1alpha1.ReasonPublished))
	})

	It("destroys expired keys on time while the key source is down, and catches up when it is back", func() {
		vault := newStandinVault()
		cks := createKeySource(ctx, vault.URL, vault.CA, standinToken, allNamespaces)
		ring := createRing(ctx, ns, "outage", func(r *v1alpha1.TicketKeyRing) {
			r.Spec.RotationInterval = metav1.Duration{Duration: 10 * time.Minute}
			r.Spec.RetainedKeys = 1
			r.Spec.ActivationDelay = metav1.Duration{Duration: time.Minute}
			r.Spec.SourceRef = sourceRef(cks.Name)
		})
		waitEpoch(ctx, ring, 1)
		first, second := decode(getSecret(ctx, ns, "outage-ticket-keys")).Keys[1], decode(getSecret(ctx, ns, "outage-ticket-keys")).Keys[0]
		vault.fail.Store(true)

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
		Expect(readyReason(got.Status.Conditions)).To(Equal(v1alpha1.ReasonVaultUnavailable))
		Expect(meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionRotationOverdue)).To(BeTrue())
		Expect(gaugeValue("ringmaster_ticketkeyring_rotation_overdue_seconds", ns, "outage")).To(BeNumerically(">=", 600))

		By("the source is back: one new key, on schedule again")
		vault.fail.Store(false)
		Eventually(func() int64 { return getRing(ctx, ring).Status.Epoch }, time.Minute, poll).Should(BeEquivalentTo(3))
		r = decode(getSecret(ctx, ns, "outage-ticket-keys"))
		Expect(r.Keys).To(HaveLen(2))
		Expect(r.Keys[1].ID).To(Equal(second.ID))
		Expect(r.Keys[0].ActiveFrom).To(BeTemporally("==", fakeClock.Now().Add(time.Minute)), "staged for activationDelay, not a burst")
		Eventually(func() bool {
			return meta.IsStatusConditionFalse(getRing(ctx, ring).Status.Conditions, v1alpha1.ConditionRotationOverdue)
		}, timeout, poll).Should(BeTrue())
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
		}, "(retainedKeys + 1) x rotationInterval, plus confirmation.maxDelay (or confirmation.timeout when maxDelay is omitted), must not exceed 168h"),
		Entry("a confirmation ceiling past the 7-day bound", func(r *v1alpha1.TicketKeyRing) {
			r.Spec.RotationInterval.Duration, r.Spec.RetainedKeys = 24*time.Hour, 6
			r.Spec.Confirmation = confirmationOf(0, &metav1.Duration{Duration: time.Second})
		}, "(retainedKeys + 1) x rotationInterval, plus confirmation.maxDelay"),
		Entry("a confirmation timeout, without maxDelay, past the 7-day bound", func(r *v1alpha1.TicketKeyRing) {
			r.Spec.RotationInterval.Duration, r.Spec.RetainedKeys = 24*time.Hour, 6
			r.Spec.Confirmation = confirmationOf(time.Minute, nil)
		}, "(retainedKeys + 1) x rotationInterval, plus confirmation.maxDelay"),
		Entry("maxDelay over rotationInterval", func(r *v1alpha1.TicketKeyRing) {
			r.Spec.Confirmation = confirmationOf(10*time.Minute, &metav1.Duration{Duration: time.Hour + time.Second})
		}, "confirmation.maxDelay (or confirmation.timeout when maxDelay is omitted) must not exceed rotationInterval"),
		Entry("a timeout over rotationInterval, without maxDelay", func(r *v1alpha1.TicketKeyRing) {
			r.Spec.Confirmation = confirmationOf(2*time.Hour, nil)
		}, "confirmation.maxDelay (or confirmation.timeout when maxDelay is omitted) must not exceed rotationInterval"),
		Entry("maxDelay under the timeout", func(r *v1alpha1.TicketKeyRing) {
			r.Spec.Confirmation = confirmationOf(10*time.Minute, &metav1.Duration{Duration: 5 * time.Minute})
		}, "confirmation.maxDelay must be at least confirmation.timeout"),
		Entry("a negative timeout", func(r *v1alpha1.TicketKeyRing) {
			r.Spec.Confirmation = confirmationOf(-time.Minute, nil)
		}, "confirmation.timeout must be at least 0s"),
		Entry("voterNamespaceSelector on a TicketKeyRing", func(r *v1alpha1.TicketKeyRing) {
			r.Spec.Confirmation = confirmationOf(time.Minute, nil)
			r.Spec.Confirmation.VoterNamespaceSelector = &metav1.LabelSelector{}
		}, "spec.confirmation.voterNamespaceSelector is for ClusterTicketKeyRings"),
		Entry("secret name not DNS-1123", func(r *v1alpha1.TicketKeyRing) { r.Spec.Distribution.SecretName = "Web_Keys" },
			"spec.distribution.secretName in body should match"),
		Entry("a name too long for the label on its Secrets", func(r *v1alpha1.TicketKeyRing) { r.Name = strings.Repeat("w", 64) },
			"metadata.name may be at most 63 characters"),
		Entry("a secretName shaped like another ring's snapshot", func(r *v1alpha1.TicketKeyRing) { r.Spec.Distribution.SecretName = "b-e1" },
			"secretName may not end in -e<number> or -ce<number>"),
		Entry("a secretName shaped like a cluster ring's snapshot", func(r *v1alpha1.TicketKeyRing) { r.Spec.Distribution.SecretName = "edge-ce12" },
			"secretName may not end in -e<number> or -ce<number>"),
		Entry("a key source without a name", func(r *v1alpha1.TicketKeyRing) { r.Spec.SourceRef = &v1alpha1.KeySourceReference{} },
			"spec.sourceRef.name"),
		Entry("unknown format", func(r *v1alpha1.TicketKeyRing) { r.Spec.Distribution.Formats = []v1alpha1.KeyFormat{"iis"} },
			`Unsupported value: "iis"`),
	)

	It("reports a format whose server keeps fewer decrypt-only keys than retained, once", func() {
		ring := createRing(ctx, ns, "web", func(r *v1alpha1.TicketKeyRing) {
			r.Spec.Distribution.Formats = []v1alpha1.KeyFormat{"go", "nginx", "haproxy"}
		})
		limited := func() *metav1.Condition {
			return meta.FindStatusCondition(getRing(ctx, ring).Status.Conditions, v1alpha1.ConditionRetentionLimited)
		}
		Eventually(limited, timeout, poll).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue)))
		c := limited()
		Expect(c.Reason).To(Equal(v1alpha1.ReasonFormatKeepsFewerKeys))
		Expect(c.Message).To(ContainSubstring("haproxy keeps 1 decrypt-only key(s) of the 3 retained"))
		Expect(c.Message).NotTo(ContainSubstring("nginx"))
		Expect(readyReason(getRing(ctx, ring).Status.Conditions)).To(Equal(v1alpha1.ReasonPublished))
		Eventually(warnings(ctx, ns, v1alpha1.ReasonFormatKeepsFewerKeys), timeout, poll).Should(HaveLen(1))

		By("a later reconcile, unchanged, emits no second event")
		poke(ctx, ring)
		Consistently(warnings(ctx, ns, v1alpha1.ReasonFormatKeepsFewerKeys), 2*time.Second, poll).Should(HaveLen(1))

		By("retainedKeys 1, which HAProxy holds: no longer limited")
		patchRing(ctx, ring, func(r *v1alpha1.TicketKeyRing) { r.Spec.RetainedKeys = 1 })
		Eventually(func() metav1.ConditionStatus { return limited().Status }, timeout, poll).Should(Equal(metav1.ConditionFalse))
		Expect(limited().Reason).To(Equal(v1alpha1.ReasonFormatsKeepRetainedKeys))
	})

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

var _ = Describe("A TicketKeyRing deleted and created again under its name", func() {
	It("removes what the deleted ring left, as the garbage collector would, and publishes", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		old := createRing(ctx, ns, "web", nil)
		waitEpoch(ctx, old, 1)
		oldUID := getSecret(ctx, ns, "web-e1").OwnerReferences[0].UID

		By("deleting the ring: envtest runs no garbage collector, so its snapshot and projection stay")
		Expect(k8s.Delete(ctx, old)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(old), &v1alpha1.TicketKeyRing{}))
		}, timeout, poll).Should(BeTrue())
		Expect(trySecret(ctx, ns, "web-e1").Name).To(Equal("web-e1"), "the deleted ring's snapshot is still there")

		By("creating a ring of the same name, which takes the same Secret names")
		ring := createRing(ctx, ns, "web", nil)
		Expect(ring.UID).NotTo(Equal(oldUID))
		waitEpoch(ctx, ring, 1)
		Eventually(func(g Gomega) {
			snap := getSecret(ctx, ns, "web-e1")
			g.Expect(metav1.IsControlledBy(snap, ring)).To(BeTrue(), "the snapshot is the new ring's")
			proj := getSecret(ctx, ns, "web-ticket-keys")
			g.Expect(metav1.IsControlledBy(proj, ring)).To(BeTrue(), "the projection is the new ring's")
			g.Expect(decode(proj)).To(Equal(decode(snap)))
			g.Expect(readyReason(getRing(ctx, ring).Status.Conditions)).NotTo(Equal(v1alpha1.ReasonSecretConflict))
		}, timeout, poll).Should(Succeed())
	})
})
