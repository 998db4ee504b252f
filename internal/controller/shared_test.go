//go:build integration

package controller_test

import (
	"context"
	"fmt"
	"time"

	vault "github.com/hashicorp/vault/api"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/controller"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/sharedring"
	"github.com/ringmaster-io/ringmaster/internal/sharedring/vaultstore"
	"github.com/ringmaster-io/ringmaster/internal/testing/blackhole"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
	"github.com/ringmaster-io/ringmaster/internal/testing/vaulttest"
)

// sharedPolicy is all a key source sharing rings under ringmaster/ needs:
// random bytes, and the rings' entries, their metadata and destruction.
const sharedPolicy = `
path "sys/tools/random/*"          { capabilities = ["update"] }
path "secret/data/ringmaster/*"     { capabilities = ["create", "read", "update"] }
path "secret/metadata/ringmaster/*" { capabilities = ["read", "update"] }
path "secret/destroy/ringmaster/*"  { capabilities = ["update"] }
`

// These specs share rings through a real Vault's KV v2 engine, playing the
// other cluster's operator by writing the entry directly.
var _ = Describe("Rings shared through Vault KV v2", Ordered, func() {
	var (
		ctx context.Context
		ns  string
		srv *vaulttest.Server
		kv  *vault.KVv2
	)

	BeforeAll(func() {
		var err error
		srv, err = vaulttest.Start(GinkgoT().TempDir(), func(c *vault.Client) error { return c.Sys().PutPolicy("shared", sharedPolicy) })
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(srv.Stop)
		kv = srv.Root.KVv2("secret")
	})

	BeforeEach(func() {
		ctx = context.Background()
		ns = newNamespace(ctx)
	})

	// sharedSourceOf creates a key source sharing the rings of the
	// namespaces shared selects under a path of its own, logged in with a
	// token of sharedPolicy.
	sharedSourceOf := func(shared *metav1.LabelSelector) *v1alpha1.ClusterKeySource {
		tok, err := srv.Root.Auth().Token().Create(&vault.TokenCreateRequest{Policies: []string{"shared"}, TTL: "1h"})
		Expect(err).NotTo(HaveOccurred())
		name := fmt.Sprintf("shared-%d", time.Now().UnixNano())
		Expect(k8s.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: testenv.Namespace, Name: name},
			Data:       map[string][]byte{"token": []byte(tok.Auth.ClientToken), "ca.crt": srv.CA},
		})).To(Succeed())
		cks := &v1alpha1.ClusterKeySource{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.ClusterKeySourceSpec{NamespaceSelector: allNamespaces, Vault: &v1alpha1.VaultSource{
				Address:     srv.Addr,
				Auth:        v1alpha1.VaultAuth{TokenSecretRef: &v1alpha1.KeyRef{Name: name, Key: "token"}},
				CABundle:    &v1alpha1.CABundleSource{SecretKeyRef: &v1alpha1.KeyRef{Name: name, Key: "ca.crt"}},
				SharedRings: &v1alpha1.VaultSharedRings{Path: "ringmaster/" + name, NamespaceSelector: shared},
			}},
		}
		Expect(k8s.Create(ctx, cks)).To(Succeed())
		return cks
	}
	sharedSource := func() *v1alpha1.ClusterKeySource { return sharedSourceOf(allNamespaces) }
	sharedRing := func(name string, cks *v1alpha1.ClusterKeySource) *v1alpha1.TicketKeyRing {
		return createRing(ctx, ns, name, func(r *v1alpha1.TicketKeyRing) {
			r.Spec.SourceRef = sourceRef(cks.Name)
			r.Spec.ActivationDelay = metav1.Duration{Duration: 4 * time.Second} // the entry is read every second
		})
	}
	entryOf := func(cks *v1alpha1.ClusterKeySource, ring string) string {
		return cks.Spec.Vault.SharedRings.Path + "/namespaces/" + ns + "/" + ring
	}
	readEntry := func(entry, ring string) sharedring.Record {
		GinkgoHelper()
		got, err := kv.Get(ctx, entry)
		Expect(err).NotTo(HaveOccurred())
		rec, err := sharedring.Decode(got.Data, ns+"/"+ring)
		Expect(err).NotTo(HaveOccurred())
		rec.Version = int64(got.VersionMetadata.Version)
		return rec
	}
	served := func(ring string) func() []string {
		return func() []string {
			s := trySecret(ctx, ns, ring+"-ticket-keys")
			if len(s.Data) == 0 {
				return nil
			}
			return keyIDs(decode(s)) // decode also has the suite look for the keys in the operator's log
		}
	}
	// sameSpec is the policy of sharedRing's spec.
	sameSpec := keyring.Policy{RotationInterval: time.Hour, RetainedKeys: 3, ActivationDelay: 4 * time.Second}
	// otherCluster writes the entry's next version as another cluster's
	// operator would, under the same spec: rotate-now from the version it
	// read.
	otherCluster := func(entry, ring string, drop bool) keyring.Ring {
		GinkgoHelper()
		rec := readEntry(entry, ring)
		plan := keyring.Next(fakeClock.Now(), sameSpec, rec.Ring, keyring.Inputs{RotateNow: true})
		next := plan.Ring
		if plan.Mint > 0 {
			var err error
			next, err = plan.Fill([]keyring.Secret{keyring.Secret([]byte(fmt.Sprintf("%032d", time.Now().UnixNano())))})
			Expect(err).NotTo(HaveOccurred())
		}
		if drop {
			next.Keys = next.Keys[:len(next.Keys)-1]
		}
		data, err := sharedring.Encode(rec.Next(next, sharedring.PolicyOf(sameSpec), "", ""))
		Expect(err).NotTo(HaveOccurred())
		_, err = kv.Put(ctx, entry, data, vault.WithCheckAndSet(int(rec.Version)))
		Expect(err).NotTo(HaveOccurred())
		return next
	}
	versionOf := func(entry string) func() int {
		return func() int {
			m, err := kv.GetMetadata(ctx, entry)
			Expect(err).NotTo(HaveOccurred())
			return m.CurrentVersion
		}
	}

	It("seeds its entry, adopts a version another cluster wrote, and destroys the versions holding a dropped key", func() {
		cks := sharedSource()
		ring := sharedRing("web", cks)
		entry := entryOf(cks, "web")
		waitEpoch(ctx, ring, 1)
		rec := readEntry(entry, "web")
		Expect(rec.Version).To(BeEquivalentTo(1))
		Expect(served("web")()).To(Equal(keyIDs(rec.Ring)), "the cluster serves what it wrote")
		st := getRing(ctx, ring).Status.Shared
		Expect(st).NotTo(BeNil())
		Expect(st.Path).To(Equal("secret/" + entry))
		Expect(st.Version).To(BeEquivalentTo(1))
		Expect(st.Writer).To(Equal("Local"))
		Expect(getSecret(ctx, ns, "web-e1").Annotations).To(HaveKeyWithValue(v1alpha1.SharedVersionAnnotation, "1"))

		By("adopting version 2, written by another cluster")
		v2 := otherCluster(entry, "web", false)
		Eventually(served("web"), timeout, poll).Should(Equal(keyIDs(v2)))
		Eventually(func() int64 { return getRing(ctx, ring).Status.Shared.Version }, timeout, poll).Should(BeEquivalentTo(2))
		st = getRing(ctx, ring).Status.Shared
		Expect(st.Writer).To(Equal("Adopted"))
		Expect(st.PropagationDelay).NotTo(BeNil())
		Expect(getSecret(ctx, ns, fmt.Sprintf("web-e%d", getRing(ctx, ring).Status.Epoch)).Annotations).
			To(HaveKeyWithValue(v1alpha1.SharedVersionAnnotation, "2"))
		Consistently(func() int {
			m, err := kv.GetMetadata(ctx, entry)
			Expect(err).NotTo(HaveOccurred())
			return m.CurrentVersion
		}, 3*time.Second, 200*time.Millisecond).Should(Equal(2), "an adopted version is not written again")

		By("destroying, in Vault, every version that holds the key version 3 drops")
		v3 := otherCluster(entry, "web", true)
		Eventually(served("web"), timeout, poll).Should(Equal(keyIDs(v3)))
		Eventually(func(g Gomega) {
			m, err := kv.GetMetadata(ctx, entry)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(m.MaxVersions).To(Equal(5))
			g.Expect(m.CASRequired).To(BeTrue())
			g.Expect(m.Versions["1"].Destroyed).To(BeTrue(), "version 1 holds the dropped key")
			g.Expect(m.Versions["2"].Destroyed).To(BeTrue(), "version 2 holds the dropped key")
			g.Expect(m.Versions["3"].Destroyed).To(BeFalse())
		}, timeout, poll).Should(Succeed())
		Expect(meta.IsStatusConditionTrue(getRing(ctx, ring).Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue())
	})

	It("carries out a FleetRequest of its key source once, through its entry, whose version remembers the request", func() {
		cks := sharedSource()
		ring := sharedRing("fleet", cks)
		entry := entryOf(cks, "fleet")
		waitEpoch(ctx, ring, 1)
		fakeClock.Step(5 * time.Second) // past the ring's activationDelay
		before := versionOf(entry)()

		fr := &v1alpha1.FleetRequest{ObjectMeta: metav1.ObjectMeta{Name: "shared-" + ns},
			Spec: v1alpha1.FleetRequestSpec{Action: v1alpha1.FleetRotate, KeySource: cks.Name}}
		Expect(k8s.Create(ctx, fr)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(context.Background(), fr) })
		Eventually(func() *v1alpha1.FleetRequestRecord { return getRing(ctx, ring).Status.FleetRequest }, timeout, poll).
			Should(And(Not(BeNil()), HaveField("UID", string(fr.UID))))

		rec := readEntry(entry, "fleet")
		Expect(rec.Version).To(BeEquivalentTo(before+1), "one version for the request")
		Expect(rec.Handled(distribute.FleetRequestValue(v1alpha1.FleetRotate, string(fr.UID)))).To(BeTrue(),
			"the version remembers the request, so an operator stopped before its snapshot serves it rather than rotate again")
		Eventually(served("fleet"), timeout, poll).Should(Equal(keyIDs(rec.Ring)))
		got := getRing(ctx, ring)
		Expect(got.Status.FleetRequest.Epoch).To(Equal(got.Status.Epoch))
		Expect(got.Status.Shared.Version).To(BeEquivalentTo(before + 1))
		Consistently(versionOf(entry), 3*time.Second, 200*time.Millisecond).Should(Equal(before+1), "the request is carried out once")
	})

	It("refuses an entry holding garbage, keeps serving its keys, and recovers once the entry is sound", func() {
		cks := sharedSource()
		ring := sharedRing("web", cks)
		entry := entryOf(cks, "web")
		waitEpoch(ctx, ring, 1)
		before := served("web")()

		_, err := kv.Put(ctx, entry, map[string]any{sharedring.RingField: `{"not":"a ring"}`}, vault.WithCheckAndSet(1))
		Expect(err).NotTo(HaveOccurred())
		Eventually(ringReason(ctx, ring), timeout, poll).Should(Equal(v1alpha1.ReasonVaultBadResponse))
		msg := meta.FindStatusCondition(getRing(ctx, ring).Status.Conditions, v1alpha1.ConditionReady).Message
		Expect(msg).To(And(ContainSubstring(entry), ContainSubstring("version 2"), ContainSubstring("keeps serving")))
		Consistently(served("web"), 2*time.Second, poll).Should(Equal(before))

		By("a sound version 3")
		sound := readEntryAt(ctx, kv, entry, 1, ns+"/web")
		data, err := sharedring.Encode(sound)
		Expect(err).NotTo(HaveOccurred())
		_, err = kv.Put(ctx, entry, data, vault.WithCheckAndSet(2))
		Expect(err).NotTo(HaveOccurred())
		Eventually(ringReason(ctx, ring), timeout, poll).Should(Equal(v1alpha1.ReasonPublished))
		Expect(served("web")()).To(Equal(before))
		Eventually(func() bool {
			m, err := kv.GetMetadata(ctx, entry)
			return err == nil && m.Versions["2"].Destroyed
		}, timeout, poll).Should(BeTrue(), "the unreadable version is destroyed")
	})

	It("shares a ClusterTicketKeyRing under cluster/, and delivers what its entry holds", func() {
		cks := sharedSource()
		name := fmt.Sprintf("edge-%d", time.Now().UnixNano()%100000)
		Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"edge": name}}})).To(Succeed())
		spec := defaultSpec()
		spec.SourceRef = sourceRef(cks.Name)
		spec.ActivationDelay = metav1.Duration{Duration: 4 * time.Second}
		spec.Distribution.SecretName = "edge-keys"
		ctkr := &v1alpha1.ClusterTicketKeyRing{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.ClusterTicketKeyRingSpec{
			TicketKeyRingSpec: spec, NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"edge": name}},
		}}
		Expect(k8s.Create(ctx, ctkr)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(context.Background(), ctkr) })
		entry := cks.Spec.Vault.SharedRings.Path + "/cluster/" + name
		Eventually(func() error { _, err := kv.Get(ctx, entry); return err }, timeout, poll).Should(Succeed())
		rec := readEntryAt(ctx, kv, entry, 1, name)
		Eventually(func() []string {
			s := trySecret(ctx, name, "edge-keys")
			if len(s.Data) == 0 {
				return nil
			}
			return keyIDs(decode(s))
		}, timeout, poll).Should(Equal(keyIDs(rec.Ring)))
	})

	It("records the ring's policy in the entry it writes", func() {
		cks := sharedSource()
		ring := sharedRing("web", cks)
		waitEpoch(ctx, ring, 1)
		rec := readEntry(entryOf(cks, "web"), "web")
		Expect(rec.Policy).NotTo(BeNil())
		Expect(rec.Policy.Diff(sharedring.PolicyOf(sameSpec))).To(BeEmpty())
	})

	It("shares no TicketKeyRing of a namespace sharedRings does not select, and never adopts the entry its name would have", func() {
		cks := sharedSourceOf(&metav1.LabelSelector{MatchLabels: map[string]string{"ringmaster.io/shared": "yes"}})
		entry := entryOf(cks, "web")
		By("another cluster's entry for a ring of the same namespace and name")
		theirs := keyring.Next(fakeClock.Now(), sameSpec, keyring.Ring{Name: ns + "/web"}, keyring.Inputs{})
		ring, err := theirs.Fill([]keyring.Secret{keyring.Secret([]byte("their staged key, 32 bytes long!")), keyring.Secret([]byte("their active key, 32 bytes long!"))})
		Expect(err).NotTo(HaveOccurred())
		data, err := sharedring.Encode((*sharedring.Record)(nil).Next(ring, sharedring.PolicyOf(sameSpec), "", ""))
		Expect(err).NotTo(HaveOccurred())
		_, err = kv.Put(ctx, entry, data, vault.WithCheckAndSet(0))
		Expect(err).NotTo(HaveOccurred())

		local := sharedRing("web", cks)
		waitEpoch(ctx, local, 1)
		Expect(served("web")()).To(HaveLen(2))
		Expect(served("web")()).NotTo(ContainElements(keyIDs(ring)[0]), "the ring adopted none of the entry's keys")
		Expect(served("web")()).NotTo(ContainElements(keyIDs(ring)[1]), "the ring adopted none of the entry's keys")
		got := getRing(ctx, local)
		Expect(got.Status.Shared).To(BeNil())
		Expect(readyReason(got.Status.Conditions)).To(Equal(v1alpha1.ReasonPublished))
		Expect(getSecret(ctx, ns, "web-e1").Annotations).NotTo(HaveKey(v1alpha1.SharedVersionAnnotation))

		By("rotating in this cluster alone")
		requestRotation(ctx, local, time.Now().UTC().Format(time.RFC3339Nano))
		waitEpoch(ctx, local, 2)
		Consistently(versionOf(entry), 2*time.Second, 200*time.Millisecond).Should(Equal(1), "the entry is left alone")
		Expect(readEntry(entry, "web").Ring.Keys).To(HaveLen(2))
	})

	It("refuses an entry written under another policy: writes nothing, adopts none of its keys, names the fields, and still destroys expired keys", func() {
		cks := sharedSource()
		ring := sharedRing("web", cks)
		entry := entryOf(cks, "web")
		waitEpoch(ctx, ring, 1)
		before := served("web")()

		By("another cluster revoking the ring under a spec of its own")
		theirs := sameSpec
		theirs.RotationInterval, theirs.RetainedKeys = 2*time.Hour, 1
		v1 := readEntry(entry, "web")
		plan := keyring.Next(fakeClock.Now(), theirs, v1.Ring, keyring.Inputs{Revoke: true})
		v2, err := plan.Fill([]keyring.Secret{keyring.Secret([]byte("their staged key, 32 bytes long!")), keyring.Secret([]byte("their active key, 32 bytes long!"))})
		Expect(err).NotTo(HaveOccurred())
		data, err := sharedring.Encode(v1.Next(v2, sharedring.PolicyOf(theirs), "", ""))
		Expect(err).NotTo(HaveOccurred())
		_, err = kv.Put(ctx, entry, data, vault.WithCheckAndSet(1))
		Expect(err).NotTo(HaveOccurred())
		Eventually(ringReason(ctx, ring), timeout, poll).Should(Equal(v1alpha1.ReasonSharedRingPolicyMismatch))
		msg := meta.FindStatusCondition(getRing(ctx, ring).Status.Conditions, v1alpha1.ConditionReady).Message
		Expect(msg).To(And(ContainSubstring(entry), ContainSubstring("version 2"),
			ContainSubstring("rotationInterval is 1h0m0s here and 2h0m0s in the entry"),
			ContainSubstring("retainedKeys is 3 here and 1 in the entry"), Not(ContainSubstring("activationDelay is")),
			ContainSubstring("spec.rotationInterval, spec.retainedKeys")))
		Expect(warnings(ctx, ns, v1alpha1.ReasonSharedRingPolicyMismatch)()).NotTo(BeEmpty())
		Consistently(served("web"), 2*time.Second, poll).Should(Equal(before), "none of version 2's keys was adopted")
		Expect(served("web")()).NotTo(ContainElements(keyIDs(v2)[0]))
		Expect(served("web")()).NotTo(ContainElements(keyIDs(v2)[1]))
		Expect(versionOf(entry)()).To(Equal(2), "nothing was written over the other cluster's version")

		By("a rotate-now request: carried out nowhere while the policies differ")
		requestRotation(ctx, ring, time.Now().UTC().Format(time.RFC3339Nano))
		Consistently(versionOf(entry), 2*time.Second, 200*time.Millisecond).Should(Equal(2))
		Expect(served("web")()).To(Equal(before))

		By("the clock passing the active key's expiresAt")
		fakeClock.Step(4*time.Hour + time.Second)
		poke(ctx, ring)
		Eventually(served("web"), timeout, poll).Should(Equal(before[:1]), "the expired key is destroyed; the staged one, now active, stays")
		Expect(versionOf(entry)()).To(Equal(2))
		Expect(ringReason(ctx, ring)()).To(Equal(v1alpha1.ReasonSharedRingPolicyMismatch))

		By("the spec made the same as the other cluster's")
		patchRing(ctx, ring, func(r *v1alpha1.TicketKeyRing) {
			r.Spec.RotationInterval, r.Spec.RetainedKeys = metav1.Duration{Duration: theirs.RotationInterval}, int32(theirs.RetainedKeys)
		})
		Eventually(ringReason(ctx, ring), timeout, poll).ShouldNot(Equal(v1alpha1.ReasonSharedRingPolicyMismatch))
	})

	It("refuses spec.confirmation on a shared ring, and publishes nothing", func() {
		cks := sharedSource()
		ring := createRing(ctx, ns, "web", func(r *v1alpha1.TicketKeyRing) {
			r.Spec.SourceRef = sourceRef(cks.Name)
			r.Spec.Confirmation = &v1alpha1.Confirmation{Port: intstr.FromInt32(8080)}
		})
		Eventually(ringReason(ctx, ring), timeout, poll).Should(Equal(v1alpha1.ReasonSharedRingUnsupported))
		Expect(trySecret(ctx, ns, "web-ticket-keys").Data).To(BeEmpty())
		_, err := kv.Get(ctx, entryOf(cks, "web"))
		Expect(err).To(MatchError(vault.ErrSecretNotFound))
	})
})

// readEntryAt reads one version of an entry.
func readEntryAt(ctx context.Context, kv *vault.KVv2, entry string, version int, ring string) sharedring.Record {
	GinkgoHelper()
	got, err := kv.GetVersion(ctx, entry, version)
	Expect(err).NotTo(HaveOccurred())
	rec, err := sharedring.Decode(got.Data, ring)
	Expect(err).NotTo(HaveOccurred())
	return rec
}

func keyIDs(r keyring.Ring) []string {
	out := make([]string, len(r.Keys))
	for i, k := range r.Keys {
		out[i] = k.ID
	}
	return out
}

var _ = Describe("Shared rings of a key source whose Vault never answers", func() {
	It("hold up no other ring: another namespace's rotate-now is carried out while they wait, and the Vault never holds more calls than the key source's budget", func(ctx SpecContext) {
		hole := blackhole.Listen(GinkgoT())
		ns := newNamespace(ctx)
		name := fmt.Sprintf("blackhole-%d", time.Now().UnixNano())
		Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testenv.Namespace, Name: name},
			Data: map[string][]byte{"token": []byte("s.never-answered")}})).To(Succeed())
		cks := &v1alpha1.ClusterKeySource{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.ClusterKeySourceSpec{NamespaceSelector: allNamespaces, Vault: &v1alpha1.VaultSource{
				Address:     "https://" + hole.Addr,
				Auth:        v1alpha1.VaultAuth{TokenSecretRef: &v1alpha1.KeyRef{Name: name, Key: "token"}},
				SharedRings: &v1alpha1.VaultSharedRings{Path: "ringmaster/blackhole", NamespaceSelector: allNamespaces},
			}}}
		Expect(k8s.Create(ctx, cks)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(context.Background(), cks) })

		victim := createRing(ctx, newNamespace(ctx), "victim", nil)
		waitEpoch(ctx, victim, 1)

		const stuck = 2 * controller.DefaultRingWorkers
		var rings []*v1alpha1.TicketKeyRing
		for i := range stuck {
			rings = append(rings, createRing(ctx, ns, fmt.Sprintf("shared-%d", i), func(r *v1alpha1.TicketKeyRing) {
				r.Spec.SourceRef = sourceRef(cks.Name)
				r.Spec.ActivationDelay = metav1.Duration{Duration: 4 * time.Second} // its entry is read every second
			}))
		}
		Eventually(hole.Open, timeout, poll).Should(BeNumerically(">", 0), "the rings wait on the Vault that never answers")

		requested := time.Now()
		at := requested.UTC().Format(time.RFC3339Nano)
		requestRotation(ctx, victim, at)
		// Within one read of the blackholed Vault: no worker the victim
		// needed was held by it.
		Eventually(func() string { return getRing(ctx, victim).Status.LastRotateRequestedAt }, vaultstore.SharedReadTimeout, 20*time.Millisecond).Should(Equal(at))
		waited := time.Since(requested)
		Expect(decode(getSecret(ctx, victim.Namespace, "victim-ticket-keys")).Epoch).To(BeEquivalentTo(2), "the victim's pods receive the epoch that carried it out")
		GinkgoWriter.Printf("With %d shared rings on a blackholed Vault and %d ring workers, another namespace's rotate-now was carried out %s after it was requested; the Vault held %d calls at most\n",
			stuck, controller.DefaultRingWorkers, waited.Round(time.Millisecond), hole.MaxOpen())

		for _, r := range rings {
			Eventually(func() string {
				c := meta.FindStatusCondition(getRing(ctx, r).Status.Conditions, v1alpha1.ConditionReady)
				if c == nil {
					return ""
				}
				return c.Reason + ": " + c.Message
			}, timeout, poll).Should(HavePrefix(v1alpha1.ReasonVaultUnavailable))
			Expect(getRing(ctx, r).Status.Epoch).To(BeZero(), "a shared ring that cannot read its entry publishes nothing")
		}
		// The key source's own check, on its own controller's worker, may
		// hold one more.
		Expect(hole.MaxOpen()).To(BeNumerically("<=", vaultstore.SharedCalls+1), "the Vault held more calls than the key source's budget")
		for _, r := range rings {
			Expect(k8s.Delete(ctx, r)).To(Succeed())
		}
	}, NodeTimeout(2*time.Minute))
})
