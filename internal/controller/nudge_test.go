//go:build integration

package controller_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/nudge"
	"github.com/ringmaster-io/ringmaster/internal/testing/knot"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
)

// The nudge: after every new epoch the operator sets one annotation on each
// pod mounting the projection, under the admission guard of
// config/admission/pods.yaml, which lets it change nothing else of a pod.
// The guard is installed for these containers only, and removed after them.

// installPodGuard installs the pods' admission guard until the container
// ends, and waits until the API server enforces it: a dry-run label change
// by the operator is refused.
func installPodGuard(ctx context.Context, ns string) {
	GinkgoHelper()
	probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "guard-probe"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "examples/server"}}}}
	Expect(k8s.Create(ctx, probe)).To(Succeed())
	asOperator, err := client.New(operatorCfg, client.Options{Scheme: k8s.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	label := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"probe":"x"}}}`))
	remove, err := env.PodGuard(ctx)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func(ctx context.Context) {
		Expect(remove(ctx)).To(Succeed())
		Eventually(func() error { return asOperator.Patch(ctx, probe.DeepCopy(), label, client.DryRunAll) }, timeout, poll).Should(Succeed(), "the guard no longer enforced")
	})
	Eventually(func() error { return asOperator.Patch(ctx, probe.DeepCopy(), label, client.DryRunAll) }, timeout, poll).
		Should(MatchError(ContainSubstring(testenv.PodGuardName)), "the guard enforced")
}

var _ = Describe("The admission guard of pods", Ordered, func() {
	var (
		ctx        context.Context
		ns         string
		asOperator client.Client
		pod        *corev1.Pod
	)

	BeforeAll(func() {
		ctx = context.Background()
		ns = newNamespace(ctx)
		// More than the operator's RBAC grants, as an administrator might by
		// mistake: the guard, not RBAC, must refuse what follows.
		for _, obj := range []client.Object{
			&rbacv1.Role{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "operator-too-much"},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Verbs: []string{"get", "create", "update", "patch", "delete"},
					Resources: []string{"pods", "pods/status", "pods/ephemeralcontainers", "pods/eviction", "pods/exec"}}},
			},
			&rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "operator-too-much"},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "operator-too-much"},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: testenv.Namespace, Name: testenv.ServiceAccount}},
			},
		} {
			Expect(k8s.Create(ctx, obj)).To(Succeed())
		}
		var err error
		asOperator, err = client.New(operatorCfg, client.Options{Scheme: k8s.Scheme()})
		Expect(err).NotTo(HaveOccurred())
		installPodGuard(ctx, ns)

		pod = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-0", Labels: map[string]string{"app": "web"},
				Annotations: map[string]string{"team.example/owner": "shop"}},
			Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "server", Image: "examples/server"}}},
		}
		Expect(k8s.Create(ctx, pod)).To(Succeed())
	})

	current := func() *corev1.Pod {
		GinkgoHelper()
		p := &corev1.Pod{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pod), p)).To(Succeed())
		return p
	}
	mergePatch := func(c client.Client, obj client.Object, body string, opts ...client.PatchOption) error {
		return c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(body)), opts...)
	}
	refused := func(what string, err error, message string) {
		GinkgoHelper()
		Expect(err).To(HaveOccurred(), what)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: want Forbidden, got %v", what, err)
		Expect(err.Error()).To(And(ContainSubstring("ValidatingAdmissionPolicy '%s'", testenv.PodGuardName),
			ContainSubstring(testenv.PodGuardName+": the ringmaster operator (system:serviceaccount:ringmaster-system:ringmaster) "+message)), what)
	}

	It("lets the operator set the annotation ringmaster.io/delivered, by merge patch, update or apply, and nothing else changes", func() {
		before := current()
		body, err := nudge.Body(before.UID, nudge.Value("web-ticket-keys", "3"))
		Expect(err).NotTo(HaveOccurred())
		Expect(asOperator.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Name}},
			client.RawPatch(types.MergePatchType, body), client.FieldOwner(nudge.FieldManager))).To(Succeed())
		after := current()
		Expect(after.Annotations).To(Equal(map[string]string{"team.example/owner": "shop", v1alpha1.DeliveredAnnotation: "web-ticket-keys=3"}))
		Expect(after.Labels).To(Equal(before.Labels))
		Expect(after.Spec).To(Equal(before.Spec))
		Expect(after.ResourceVersion).NotTo(Equal(before.ResourceVersion), "a change of the pod, which its kubelet syncs on")
		By("the managed fields admission saw: the creator's entry as it was, the operator's owning the annotation alone")
		for _, e := range before.ManagedFields {
			Expect(after.ManagedFields).To(ContainElement(e), "%s's entry is unchanged", e.Manager)
		}
		Expect(after.ManagedFields).To(ContainElement(And(HaveField("Manager", nudge.FieldManager), HaveField("Operation", metav1.ManagedFieldsOperationUpdate),
			WithTransform(func(e metav1.ManagedFieldsEntry) string { return e.FieldsV1.GetRawString() },
				MatchJSON(`{"f:metadata":{"f:annotations":{"f:`+v1alpha1.DeliveredAnnotation+`":{}}}}`)))))

		updated := after.DeepCopy()
		updated.Annotations[v1alpha1.DeliveredAnnotation] = "web-ticket-keys=4"
		// Under a field manager of its own: the creator's would have the API
		// server rewrite the creator's entry, which the guard refuses.
		Expect(asOperator.Update(ctx, updated, client.FieldOwner("ringmaster-update"))).To(Succeed(), "an update changing the annotation alone")

		applied := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"namespace": ns, "name": pod.Name, "annotations": map[string]any{v1alpha1.DeliveredAnnotation: "web-ticket-keys=5"}}}}
		Expect(asOperator.Apply(ctx, client.ApplyConfigurationFromUnstructured(applied), client.FieldOwner("ringmaster-apply"), client.ForceOwnership)).To(Succeed(), "server-side apply of the annotation alone")
		Expect(current().Annotations).To(HaveKeyWithValue(v1alpha1.DeliveredAnnotation, "web-ticket-keys=5"))

		By("a patch naming another pod's UID takes nothing")
		other, err := nudge.Body("00000000-0000-0000-0000-000000000000", nudge.Value("web-ticket-keys", "6"))
		Expect(err).NotTo(HaveOccurred())
		err = asOperator.Patch(ctx, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Name}}, client.RawPatch(types.MergePatchType, other))
		Expect(err).To(HaveOccurred())
		GinkgoWriter.Printf("A patch naming another UID: %v (reason %s)\n", err, apierrors.ReasonForError(err))
		Expect(current().Annotations).To(HaveKeyWithValue(v1alpha1.DeliveredAnnotation, "web-ticket-keys=5"))
	})

	It("refuses the operator every other change of a pod, whatever RBAC grants it, naming the policy and what changed", func() {
		target := "pod " + ns + "/web-0"
		change := "may change nothing of a pod but the annotation ringmaster.io/delivered, and may not change the "
		only := "may only set the annotation ringmaster.io/delivered of a pod, and may not "
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Name}}
		refused("the image", mergePatch(asOperator, p, `{"spec":{"containers":[{"name":"server","image":"evil.example/server"}]}}`), change+"spec of "+target)
		refused("a deadline", mergePatch(asOperator, p, `{"spec":{"activeDeadlineSeconds":5}}`), change+"spec of "+target)
		refused("a label", mergePatch(asOperator, p, `{"metadata":{"labels":{"app":"other"}}}`), change+"labels of "+target)
		refused("a new label", mergePatch(asOperator, p, `{"metadata":{"labels":{"ringmaster.io/x":"y"}}}`), change+"labels of "+target)
		refused("another annotation", mergePatch(asOperator, p, `{"metadata":{"annotations":{"team.example/owner":"mallory"}}}`), change+"other annotations of "+target)
		refused("a new annotation", mergePatch(asOperator, p, `{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"now"}}}`), change+"other annotations of "+target)
		refused("an annotation removed", mergePatch(asOperator, p, `{"metadata":{"annotations":{"team.example/owner":null}}}`), change+"other annotations of "+target)
		refused("the annotation beside a label", mergePatch(asOperator, p, `{"metadata":{"annotations":{"ringmaster.io/delivered":"web-ticket-keys=9"},"labels":{"app":"x"}}}`),
			change+"labels of "+target)
		refused("an owner reference", mergePatch(asOperator, p, fmt.Sprintf(`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"x","uid":%q}]}}`, "11111111-1111-1111-1111-111111111111")),
			change+"owner references of "+target)
		refused("a finalizer", mergePatch(asOperator, p, `{"metadata":{"finalizers":["example.com/keep"]}}`), change+"finalizers of "+target)
		By("its managed fields: another manager's entry rewritten, or all of them reset, even beside the annotation")
		fields := current().ManagedFields
		creator := slices.IndexFunc(fields, func(e metav1.ManagedFieldsEntry) bool {
			return strings.Contains(e.FieldsV1.GetRawString(), `"f:spec"`)
		})
		Expect(creator).To(BeNumerically(">=", 0), "the pod's creator has an entry")
		refused("another manager's entry renamed", asOperator.Patch(ctx, p, client.RawPatch(types.JSONPatchType,
			[]byte(fmt.Sprintf(`[{"op":"replace","path":"/metadata/managedFields/%d/manager","value":"mallory"}]`, creator)))), change+"managed fields of "+target)
		forged := slices.Clone(fields)
		forged[creator].FieldsV1 = metav1.NewFieldsV1(`{"f:metadata":{"f:labels":{"f:app":{}}}}`)
		rewrite, err := json.Marshal(map[string]any{"metadata": map[string]any{"managedFields": forged,
			"annotations": map[string]string{v1alpha1.DeliveredAnnotation: "web-ticket-keys=9"}}})
		Expect(err).NotTo(HaveOccurred())
		refused("another manager's fields rewritten, beside the annotation", mergePatch(asOperator, p, string(rewrite), client.FieldOwner(nudge.FieldManager)), change+"managed fields of "+target)
		refused("every entry reset", mergePatch(asOperator, p, `{"metadata":{"managedFields":[{}]}}`), change+"managed fields of "+target)
		refused("the annotation set under the creator's field manager, which rewrites its entry", mergePatch(asOperator, p,
			`{"metadata":{"annotations":{"ringmaster.io/delivered":"web-ticket-keys=9"}}}`, client.FieldOwner(fields[creator].Manager)), change+"managed fields of "+target)
		refused("every entry replaced by one of the operator's", mergePatch(asOperator, p,
			`{"metadata":{"managedFields":[{"manager":"ringmaster","operation":"Update","apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:annotations":{"f:ringmaster.io/delivered":{}}}}}]}}`),
			change+"managed fields of "+target)
		refused("by a JSON patch", asOperator.Patch(ctx, p, client.RawPatch(types.JSONPatchType, []byte(`[{"op":"add","path":"/metadata/labels/evil","value":"x"}]`))), change+"labels of "+target)
		refused("by a strategic merge patch", asOperator.Patch(ctx, p, client.RawPatch(types.StrategicMergePatchType, []byte(`{"spec":{"containers":[{"name":"server","image":"evil.example/x"}]}}`))), change+"spec of "+target)
		labelled := current()
		labelled.Labels["app"] = "other"
		refused("by an update", asOperator.Update(ctx, labelled), change+"labels of "+target)
		refused("a value not of the form <secret>=<epoch>", mergePatch(asOperator, p, `{"metadata":{"annotations":{"ringmaster.io/delivered":"`+strings.Repeat("x", 300)+`"}}}`,
			client.FieldOwner(nudge.FieldManager)),
			"may set the annotation ringmaster.io/delivered of "+target+" only to <secret>=<epoch>")

		By("its status and subresources")
		status := current()
		status.Status.Phase = corev1.PodFailed
		refused("the status", asOperator.Status().Update(ctx, status), only+"update "+target+"/status")
		refused("the status by patch", asOperator.Status().Patch(ctx, p, client.RawPatch(types.MergePatchType, []byte(`{"status":{"phase":"Failed"}}`))), only+"update "+target+"/status")
		ephemeral := current()
		ephemeral.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "evil.example/debug"}}}
		refused("an ephemeral container", asOperator.SubResource("ephemeralcontainers").Update(ctx, ephemeral), only+"update "+target+"/ephemeralcontainers")
		refused("an eviction", asOperator.SubResource("eviction").Create(ctx, current(), &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Name}}),
			only+"create "+target+"/eviction")
		refused("a delete", asOperator.Delete(ctx, current()), only+"delete "+target)
		hc, err := rest.HTTPClientFor(operatorCfg)
		Expect(err).NotTo(HaveOccurred())
		resp, err := hc.Post(strings.TrimSuffix(operatorCfg.Host, "/")+"/api/v1/namespaces/"+ns+"/pods/web-0/exec?command=sh&stdout=true", "", nil)
		Expect(err).NotTo(HaveOccurred())
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		Expect(resp.StatusCode).To(Equal(http.StatusForbidden), "an exec: %s", msg)
		Expect(string(msg)).To(ContainSubstring(testenv.PodGuardName + ": the ringmaster operator (system:serviceaccount:ringmaster-system:ringmaster) " + only + "connect " + target + "/exec"))
		refused("a create", asOperator.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "evil"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "evil.example/x"}}}}), only+"create pod "+ns+"/evil")

		By("nothing changed")
		now := current()
		Expect(now.Labels).To(Equal(map[string]string{"app": "web"}))
		Expect(now.Annotations).To(Equal(map[string]string{"team.example/owner": "shop", v1alpha1.DeliveredAnnotation: "web-ticket-keys=5"}))
		Expect(now.Spec.Containers[0].Image).To(Equal("examples/server"))
		Expect(now.Spec.ActiveDeadlineSeconds).To(BeNil())
		Expect(now.OwnerReferences).To(BeEmpty())
		Expect(now.Finalizers).To(BeEmpty())
		Expect(now.Status.Phase).NotTo(Equal(corev1.PodFailed))
		Expect(now.ManagedFields).To(Equal(fields))
	})

	It("judges nobody else", func() {
		Expect(mergePatch(k8s, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Name}},
			`{"metadata":{"labels":{"app":"web2"},"annotations":{"ringmaster.io/delivered":"anything"}}}`)).To(Succeed())
		Expect(current().Labels).To(HaveKeyWithValue("app", "web2"))
	})
})

// annotated counts the pods of ns carrying the annotation value want.
func annotated(ctx context.Context, ns, want string) func() int {
	return func() int {
		list := &metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}}
		if err := k8s.List(ctx, list, client.InNamespace(ns)); err != nil {
			return -1
		}
		n := 0
		for _, p := range list.Items {
			if p.Annotations[v1alpha1.DeliveredAnnotation] == want {
				n++
			}
		}
		return n
	}
}

// mountingPod creates a pod bound to a node that mounts Secret secret
// through a projected volume, as a fleet's pods do; its kubelet would sync
// it, none runs.
func mountingPod(ctx context.Context, c client.Client, ns, name, secret string) error {
	return c.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "fleet"}},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{
			Name: "server", Image: "examples/server",
			VolumeMounts: []corev1.VolumeMount{{Name: "ticket-keys", MountPath: "/var/run/ringmaster", ReadOnly: true}},
		}}, Volumes: []corev1.Volume{{Name: "ticket-keys", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: secret}}}},
		}}}}},
	})
}

var _ = Describe("Nudging the pods of a ring", Ordered, func() {
	var ctx context.Context

	BeforeAll(func() {
		ctx = context.Background()
		installPodGuard(ctx, newNamespace(ctx))
	})

	It("sets the annotation on each running pod mounting the projection at every new epoch, a revoke's too, under the guard, and on no other pod", func() {
		ns := newNamespace(ctx)
		ring := createRing(ctx, ns, "web", nil)
		waitEpoch(ctx, ring, 1)
		for i := range 3 {
			Expect(mountingPod(ctx, k8s, ns, fmt.Sprintf("web-%d", i), "web-ticket-keys")).To(Succeed())
		}
		Expect(mountingPod(ctx, k8s, ns, "other", "other-ticket-keys")).To(Succeed())
		// Not bound to a node yet: it mounts the newest epoch when it starts.
		unbound := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unbound"}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "server", Image: "examples/server", VolumeMounts: []corev1.VolumeMount{{Name: "k", MountPath: "/k"}}}},
			Volumes:    []corev1.Volume{{Name: "k", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "web-ticket-keys"}}}},
		}}
		Expect(k8s.Create(ctx, unbound)).To(Succeed())
		nudged := func() float64 {
			v, _, err := testenv.Metric(registry, "ringmaster_nudges_total", map[string]string{"result": nudge.Nudged})
			Expect(err).NotTo(HaveOccurred())
			return v
		}
		before := nudged()

		By("a rotation")
		// Rotated now rather than by the clock: the suite's fake clock moves
		// by minutes, not hours, in these specs (the replicas' certificates
		// of other specs are valid for a day of it).
		fakeClock.Step(4 * time.Minute) // past the activationDelay (3m)
		requestRotation(ctx, ring, time.Now().UTC().Format(time.RFC3339Nano))
		waitEpoch(ctx, ring, 2)
		Eventually(annotated(ctx, ns, "web-ticket-keys=2"), timeout, poll).Should(Equal(3))
		Eventually(nudged, timeout, poll).Should(BeNumerically(">=", before+3))

		By("a revoke")
		patchRing(ctx, ring, func(r *v1alpha1.TicketKeyRing) {
			r.Annotations[v1alpha1.RevokeRequestedAtAnnotation] = fakeClock.Now().UTC().Format(time.RFC3339)
		})
		Eventually(func() int { return len(getRing(ctx, ring).Status.Revocations) }, timeout, poll).Should(Equal(1))
		epoch := getRing(ctx, ring).Status.Epoch
		waitEpoch(ctx, ring, epoch)
		Eventually(annotated(ctx, ns, fmt.Sprintf("web-ticket-keys=%d", epoch)), timeout, poll).Should(Equal(3))
		Eventually(func() (uint64, error) {
			return histogramCount("ringmaster_nudge_seconds", map[string]string{"priority": "revoke"})
		}, timeout, poll).
			Should(BeNumerically(">=", 1), "the revoke's nudge counted as such")

		for _, name := range []string{"other", "unbound"} {
			p := &corev1.Pod{}
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, p)).To(Succeed())
			Expect(p.Annotations).NotTo(HaveKey(v1alpha1.DeliveredAnnotation), "pod %s", name)
		}
		for _, r := range []string{nudge.Forbidden, nudge.Failed} {
			v, _, err := testenv.Metric(registry, "ringmaster_nudges_total", map[string]string{"result": r})
			Expect(err).NotTo(HaveOccurred())
			Expect(v).To(BeZero(), "no nudge %s under the guard", r)
		}
	})

	It("nudges the pods of every ring kind: a ClusterTicketKeyRing's in each namespace it delivers to, an ECHKeyRing's at each staged config", func() {
		By("a ClusterTicketKeyRing delivering to two namespaces")
		tier := fmt.Sprintf("nudge-%d", time.Now().UnixNano())
		var targets []string
		for range 2 {
			n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "nudge-", Labels: map[string]string{"tier": tier}}}
			Expect(k8s.Create(ctx, n)).To(Succeed())
			targets = append(targets, n.Name)
			for i := range 2 {
				Expect(mountingPod(ctx, k8s, n.Name, fmt.Sprintf("edge-%d", i), "edge-keys")).To(Succeed())
			}
		}
		ctkr := &v1alpha1.ClusterTicketKeyRing{ObjectMeta: metav1.ObjectMeta{Name: tier, Annotations: map[string]string{}},
			Spec: v1alpha1.ClusterTicketKeyRingSpec{TicketKeyRingSpec: defaultSpec(),
				NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": tier}}}}
		ctkr.Spec.Distribution.SecretName = "edge-keys"
		Expect(k8s.Create(ctx, ctkr)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { _ = k8s.Delete(ctx, ctkr) })
		for _, ns := range targets {
			Eventually(annotated(ctx, ns, "edge-keys=1"), timeout, poll).Should(Equal(2), "namespace %s", ns)
		}
		fakeClock.Step(4 * time.Minute) // past the activationDelay (3m)
		Expect(testenv.Update(ctx, k8s, &v1alpha1.ClusterTicketKeyRing{ObjectMeta: metav1.ObjectMeta{Name: ctkr.Name}}, func(r *v1alpha1.ClusterTicketKeyRing) {
			r.Annotations[v1alpha1.RotateRequestedAtAnnotation] = time.Now().UTC().Format(time.RFC3339Nano)
		})).To(Succeed())
		for _, ns := range targets {
			Eventually(annotated(ctx, ns, "edge-keys=2"), timeout, poll).Should(Equal(2), "namespace %s", ns)
		}

		By("an ECHKeyRing staging its first config")
		ns := newNamespace(ctx)
		srv := knot.Run(GinkgoT(), "example.test.", knot.Key{})
		for i := range 2 {
			Expect(mountingPod(ctx, k8s, ns, fmt.Sprintf("web-%d", i), "web-ech-keys")).To(Succeed())
		}
		ech := &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Annotations: map[string]string{}}, Spec: echSpec(createZone(ctx, ns, srv))}
		Expect(k8s.Create(ctx, ech)).To(Succeed())
		Eventually(func() []string { return configStates(getECH(ctx, ech)) }, timeout, poll).Should(Equal([]string{"1:staged"}))
		epoch := getSecret(ctx, ns, "web-ech-keys").Annotations[v1alpha1.EpochAnnotation]
		Expect(epoch).NotTo(BeEmpty())
		Eventually(annotated(ctx, ns, "web-ech-keys="+epoch), timeout, poll).Should(Equal(2))
	})
})

// histogramCount is the sample count of a histogram's series in the
// operator's registry whose labels include the given ones.
func histogramCount(name string, labels map[string]string) (uint64, error) {
	families, err := registry.Gather()
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if matchLabels(m.GetLabel(), labels) {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n, nil
}

// histogramSum is histogramCount's sum.
func histogramSum(name string, labels map[string]string) (float64, error) {
	families, err := registry.Gather()
	if err != nil {
		return 0, err
	}
	var s float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if matchLabels(m.GetLabel(), labels) {
				s += m.GetHistogram().GetSampleSum()
			}
		}
	}
	return s, nil
}

func matchLabels[L interface {
	GetName() string
	GetValue() string
}](have []L, want map[string]string) bool {
	found := 0
	for _, l := range have {
		if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
			found++
		}
	}
	return found == len(want)
}

// apiRequests reads kube-apiserver's own count of requests
// (apiserver_request_total) of a verb on a resource, subresources left
// out, every response code together.
func apiRequests(verb, resource string) float64 {
	GinkgoHelper()
	hc, err := rest.HTTPClientFor(env.Config)
	Expect(err).NotTo(HaveOccurred())
	resp, err := hc.Get(strings.TrimSuffix(env.Config.Host, "/") + "/metrics")
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	Expect(resp.StatusCode).To(Equal(http.StatusOK))
	series := regexp.MustCompile(`^apiserver_request_total\{(.*)\} (\S+)$`)
	var total float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := series.FindStringSubmatch(sc.Text())
		if m == nil || !strings.Contains(m[1], `resource="`+resource+`"`) || !strings.Contains(m[1], `verb="`+verb+`"`) || !strings.Contains(m[1], `subresource=""`) {
			continue
		}
		v, err := strconv.ParseFloat(m[2], 64)
		Expect(err).NotTo(HaveOccurred())
		total += v
	}
	Expect(sc.Err()).NotTo(HaveOccurred())
	return total
}

// scalePods is the fleet of the scale spec.
const scalePods = 1000

var _ = Describe("A revoke of a ring mounted by 1,000 pods", Ordered, func() {
	It("nudges every pod, and delays no rotate-now in another namespace beyond one unhurried reconcile", func(sctx SpecContext) {
		var ctx context.Context = sctx
		installPodGuard(ctx, newNamespace(ctx))
		bigNS, otherNS := newNamespace(ctx), newNamespace(ctx)
		big := createRing(ctx, bigNS, "web", nil)
		other := createRing(ctx, otherNS, "api", nil)
		waitEpoch(ctx, big, 1)
		waitEpoch(ctx, other, 1)

		By(fmt.Sprintf("%d pods mounting the ring's projection, and 3 in another namespace mounting another's", scalePods))
		start := time.Now()
		names := make(chan string)
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				defer GinkgoRecover()
				for name := range names {
					Expect(mountingPod(ctx, k8s, bigNS, name, "web-ticket-keys")).To(Succeed())
				}
			})
		}
		for i := range scalePods {
			names <- fmt.Sprintf("web-%04d", i)
		}
		close(names)
		wg.Wait()
		for i := range 3 {
			Expect(mountingPod(ctx, k8s, otherNS, fmt.Sprintf("api-%d", i), "api-ticket-keys")).To(Succeed())
		}
		GinkgoWriter.Printf("Created %d pods in %s\n", scalePods+3, time.Since(start).Round(time.Millisecond))

		By("a rotation of the big ring first: every pod nudged")
		fakeClock.Step(4 * time.Minute) // past the activationDelay (3m)
		rotationSumBefore, err := histogramSum("ringmaster_nudge_seconds", map[string]string{"priority": "rotation"})
		Expect(err).NotTo(HaveOccurred())
		rotated := time.Now()
		requestRotation(ctx, big, rotated.UTC().Format(time.RFC3339Nano))
		waitEpoch(ctx, big, 2)
		Eventually(annotated(ctx, bigNS, "web-ticket-keys=2"), 5*time.Minute, 250*time.Millisecond).Should(Equal(scalePods))
		rotation := time.Since(rotated)
		Eventually(func() (float64, error) {
			return histogramSum("ringmaster_nudge_seconds", map[string]string{"priority": "rotation"})
		}, timeout, poll).Should(BeNumerically(">", rotationSumBefore))
		rotationSum, err := histogramSum("ringmaster_nudge_seconds", map[string]string{"priority": "rotation"})
		Expect(err).NotTo(HaveOccurred())
		rotationSum -= rotationSumBefore

		By("the revoke, and a rotate-now in the other namespace right after it")
		fakeClock.Step(4 * time.Minute) // past the other ring's activationDelay (3m) once more
		patchesBefore, nudgedBefore := apiRequests("PATCH", "pods"), nudgesTotal(nudge.Nudged)
		revokeSumBefore, err := histogramSum("ringmaster_nudge_seconds", map[string]string{"priority": "revoke"})
		Expect(err).NotTo(HaveOccurred())
		requested := time.Now()
		patchRing(ctx, big, func(r *v1alpha1.TicketKeyRing) {
			r.Annotations[v1alpha1.RevokeRequestedAtAnnotation] = fakeClock.Now().UTC().Format(time.RFC3339)
		})
		id := time.Now().UTC().Format(time.RFC3339Nano)
		otherEpoch := getRing(ctx, other).Status.Epoch
		requestRotation(ctx, other, id)

		Eventually(func() string { return getRing(ctx, other).Status.LastRotateRequestedAt }, timeout, 10*time.Millisecond).Should(Equal(id),
			"the other namespace's rotate-now, within one unhurried reconcile")
		rotateNow := time.Since(requested)
		waitEpoch(ctx, other, getRing(ctx, other).Status.Epoch)
		newEpoch := getRing(ctx, other).Status.Epoch
		Expect(newEpoch).To(BeNumerically(">", otherEpoch))
		Eventually(annotated(ctx, otherNS, fmt.Sprintf("api-ticket-keys=%d", newEpoch)), timeout, 10*time.Millisecond).Should(Equal(3),
			"the other namespace's pods nudged, within one unhurried reconcile")
		otherNudged := time.Since(requested)

		Eventually(func() int { return len(getRing(ctx, big).Status.Revocations) }, timeout, poll).Should(Equal(1))
		revoked := getRing(ctx, big).Status.Epoch
		want := fmt.Sprintf("web-ticket-keys=%d", revoked)
		bigLeft := annotated(ctx, bigNS, want)()
		Eventually(annotated(ctx, bigNS, want), 5*time.Minute, 100*time.Millisecond).Should(Equal(scalePods))
		allNudged := time.Since(requested)
		Eventually(func() (float64, error) {
			return histogramSum("ringmaster_nudge_seconds", map[string]string{"priority": "revoke"})
		}, timeout, poll).Should(BeNumerically(">", revokeSumBefore))
		revokeSum, err := histogramSum("ringmaster_nudge_seconds", map[string]string{"priority": "revoke"})
		Expect(err).NotTo(HaveOccurred())
		patches, nudged := apiRequests("PATCH", "pods")-patchesBefore, nudgesTotal(nudge.Nudged)-nudgedBefore
		for _, r := range []string{nudge.Forbidden, nudge.Failed, nudge.Conflict} {
			Expect(nudgesTotal(r)).To(BeZero(), "no nudge %s", r)
		}
		Expect(nudged).To(BeNumerically(">=", scalePods+3), "each pod nudged")

		report := fmt.Sprintf("%d pods: a rotation's nudges done %s after the request (%.2f s from the projection's write, ringmaster_nudge_seconds); "+
			"revoke: every pod nudged %s after the request (%.2f s from the projection's write); %d PATCH requests of pods meanwhile (kube-apiserver's count), %.0f nudges; "+
			"the other namespace's rotate-now carried out %s after the revoke's request, its 3 pods nudged after %s, while %d of the %d still lacked the revoke's epoch",
			scalePods, rotation.Round(time.Millisecond), rotationSum, allNudged.Round(time.Millisecond), revokeSum-revokeSumBefore,
			int(patches), nudged, rotateNow.Round(time.Millisecond), otherNudged.Round(time.Millisecond), scalePods-bigLeft, scalePods)
		AddReportEntry("nudge at scale", report)
		GinkgoWriter.Printf("MEASURE nudge: %s\n", report)
	}, NodeTimeout(15*time.Minute))
})

// nudgesTotal is ringmaster_nudges_total of a result.
func nudgesTotal(result string) float64 {
	GinkgoHelper()
	v, _, err := testenv.Metric(registry, "ringmaster_nudges_total", map[string]string{"result": result})
	Expect(err).NotTo(HaveOccurred())
	return v
}
