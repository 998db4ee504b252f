//go:build integration

package controller_test

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/fleet"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
)

var _ = Describe("FleetRequest", func() {
	ctx := context.Background()

	// labelled is a namespace labelled fleet=id, for a request's selector
	// to find only the spec's own rings among the suite's.
	labelled := func(id string) string {
		GinkgoHelper()
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "fleet-", Labels: map[string]string{"fleet": id}}}
		Expect(k8s.Create(ctx, n)).To(Succeed())
		return n.Name
	}
	labels := func(id string) func(*v1alpha1.TicketKeyRing) {
		return func(r *v1alpha1.TicketKeyRing) { r.Labels = map[string]string{"fleet": id} }
	}
	selector := func(id string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": id}}
	}
	request := func(name string, spec v1alpha1.FleetRequestSpec) *v1alpha1.FleetRequest {
		GinkgoHelper()
		fr := &v1alpha1.FleetRequest{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
		Expect(k8s.Create(ctx, fr)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(context.Background(), fr) })
		return fr
	}
	getRequest := func(fr *v1alpha1.FleetRequest) *v1alpha1.FleetRequest {
		GinkgoHelper()
		got := &v1alpha1.FleetRequest{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(fr), got)).To(Succeed())
		return got
	}
	// status is the request's status, which a failed wait prints.
	status := func(fr *v1alpha1.FleetRequest) func() v1alpha1.FleetRequestStatus {
		return func() v1alpha1.FleetRequestStatus { return getRequest(fr).Status }
	}
	complete := Satisfy(fleet.Complete)
	// carriedOut are the snapshots of a ring's that record the request.
	carriedOut := func(home, ringLabel, ring string, fr *v1alpha1.FleetRequest) []string {
		GinkgoHelper()
		list := &corev1.SecretList{}
		Expect(k8s.List(ctx, list, client.InNamespace(home), client.MatchingLabels{ringLabel: ring, v1alpha1.ComponentLabel: v1alpha1.ComponentSnapshot})).To(Succeed())
		var out []string
		for i := range list.Items {
			if uid, _ := distribute.FleetRequestOf(&list.Items[i]); uid == string(fr.UID) {
				out = append(out, list.Items[i].Name)
			}
		}
		return out
	}
	requestEvents := func(fr *v1alpha1.FleetRequest) []string {
		var out []string
		for _, e := range events(ctx, "default") {
			if e.Regarding.Kind == v1alpha1.KindFleetRequest && e.Regarding.Name == fr.Name {
				out = append(out, e.Reason)
			}
		}
		return out
	}

	It("rotates every ring it selects, across namespaces and kinds, once, and leaves one event on itself rather than one per ring", func() {
		id := fmt.Sprintf("rot-%d", time.Now().UnixNano())
		nsA, nsB := labelled(id), labelled(id)
		a := createRing(ctx, nsA, "web", labels(id))
		b := createRing(ctx, nsB, "api", labels(id))
		other := createRing(ctx, nsA, "other", nil)
		ctkr := &v1alpha1.ClusterTicketKeyRing{ObjectMeta: metav1.ObjectMeta{Name: id, Labels: map[string]string{"fleet": id}},
			Spec: v1alpha1.ClusterTicketKeyRingSpec{TicketKeyRingSpec: defaultSpec(), NamespaceSelector: *selector(id)}}
		ctkr.Spec.Distribution.SecretName = id + "-keys"
		Expect(k8s.Create(ctx, ctkr)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(context.Background(), ctkr) })
		for _, r := range []*v1alpha1.TicketKeyRing{a, b, other} {
			waitEpoch(ctx, r, 1)
		}
		ctkrEpoch := func() int64 {
			got := &v1alpha1.ClusterTicketKeyRing{}
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(ctkr), got)).To(Succeed())
			return got.Status.Epoch
		}
		Eventually(ctkrEpoch, timeout, poll).Should(BeEquivalentTo(1))
		fakeClock.Step(5 * time.Minute) // past the rings' activationDelay

		fr := request(id, v1alpha1.FleetRequestSpec{Action: v1alpha1.FleetRotate, RingSelector: selector(id)})
		Eventually(status(fr), timeout, poll).Should(complete)
		st := getRequest(fr).Status
		Expect(st.Selected).To(BeEquivalentTo(3))
		Expect(st.Served).To(BeEquivalentTo(3))
		Expect(st.WaitingCount).To(BeZero())
		Expect(st.StartedAt).NotTo(BeNil())
		Expect(st.LastRingServedAt).NotTo(BeNil())
		Expect(st.LastPodConfirmedAt).NotTo(BeNil())
		Expect(st.Conditions).To(ContainElement(And(HaveField("Type", v1alpha1.ConditionComplete), HaveField("ObservedGeneration", fr.Generation))))

		for _, r := range []*v1alpha1.TicketKeyRing{a, b} {
			waitEpoch(ctx, r, 2)
			got := getRing(ctx, r)
			Expect(got.Status.FleetRequest).To(And(Not(BeNil()), HaveField("UID", string(fr.UID)), HaveField("Epoch", BeEquivalentTo(2))))
			Expect(got.Status.LastRotateRequestedAt).To(BeEmpty(), "the ring's own request is untouched")
			Expect(carriedOut(r.Namespace, v1alpha1.RingLabel, r.Name, fr)).To(Equal([]string{r.Name + "-e2"}))
		}
		Expect(ctkrEpoch()).To(BeEquivalentTo(2))
		Expect(carriedOut(testenv.Namespace, v1alpha1.ClusterRingLabel, ctkr.Name, fr)).To(HaveLen(1))
		Expect(getRing(ctx, other).Status.Epoch).To(BeEquivalentTo(1), "a ring it does not select is left alone")

		Eventually(func() []string { return requestEvents(fr) }, timeout, poll).Should(Equal([]string{v1alpha1.ReasonCompleted}))
		for _, ns := range []string{nsA, nsB} {
			for _, e := range events(ctx, ns) {
				Expect(e.Reason).NotTo(Equal("Rotated"), "no per-ring event for a fleet rotation")
			}
		}
		Consistently(func() []string { return requestEvents(fr) }, 2*time.Second, poll).Should(HaveLen(1))
	})

	It("revokes the rings of one key source, with exactly the per-ring revoke's meaning, and leaves the others", func() {
		id := fmt.Sprintf("rev-%d", time.Now().UnixNano())
		vault := newStandinVault()
		cks := createKeySource(ctx, vault.URL, vault.CA, standinToken, selector(id))
		ns := labelled(id)
		minted := createRing(ctx, ns, "vaulted", func(r *v1alpha1.TicketKeyRing) { r.Spec.SourceRef = sourceRef(cks.Name) })
		local := createRing(ctx, ns, "local", nil)
		waitEpoch(ctx, minted, 1)
		waitEpoch(ctx, local, 1)
		before := decode(getSecret(ctx, ns, minted.ProjectionSecretName()))

		fr := request(id, v1alpha1.FleetRequestSpec{Action: v1alpha1.FleetRevoke, KeySource: cks.Name,
			NamespaceSelector: selector(id), Kinds: []v1alpha1.RingKind{v1alpha1.KindTicketKeyRing}})
		Eventually(status(fr), timeout, poll).Should(complete)
		Expect(getRequest(fr).Status.Selected).To(BeEquivalentTo(1))

		waitEpoch(ctx, minted, 2)
		got := getRing(ctx, minted)
		Expect(got.Status.Revocations).To(HaveLen(1))
		Expect(got.Status.Revocations[0]).To(And(HaveField("RequestedBy", "FleetRequest "+fr.Name), HaveField("Epoch", BeEquivalentTo(2))))
		after := decode(getSecret(ctx, ns, minted.ProjectionSecretName()))
		for _, k := range before.Keys {
			_, held := after.Key(k.ID)
			Expect(held).To(BeFalse(), "revoked key %s is gone from the projection", k.ID)
		}
		Expect(after.Keys).To(HaveLen(2), "a fresh ring, as after a per-ring revoke")
		Expect(getRing(ctx, local).Status.Epoch).To(BeEquivalentTo(1), "a ring minting in-cluster is not selected")
		for _, e := range events(ctx, ns) {
			Expect(e.Reason).NotTo(Equal(v1alpha1.ReasonRevoked), "the request has the one event")
		}
	})

	It("is carried out once by every ring across an operator restart mid-request", func() {
		id := fmt.Sprintf("restart-%d", time.Now().UnixNano())
		var rings []*v1alpha1.TicketKeyRing
		for i := range 3 {
			ns := labelled(id)
			for j := range 4 {
				rings = append(rings, createRing(ctx, ns, fmt.Sprintf("r%d-%d", i, j), nil))
			}
		}
		for _, r := range rings {
			waitEpoch(ctx, r, 1)
		}
		fakeClock.Step(5 * time.Minute)

		fr := request(id, v1alpha1.FleetRequestSpec{Action: v1alpha1.FleetRotate, NamespaceSelector: selector(id)})
		Eventually(func() bool {
			for _, r := range rings {
				if getRing(ctx, r).Status.FleetRequest != nil {
					return true
				}
			}
			return false
		}, timeout, 10*time.Millisecond).Should(BeTrue())
		stopManager()
		startManager()
		Eventually(status(fr), timeout, poll).Should(complete)
		Expect(getRequest(fr).Status.Served).To(BeEquivalentTo(len(rings)))

		By("another restart, and a look at every ring: none carries it out again")
		stopManager()
		startManager()
		for _, r := range rings {
			poke(ctx, r)
		}
		Consistently(func() []int64 {
			var epochs []int64
			for _, r := range rings {
				epochs = append(epochs, getRing(ctx, r).Status.Epoch)
			}
			return epochs
		}, 3*time.Second, 200*time.Millisecond).Should(HaveEach(BeEquivalentTo(2)))
		for _, r := range rings {
			Expect(carriedOut(r.Namespace, v1alpha1.RingLabel, r.Name, fr)).To(Equal([]string{r.Name + "-e2"}), "ring %s", r.Name)
		}
	})

	It("may be created only with cluster rights: a tenant with ringmaster-ring-editor is refused, ringmaster-fleet-operator allowed", func() {
		Expect(env.Apply(ctx, filepath.Join(testenv.Root(), "config", "rbac", "tenant_roles.yaml"))).To(Succeed())
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "team"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "team-a"}},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "ringmaster-ring-editor"}})).To(Succeed())
		Expect(k8s.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "oncall-" + ns},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "oncall-" + ns}},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "ringmaster-fleet-operator"}})).To(Succeed())
		tenant, err := env.As("team-a")
		Expect(err).NotTo(HaveOccurred())
		// Nothing selected: the spec's request must reach no ring.
		spec := v1alpha1.FleetRequestSpec{Action: v1alpha1.FleetRevoke, NamespaceSelector: selector("nobody")}
		Eventually(func() error {
			return tenant.Create(ctx, &v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"}, Spec: defaultSpec()})
		}, timeout, poll).Should(Succeed(), "the tenant does have its namespace's rings")
		err = tenant.Create(ctx, &v1alpha1.FleetRequest{ObjectMeta: metav1.ObjectMeta{Name: "tenant-" + ns}, Spec: spec})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)

		oncall, err := env.As("oncall-" + ns)
		Expect(err).NotTo(HaveOccurred())
		fr := &v1alpha1.FleetRequest{ObjectMeta: metav1.ObjectMeta{Name: "oncall-" + ns}, Spec: spec}
		Eventually(func() error { return oncall.Create(ctx, fr) }, timeout, poll).Should(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(context.Background(), fr) })

		By("its spec is a record: it cannot be changed")
		got := getRequest(fr)
		changed := got.DeepCopy()
		changed.Spec.Action = v1alpha1.FleetRotate
		err = k8s.Patch(ctx, changed, client.MergeFrom(got))
		Expect(err).To(MatchError(ContainSubstring("a FleetRequest's spec is immutable")))
	})
})
