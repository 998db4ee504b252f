//go:build integration

package controller_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
)

// The admission guard of config/admission, on the real API server: only the
// operator writes ringmaster's Secrets, and the operator writes no other.
// The guard is installed for this container only, and removed after it,
// since other specs play a hand-editing administrator.
var _ = Describe("The admission guard of ringmaster's Secrets", Ordered, func() {
	var (
		ctx        context.Context
		ns         string
		tenant     client.Client // may edit everything in ns, Secrets included
		asOperator client.Client
	)
	// probe is a ring-labelled Secret the tenant tries to create (dry run),
	// to see whether the guard is enforced.
	probe := func() error {
		return tenant.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe", Labels: map[string]string{v1alpha1.RingLabel: "web"}},
		}, client.DryRunAll)
	}

	BeforeAll(func() {
		ctx = context.Background()
		ns = newNamespace(ctx)
		// What the "edit" ClusterRole grants of Secrets (which envtest, having
		// no controller-manager to aggregate it, leaves empty).
		for _, obj := range []client.Object{
			&rbacv1.Role{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant-secrets"},
				Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}}},
			},
			&rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant-secrets"},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tenant-secrets"},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "tenant"}},
			},
		} {
			Expect(k8s.Create(ctx, obj)).To(Succeed())
		}
		var err error
		tenant, err = env.As("tenant", "tenants")
		Expect(err).NotTo(HaveOccurred())
		asOperator, err = client.New(operatorCfg, client.Options{Scheme: k8s.Scheme()})
		Expect(err).NotTo(HaveOccurred())
		Eventually(probe, timeout, poll).Should(Succeed(), "before the guard, the tenant may (once the API server sees its RoleBinding)")

		remove, err := env.Guard(ctx)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx context.Context) {
			Expect(remove(ctx)).To(Succeed())
			Eventually(probe, timeout, poll).Should(Succeed(), "the guard no longer enforced")
		})
		Eventually(probe, timeout, poll).Should(MatchError(ContainSubstring("ringmaster-secrets")), "the guard enforced")
	})

	// refused checks that err is the guard's refusal, naming the policy, with
	// the message of the rule that refused.
	refused := func(what string, err error, message string) {
		GinkgoHelper()
		Expect(err).To(HaveOccurred(), what)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: want Forbidden, got %v", what, err)
		Expect(err.Error()).To(And(
			ContainSubstring("ValidatingAdmissionPolicy '%s'", testenv.GuardName),
			ContainSubstring(testenv.GuardName+": "+message)), what)
	}
	const onlyOperator = "only the ringmaster operator (system:serviceaccount:ringmaster-system:ringmaster) may "
	const onlyType = "the ringmaster operator may write only Secrets of type ringmaster.io/ticket-keys, and may not "

	It("refuses a tenant's forged snapshot, forged projection and ring-labelled Secret, naming the policy; the operator still rotates", func() {
		ring := createRing(ctx, ns, "web", nil)
		waitEpoch(ctx, ring, 1)
		projection := getSecret(ctx, ns, "web-ticket-keys")
		snapshot := getSecret(ctx, ns, "web-e1")
		before := maps.Clone(projection.Data)

		By("a forged snapshot, owner reference copied from the projection")
		forged := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-e2", Labels: maps.Clone(snapshot.Labels), OwnerReferences: forgedRefs(projection)},
			Type:       distribute.SecretType, Data: snapshot.Data, Immutable: snapshot.Immutable,
		}
		forged.Labels[v1alpha1.EpochLabel] = "2"
		refused("a forged snapshot", tenant.Create(ctx, forged), onlyOperator+"create Secret "+ns+"/web-e2")
		forged.Name, forged.Labels[v1alpha1.EpochLabel] = "web-e"+strconv.FormatInt(math.MaxInt64, 10), strconv.FormatInt(math.MaxInt64, 10)
		refused("a snapshot whose epoch would overflow", tenant.Create(ctx, forged), onlyOperator+"create")
		forged.Name, forged.Labels, forged.OwnerReferences = "unlabelled", nil, nil
		refused("a Secret of ringmaster's type with no label", tenant.Create(ctx, forged), onlyOperator+"create Secret "+ns+"/unlabelled")

		By("the projection: edited, relabelled out, deleted")
		edited := projection.DeepCopy()
		edited.Data[keyring.FileName] = []byte(`{"version":1}`)
		refused("an edited projection", tenant.Update(ctx, edited), onlyOperator+"update Secret "+ns+"/web-ticket-keys")
		out := projection.DeepCopy()
		out.Labels, out.OwnerReferences = nil, nil
		refused("a projection relabelled out", tenant.Update(ctx, out), onlyOperator+"update")
		refused("a deleted projection", tenant.Delete(ctx, projection.DeepCopy()), onlyOperator+"delete Secret "+ns+"/web-ticket-keys")
		refused("a deleted snapshot", tenant.Delete(ctx, snapshot.DeepCopy()), onlyOperator+"delete Secret "+ns+"/web-e1")

		By("an Opaque Secret labelled for a ring, or relabelled into one")
		decoy := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "decoy", Labels: map[string]string{v1alpha1.ClusterRingLabel: "edge"}},
			Data:       map[string][]byte{"padding": bytes.Repeat([]byte("x"), 1<<10)},
		}
		refused("a cluster-ring-labelled Secret", tenant.Create(ctx, decoy), onlyOperator+"create Secret "+ns+"/decoy")
		decoy.Labels = map[string]string{v1alpha1.ECHRingLabel: "web"}
		refused("an ech-ring-labelled Secret", tenant.Create(ctx, decoy), onlyOperator+"create Secret "+ns+"/decoy")
		mine := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mine"}, StringData: map[string]string{"password": "hunter2"}}
		Expect(tenant.Create(ctx, mine)).To(Succeed(), "the tenant's own Secrets are left alone")
		mine.Labels = map[string]string{v1alpha1.ComponentLabel: v1alpha1.ComponentSnapshot}
		refused("a Secret relabelled into ringmaster's", tenant.Update(ctx, mine), onlyOperator+"update Secret "+ns+"/mine")
		Expect(tenant.Get(ctx, client.ObjectKeyFromObject(mine), mine)).To(Succeed())
		mine.StringData = map[string]string{"password": "hunter3"}
		Expect(tenant.Update(ctx, mine)).To(Succeed())
		Expect(tenant.Delete(ctx, mine)).To(Succeed())

		By("nothing of the ring changed")
		Expect(getSecret(ctx, ns, "web-ticket-keys").Data).To(Equal(before))
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-e2"}, &corev1.Secret{}))).To(BeTrue())

		By("the operator still rotates, under the guard")
		fakeClock.Step(time.Hour)
		poke(ctx, ring)
		waitEpoch(ctx, ring, 2)
		next := decode(getSecret(ctx, ns, "web-ticket-keys"))
		Expect(next.Keys[1].ID).To(Equal(decode(snapshot).Keys[0].ID), "the staged key of epoch 1 encrypts in epoch 2")
		Expect(readyReason(getRing(ctx, ring).Status.Conditions)).To(Equal(v1alpha1.ReasonPublished))

		By("and restores a projection garbage collection removed")
		gc, err := env.As("system:serviceaccount:kube-system:generic-garbage-collector", "system:serviceaccounts", "system:serviceaccounts:kube-system")
		Expect(err).NotTo(HaveOccurred())
		want := getSecret(ctx, ns, "web-ticket-keys")
		Expect(gc.Delete(ctx, want)).To(Succeed(), "garbage collection deletes ringmaster's Secrets")
		Eventually(func() string { return string(trySecret(ctx, ns, "web-ticket-keys").UID) }, timeout, poll).ShouldNot(Or(BeEmpty(), Equal(string(want.UID))))
		Expect(getSecret(ctx, ns, "web-ticket-keys").Data).To(Equal(want.Data))

		By("namespace deletion may delete them too")
		nsc, err := env.As("system:serviceaccount:kube-system:namespace-controller", "system:serviceaccounts", "system:serviceaccounts:kube-system")
		Expect(err).NotTo(HaveOccurred())
		Expect(nsc.Delete(ctx, getSecret(ctx, ns, "web-e1"))).To(Succeed())
	})

	It("lets the garbage collector strip owner references, as an orphan delete has it do, and change nothing else", func() {
		ring := createRing(ctx, ns, "gc", nil)
		waitEpoch(ctx, ring, 1)
		gc, err := env.As("system:serviceaccount:kube-system:generic-garbage-collector", "system:serviceaccounts", "system:serviceaccounts:kube-system")
		Expect(err).NotTo(HaveOccurred())
		snapshot := getSecret(ctx, ns, "gc-e1")

		relabelled := snapshot.DeepCopy()
		relabelled.OwnerReferences = nil
		relabelled.Labels[v1alpha1.EpochLabel] = "2"
		refused("the collector relabelling while it strips", gc.Update(ctx, relabelled), onlyOperator+"update Secret "+ns+"/gc-e1")
		annotated := snapshot.DeepCopy()
		annotated.Annotations["collector.example/x"] = "y"
		refused("the collector annotating", gc.Update(ctx, annotated), onlyOperator+"update")
		finalized := snapshot.DeepCopy()
		finalized.Finalizers = []string{"example.com/keep"}
		refused("the collector adding a finalizer", gc.Update(ctx, finalized), onlyOperator+"update")
		swapped := snapshot.DeepCopy()
		swapped.OwnerReferences[0].UID = "uid-of-another"
		refused("the collector swapping an owner", gc.Update(ctx, swapped), onlyOperator+"update")

		stripped := snapshot.DeepCopy()
		stripped.OwnerReferences = nil
		Expect(gc.Update(ctx, stripped)).To(Succeed(), "stripping the owner references alone")
		Expect(getSecret(ctx, ns, "gc-e1").Data).To(Equal(snapshot.Data))
	})

	It("lets a user granted repair in a namespace delete ringmaster's Secrets there, and nothing more", func() {
		ring := createRing(ctx, ns, "fix", nil)
		waitEpoch(ctx, ring, 1)
		elsewhere := newNamespace(ctx)
		other := createRing(ctx, elsewhere, "fix", nil)
		waitEpoch(ctx, other, 1)
		Expect(env.Apply(ctx, filepath.Join(testenv.Root(), "config", "rbac", "repair_role.yaml"))).To(Succeed())
		for _, n := range []string{ns, elsewhere} {
			// RBAC's own Secret verbs in both namespaces; repair in ns alone.
			Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Namespace: n, Name: "repairer-secrets"},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "repairer-secrets"},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "repairer"}},
			})).To(Succeed())
		}
		Expect(k8s.Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "repairer-secrets"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "create", "update", "delete"}}},
		})).To(Succeed())
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ringmaster-repair"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "ringmaster-secret-repairer"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "repairer"}},
		})).To(Succeed())
		repairer, err := env.As("repairer")
		Expect(err).NotTo(HaveOccurred())

		snapshot := getSecret(ctx, ns, "fix-e1")
		edited := snapshot.DeepCopy()
		edited.Labels[v1alpha1.EpochLabel] = "9"
		refused("a repairer editing", repairer.Update(ctx, edited), onlyOperator+"update Secret "+ns+"/fix-e1")
		forged := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fix-e9", Labels: edited.Labels}, Type: distribute.SecretType, Data: snapshot.Data}
		refused("a repairer creating", repairer.Create(ctx, forged), onlyOperator+"create Secret "+ns+"/fix-e9")
		refused("a repairer deleting in another namespace", repairer.Delete(ctx, getSecret(ctx, elsewhere, "fix-e1")),
			onlyOperator+"delete Secret "+elsewhere+"/fix-e1: it is of type ringmaster.io/ticket-keys or labelled ringmaster.io/ring, cluster-ring, ech-ring, component or epoch, before or after the change (or whoever may repair ringmaster.io/secrets in "+elsewhere+")")
		Eventually(func() error { return repairer.Delete(ctx, getSecret(ctx, ns, "fix-e1")) }, timeout, poll).Should(Succeed(), "deleting in the namespace of the binding (once the authorizer sees it)")
		Expect(trySecret(ctx, elsewhere, "fix-e1").UID).NotTo(BeEmpty())
	})

	It("refuses the operator any write to a Secret of another type", func() {
		opaque := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-password"}, StringData: map[string]string{"password": "hunter2"}}
		refused("creating an Opaque Secret", asOperator.Create(ctx, opaque.DeepCopy()), onlyType+"create Secret "+ns+"/app-password of type Opaque")
		Expect(k8s.Create(ctx, opaque)).To(Succeed())
		taken := getSecret(ctx, ns, "app-password")
		taken.Data["password"] = []byte("mine now")
		refused("updating an Opaque Secret", asOperator.Update(ctx, taken), onlyType+"update Secret "+ns+"/app-password of type Opaque")
		refused("deleting an Opaque Secret", asOperator.Delete(ctx, getSecret(ctx, ns, "app-password")), onlyType+"delete Secret "+ns+"/app-password of type Opaque")
		token := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default-token", Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}},
			Type:       corev1.SecretTypeServiceAccountToken,
		}
		refused("creating a service account token Secret", asOperator.Create(ctx, token), onlyType+"create Secret "+ns+"/default-token of type kubernetes.io/service-account-token")
		Expect(getSecret(ctx, ns, "app-password").Data["password"]).To(Equal([]byte("hunter2")))
	})
})

var _ = Describe("A forged snapshot, without the admission guard", func() {
	It("halts the ring with InvalidSnapshot when its epoch label would overflow the next epoch, and recovers once it is removed", func() {
		ctx := context.Background()
		ns := newNamespace(ctx)
		ring := createRing(ctx, ns, "web", nil)
		waitEpoch(ctx, ring, 1)
		snapshot := getSecret(ctx, ns, "web-e1")
		r := decode(snapshot)
		r.Epoch = math.MaxInt64
		data, err := keyring.Encode(r)
		Expect(err).NotTo(HaveOccurred())
		epoch := strconv.FormatInt(math.MaxInt64, 10)
		forged := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-e" + epoch, Labels: maps.Clone(snapshot.Labels), OwnerReferences: snapshot.OwnerReferences},
			Type:       distribute.SecretType, Data: map[string][]byte{keyring.FileName: data},
		}
		forged.Labels[v1alpha1.EpochLabel] = epoch
		Expect(k8s.Create(ctx, forged)).To(Succeed())
		poke(ctx, ring)

		Eventually(ringReason(ctx, ring), timeout, poll).Should(Equal(v1alpha1.ReasonInvalidSnapshot))
		ready := meta.FindStatusCondition(getRing(ctx, ring).Status.Conditions, v1alpha1.ConditionReady)
		Expect(ready.Message).To(ContainSubstring(fmt.Sprintf("snapshot %s/web-e%s: labelled epoch %s, above %d, the most a ring may reach; delete that Secret", ns, epoch, epoch, distribute.MaxEpoch)))
		Eventually(warnings(ctx, ns, v1alpha1.ReasonInvalidSnapshot), timeout, poll).ShouldNot(BeEmpty())
		Expect(getRing(ctx, ring).Status.Epoch).To(BeEquivalentTo(1), "nothing published past the bound")

		Expect(k8s.Delete(ctx, forged)).To(Succeed())
		fakeClock.Step(time.Hour)
		poke(ctx, ring)
		waitEpoch(ctx, ring, 2)
		Expect(ringReason(ctx, ring)()).To(Equal(v1alpha1.ReasonPublished))
	})
})

var _ = Describe("The operator's cache of ringmaster's Secrets", func() {
	It("keeps whole only the snapshots a ring controls, of its projections the data's digest, and of a tenant's only what tells it apart", func() {
		ctx := context.Background()
		ns := newNamespace(ctx)
		ring := createRing(ctx, ns, "web", nil)
		waitEpoch(ctx, ring, 1)
		bulk := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bulk", Labels: map[string]string{v1alpha1.RingLabel: "web"},
				Annotations: map[string]string{"tenant.example/padding": string(bytes.Repeat([]byte("a"), 200<<10))}},
			Type: distribute.SecretType,
			Data: map[string][]byte{"padding": bytes.Repeat([]byte("x"), 900<<10)},
		}
		Expect(k8s.Create(ctx, bulk)).To(Succeed())

		cached := &corev1.Secret{}
		Eventually(func() error { return operatorCache.Get(ctx, client.ObjectKeyFromObject(bulk), cached) }, timeout, poll).Should(Succeed())
		Expect(cached.Labels).To(Equal(bulk.Labels), "what maps it to a ring")
		Expect(cached.Data).To(BeEmpty())
		Expect(cached.Annotations).To(BeEmpty())
		Expect(cached.ManagedFields).To(BeEmpty())

		snap := &corev1.Secret{}
		Expect(operatorCache.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-e1"}, snap)).To(Succeed())
		Expect(bytes.Equal(snap.Data[keyring.FileName], getSecret(ctx, ns, "web-e1").Data[keyring.FileName])).To(BeTrue(), "the snapshot, whole")
		Expect(snap.ManagedFields).To(BeEmpty())

		own := &corev1.Secret{}
		Expect(operatorCache.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-ticket-keys"}, own)).To(Succeed())
		Expect(own.Data).To(HaveLen(1), "the projection's digest, not its keys")
		Expect(own.Data[distribute.DigestKey]).To(Equal(distribute.DataDigest(getSecret(ctx, ns, "web-ticket-keys").Data)))
		Expect(own.Annotations).To(HaveKeyWithValue(v1alpha1.EpochAnnotation, "1"))
		Expect(own.ManagedFields).To(BeEmpty())
		Expect(ringReason(ctx, ring)()).To(Equal(v1alpha1.ReasonPublished), "a tenant's Secret labelled for the ring changes nothing")
	})
})

// forgedRefs copies a Secret's owner references as a tenant would, without
// blockOwnerDeletion (which OwnerReferencesPermissionEnforcement keeps to
// those who may set the ring's finalizers): the ring's name and UID, which
// the projection shows.
func forgedRefs(s *corev1.Secret) []metav1.OwnerReference {
	refs := make([]metav1.OwnerReference, len(s.OwnerReferences))
	for i, r := range s.OwnerReferences {
		r.BlockOwnerDeletion = nil
		refs[i] = r
	}
	return refs
}
