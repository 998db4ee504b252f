//go:build integration

package controller_test

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/operator"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
)

// Tenancy: a TicketKeyRing's author reaches its own namespace and nothing
// else; what crosses namespaces or uses the operator's credentials is a
// cluster-scoped object's; and the operator itself can do what its
// generated RBAC allows and nothing more.
var _ = Describe("Tenancy", func() {
	var (
		ctx context.Context
		ns  string
	)

	BeforeEach(func() {
		ctx = context.Background()
		ns = newNamespace(ctx)
	})

	It("gives a TicketKeyRing no field to send the operator's credentials anywhere, or to write into another namespace", func() {
		bare := func(name string) *unstructured.Unstructured {
			return &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": v1alpha1.GroupVersion.String(), "kind": v1alpha1.KindTicketKeyRing,
				"metadata": map[string]any{"namespace": ns, "name": name},
				"spec": map[string]any{
					"source": map[string]any{"vault": map[string]any{
						"address": "https://attacker.example:8200",
						"auth":    map[string]any{"kubernetes": map[string]any{"role": "x"}, "tokenSecretRef": map[string]any{"name": "db-password", "key": "password"}},
					}},
					"distribution": map[string]any{"namespaces": []any{"kube-system"}},
				},
			}}
		}
		err := k8s.Create(ctx, bare("strict"), client.FieldValidation("Strict"))
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(And(ContainSubstring(`unknown field "spec.source"`), ContainSubstring(`unknown field "spec.distribution.namespaces"`)))

		By("a client that does not ask for strict validation gets the fields dropped")
		Expect(k8s.Create(ctx, bare("lax"))).To(Succeed())
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(v1alpha1.KindTicketKeyRing))
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "lax"}, got)).To(Succeed())
		_, hasSource, _ := unstructured.NestedFieldNoCopy(got.Object, "spec", "source")
		_, hasTargets, _ := unstructured.NestedFieldNoCopy(got.Object, "spec", "distribution", "namespaces")
		Expect(hasSource || hasTargets).To(BeFalse(), "the API server pruned them")
		ring := &v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lax"}}
		waitEpoch(ctx, ring, 1)

		By("its Secrets are in its namespace only")
		all := &corev1.SecretList{}
		Expect(k8s.List(ctx, all, client.MatchingLabels{v1alpha1.RingLabel: "lax"})).To(Succeed())
		for _, s := range all.Items {
			Expect(s.Namespace).To(Equal(ns), "Secret %s/%s", s.Namespace, s.Name)
		}
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "lax-ticket-keys"}, &corev1.Secret{}))).To(BeTrue())
	})

	It("mints from a key source only for the namespaces the key source allows", func() {
		vault := newStandinVault()
		team := fmt.Sprintf("team-%d", time.Now().UnixNano())
		only := createKeySource(ctx, vault.URL, vault.CA, standinToken, &metav1.LabelSelector{MatchLabels: map[string]string{"team": team}})
		closed := createKeySource(ctx, vault.URL, vault.CA, standinToken, nil)

		ring := createRing(ctx, ns, "web", func(r *v1alpha1.TicketKeyRing) { r.Spec.SourceRef = sourceRef(only.Name) })
		Eventually(ringReason(ctx, ring), timeout, poll).Should(Equal(v1alpha1.ReasonKeySourceNotAllowed))
		Expect(meta.FindStatusCondition(getRing(ctx, ring).Status.Conditions, v1alpha1.ConditionReady).Message).To(
			ContainSubstring(fmt.Sprintf("ClusterKeySource %s does not allow rings of namespace %s", only.Name, ns)))
		Eventually(warnings(ctx, ns, v1alpha1.ReasonKeySourceNotAllowed), timeout, poll).Should(HaveLen(1))
		Expect(vault.mints.Load()).To(BeZero(), "nothing was minted for the ring")
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-e1"}, &corev1.Secret{}))).To(BeTrue())

		By("a key source without a selector allows no TicketKeyRing")
		other := createRing(ctx, ns, "api", func(r *v1alpha1.TicketKeyRing) { r.Spec.SourceRef = sourceRef(closed.Name) })
		Eventually(ringReason(ctx, other), timeout, poll).Should(Equal(v1alpha1.ReasonKeySourceNotAllowed))

		By("labelling the namespace lets the ring mint, without touching the ring")
		n := &corev1.Namespace{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: ns}, n)).To(Succeed())
		n.Labels["team"] = team
		Expect(k8s.Update(ctx, n)).To(Succeed())
		waitEpoch(ctx, ring, 1)
		Expect(vault.mints.Load()).To(BeEquivalentTo(2))
		Consistently(ringReason(ctx, other), time.Second, poll).Should(Equal(v1alpha1.ReasonKeySourceNotAllowed))
	})

	It("says when a ring names a key source that does not exist, and mints once it does", func() {
		name := fmt.Sprintf("vault-later-%d", time.Now().UnixNano())
		ring := createRing(ctx, ns, "web", func(r *v1alpha1.TicketKeyRing) { r.Spec.SourceRef = sourceRef(name) })
		Eventually(ringReason(ctx, ring), timeout, poll).Should(Equal(v1alpha1.ReasonKeySourceNotFound))
		Eventually(warnings(ctx, ns, v1alpha1.ReasonKeySourceNotFound), timeout, poll).Should(HaveLen(1))

		vault := newStandinVault()
		cks := createKeySource(ctx, vault.URL, vault.CA, standinToken, allNamespaces)
		Eventually(func() error {
			got := getRing(ctx, ring)
			got.Spec.SourceRef = sourceRef(cks.Name)
			return k8s.Update(ctx, got)
		}, timeout, poll).Should(Succeed())
		waitEpoch(ctx, ring, 1)
	})

	It("reads a key source's Secrets in the operator's namespace only, never a ring's", func() {
		Expect(k8s.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant-token"},
			Data:       map[string][]byte{"token": []byte(standinToken)},
		})).To(Succeed())
		vault := newStandinVault()
		cks := createKeySource(ctx, vault.URL, vault.CA, standinToken, allNamespaces)
		Eventually(func() error {
			c := getKeySource(ctx, cks.Name)
			c.Spec.Vault.Auth.TokenSecretRef.Name = "tenant-token"
			return k8s.Update(ctx, c)
		}, timeout, poll).Should(Succeed())
		Eventually(func() string {
			c := meta.FindStatusCondition(getKeySource(ctx, cks.Name).Status.Conditions, v1alpha1.ConditionReady)
			if c == nil || c.ObservedGeneration != 2 {
				return ""
			}
			return c.Reason + ": " + c.Message
		}, timeout, poll).Should(Equal(v1alpha1.ReasonVaultConfig + ": Secret " + testenv.Namespace + "/tenant-token named by the key source does not exist"))
	})

	DescribeTable("the API server rejects a key source that could leak the operator's credentials",
		func(mutate func(*v1alpha1.ClusterKeySource), message string) {
			c := &v1alpha1.ClusterKeySource{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: v1alpha1.ClusterKeySourceSpec{Vault: &v1alpha1.VaultSource{
				Address: "https://vault.vault.svc:8200",
				Auth:    v1alpha1.VaultAuth{Kubernetes: &v1alpha1.VaultKubernetesAuth{Role: "ringmaster", Audience: "vault"}},
			}}}
			mutate(c)
			err := k8s.Create(ctx, c)
			if message == "" {
				Expect(err).NotTo(HaveOccurred(), "a valid key source")
				Expect(k8s.Delete(ctx, c)).To(Succeed())
				return
			}
			Expect(err).To(HaveOccurred())
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("a valid address with a port and a path", func(c *v1alpha1.ClusterKeySource) { c.Spec.Vault.Address = "https://vault.vault.svc:8200/" }, ""),
		Entry("a valid IPv6 address", func(c *v1alpha1.ClusterKeySource) { c.Spec.Vault.Address = "https://[fd00::1]:8200" }, ""),
		Entry("a valid nested mount path", func(c *v1alpha1.ClusterKeySource) { c.Spec.Vault.Auth.Kubernetes.MountPath = "clusters/prod.k8s_1" }, ""),
		Entry("a user and password in the address", func(c *v1alpha1.ClusterKeySource) { c.Spec.Vault.Address = "https://ops:hunter2@vault.svc:8200" },
			"address may not hold credentials (user:password@): give them in auth"),
		Entry("a user in the address", func(c *v1alpha1.ClusterKeySource) { c.Spec.Vault.Address = "https://ops@vault.svc:8200/v1" },
			"address may not hold credentials (user:password@): give them in auth"),
		Entry("a mount path that climbs out of auth/", func(c *v1alpha1.ClusterKeySource) { c.Spec.Vault.Auth.Kubernetes.MountPath = "../sys/tools" },
			"mountPath may not hold a . or .. segment"),
		Entry("a mount path with a . segment", func(c *v1alpha1.ClusterKeySource) { c.Spec.Vault.Auth.Kubernetes.MountPath = "kubernetes/." },
			"mountPath may not hold a . or .. segment"),
		Entry("a random path that climbs out of its mount", func(c *v1alpha1.ClusterKeySource) { c.Spec.Vault.RandomPath = "transit/../sys/random" },
			"randomPath may not hold . or .. segments"),
		Entry("a random path with a . segment", func(c *v1alpha1.ClusterKeySource) { c.Spec.Vault.RandomPath = "transit/./random" },
			"randomPath may not hold . or .. segments"),
		Entry("a valid transit random path", func(c *v1alpha1.ClusterKeySource) { c.Spec.Vault.RandomPath = "transit/random" }, ""),
		Entry("an absolute mount path", func(c *v1alpha1.ClusterKeySource) { c.Spec.Vault.Auth.Kubernetes.MountPath = "/kubernetes" },
			"spec.vault.auth.kubernetes.mountPath in body should match"),
		Entry("an AppRole mount path with a query", func(c *v1alpha1.ClusterKeySource) {
			c.Spec.Vault.Auth = v1alpha1.VaultAuth{AppRole: &v1alpha1.VaultAppRoleAuth{RoleID: "r", SecretIDSecretRef: v1alpha1.KeyRef{Name: "s", Key: "id"}, MountPath: "approle?x=1"}}
		}, "spec.vault.auth.appRole.mountPath in body should match"),
		Entry("an AppRole mount path that climbs", func(c *v1alpha1.ClusterKeySource) {
			c.Spec.Vault.Auth = v1alpha1.VaultAuth{AppRole: &v1alpha1.VaultAppRoleAuth{RoleID: "r", SecretIDSecretRef: v1alpha1.KeyRef{Name: "s", Key: "id"}, MountPath: "approle/../../sys"}}
		}, "mountPath may not hold a . or .. segment"),
		Entry("plain http", func(c *v1alpha1.ClusterKeySource) { c.Spec.Vault.Address = "http://vault.vault.svc:8200" },
			"spec.vault.address in body should match"),
		Entry("credentials in the address", func(c *v1alpha1.ClusterKeySource) { c.Spec.Vault.Address = "https://vault.svc:8200?token=x" },
			"spec.vault.address in body should match"),
		Entry("no audience for the operator's token", func(c *v1alpha1.ClusterKeySource) { c.Spec.Vault.Auth.Kubernetes.Audience = "" },
			"spec.vault.auth.kubernetes.audience"),
		Entry("two login methods", func(c *v1alpha1.ClusterKeySource) {
			c.Spec.Vault.Auth.TokenSecretRef = &v1alpha1.KeyRef{Name: "t", Key: "token"}
		}, "auth takes exactly one of kubernetes, tokenSecretRef and appRole"),
		Entry("no Vault", func(c *v1alpha1.ClusterKeySource) { c.Spec.Vault = nil }, "spec.vault"),
	)

	It("runs as its own service account, holding the leader Lease, and is refused what its RBAC does not grant", func() {
		Expect(leaseHolder(ctx)).NotTo(BeEmpty(), "the operator elected itself with the generated RBAC")

		op, err := client.New(operatorCfg, client.Options{Scheme: k8s.Scheme()})
		Expect(err).NotTo(HaveOccurred())
		refused := func(what string, err error) {
			GinkgoHelper()
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: want Forbidden, got %v", what, err)
		}
		tokenFor := func(ns, name string) error {
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
			return op.SubResource("token").Create(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"vault"}}})
		}
		Expect(tokenFor(testenv.Namespace, testenv.ServiceAccount)).To(Succeed(), "a token for itself")
		refused("a token for another service account of its namespace", tokenFor(testenv.Namespace, "default"))
		refused("a token for a service account elsewhere", tokenFor("kube-system", "default"))
		refused("a ConfigMap outside its namespace", op.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "extension-apiserver-authentication"}, &corev1.ConfigMap{}))
		refused("a Lease outside its namespace", op.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "grab"}}))
		refused("another Lease in its namespace", op.Update(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: testenv.Namespace, Name: "kube-lease", ResourceVersion: "1"}}))
		refused("granting itself more", op.Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "ringmaster-escalate"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: testenv.Namespace, Name: testenv.ServiceAccount}},
		}))
		ring := createRing(ctx, ns, "web", nil)
		waitEpoch(ctx, ring, 1)
		mine := getRing(ctx, ring)
		mine.Spec.RetainedKeys = 0
		refused("changing a ring's spec", op.Update(ctx, mine))
		refused("patching a Secret (it never patches one)", op.Patch(ctx, getSecret(ctx, ns, "web-ticket-keys"), client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"x":"y"}}}`))))
		refused("creating a ring", op.Create(ctx, &v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mine"}}))
		Expect(operator.LeaderElectionID).To(Equal("ringmaster.ringmaster.io"), "the Lease name the Role's resourceNames allow")
	})

	It("keeps minting for every other ring while one key source hangs, and gives up on it at the deadline", func() {
		slow := newStandinVault()
		slow.hang.Store(true)
		cks := createKeySource(ctx, slow.URL, slow.CA, standinToken, allNamespaces)
		var stuck []*v1alpha1.TicketKeyRing
		for i := range 2 {
			stuck = append(stuck, createRing(ctx, ns, fmt.Sprintf("stuck-%d", i), func(r *v1alpha1.TicketKeyRing) { r.Spec.SourceRef = sourceRef(cks.Name) }))
		}
		Eventually(slow.inflight.Load, timeout, poll).Should(BeEquivalentTo(2), "both rings wait on the hanging Vault at once")

		fast := createRing(ctx, ns, "fast", nil)
		Eventually(func() bool {
			return getRing(ctx, fast).Status.Epoch == 1 && slow.inflight.Load() > 0
		}, timeout, poll).Should(BeTrue(), "a ring with another source published while the others still waited")

		for _, r := range stuck {
			Eventually(func() string {
				c := meta.FindStatusCondition(getRing(ctx, r).Status.Conditions, v1alpha1.ConditionReady)
				if c == nil {
					return ""
				}
				return c.Reason + ": " + c.Message
			}, mintTimeout+timeout, poll).Should(And(HavePrefix(v1alpha1.ReasonVaultUnavailable), ContainSubstring("Vault did not answer")))
			Expect(getRing(ctx, r).Status.Epoch).To(BeZero())
		}
	})
})
