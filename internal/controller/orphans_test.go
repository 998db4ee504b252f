//go:build integration

package controller_test

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
)

// What a ring leaves behind when it goes without its Secrets: an orphan
// delete (kubectl delete --cascade=orphan), whose garbage collection this
// control plane (which runs no kube-controller-manager) plays by hand, as
// the collector's own service account; and a ring removed while the
// operator was down.
var _ = Describe("Secrets no live ring controls", func() {
	var ctx context.Context
	BeforeEach(func() { ctx = context.Background() })

	It("are destroyed when a key they hold expires after an orphan delete, not before", func() {
		ns := newNamespace(ctx)
		ring := createRing(ctx, ns, "web", nil)
		waitEpoch(ctx, ring, 1)
		snapshot, projection := getSecret(ctx, ns, "web-e1"), getSecret(ctx, ns, "web-ticket-keys")
		expiry := firstKeyExpiry(decode(snapshot))
		stamp := expiry.UTC().Truncate(time.Second).Format(time.RFC3339)
		Expect(snapshot.Annotations).To(HaveKeyWithValue(v1alpha1.ExpiresAtAnnotation, stamp))
		Expect(projection.Annotations).To(HaveKeyWithValue(v1alpha1.ExpiresAtAnnotation, stamp))

		orphanDelete(ctx, ring)
		flushOrphans(ctx, ns)
		for _, s := range []*corev1.Secret{snapshot, projection} {
			left := getSecret(ctx, ns, s.Name)
			Expect(left.OwnerReferences).To(BeEmpty(), "orphaned by the collector")
			Expect(left.Data).To(Equal(s.Data), "kept while its keys live: pods may still mount it")
		}

		By("a minute before their first key expires, both are still there")
		fakeClock.SetTime(expiry.Add(-time.Minute))
		touch(ctx, snapshot, projection)
		flushOrphans(ctx, ns)
		Expect(trySecret(ctx, ns, "web-e1").UID).To(Equal(snapshot.UID))
		Expect(trySecret(ctx, ns, "web-ticket-keys").UID).To(Equal(projection.UID))

		By("once it has expired, neither is")
		fakeClock.SetTime(expiry.Add(time.Second))
		touch(ctx, snapshot, projection)
		Eventually(func() bool { return gone(ctx, snapshot) && gone(ctx, projection) }, timeout, poll).Should(BeTrue())
		v, _, err := testenv.Metric(registry, "ringmaster_orphaned_secrets_deleted_total", map[string]string{"component": "snapshot", "reason": "expired"})
		Expect(err).NotTo(HaveOccurred())
		Expect(v).To(BeNumerically(">=", 1))
	})

	It("take no ring's name: a ring created again under it takes their place at once, without a SecretConflict", func() {
		ns := newNamespace(ctx)
		ring := createRing(ctx, ns, "web", nil)
		waitEpoch(ctx, ring, 1)
		old := getSecret(ctx, ns, "web-ticket-keys")
		oldKeys := decode(old)
		orphanDelete(ctx, ring)

		again := createRing(ctx, ns, "web", nil)
		Eventually(ringReason(ctx, again), timeout, poll).Should(Equal(v1alpha1.ReasonPublished))
		waitEpoch(ctx, again, 1)
		owner := distribute.OwnerOf(getRing(ctx, again))
		for _, name := range []string{"web-e1", "web-ticket-keys"} {
			Expect(owner.Owns(getSecret(ctx, ns, name))).To(BeTrue(), "%s is the new ring's", name)
		}
		Expect(decode(getSecret(ctx, ns, "web-ticket-keys")).Keys[0].ID).NotTo(Equal(oldKeys.Keys[0].ID), "fresh keys")
		Expect(warnings(ctx, ns, v1alpha1.ReasonSecretConflict)()).To(BeEmpty())
	})

	It("are destroyed when the operator starts, if a ring removed while it was down left them holding only expired keys", func() {
		ns := newNamespace(ctx)
		ring := createRing(ctx, ns, "web", nil)
		waitEpoch(ctx, ring, 1)
		snapshot, projection := getSecret(ctx, ns, "web-e1"), getSecret(ctx, ns, "web-ticket-keys")
		expiry := firstKeyExpiry(decode(snapshot))

		stopManager()
		// No garbage collector runs here: the Secrets keep their owner
		// references to a ring that no longer exists.
		Expect(k8s.Delete(ctx, getRing(ctx, ring))).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(ring), &v1alpha1.TicketKeyRing{}))
		}, timeout, poll).Should(BeTrue())
		fakeClock.SetTime(expiry.Add(time.Second))
		startManager()

		Eventually(func() bool { return gone(ctx, snapshot) && gone(ctx, projection) }, timeout, poll).Should(BeTrue())
	})

	It("never include a Secret that is not ringmaster's by type, labels, name and owners, with no admission guard to keep tenants from making one", func() {
		ns := newNamespace(ctx)
		past := fakeClock.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
		lookAlike := func(name string, typ corev1.SecretType, labels map[string]string, owners []metav1.OwnerReference) *corev1.Secret {
			s := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, OwnerReferences: owners,
					Annotations: map[string]string{v1alpha1.ExpiresAtAnnotation: past}},
				Type: typ, Data: map[string][]byte{keyring.FileName: []byte(`{"version":1}`)},
			}
			Expect(k8s.Create(ctx, s)).To(Succeed())
			return s
		}
		snapshotLabels := func() map[string]string {
			return map[string]string{v1alpha1.RingLabel: "web", v1alpha1.ComponentLabel: v1alpha1.ComponentSnapshot, v1alpha1.EpochLabel: "1"}
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "owner"}}
		Expect(k8s.Create(ctx, cm)).To(Succeed())
		tenant := []*corev1.Secret{
			lookAlike("web-e1", corev1.SecretTypeOpaque, snapshotLabels(), nil),
			lookAlike("web-e2", distribute.SecretType, map[string]string{v1alpha1.RingLabel: "web", v1alpha1.EpochLabel: "2"}, nil),
			lookAlike("web-e3-backup", distribute.SecretType, func() map[string]string { l := snapshotLabels(); l[v1alpha1.EpochLabel] = "3"; return l }(), nil),
			lookAlike("web-e4", distribute.SecretType, func() map[string]string { l := snapshotLabels(); l[v1alpha1.EpochLabel] = "4"; return l }(),
				[]metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: cm.Name, UID: cm.UID}}),
			lookAlike("web-keys", distribute.SecretType, map[string]string{v1alpha1.RingLabel: "web", v1alpha1.ECHRingLabel: "web", v1alpha1.ComponentLabel: v1alpha1.ComponentProjection}, nil),
		}
		touch(ctx, tenant...)
		flushOrphans(ctx, ns)
		for _, s := range tenant {
			Expect(trySecret(ctx, ns, s.Name).UID).To(Equal(s.UID), "%s is left alone", s.Name)
		}
	})
})

// firstKeyExpiry is the earliest expiresAt of r's keys.
func firstKeyExpiry(r keyring.Ring) time.Time {
	first := r.Keys[0].ExpiresAt
	for _, k := range r.Keys {
		if k.ExpiresAt.Before(first) {
			first = k.ExpiresAt
		}
	}
	return first
}

// orphanDelete deletes a ring as `kubectl delete --cascade=orphan` does, and
// does what kube-controller-manager's garbage collector then does, as its
// service account: strip the ring's owner references from its dependents,
// then the orphan finalizer from the ring.
func orphanDelete(ctx context.Context, ring *v1alpha1.TicketKeyRing) {
	GinkgoHelper()
	live := getRing(ctx, ring)
	Expect(k8s.Delete(ctx, live, client.PropagationPolicy(metav1.DeletePropagationOrphan))).To(Succeed())
	gc, err := env.As("system:serviceaccount:kube-system:generic-garbage-collector", "system:serviceaccounts", "system:serviceaccounts:kube-system")
	Expect(err).NotTo(HaveOccurred())
	list := &corev1.SecretList{}
	Expect(k8s.List(ctx, list, client.InNamespace(ring.Namespace), client.MatchingLabels{v1alpha1.RingLabel: ring.Name})).To(Succeed())
	for i := range list.Items {
		s := &list.Items[i]
		var refs []metav1.OwnerReference
		for _, r := range s.OwnerReferences {
			if r.UID != live.UID {
				refs = append(refs, r)
			}
		}
		patch := client.MergeFrom(s.DeepCopy())
		s.OwnerReferences = refs
		Expect(gc.Patch(ctx, s, patch)).To(Succeed(), "the collector strips %s's owner references", s.Name)
	}
	going := getRing(ctx, ring)
	Expect(going.Finalizers).To(ContainElement(metav1.FinalizerOrphanDependents))
	patch := client.MergeFrom(going.DeepCopy())
	going.Finalizers = nil
	Expect(gc.Patch(ctx, going, patch)).To(Succeed())
	Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(ring), &v1alpha1.TicketKeyRing{}))
	}, timeout, poll).Should(BeTrue())
}

// touch updates each Secret's metadata, so that the operator judges it
// again now, as its own requeue would once the fake clock's time arrives
// in real time.
func touch(ctx context.Context, secrets ...*corev1.Secret) {
	GinkgoHelper()
	for _, s := range secrets {
		err := testenv.Update(ctx, k8s, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name}}, func(s *corev1.Secret) {
			s.Annotations["test.ringmaster.io/poke"] = fmt.Sprint(time.Now().UnixNano())
		})
		// One already destroyed needs no poke: the caller waits for it to go.
		Expect(client.IgnoreNotFound(err)).To(Succeed())
	}
}

// flushOrphans waits until the orphan controller has judged every Secret
// event of ns so far: it creates an orphan whose keys all expired (of a
// ring that never existed) after them, and waits until it is gone. The
// controller works through its queue in order, with one worker.
func flushOrphans(ctx context.Context, ns string) {
	GinkgoHelper()
	sentinel := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "flush-e1",
			Labels:      map[string]string{v1alpha1.RingLabel: "flush", v1alpha1.ComponentLabel: v1alpha1.ComponentSnapshot, v1alpha1.EpochLabel: "1"},
			Annotations: map[string]string{v1alpha1.ExpiresAtAnnotation: fakeClock.Now().Add(-time.Hour).UTC().Format(time.RFC3339)}},
		Type: distribute.SecretType,
	}
	Expect(k8s.Create(ctx, sentinel)).To(Succeed())
	Eventually(func() bool { return gone(ctx, sentinel) }, timeout, poll).Should(BeTrue(), "the orphan controller judged the sentinel")
}

// gone reports whether s (that very Secret, by UID) no longer exists.
func gone(ctx context.Context, s *corev1.Secret) bool {
	return trySecret(ctx, s.Namespace, s.Name).UID != s.UID
}
