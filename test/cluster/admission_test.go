//go:build cluster

package cluster_test

import (
	"maps"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
)

// guardsRingmastersSecrets runs after the fleet's spec, with the chart's
// admission guard (admissionPolicy.enabled, on by default) installed: a
// tenant of the ring's namespace, who may edit every Secret there, can
// forge none of the ring's; the operator can write no other Secret; the
// operator still rotates, and the cluster's own garbage collector and
// namespace controller still remove ringmaster's Secrets.
func guardsRingmastersSecrets(ctx SpecContext) {
	const policy = release + "-secrets"
	// What the "edit" ClusterRole grants of Secrets (which envtest, having
	// no controller-manager to aggregate it, leaves empty).
	for _, obj := range []client.Object{
		&rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: shopNS, Name: "tenant-secrets"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}}},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: shopNS, Name: "tenant-secrets"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tenant-secrets"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "tenant"}},
		},
	} {
		Expect(cl.Client.Create(ctx, obj)).To(Succeed())
	}
	as := func(user string, groups ...string) client.Client {
		GinkgoHelper()
		cfg := rest.CopyConfig(cl.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append([]string{"system:authenticated"}, groups...)}
		c, err := client.New(cfg, client.Options{Scheme: cl.Client.Scheme()})
		Expect(err).NotTo(HaveOccurred())
		return c
	}
	tenant := as("tenant")
	operatorSA := as("system:serviceaccount:"+releaseNS+":"+release, "system:serviceaccounts", "system:serviceaccounts:"+releaseNS)
	refused := func(what string, err error, message string) {
		GinkgoHelper()
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: want Forbidden, got %v", what, err)
		Expect(err.Error()).To(And(ContainSubstring("ValidatingAdmissionPolicy '"+policy+"'"), ContainSubstring(policy+": "+message)), what)
	}
	onlyOperator := "only the ringmaster operator (system:serviceaccount:" + releaseNS + ":" + release + ") may "

	By("kube-controller-manager type-checking every expression of the policy")
	Eventually(func(g Gomega) {
		p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		g.Expect(cl.Client.Get(ctx, key("", policy), p)).To(Succeed())
		g.Expect(p.Status.TypeChecking).NotTo(BeNil())
		g.Expect(p.Status.TypeChecking.ExpressionWarnings).To(BeEmpty())
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())

	ring, err := cl.GetRing(ctx, shopNS, ringName)
	Expect(err).NotTo(HaveOccurred())
	projection, snapshot := &corev1.Secret{}, &corev1.Secret{}
	Expect(cl.Client.Get(ctx, key(shopNS, keysSecret), projection)).To(Succeed())
	Expect(cl.Client.Get(ctx, key(shopNS, ring.Status.Snapshot), snapshot)).To(Succeed())

	By("a tenant's forged snapshot, forged projection and ring-labelled Secret")
	forged := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: shopNS, Name: ringName + "-e999", Labels: maps.Clone(snapshot.Labels), OwnerReferences: forgedRefs(projection)},
		Type:       snapshot.Type, Data: snapshot.Data,
	}
	forged.Labels[v1alpha1.EpochLabel] = "999"
	refused("a forged snapshot", tenant.Create(ctx, forged), onlyOperator+"create Secret "+shopNS+"/"+forged.Name)
	edited := projection.DeepCopy()
	edited.Data[keyring.FileName] = []byte(`{"version":1}`)
	refused("a forged projection", tenant.Update(ctx, edited), onlyOperator+"update Secret "+shopNS+"/"+keysSecret)
	refused("a deleted projection", tenant.Delete(ctx, projection.DeepCopy()), onlyOperator+"delete Secret "+shopNS+"/"+keysSecret)
	labelled := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: shopNS, Name: "decoy", Labels: map[string]string{v1alpha1.RingLabel: ringName}},
		StringData: map[string]string{"padding": strings.Repeat("x", 1024)},
	}
	refused("a ring-labelled Secret", tenant.Create(ctx, labelled), onlyOperator+"create Secret "+shopNS+"/decoy")
	delete(labelled.Labels, v1alpha1.RingLabel)
	Expect(tenant.Create(ctx, labelled)).To(Succeed(), "the tenant's own Secrets are left alone")

	By("the operator's service account writing a Secret of another type")
	refused("an Opaque Secret written as the operator", operatorSA.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: shopNS, Name: "taken"}}),
		"the ringmaster operator may write only Secrets of type ringmaster.io/ticket-keys, and may not create Secret "+shopNS+"/taken of type Opaque")
	refused("a TLS Secret deleted as the operator", operatorSA.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: shopNS, Name: tlsSecret}}),
		"the ringmaster operator may write only Secrets of type ringmaster.io/ticket-keys, and may not delete Secret "+shopNS+"/"+tlsSecret+" of type kubernetes.io/tls")

	By("the operator still rotating")
	rot, err := cl.Rotate(ctx, shopNS, ringName)
	Expect(err).NotTo(HaveOccurred())
	GinkgoWriter.Printf("Under the admission guard: rotated %s -> %s (epoch %d)\n", rot.From, rot.To, rot.Epoch)
	Expect(cl.Client.Get(ctx, key(shopNS, keysSecret), projection)).To(Succeed())
	Expect(projection.Annotations).To(HaveKeyWithValue(v1alpha1.EpochAnnotation, strconv.FormatInt(rot.Epoch, 10)))

	By("garbage collection and namespace deletion still removing ringmaster's Secrets")
	const guarded = "guarded"
	Expect(cl.CreateNamespace(ctx, guarded)).To(Succeed())
	for _, name := range []string{"collected", "kept"} {
		Expect(cl.Client.Create(ctx, &v1alpha1.TicketKeyRing{
			ObjectMeta: metav1.ObjectMeta{Namespace: guarded, Name: name},
			Spec: v1alpha1.TicketKeyRingSpec{
				RotationInterval: metav1.Duration{Duration: time.Hour}, RetainedKeys: 1,
				ActivationDelay: metav1.Duration{Duration: time.Minute},
			},
		})).To(Succeed())
		_, err := cl.WaitRing(ctx, guarded, name, "Ready", fleet.Ready)
		Expect(err).NotTo(HaveOccurred())
	}
	secretsOf := func(g Gomega, ring string) []string {
		list := &corev1.SecretList{}
		g.Expect(cl.Client.List(ctx, list, inNamespace(guarded), matchingLabels(map[string]string{v1alpha1.RingLabel: ring}))).To(Succeed())
		var names []string
		for _, s := range list.Items {
			names = append(names, s.Name)
		}
		return names
	}
	Eventually(func(g Gomega) { g.Expect(secretsOf(g, "collected")).To(HaveLen(2)) }).WithContext(ctx).Should(Succeed(), "a snapshot and a projection")
	Expect(cl.Client.Delete(ctx, &v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: guarded, Name: "collected"}})).To(Succeed())
	Eventually(func(g Gomega) { g.Expect(secretsOf(g, "collected")).To(BeEmpty()) }).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed(),
		"the garbage collector deleted the ring's Secrets")
	Expect(cl.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: guarded}})).To(Succeed())
	Eventually(func() bool {
		return apierrors.IsNotFound(cl.Client.Get(ctx, key("", guarded), &corev1.Namespace{}))
	}).WithContext(ctx).WithTimeout(2*time.Minute).WithPolling(time.Second).Should(BeTrue(), "the namespace controller deleted the ring and its Secrets")
}

// forgedRefs copies a Secret's owner references as a tenant would, without
// blockOwnerDeletion: the ring's name and UID, which the projection shows.
func forgedRefs(s *corev1.Secret) []metav1.OwnerReference {
	refs := make([]metav1.OwnerReference, len(s.OwnerReferences))
	for i, r := range s.OwnerReferences {
		r.BlockOwnerDeletion = nil
		refs[i] = r
	}
	return refs
}

// guardsPods runs after the fleet's spec, with the chart's defaults
// (nudge.enabled, admissionPolicy.enabled): kube-controller-manager
// type-checks the pods' guard without a warning; the operator nudged the
// fleet's pods through it (each carries the annotation of the ring's newest
// epoch); and its ServiceAccount can change nothing else of a pod.
func guardsPods(ctx SpecContext) {
	const policy = release + "-pods"
	By("kube-controller-manager type-checking every expression of the pods' policy")
	Eventually(func(g Gomega) {
		p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		g.Expect(cl.Client.Get(ctx, key("", policy), p)).To(Succeed())
		g.Expect(p.Status.TypeChecking).NotTo(BeNil())
		g.Expect(p.Status.TypeChecking.ExpressionWarnings).To(BeEmpty())
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())

	By("the fleet's pods nudged through it")
	pods := &corev1.PodList{}
	Eventually(func(g Gomega) {
		ring, err := cl.GetRing(ctx, shopNS, ringName)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cl.Client.List(ctx, pods, inNamespace(shopNS), matchingLabels(map[string]string{"app": "server"}))).To(Succeed())
		g.Expect(pods.Items).NotTo(BeEmpty())
		for _, p := range pods.Items {
			g.Expect(p.Annotations).To(HaveKeyWithValue(v1alpha1.DeliveredAnnotation, keysSecret+"="+strconv.FormatInt(ring.Status.Epoch, 10)), "pod %s", p.Name)
		}
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())

	By("the operator's ServiceAccount changing anything else of a pod")
	cfg := rest.CopyConfig(cl.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + releaseNS + ":" + release,
		Groups: []string{"system:authenticated", "system:serviceaccounts", "system:serviceaccounts:" + releaseNS}}
	operatorSA, err := client.New(cfg, client.Options{Scheme: cl.Client.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: shopNS, Name: pods.Items[0].Name}}
	err = operatorSA.Patch(ctx, pod, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"stolen"}}}`)))
	Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden, got %v", err)
	Expect(err.Error()).To(ContainSubstring(policy + ": the ringmaster operator (system:serviceaccount:" + releaseNS + ":" + release + ") may change nothing of a pod but the annotation " +
		v1alpha1.DeliveredAnnotation + ", and may not change the labels of pod " + shopNS + "/" + pod.Name))
	err = operatorSA.Patch(ctx, pod, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"activeDeadlineSeconds":1}}`)))
	Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden, got %v", err)
	Expect(err.Error()).To(ContainSubstring("may not change the spec of pod " + shopNS + "/" + pod.Name))
}
