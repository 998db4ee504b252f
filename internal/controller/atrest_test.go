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
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/testing/atrest"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
)

var _ = Describe("Keys at rest", func() {
	var ctx context.Context
	BeforeEach(func() { ctx = context.Background() })

	// traces lists, for every Secret ringmaster wrote in namespaces, the
	// ids of the keys whose bytes it holds in any encoding Secrets carry.
	traces := func(namespaces []string, keys []keyring.Key) []string {
		GinkgoHelper()
		var found []string
		for _, ns := range namespaces {
			list := &corev1.SecretList{}
			Expect(k8s.List(ctx, list, client.InNamespace(ns))).To(Succeed())
			for _, s := range list.Items {
				if s.Type != distribute.SecretType {
					continue
				}
				var all []byte
				for _, v := range s.Data {
					all = append(all, v...)
				}
				for _, v := range s.Annotations {
					all = append(all, v...)
				}
				for _, k := range keys {
					if t := atrest.FindTraces(all, k.Secret); len(t) > 0 {
						found = append(found, fmt.Sprintf("%s/%s holds key %s (%v)", ns, s.Name, k.ID, t))
					}
				}
			}
		}
		return found
	}

	It("removes every key byte from the projections and snapshots once the last key expires while the source stays down", func() {
		vault := newStandinVault()
		cks := createKeySource(ctx, vault.URL, vault.CA, standinToken, allNamespaces)
		spec := func(s *v1alpha1.TicketKeyRingSpec) {
			s.RotationInterval = metav1.Duration{Duration: 10 * time.Minute}
			s.RetainedKeys = 0
			s.ActivationDelay = metav1.Duration{Duration: time.Minute}
			s.SourceRef = sourceRef(cks.Name)
			s.Distribution.Formats = []v1alpha1.KeyFormat{v1alpha1.KeyFormat(keyring.FormatNginx), v1alpha1.KeyFormat(keyring.FormatHAProxy), v1alpha1.KeyFormat(keyring.FormatEnvoy)}
		}
		ns := newNamespace(ctx)
		ring := createRing(ctx, ns, "gone", func(r *v1alpha1.TicketKeyRing) { spec(&r.Spec) })

		tier := fmt.Sprintf("atrest-%d", time.Now().UnixNano())
		var targets []string
		for range 2 {
			n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "atrest-", Labels: map[string]string{"tier": tier}}}
			Expect(k8s.Create(ctx, n)).To(Succeed())
			targets = append(targets, n.Name)
		}
		cluster := &v1alpha1.ClusterTicketKeyRing{
			ObjectMeta: metav1.ObjectMeta{Name: tier, Annotations: map[string]string{}},
			Spec: v1alpha1.ClusterTicketKeyRingSpec{
				TicketKeyRingSpec: defaultSpec(),
				NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": tier}},
			},
		}
		spec(&cluster.Spec.TicketKeyRingSpec)
		cluster.Spec.Distribution.SecretName = "edge-keys"
		Expect(k8s.Create(ctx, cluster)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(context.Background(), cluster) })
		clusterEpoch := func() int64 {
			got := &v1alpha1.ClusterTicketKeyRing{}
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cluster), got)).To(Succeed())
			return got.Status.Epoch
		}
		pokeBoth := func() {
			GinkgoHelper()
			poke(ctx, ring)
			Expect(testenv.Update(ctx, k8s, &v1alpha1.ClusterTicketKeyRing{ObjectMeta: metav1.ObjectMeta{Name: cluster.Name}}, func(got *v1alpha1.ClusterTicketKeyRing) {
				got.Annotations["test.ringmaster.io/poke"] = fmt.Sprint(time.Now().UnixNano())
			})).To(Succeed())
		}
		waitEpoch(ctx, ring, 1)
		Eventually(clusterEpoch, timeout, poll).Should(BeEquivalentTo(1))
		Eventually(func() string { return trySecret(ctx, targets[1], "edge-keys").Annotations[v1alpha1.EpochAnnotation] }, timeout, poll).Should(Equal("1"))

		everywhere := append([]string{ns, testenv.Namespace}, targets...)
		By("every Secret that holds keys is labelled for backups to skip")
		for _, n := range everywhere {
			list := &corev1.SecretList{}
			Expect(k8s.List(ctx, list, client.InNamespace(n))).To(Succeed())
			for _, s := range list.Items {
				if s.Type == distribute.SecretType {
					Expect(s.Labels).To(HaveKeyWithValue(distribute.ExcludeFromBackupLabel, "true"), "%s/%s", n, s.Name)
				}
			}
		}
		keys := decode(getSecret(ctx, ns, "gone-ticket-keys")).Keys
		keys = append(keys, decode(getSecret(ctx, targets[0], "edge-keys")).Keys...)
		Expect(keys).To(HaveLen(4))
		Expect(traces(everywhere, keys)).NotTo(BeEmpty(), "the scan finds the keys while they live")
		last := slices.MaxFunc(keys, func(a, b keyring.Key) int { return a.ExpiresAt.Compare(b.ExpiresAt) })
		vault.fail.Store(true)

		By("the active key expires and no successor can be minted: the staged key, now active, is all that remains")
		fakeClock.Step(10 * time.Minute)
		pokeBoth()
		waitEpoch(ctx, ring, 2)
		Eventually(clusterEpoch, timeout, poll).Should(BeEquivalentTo(2))

		By("the last key expires with the source still down: one reconcile later, no Secret holds a byte of any key")
		fakeClock.SetTime(last.ExpiresAt)
		pokeBoth()
		waitEpoch(ctx, ring, 3)
		Eventually(clusterEpoch, timeout, poll).Should(BeEquivalentTo(3))
		Eventually(func() []string { return traces(everywhere, keys) }, timeout, poll).Should(BeEmpty())
		for _, p := range []*corev1.Secret{getSecret(ctx, ns, "gone-ticket-keys"), getSecret(ctx, targets[0], "edge-keys"), getSecret(ctx, targets[1], "edge-keys")} {
			r := decode(p)
			Expect(r.Keys).To(BeEmpty(), "projection %s/%s", p.Namespace, p.Name)
			Expect(r.Epoch).To(BeEquivalentTo(3))
			Expect(p.Data).To(HaveLen(1), "no derived file is left: only the key-less ticketkeys.json")
		}
		got := getRing(ctx, ring)
		Expect(got.Status.Keys).To(BeEmpty())
		Expect(got.Status.ActiveKey).To(BeNil())
		overdue := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionRotationOverdue)
		Expect(overdue).NotTo(BeNil())
		Expect(overdue.Status).To(Equal(metav1.ConditionTrue))
		Expect(overdue.Message).To(ContainSubstring("every key has expired and been destroyed (epoch 3 holds none)"))
		Expect(readyReason(got.Status.Conditions)).To(Equal(v1alpha1.ReasonVaultUnavailable))

		By("later passes while the source stays down publish nothing more, and the condition stays true")
		fakeClock.Step(5 * time.Minute)
		poke(ctx, ring)
		Eventually(ringReason(ctx, ring), timeout, poll).Should(Equal(v1alpha1.ReasonVaultUnavailable))
		Consistently(func() int64 { return getRing(ctx, ring).Status.Epoch }, 2*time.Second, poll).Should(BeEquivalentTo(3))
		Expect(meta.IsStatusConditionTrue(getRing(ctx, ring).Status.Conditions, v1alpha1.ConditionRotationOverdue)).To(BeTrue())

		By("the source is back: a new ring of fresh keys")
		vault.fail.Store(false)
		Eventually(func() int64 { return getRing(ctx, ring).Status.Epoch }, time.Minute, poll).Should(BeEquivalentTo(4))
		fresh := decode(getSecret(ctx, ns, "gone-ticket-keys")).Keys
		Expect(fresh).To(HaveLen(2))
		for _, k := range fresh {
			Expect(slices.ContainsFunc(keys, func(old keyring.Key) bool { return old.ID == k.ID })).To(BeFalse())
		}
		Eventually(func() bool {
			return meta.IsStatusConditionFalse(getRing(ctx, ring).Status.Conditions, v1alpha1.ConditionRotationOverdue)
		}, timeout, poll).Should(BeTrue())
	})

	It("recovers from an etcd restore with fresh keys: the restored snapshot's expired keys are deleted, never served again", func() {
		ns := newNamespace(ctx)
		ring := createRing(ctx, ns, "restored", func(r *v1alpha1.TicketKeyRing) {
			r.Spec.RotationInterval = metav1.Duration{Duration: 10 * time.Minute}
			r.Spec.RetainedKeys = 0
			r.Spec.ActivationDelay = metav1.Duration{Duration: time.Minute}
		})
		waitEpoch(ctx, ring, 1)
		fakeClock.Step(10 * time.Minute)
		poke(ctx, ring)
		waitEpoch(ctx, ring, 2)

		By("taking a backup at epoch 2: its snapshot, its projection, the ring's status")
		backupSnap := getSecret(ctx, ns, "restored-e2").DeepCopy()
		backupProj := getSecret(ctx, ns, "restored-ticket-keys").DeepCopy()
		backupStatus := *getRing(ctx, ring).Status.DeepCopy()
		before := decode(backupSnap).Keys

		fakeClock.Step(10 * time.Minute)
		poke(ctx, ring)
		waitEpoch(ctx, ring, 3)
		fakeClock.Step(10 * time.Minute)
		poke(ctx, ring)
		waitEpoch(ctx, ring, 4)

		By("restoring it with the operator down, as after an etcd restore")
		stopManager()
		snaps := &corev1.SecretList{}
		Expect(k8s.List(ctx, snaps, client.InNamespace(ns), client.MatchingLabels{v1alpha1.ComponentLabel: v1alpha1.ComponentSnapshot})).To(Succeed())
		for i := range snaps.Items {
			Expect(k8s.Delete(ctx, &snaps.Items[i])).To(Succeed())
		}
		restored := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: backupSnap.Name, Labels: backupSnap.Labels,
			Annotations: backupSnap.Annotations, OwnerReferences: backupSnap.OwnerReferences}, Type: backupSnap.Type, Data: backupSnap.Data, Immutable: backupSnap.Immutable}
		Expect(k8s.Create(ctx, restored)).To(Succeed())
		Expect(testenv.Update(ctx, k8s, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: backupProj.Name}}, func(s *corev1.Secret) {
			s.Data, s.Annotations[v1alpha1.EpochAnnotation] = backupProj.Data, backupProj.Annotations[v1alpha1.EpochAnnotation]
		})).To(Succeed())
		got := getRing(ctx, ring)
		got.Status = backupStatus
		Expect(k8s.Status().Update(ctx, got)).To(Succeed())
		startManager()
		poke(ctx, ring)

		By("one pass later: fresh keys, and no Secret holds a key of the backup, all expired by now")
		Eventually(func() []string { return traces([]string{ns}, before) }, timeout, poll).Should(BeEmpty())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: backupSnap.Name}, &corev1.Secret{}))
		}, timeout, poll).Should(BeTrue(), "the restored snapshot is deleted")
		r := decode(getSecret(ctx, ns, "restored-ticket-keys"))
		Expect(r.Keys).To(HaveLen(2), "a new ring: the restored keys had all expired")
		Expect(r.Epoch).To(BeEquivalentTo(3), "the epoch follows the restored status: agents holding epoch 4 refuse it until their pods restart")
		for _, k := range r.Keys {
			Expect(slices.ContainsFunc(before, func(old keyring.Key) bool { return old.ID == k.ID })).To(BeFalse())
		}
	})
})
