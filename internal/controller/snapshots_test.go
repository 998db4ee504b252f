//go:build integration

package controller_test

import (
	"context"
	"crypto/rand"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/controller"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

// laggingCache stands for the operator's cache at its worst: frozen, its
// lists of Secrets answer what the API server answered when it froze, as an
// informer that has not yet seen the latest watch events would. Writes go
// to the API server.
type laggingCache struct {
	client.Client
	frozen *corev1.SecretList
	sel    client.MatchingLabels
	ns     string
}

func (c *laggingCache) freeze(ctx context.Context) {
	GinkgoHelper()
	list := &corev1.SecretList{}
	Expect(c.Client.List(ctx, list, client.InNamespace(c.ns), c.sel)).To(Succeed())
	c.frozen = list
}

func (c *laggingCache) thaw() { c.frozen = nil }

func (c *laggingCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if l, ok := list.(*corev1.SecretList); ok && c.frozen != nil {
		c.frozen.DeepCopyInto(l)
		return nil
	}
	return c.Client.List(ctx, list, opts...)
}

// countingReader counts the lists that reach the API server.
type countingReader struct {
	client.Reader
	lists atomic.Int32
}

func (r *countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	r.lists.Add(1)
	return r.Reader.List(ctx, list, opts...)
}

var _ = Describe("The snapshots a reconcile plans from", func() {
	var (
		ctx   context.Context
		owner distribute.Owner
		cache *laggingCache
		api   *countingReader
		w     *controller.RingSecrets
		epoch int64
	)
	BeforeEach(func() {
		ctx = context.Background()
		ns := newNamespace(ctx)
		// No ring object: the operator of the suite leaves these Secrets
		// alone, and the spec alone writes them, as a reconcile would.
		owner = distribute.Owner{Kind: v1alpha1.KindTicketKeyRing, Name: "fresh", UID: uuid.NewUUID(), Namespace: ns, Home: ns, SecretName: "fresh-ticket-keys"}
		cache = &laggingCache{Client: k8s, sel: client.MatchingLabels(owner.SnapshotLabels()), ns: ns}
		api = &countingReader{Reader: k8s}
		w = controller.NewRingSecrets(cache, api)
		epoch = 0
	})

	publish := func() *corev1.Secret {
		GinkgoHelper()
		epoch++
		plan := keyring.Next(fakeClock.Now(), keyring.Policy{RotationInterval: time.Hour, RetainedKeys: 1, ActivationDelay: time.Minute}, keyring.Ring{}, keyring.Inputs{})
		r := plan.Ring
		for i := range r.Keys {
			var s keyring.Secret
			_, _ = rand.Read(s[:])
			k := keyring.NewKey(s)
			k.ActiveFrom, k.RetireAt, k.ExpiresAt = r.Keys[i].ActiveFrom, r.Keys[i].RetireAt, r.Keys[i].ExpiresAt
			r.Keys[i] = k
		}
		r.Name, r.Epoch, r.IssuedAt = owner.RingName(), epoch, fakeClock.Now()
		snap, err := distribute.Snapshot(owner, r, distribute.Requests{})
		Expect(err).NotTo(HaveOccurred())
		Expect(w.Publish(ctx, owner, snap)).To(Succeed())
		return snap
	}
	names := func() []string {
		GinkgoHelper()
		snaps, err := w.Snapshots(ctx, owner)
		Expect(err).NotTo(HaveOccurred())
		out := make([]string, len(snaps))
		for i, s := range snaps {
			out[i] = s.Name
		}
		return out
	}

	It("come from the cache only when it holds every write of the operator, and from the API server otherwise", func() {
		By("a ring the operator knows nothing of: listed from the API server")
		cache.freeze(ctx)
		Expect(names()).To(BeEmpty())
		Expect(api.lists.Load()).To(BeEquivalentTo(1))

		By("a snapshot the cache has not seen: the API server's list, which holds it")
		e1 := publish()
		Expect(names()).To(Equal([]string{"fresh-e1"}), "never the stale cache's empty list")
		Expect(api.lists.Load()).To(BeEquivalentTo(2))

		By("the cache caught up: read from it")
		cache.thaw()
		Expect(names()).To(Equal([]string{"fresh-e1"}))
		Expect(names()).To(Equal([]string{"fresh-e1"}))
		Expect(api.lists.Load()).To(BeEquivalentTo(2))

		By("the next epoch, unseen by the cache: the API server's list again")
		cache.freeze(ctx)
		publish()
		Expect(names()).To(Equal([]string{"fresh-e2", "fresh-e1"}))
		Expect(api.lists.Load()).To(BeEquivalentTo(3))

		By("a snapshot the operator deleted, still in the cache: left out, as the API server would")
		cache.thaw()
		cache.freeze(ctx)
		Expect(w.Destroy(ctx, owner, []*corev1.Secret{e1}, func(*corev1.Secret) bool { return true })).To(Succeed())
		Expect(names()).To(Equal([]string{"fresh-e2"}))
		Expect(api.lists.Load()).To(BeEquivalentTo(3), "the cache, less what the operator deleted")

		By("a snapshot deleted by someone else: the cache no longer holds what the operator knows, so the API server's list")
		cache.thaw()
		Expect(k8s.Delete(ctx, getSecret(ctx, owner.Home, "fresh-e2"))).To(Succeed())
		Eventually(func() []string { return names() }, timeout, poll).Should(BeEmpty())
		Expect(api.lists.Load()).To(BeNumerically(">=", 4))
	})

	It("are listed from the API server when a snapshot changed since the operator saw it, or for a ring of the name created again", func() {
		publish()
		Expect(names()).To(Equal([]string{"fresh-e1"}))
		Expect(names()).To(Equal([]string{"fresh-e1"}))
		Expect(api.lists.Load()).To(BeEquivalentTo(1), "the create recorded, then the cache")

		By("a label edited by hand: a resourceVersion the operator does not know")
		s := getSecret(ctx, owner.Home, "fresh-e1")
		s.Labels["edited"] = "by-hand"
		Expect(k8s.Update(ctx, s)).To(Succeed())
		Expect(names()).To(Equal([]string{"fresh-e1"}))
		Expect(api.lists.Load()).To(BeEquivalentTo(2))

		By("another ring of the same name")
		owner.UID = uuid.NewUUID()
		Expect(names()).To(BeEmpty(), "the old ring's snapshot is not the new one's")
		Expect(api.lists.Load()).To(BeEquivalentTo(3))
	})
})
