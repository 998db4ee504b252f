//go:build integration

package controller_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	vault "github.com/hashicorp/vault/api"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
	"github.com/ringmaster-io/ringmaster/internal/testing/vaulttest"
)

// These specs mint keys with a real Vault dev server over TLS (hack/vault.sh
// builds it), through ClusterKeySources, logged into with tokens, AppRoles
// and the operator's own service account tokens from the envtest API server.

const vaultPolicy = `
path "sys/tools/random/*" { capabilities = ["update"] }
path "transit/random/*"   { capabilities = ["update"] }
`

// vaultAudience is the audience the Vault role expects of the operator's
// service account tokens.
const vaultAudience = "vault"

var _ = Describe("Keys from Vault", Ordered, func() {
	var (
		ctx   context.Context
		ns    string
		srv   *vaulttest.Server
		audit string
	)

	BeforeAll(func() {
		dir := GinkgoT().TempDir()
		audit = filepath.Join(dir, "audit.log")
		var err error
		srv, err = vaulttest.Start(dir, func(c *vault.Client) error { return setupVault(c, audit) })
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(srv.Stop)
	})

	BeforeEach(func() {
		ctx = context.Background()
		ns = newNamespace(ctx)
	})

	// keySource creates a ClusterKeySource for the suite's Vault, its CA in
	// a ConfigMap of the operator's namespace, open to every namespace.
	keySource := func(randomPath string, auth v1alpha1.VaultAuth) *v1alpha1.ClusterKeySource {
		name := fmt.Sprintf("vault-%d", time.Now().UnixNano())
		Expect(k8s.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: testenv.Namespace, Name: name + "-ca"},
			Data:       map[string]string{"ca.crt": string(srv.CA)},
		})).To(Succeed())
		cks := &v1alpha1.ClusterKeySource{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.ClusterKeySourceSpec{NamespaceSelector: allNamespaces, Vault: &v1alpha1.VaultSource{
				Address: srv.Addr, RandomPath: randomPath, Auth: auth,
				CABundle: &v1alpha1.CABundleSource{ConfigMapKeyRef: &v1alpha1.KeyRef{Name: name + "-ca", Key: "ca.crt"}},
			}},
		}
		Expect(k8s.Create(ctx, cks)).To(Succeed())
		return cks
	}
	tokenSecret := func(policies ...string) v1alpha1.VaultAuth {
		tok, err := srv.Root.Auth().Token().Create(&vault.TokenCreateRequest{Policies: policies, TTL: "1h"})
		Expect(err).NotTo(HaveOccurred())
		name := fmt.Sprintf("vault-token-%d", time.Now().UnixNano())
		Expect(k8s.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: testenv.Namespace, Name: name},
			Data:       map[string][]byte{"token": []byte(tok.Auth.ClientToken)},
		})).To(Succeed())
		return v1alpha1.VaultAuth{TokenSecretRef: &v1alpha1.KeyRef{Name: name, Key: "token"}}
	}
	kubernetesAuth := func(audience string) v1alpha1.VaultAuth {
		return v1alpha1.VaultAuth{Kubernetes: &v1alpha1.VaultKubernetesAuth{Role: "ringmaster", MountPath: "kubernetes", Audience: audience}}
	}
	vaultRing := func(name string, cks *v1alpha1.ClusterKeySource) *v1alpha1.TicketKeyRing {
		return createRing(ctx, ns, name, func(r *v1alpha1.TicketKeyRing) { r.Spec.SourceRef = sourceRef(cks.Name) })
	}
	nothingPublished := func(ring string) {
		GinkgoHelper()
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: ring + "-e1"}, &corev1.Secret{}))).To(BeTrue())
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: ring + "-ticket-keys"}, &corev1.Secret{}))).To(BeTrue())
	}

	It("mints through sys/tools/random with a token read from the operator's namespace, once the key source is Ready", func() {
		cks := keySource("sys/tools/random", tokenSecret("ringmaster"))
		Eventually(keySourceReady(ctx, cks.Name), timeout, poll).Should(Equal("True " + v1alpha1.ReasonLoggedIn))
		Expect(getKeySource(ctx, cks.Name).Status.LastCheckTime).NotTo(BeNil())

		before := auditCount(audit, "sys/tools/random/32")
		ring := vaultRing("web", cks)
		waitEpoch(ctx, ring, 1)
		Expect(decode(getSecret(ctx, ns, "web-ticket-keys")).Keys).To(HaveLen(2))
		Expect(auditCount(audit, "sys/tools/random/32")-before).To(Equal(2), "both keys came from Vault")
	})

	It("mints through transit/random, logged in with a token of the operator's own service account, shared by every ring of the key source", func() {
		logins, before := auditCount(audit, "auth/kubernetes/login"), auditCount(audit, "transit/random/32")
		cks := keySource("transit/random", kubernetesAuth(vaultAudience))
		Eventually(keySourceReady(ctx, cks.Name), timeout, poll).Should(Equal("True " + v1alpha1.ReasonLoggedIn))
		web, api := vaultRing("web", cks), vaultRing("api", cks)
		waitEpoch(ctx, web, 1)
		waitEpoch(ctx, api, 1)
		Expect(auditCount(audit, "transit/random/32") - before).To(Equal(4))
		Expect(auditCount(audit, "auth/kubernetes/login")-logins).To(Equal(1), "one login for the key source and both rings")

		By("reusing its token for the next rotation")
		fakeClock.Step(time.Hour)
		poke(ctx, web)
		waitEpoch(ctx, web, 2)
		Expect(auditCount(audit, "transit/random/32") - before).To(BeNumerically(">=", 5))
		Expect(auditCount(audit, "auth/kubernetes/login") - logins).To(Equal(1))
	})

	It("logs in with an AppRole whose secret id lives in the operator's namespace", func() {
		role, err := srv.Root.Logical().Read("auth/approle/role/ringmaster/role-id")
		Expect(err).NotTo(HaveOccurred())
		sid, err := srv.Root.Logical().Write("auth/approle/role/ringmaster/secret-id", nil)
		Expect(err).NotTo(HaveOccurred())
		name := fmt.Sprintf("approle-%d", time.Now().UnixNano())
		Expect(k8s.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: testenv.Namespace, Name: name},
			Data:       map[string][]byte{"secret-id": []byte(sid.Data["secret_id"].(string))},
		})).To(Succeed())
		cks := keySource("sys/tools/random", v1alpha1.VaultAuth{AppRole: &v1alpha1.VaultAppRoleAuth{
			RoleID: role.Data["role_id"].(string), MountPath: "approle", SecretIDSecretRef: v1alpha1.KeyRef{Name: name, Key: "secret-id"},
		}})
		Eventually(keySourceReady(ctx, cks.Name), timeout, poll).Should(Equal("True " + v1alpha1.ReasonLoggedIn))
		waitEpoch(ctx, vaultRing("web", cks), 1)
	})

	It("reports VaultPermissionDenied on the key source and its rings for a policy without access, and publishes nothing", func() {
		cks := keySource("sys/tools/random", tokenSecret("default"))
		// The token itself is valid: the key source logs in. Minting is refused.
		Eventually(keySourceReady(ctx, cks.Name), timeout, poll).Should(Equal("True " + v1alpha1.ReasonLoggedIn))
		ring := vaultRing("web", cks)
		Eventually(ringReason(ctx, ring), timeout, poll).Should(Equal(v1alpha1.ReasonVaultPermissionDenied))
		Eventually(warnings(ctx, ns, v1alpha1.ReasonVaultPermissionDenied), timeout, poll).Should(HaveLen(1))
		nothingPublished("web")

		By("the ring, a tenant's, showing the reason and the key source's name; the key source the details")
		msg := meta.FindStatusCondition(getRing(ctx, ring).Status.Conditions, v1alpha1.ConditionReady).Message
		Expect(msg).To(And(ContainSubstring("key source "+cks.Name), ContainSubstring(v1alpha1.ReasonVaultPermissionDenied)))
		Expect(msg).NotTo(Or(ContainSubstring(strings.TrimPrefix(srv.Addr, "https://")), ContainSubstring("sys/tools/random"), ContainSubstring(testenv.Namespace)))
		Eventually(func() string {
			c := meta.FindStatusCondition(getKeySource(ctx, cks.Name).Status.Conditions, v1alpha1.ConditionMinting)
			if c == nil {
				return ""
			}
			return string(c.Status) + " " + c.Reason + " " + c.Message
		}, timeout, poll).Should(And(HavePrefix("False "+v1alpha1.ReasonVaultPermissionDenied), ContainSubstring("sys/tools/random"), ContainSubstring("policy")))
	})

	It("reports a broken key source before any ring uses it: a revoked token, a CA that does not vouch for Vault", func() {
		revoked := tokenSecret("ringmaster")
		sec := &corev1.Secret{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: testenv.Namespace, Name: revoked.TokenSecretRef.Name}, sec)).To(Succeed())
		Expect(srv.Root.Auth().Token().RevokeTree(string(sec.Data["token"]))).To(Succeed())
		cks := keySource("sys/tools/random", revoked)
		Eventually(keySourceReady(ctx, cks.Name), timeout, poll).Should(Equal("False " + v1alpha1.ReasonVaultPermissionDenied))
		Eventually(warnings(ctx, "default", v1alpha1.ReasonVaultPermissionDenied), timeout, poll).ShouldNot(BeEmpty())

		wrongCA := keySource("sys/tools/random", tokenSecret("ringmaster"))
		vault := newStandinVault() // another CA
		Eventually(func() error {
			cm := &corev1.ConfigMap{}
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: testenv.Namespace, Name: wrongCA.Name + "-ca"}, cm); err != nil {
				return err
			}
			cm.Data["ca.crt"] = string(vault.CA)
			return k8s.Update(ctx, cm)
		}, timeout, poll).Should(Succeed())
		// The ConfigMap raises no event on the key source: a spec change
		// has it checked again at once.
		Eventually(func() error {
			c := getKeySource(ctx, wrongCA.Name)
			c.Spec.Vault.RandomPath = "transit/random"
			return k8s.Update(ctx, c)
		}, timeout, poll).Should(Succeed())
		Eventually(func() string {
			c := meta.FindStatusCondition(getKeySource(ctx, wrongCA.Name).Status.Conditions, v1alpha1.ConditionReady)
			if c == nil || c.ObservedGeneration != 2 {
				return ""
			}
			return string(c.Status) + " " + c.Reason + " " + c.Message
		}, timeout, poll).Should(And(HavePrefix("False "+v1alpha1.ReasonVaultUnavailable), ContainSubstring("certificate")))
	})

	It("refuses to send a service account token the Kubernetes API server would accept", func() {
		// The envtest API server accepts its own issuer as an audience.
		apiAudience := strings.TrimSuffix(env.Config.Host, "/") + "/"
		Expect(apiAudience).To(HavePrefix("https://"))
		logins := auditCount(audit, "auth/kubernetes/login")
		cks := keySource("sys/tools/random", kubernetesAuth(apiAudience))
		Eventually(func() string {
			c := meta.FindStatusCondition(getKeySource(ctx, cks.Name).Status.Conditions, v1alpha1.ConditionReady)
			if c == nil {
				return ""
			}
			return c.Reason + ": " + c.Message
		}, timeout, poll).Should(And(HavePrefix(v1alpha1.ReasonVaultConfig), ContainSubstring("the Kubernetes API server accepts")))
		Expect(auditCount(audit, "auth/kubernetes/login")).To(Equal(logins), "the token never reached Vault")
	})

	It("reports VaultBadResponse when something answering as Vault sends garbage, and publishes nothing", func() {
		garbage := newStandinVault()
		garbage.short.Store(true)
		cks := createKeySource(ctx, garbage.URL, garbage.CA, standinToken, allNamespaces)
		ring := vaultRing("web", cks)
		Eventually(ringReason(ctx, ring), timeout, poll).Should(Equal(v1alpha1.ReasonVaultBadResponse))
		Eventually(warnings(ctx, ns, v1alpha1.ReasonVaultBadResponse), timeout, poll).Should(HaveLen(1))
		nothingPublished("web")
	})

	It("fails closed while Vault is down mid-rotation, then recovers by itself without a duplicate epoch", func() {
		cks := keySource("sys/tools/random", kubernetesAuth(vaultAudience))
		ring := vaultRing("web", cks)
		waitEpoch(ctx, ring, 1)
		staged := decode(getSecret(ctx, ns, "web-ticket-keys")).Keys[0]
		served := getSecret(ctx, ns, "web-ticket-keys").Data

		Expect(srv.Stop()).To(Succeed())
		fakeClock.Step(time.Hour) // the staged key activates: its successor is due
		poke(ctx, ring)
		Eventually(ringReason(ctx, ring), timeout, poll).Should(Equal(v1alpha1.ReasonVaultUnavailable))
		Expect(meta.IsStatusConditionTrue(getRing(ctx, ring).Status.Conditions, v1alpha1.ConditionRotationOverdue)).To(BeTrue())
		Consistently(func() int64 { return getRing(ctx, ring).Status.Epoch }, 2*time.Second, poll).Should(BeEquivalentTo(1))
		Expect(getSecret(ctx, ns, "web-ticket-keys").Data).To(Equal(served), "the current keys keep serving")
		Expect(warnings(ctx, ns, v1alpha1.ReasonVaultUnavailable)()).To(HaveLen(1), "one event per transition, not per retry")

		// A fresh dev server, with a new CA: the operator must log in again
		// and trust the new CA, which the key source's ConfigMap now holds.
		Expect(srv.Restart()).To(Succeed())
		Eventually(func() error {
			cm := &corev1.ConfigMap{}
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: testenv.Namespace, Name: cks.Name + "-ca"}, cm); err != nil {
				return err
			}
			cm.Data["ca.crt"] = string(srv.CA)
			return k8s.Update(ctx, cm)
		}, timeout, poll).Should(Succeed())
		Eventually(func() int64 { return getRing(ctx, ring).Status.Epoch }, time.Minute, poll).Should(BeEquivalentTo(2))
		Eventually(ringReason(ctx, ring), timeout, poll).Should(Equal(v1alpha1.ReasonPublished))
		r := decode(getSecret(ctx, ns, "web-ticket-keys"))
		Expect(r.Keys).To(HaveLen(3))
		Expect(r.Keys[1].ID).To(Equal(staged.ID))
		Consistently(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-e3"}, &corev1.Secret{}))
		}, 2*time.Second, poll).Should(BeTrue(), "exactly one new epoch")
		Expect(meta.IsStatusConditionFalse(getRing(ctx, ring).Status.Conditions, v1alpha1.ConditionRotationOverdue)).To(BeTrue())
	})
})

// setupVault configures a fresh dev server: transit, AppRole, a policy to
// read random bytes, Kubernetes auth against the envtest API server, and an
// audit log that shows which paths were called. Vault reviews login tokens
// with a token of the operator's service account valid for the API server,
// which the generated RBAC lets create TokenReviews: no binding beyond it.
func setupVault(c *vault.Client, audit string) error {
	if err := c.Sys().EnableAuditWithOptions("file", &vault.EnableAuditOptions{Type: "file", Options: map[string]string{"file_path": audit}}); err != nil {
		return err
	}
	if err := c.Sys().Mount("transit", &vault.MountInput{Type: "transit"}); err != nil {
		return err
	}
	if err := c.Sys().PutPolicy("ringmaster", vaultPolicy); err != nil {
		return err
	}
	if err := c.Sys().EnableAuthWithOptions("approle", &vault.EnableAuthOptions{Type: "approle"}); err != nil {
		return err
	}
	if _, err := c.Logical().Write("auth/approle/role/ringmaster", map[string]any{"token_policies": "ringmaster", "token_ttl": "1h"}); err != nil {
		return err
	}
	if err := c.Sys().EnableAuthWithOptions("kubernetes", &vault.EnableAuthOptions{Type: "kubernetes"}); err != nil {
		return err
	}
	reviewer, err := env.Token(context.Background(), testenv.ServiceAccount, nil)
	if err != nil {
		return err
	}
	if _, err := c.Logical().Write("auth/kubernetes/config", map[string]any{
		"kubernetes_host": env.Config.Host, "kubernetes_ca_cert": string(env.Config.CAData), "disable_local_ca_jwt": true,
		"token_reviewer_jwt": reviewer,
	}); err != nil {
		return err
	}
	_, err = c.Logical().Write("auth/kubernetes/role/ringmaster", map[string]any{
		"bound_service_account_names":      testenv.ServiceAccount,
		"bound_service_account_namespaces": testenv.Namespace,
		"audience":                         vaultAudience,
		"token_policies":                   "ringmaster",
		"token_ttl":                        "1h",
	})
	return err
}

// auditCount counts the requests to path in Vault's audit log.
func auditCount(audit, path string) int {
	data, err := os.ReadFile(audit)
	if err != nil {
		return 0
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, `"type":"request"`) && strings.Contains(line, `"path":"`+path+`"`) {
			n++
		}
	}
	return n
}
