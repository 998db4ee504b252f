//go:build e2e

package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	vault "github.com/hashicorp/vault/api"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
	"github.com/ringmaster-io/ringmaster/internal/testing/vaulttest"
)

// promPolicy is the operator's whole Vault policy here: random bytes.
const promPolicy = `path "sys/tools/random/*" { capabilities = ["update"] }`

// overdueAlert is the chart's alert a key source outage raises.
const overdueAlert = "RingmasterTicketKeyRotationOverdue"

var _ = Describe("Debian's Prometheus scraping the operator and a fleet", Ordered, func() {
	const ns, ringName, source = "prom", "web", "prom-vault"
	var (
		f       *fleet.Fleet
		prom    *promAPI
		proxy   *fleet.Balancer
		vaultAt string
	)
	dumpOnFailure(&f)

	BeforeAll(func(ctx SpecContext) {
		_, err := os.Stat("/usr/bin/prometheus")
		Expect(err).NotTo(HaveOccurred(), "Debian's prometheus is missing: make servers installs it")
		root, err := fleet.ModuleRoot(ctx)
		Expect(err).NotTo(HaveOccurred())
		helm := os.Getenv("RINGMASTER_HELM")
		if helm == "" {
			helm = filepath.Join(root, "bin", "helm")
		}
		dir := filepath.Join(env.Work, "prometheus")
		Expect(os.MkdirAll(filepath.Join(dir, "certs"), 0o700)).To(Succeed())

		By("serving the operator's metrics over HTTPS with a certificate of a CA Prometheus trusts")
		ca, err := testpki.NewCA("ringmaster metrics CA")
		Expect(err).NotTo(HaveOccurred())
		leaf, err := ca.Issue(testpki.Leaf{DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
		Expect(err).NotTo(HaveOccurred())
		Expect(os.WriteFile(filepath.Join(dir, "certs", "tls.crt"), leaf.CertPEM, 0o600)).To(Succeed())
		Expect(os.WriteFile(filepath.Join(dir, "certs", "tls.key"), leaf.KeyPEM, 0o600)).To(Succeed())
		Expect(os.WriteFile(filepath.Join(dir, "ca.crt"), ca.PEM, 0o600)).To(Succeed())
		metricsAddr := freeAddr()
		env.Cluster.OperatorArgs = []string{"--metrics-bind-address", metricsAddr, "--metrics-cert-dir", filepath.Join(dir, "certs")}
		Expect(env.RestartOperator(ctx)).To(Succeed())

		By("binding a ServiceAccount to the chart's metrics-reader ClusterRole, and taking its token")
		role := chartClusterRole(helm, root)
		Expect(env.Cluster.Client.Create(ctx, role)).To(Succeed())
		Expect(env.Cluster.CreateNamespace(ctx, "monitoring")).To(Succeed())
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "monitoring", Name: "prometheus"}}
		Expect(env.Cluster.Client.Create(ctx, sa)).To(Succeed())
		Expect(env.Cluster.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "prometheus-ringmaster-metrics"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: sa.Namespace, Name: sa.Name}},
		})).To(Succeed())
		tok, err := env.Cluster.Clientset.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(os.WriteFile(filepath.Join(dir, "token"), []byte(tok.Status.Token), 0o600)).To(Succeed())

		By("minting the ring's keys from a real Vault, reached through a proxy the test can cut")
		srv, err := vaulttest.Start(GinkgoT().TempDir(), func(c *vault.Client) error { return c.Sys().PutPolicy("ringmaster", promPolicy) })
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(srv.Stop)
		vt, err := srv.Root.Auth().Token().Create(&vault.TokenCreateRequest{Policies: []string{"ringmaster"}, TTL: "2h"})
		Expect(err).NotTo(HaveOccurred())
		vaultAt = strings.TrimPrefix(srv.Addr, "https://")
		proxy, err = fleet.StartBalancer([]string{vaultAt})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _ = proxy.Close() })
		Expect(env.Cluster.Client.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: fleet.OperatorNamespace, Name: "prom-vault"},
			Data:       map[string][]byte{"token": []byte(vt.Auth.ClientToken), "ca.crt": srv.CA},
		})).To(Succeed())
		Expect(env.Cluster.Client.Create(ctx, &v1alpha1.ClusterKeySource{
			ObjectMeta: metav1.ObjectMeta{Name: source},
			Spec: v1alpha1.ClusterKeySourceSpec{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
				Vault: &v1alpha1.VaultSource{
					Address:  "https://" + proxy.Addr(),
					Auth:     v1alpha1.VaultAuth{TokenSecretRef: &v1alpha1.KeyRef{Name: "prom-vault", Key: "token"}},
					CABundle: &v1alpha1.CABundleSource{SecretKeyRef: &v1alpha1.KeyRef{Name: "prom-vault", Key: "ca.crt"}},
				},
			},
		})).To(Succeed())
		ring, err := env.Cluster.CreateRing(ctx, fleet.RingSpec{Namespace: ns, Name: ringName,
			RotationInterval: time.Minute, ActivationDelay: 5 * time.Second, RetainedKeys: 2, SourceRef: source})
		Expect(err).NotTo(HaveOccurred())
		f, err = env.StartFleet(ctx, fleet.Config{Name: ns, Delays: fleet.Spread(2, 200*time.Millisecond), Namespace: ns, Secret: ring.ProjectionSecretName()})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(f.Stop)
		_, err = f.WaitServing(ctx, "serving the ring", fleet.ServingKey(fleet.ActiveKey(ring), ring.Status.Epoch))
		Expect(err).NotTo(HaveOccurred())

		By("auditing the TLS Secrets of the namespace with the baseline CertificatePolicy")
		sample, err := os.ReadFile(filepath.Join(root, "config", "samples", "ringmaster_v1alpha1_certificatepolicy.yaml"))
		Expect(err).NotTo(HaveOccurred())
		cpol := &v1alpha1.CertificatePolicy{}
		Expect(yaml.UnmarshalStrict(sample, cpol)).To(Succeed())
		cpol.Spec.Selector.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}
		Expect(env.Cluster.Client.Create(ctx, cpol)).To(Succeed())
		short, err := ca.Issue(testpki.Leaf{DNSNames: []string{"short.prom.test"}, NotAfter: time.Now().Add(24 * time.Hour)})
		Expect(err).NotTo(HaveOccurred())
		Expect(env.Cluster.Client.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "short"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": short.CertPEM, "tls.key": short.KeyPEM},
		})).To(Succeed())

		By("starting Prometheus on loopback with the chart's rules (rotationOverdueFor 10s)")
		rules := renderRules(helm, root, "metrics.prometheusRule.rotationOverdueFor=10s")
		Expect(os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o600)).To(Succeed())
		var agents []string
		for _, r := range f.Replicas {
			agents = append(agents, r.StatusAddr)
		}
		cfg, err := yaml.Marshal(map[string]any{
			"global":     map[string]any{"scrape_interval": "1s", "evaluation_interval": "1s"},
			"rule_files": []string{filepath.Join(dir, "rules.yaml")},
			"scrape_configs": []any{
				map[string]any{
					"job_name": "ringmaster", "scheme": "https",
					"authorization":  map[string]any{"credentials_file": filepath.Join(dir, "token")},
					"tls_config":     map[string]any{"ca_file": filepath.Join(dir, "ca.crt")},
					"static_configs": []any{map[string]any{"targets": []string{metricsAddr}}},
				},
				map[string]any{"job_name": "agents", "static_configs": []any{map[string]any{"targets": agents}}},
			},
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(os.WriteFile(filepath.Join(dir, "prometheus.yml"), cfg, 0o600)).To(Succeed())
		promAddr := freeAddr()
		p, err := env.Sup.Start("prometheus", "/usr/bin/prometheus", []string{
			"--config.file=" + filepath.Join(dir, "prometheus.yml"),
			"--storage.tsdb.path=" + filepath.Join(dir, "data"),
			"--web.listen-address=" + promAddr,
		})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(p.Stop)
		prom = &promAPI{base: "http://" + promAddr}
		Eventually(ctx, func() error { return prom.get(ctx, "/-/ready", nil) }).WithTimeout(30*time.Second).WithPolling(200*time.Millisecond).Should(Succeed(), "%s", p.LogTail(20))
	}, NodeTimeout(4*time.Minute))

	It("scrapes the operator over verified HTTPS with the ServiceAccount's token, and every agent", func(ctx SpecContext) {
		Eventually(ctx, func(g Gomega) {
			var t struct {
				ActiveTargets []struct {
					ScrapePool string `json:"scrapePool"`
					Health     string `json:"health"`
					LastError  string `json:"lastError"`
				} `json:"activeTargets"`
			}
			g.Expect(prom.get(ctx, "/api/v1/targets", &t)).To(Succeed())
			g.Expect(t.ActiveTargets).To(HaveLen(1 + len(f.Replicas)))
			for _, a := range t.ActiveTargets {
				g.Expect(a.Health).To(Equal("up"), "%s: %s", a.ScrapePool, a.LastError)
			}
		}).WithTimeout(30 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())
		Expect(prom.series(ctx, fmt.Sprintf(`ringmaster_ticketkeyring_epoch{namespace=%q,name=%q}`, ns, ringName))).To(HaveLen(1))
		Expect(prom.series(ctx, `ringmaster_agent_epoch{job="agents"}`)).To(HaveLen(len(f.Replicas)))
	}, NodeTimeout(time.Minute))

	It("raises the rotation-overdue alert while Vault is out of reach: pending, then firing, then resolved", func(ctx SpecContext) {
		cut := time.Now()
		Expect(proxy.Close()).To(Succeed())
		state := func() string { return prom.alertState(ctx, overdueAlert, ns, ringName) }
		// The staged key activates within one rotationInterval (1m); no
		// successor can then be minted.
		Eventually(ctx, state).WithTimeout(2 * time.Minute).WithPolling(250 * time.Millisecond).Should(Equal("pending"))
		pending := time.Since(cut)
		Eventually(ctx, state).WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(Equal("firing"))
		firing := time.Since(cut)

		var err error
		proxy, err = fleet.ListenBalancer(proxy.Addr(), []string{vaultAt})
		Expect(err).NotTo(HaveOccurred())
		back := time.Now()
		Eventually(ctx, state).WithTimeout(2 * time.Minute).WithPolling(250 * time.Millisecond).Should(BeEmpty())
		GinkgoWriter.Printf("%s: pending %v and firing %v after Vault was cut; resolved %v after it was back\n",
			overdueAlert, pending.Round(time.Millisecond), firing.Round(time.Millisecond), time.Since(back).Round(time.Millisecond))
		Expect(prom.series(ctx, `ringmaster_ticketkeyring_rotations_total{result="failure"} > 0`)).NotTo(BeEmpty())
	}, NodeTimeout(6*time.Minute))

	It("answers every query of the chart's Grafana dashboard with at least one series", func(ctx SpecContext) {
		root, err := fleet.ModuleRoot(ctx)
		Expect(err).NotTo(HaveOccurred())
		raw, err := os.ReadFile(filepath.Join(root, "charts", "ringmaster", "dashboards", "ringmaster.json"))
		Expect(err).NotTo(HaveOccurred())
		var dash struct {
			Panels []struct {
				Title   string `json:"title"`
				Targets []struct {
					Expr string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
		}
		Expect(json.Unmarshal(raw, &dash)).To(Succeed())
		Expect(dash.Panels).NotTo(BeEmpty())
		for _, p := range dash.Panels {
			Expect(p.Targets).NotTo(BeEmpty(), "panel %q", p.Title)
			for _, t := range p.Targets {
				Eventually(ctx, func() ([]json.RawMessage, error) { return prom.series(ctx, t.Expr) }).
					WithTimeout(30*time.Second).WithPolling(time.Second).ShouldNot(BeEmpty(), "panel %q: %s", p.Title, t.Expr)
			}
		}
		GinkgoWriter.Printf("All %d panels of the dashboard return series\n", len(dash.Panels))
	}, NodeTimeout(3*time.Minute))
})

// promAPI queries Prometheus's HTTP API.
type promAPI struct{ base string }

func (p *promAPI) get(ctx context.Context, path string, data any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	var body bytes.Buffer
	if _, err := body.ReadFrom(resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", path, resp.Status, body.String())
	}
	if data == nil {
		return nil
	}
	var env struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body.Bytes(), &env); err != nil {
		return err
	}
	if env.Status != "success" {
		return fmt.Errorf("%s: status %s", path, env.Status)
	}
	return json.Unmarshal(env.Data, data)
}

// series runs an instant query and returns its result's series.
func (p *promAPI) series(ctx context.Context, query string) ([]json.RawMessage, error) {
	var d struct {
		Result []json.RawMessage `json:"result"`
	}
	err := p.get(ctx, "/api/v1/query?query="+url.QueryEscape(query), &d)
	return d.Result, err
}

// alertState returns the state of the alert of one ring, "" when none.
func (p *promAPI) alertState(ctx context.Context, name, ns, ring string) string {
	var d struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	if err := p.get(ctx, "/api/v1/alerts", &d); err != nil {
		return "error: " + err.Error()
	}
	for _, a := range d.Alerts {
		if a.Labels["alertname"] == name && a.Labels["namespace"] == ns && a.Labels["name"] == ring {
			return a.State
		}
	}
	return ""
}

// freeAddr returns a loopback address with a port free now.
func freeAddr() string {
	GinkgoHelper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	addr := l.Addr().String()
	Expect(l.Close()).To(Succeed())
	return addr
}

// helmTemplate renders one template of the chart, release ringmaster.
func helmTemplate(helm, root, template string, set ...string) []byte {
	GinkgoHelper()
	args := []string{"template", "ringmaster", filepath.Join(root, "charts", "ringmaster"), "--kube-version", "1.37.2", "--show-only", template}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := exec.Command(helm, args...).Output()
	Expect(err).NotTo(HaveOccurred(), "helm %s", strings.Join(args, " "))
	return out
}

// chartClusterRole is the chart's metrics-reader ClusterRole.
func chartClusterRole(helm, root string) *rbacv1.ClusterRole {
	GinkgoHelper()
	for _, doc := range strings.Split(string(helmTemplate(helm, root, "templates/metrics.yaml")), "\n---") {
		var role rbacv1.ClusterRole
		Expect(yaml.Unmarshal([]byte(doc), &role)).To(Succeed())
		if role.Kind == "ClusterRole" && strings.HasSuffix(role.Name, "-metrics-reader") {
			return &role
		}
	}
	Fail("the chart renders no metrics-reader ClusterRole")
	return nil
}

// renderRules returns the chart's PrometheusRule groups as a Prometheus
// rule file.
func renderRules(helm, root string, set ...string) []byte {
	GinkgoHelper()
	out := helmTemplate(helm, root, "templates/prometheusrule.yaml", append([]string{"metrics.prometheusRule.enabled=true"}, set...)...)
	var rule struct {
		Spec struct {
			Groups []any `json:"groups"`
		} `json:"spec"`
	}
	Expect(yaml.Unmarshal(out, &rule)).To(Succeed())
	Expect(rule.Spec.Groups).NotTo(BeEmpty())
	b, err := yaml.Marshal(map[string]any{"groups": rule.Spec.Groups})
	Expect(err).NotTo(HaveOccurred())
	return b
}
