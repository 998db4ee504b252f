package controllers_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	vault "github.com/hashicorp/vault/api"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/vaulttest"
)

// These specs mint keys with a real Vault dev server (hack/vault.sh builds it)
// logged into through the envtest API server's service account tokens.

const vaultPolicy = `
path "sys/tools/random/*" { capabilities = ["update"] }
path "transit/random/*"   { capabilities = ["update"] }
`

var _ = Describe("TicketKeyRing with keys from Vault", Ordered, func() {
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

	vaultRing := func(name string, source v1alpha1.VaultSource) *v1alpha1.TicketKeyRing {
		return createRing(ctx, ns, name, func(r *v1alpha1.TicketKeyRing) { r.Spec.Source.Vault = &source })
	}
	tokenSecret := func(policies ...string) v1alpha1.VaultAuth {
		tok, err := srv.Root.Auth().Token().Create(&vault.TokenCreateRequest{Policies: policies, TTL: "1h"})
		Expect(err).NotTo(HaveOccurred())
		Expect(k8s.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vault-token"},
			Data:       map[string][]byte{"token": []byte(tok.Auth.ClientToken)},
		})).To(Succeed())
		return v1alpha1.VaultAuth{TokenSecretRef: &v1alpha1.KeyRef{Name: "vault-token", Key: "token"}}
	}
	kubernetesAuth := v1alpha1.VaultAuth{Kubernetes: &v1alpha1.VaultKubernetesAuth{Role: "ringmaster", MountPath: "kubernetes", Audience: "vault"}}
	readyReason := func(ring *v1alpha1.TicketKeyRing) func() string {
		return func() string {
			c := meta.FindStatusCondition(getRing(ctx, ring).Status.Conditions, v1alpha1.ConditionReady)
			if c == nil {
				return ""
			}
			return c.Reason
		}
	}
	warnings := func(reason string) func() []eventsv1.Event {
		return func() []eventsv1.Event {
			var out []eventsv1.Event
			for _, e := range events(ctx, ns) {
				if e.Reason == reason && e.Type == corev1.EventTypeWarning {
					out = append(out, e)
				}
			}
			return out
		}
	}
	nothingPublished := func(ring string) {
		GinkgoHelper()
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: ring + "-e1"}, &corev1.Secret{}))).To(BeTrue())
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: ring + "-ticket-keys"}, &corev1.Secret{}))).To(BeTrue())
	}

	It("mints through sys/tools/random with a token read from a Secret", func() {
		before := auditCount(audit, "sys/tools/random/32")
		ring := vaultRing("web", v1alpha1.VaultSource{Address: srv.Addr, RandomPath: "sys/tools/random", Auth: tokenSecret("ringmaster")})
		waitEpoch(ctx, ring, 1)
		Expect(decode(getSecret(ctx, ns, "web-ticket-keys")).Keys).To(HaveLen(2))
		Expect(auditCount(audit, "sys/tools/random/32")-before).To(Equal(2), "both keys came from Vault")
	})

	It("mints through transit/random, logged in with a TokenRequest token for the operator's service account", func() {
		logins, before := auditCount(audit, "auth/kubernetes/login"), auditCount(audit, "transit/random/32")
		ring := vaultRing("web", v1alpha1.VaultSource{Address: srv.Addr, RandomPath: "transit/random", Auth: kubernetesAuth})
		waitEpoch(ctx, ring, 1)
		Expect(auditCount(audit, "transit/random/32") - before).To(Equal(2))
		Expect(auditCount(audit, "auth/kubernetes/login") - logins).To(Equal(1))

		By("reusing its token for the next rotation")
		fakeClock.Step(time.Hour)
		poke(ctx, ring)
		waitEpoch(ctx, ring, 2)
		Expect(auditCount(audit, "transit/random/32") - before).To(Equal(3))
		Expect(auditCount(audit, "auth/kubernetes/login") - logins).To(Equal(1))
	})

	It("reports VaultPermissionDenied for a policy without access, and publishes nothing", func() {
		ring := vaultRing("web", v1alpha1.VaultSource{Address: srv.Addr, RandomPath: "sys/tools/random", Auth: tokenSecret("default")})
		Eventually(readyReason(ring), timeout, poll).Should(Equal(v1alpha1.ReasonVaultPermissionDenied))
		Eventually(warnings(v1alpha1.ReasonVaultPermissionDenied), timeout, poll).Should(HaveLen(1))
		Expect(meta.FindStatusCondition(getRing(ctx, ring).Status.Conditions, v1alpha1.ConditionReady).Message).To(ContainSubstring("policy"))
		nothingPublished("web")
	})

	It("reports VaultBadResponse when something answering as Vault sends garbage, and publishes nothing", func() {
		garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "lookup-self") {
				fmt.Fprint(w, `{"data":{"ttl":0}}`)
				return
			}
			fmt.Fprint(w, `{"data":{"random_bytes":"c2hvcnQ="}}`) // 5 bytes
		}))
		DeferCleanup(garbage.Close)
		Expect(k8s.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "standin-token"},
			Data:       map[string][]byte{"token": []byte("s.anything")},
		})).To(Succeed())
		ring := vaultRing("web", v1alpha1.VaultSource{Address: garbage.URL,
			Auth: v1alpha1.VaultAuth{TokenSecretRef: &v1alpha1.KeyRef{Name: "standin-token", Key: "token"}}})
		Eventually(readyReason(ring), timeout, poll).Should(Equal(v1alpha1.ReasonVaultBadResponse))
		Eventually(warnings(v1alpha1.ReasonVaultBadResponse), timeout, poll).Should(HaveLen(1))
		nothingPublished("web")
	})

	It("fails closed while Vault is down mid-rotation, then recovers by itself without a duplicate epoch", func() {
		ring := vaultRing("web", v1alpha1.VaultSource{Address: srv.Addr, Auth: kubernetesAuth})
		waitEpoch(ctx, ring, 1)
		staged := decode(getSecret(ctx, ns, "web-ticket-keys")).Keys[0]
		served := getSecret(ctx, ns, "web-ticket-keys").Data

		Expect(srv.Stop()).To(Succeed())
		fakeClock.Step(time.Hour) // the staged key activates: its successor is due
		poke(ctx, ring)
		Eventually(readyReason(ring), timeout, poll).Should(Equal(v1alpha1.ReasonVaultUnavailable))
		Expect(meta.IsStatusConditionTrue(getRing(ctx, ring).Status.Conditions, v1alpha1.ConditionRotationOverdue)).To(BeTrue())
		Consistently(func() int64 { return getRing(ctx, ring).Status.Epoch }, 2*time.Second, poll).Should(BeEquivalentTo(1))
		Expect(getSecret(ctx, ns, "web-ticket-keys").Data).To(Equal(served), "the current keys keep serving")
		Expect(warnings(v1alpha1.ReasonVaultUnavailable)()).To(HaveLen(1), "one event per transition, not per retry")

		Expect(srv.Restart()).To(Succeed()) // a fresh dev server: the operator must log in again
		Eventually(func() int64 { return getRing(ctx, ring).Status.Epoch }, time.Minute, poll).Should(BeEquivalentTo(2))
		Eventually(readyReason(ring), timeout, poll).Should(Equal(v1alpha1.ReasonPublished))
		r := decode(getSecret(ctx, ns, "web-ticket-keys"))
		Expect(r.Keys).To(HaveLen(3))
		Expect(r.Keys[1].ID).To(Equal(staged.ID))
		Consistently(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-e3"}, &corev1.Secret{}))
		}, 2*time.Second, poll).Should(BeTrue(), "exactly one new epoch")
		Expect(meta.IsStatusConditionFalse(getRing(ctx, ring).Status.Conditions, v1alpha1.ConditionRotationOverdue)).To(BeTrue())
	})
})

// setupVault configures a fresh dev server: transit, a policy to read random
// bytes, Kubernetes auth against the envtest API server (reviewing tokens as
// the TokenReview-capable operator service account), and an audit log that
// shows which paths were called.
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
	if err := c.Sys().EnableAuthWithOptions("kubernetes", &vault.EnableAuthOptions{Type: "kubernetes"}); err != nil {
		return err
	}
	// Vault reviews login tokens with a token of its own, valid for the API
	// server's audience; the login tokens carry the role's audience "vault".
	reviewer := &authenticationv1.TokenRequest{}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: operatorSA.Namespace, Name: operatorSA.Name}}
	if err := k8s.SubResource("token").Create(context.Background(), sa, reviewer); err != nil {
		return err
	}
	if _, err := c.Logical().Write("auth/kubernetes/config", map[string]any{
		"kubernetes_host": cfg.Host, "kubernetes_ca_cert": string(cfg.CAData), "disable_local_ca_jwt": true,
		"token_reviewer_jwt": reviewer.Status.Token,
	}); err != nil {
		return err
	}
	_, err := c.Logical().Write("auth/kubernetes/role/ringmaster", map[string]any{
		"bound_service_account_names":      operatorSA.Name,
		"bound_service_account_namespaces": operatorSA.Namespace,
		"audience":                         "vault",
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
