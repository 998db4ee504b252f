//go:build integration

package plugin_test

import (
	"context"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/audit"
	"github.com/ringmaster-io/ringmaster/internal/testing/keyfixtures"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
	"github.com/ringmaster-io/ringmaster/internal/ticketkeys"
)

// The ticket keys no ring manages: one manifest of each shape, as its
// project documents it (internal/ticketkeys/testdata), in the CRDs of
// their kinds, minimal, but for CiliumClusterwideEnvoyConfig's: that kind
// is not installed, as on a cluster without Cilium.
var (
	keyFixtures = []string{"ingress-nginx.yaml", "istio-envoyfilter.yaml", "istio-envoyfilter-file.yaml",
		"envoy-gateway-patchpolicy.yaml", "cilium-envoyconfig.yaml", "haproxy.yaml"}
	// keyObjects are the fixtures' objects; forbidden, every form of
	// their keys' bytes.
	keyObjects []*unstructured.Unstructured
	forbidden  []string
	// keysSince is when the fixtures were created.
	keysSince time.Time
)

func setUpTicketKeys(ctx context.Context) {
	GinkgoHelper()
	crds, err := keyfixtures.Load("crds.yaml")
	Expect(err).NotTo(HaveOccurred())
	for _, crd := range crds {
		if crd.GetName() != "ciliumclusterwideenvoyconfigs.cilium.io" {
			Expect(k8s.Create(ctx, crd)).To(Succeed())
		}
	}
	for _, ns := range []string{"ingress-nginx", "istio-system", "edge"} {
		namespace(ctx, ns, nil)
	}
	keysSince = time.Now().Truncate(time.Second)
	for _, name := range keyFixtures {
		objs, err := keyfixtures.Load(name)
		Expect(err).NotTo(HaveOccurred())
		keyObjects = append(keyObjects, objs...)
		for _, o := range objs {
			// A CRD is served a moment after it is created.
			Eventually(func() error {
				if err := k8s.Create(ctx, o.DeepCopy()); !apierrors.IsAlreadyExists(err) {
					return err
				}
				return nil
			}, timeout, poll).Should(Succeed(), "%s %s", o.GetKind(), o.GetName())
		}
	}
	forbidden = keyfixtures.Forbidden(keyObjects)
	Expect(len(forbidden)).To(BeNumerically(">=", 6*len(keyFixtures)))
}

// where names a finding as the tests expect it.
func where(f ticketkeys.Finding) string {
	return f.String() + " " + f.Field
}

func findings(rep audit.Report) map[string]ticketkeys.Finding {
	GinkgoHelper()
	Expect(rep.UnmanagedKeys).NotTo(BeNil())
	out := map[string]ticketkeys.Finding{}
	for _, f := range rep.UnmanagedKeys.Findings {
		out[where(f)] = f
	}
	return out
}

var _ = Describe("audit of ticket keys no ring manages", func() {
	It("lists the keys of every shape, where they are, their size, count and last change, from the kinds the cluster serves", func() {
		rep, res := auditJSON(admin, "-A")
		Expect(res.Code).To(Equal(0))
		got := findings(rep)
		for ref, want := range map[string]struct {
			shape      string
			size, keys int
		}{
			"ConfigMap ingress-nginx/ingress-nginx-controller data[ssl-session-ticket-key]":                                                    {"ingress-nginx", 80, 1},
			"EnvoyFilter istio-system/gateway-ticket-keys spec.configPatches[0].patch.value.transport_socket.typed_config.session_ticket_keys": {"envoy", 80, 2},
			"Secret shop/gateway-ticket-keys data[current.key]":                                                                                {"envoy", 80, 1},
			"Secret shop/gateway-ticket-keys data[previous.key]":                                                                               {"envoy", 80, 1},
			"EnvoyPatchPolicy shop/static-ticket-keys spec.jsonPatches[0].operation.value":                                                     {"envoy", 80, 1},
			"EnvoyPatchPolicy shop/static-ticket-keys spec.jsonPatches[1].operation.value":                                                     {"envoy", 80, 1},
			"CiliumEnvoyConfig shop/store-tls spec.resources[0].filter_chains[0].transport_socket.typed_config.session_ticket_keys":            {"envoy", 80, 3},
			"Secret edge/haproxy-config data[tls-ticket-keys]":                                                                                 {"haproxy", 48, 3},
		} {
			f, ok := got[ref]
			Expect(ok).To(BeTrue(), "no finding %s in %v", ref, rep.UnmanagedKeys.Findings)
			Expect(f.Shape).To(Equal(want.shape), ref)
			Expect(f.Size).To(Equal(want.size), ref)
			Expect(f.Keys).To(Equal(want.keys), ref)
			Expect(f.Fingerprints).To(HaveLen(want.keys), ref)
			Expect(f.SinceFrom).To(Equal(ticketkeys.SinceManagedFields), "%s: the API server keeps managedFields", ref)
			Expect(f.Since.Time).To(BeTemporally(">=", keysSince.Add(-time.Second)), ref)
			Expect(f.Since.Time).To(BeTemporally("<=", time.Now()), ref)
		}
		Expect(got["Secret shop/gateway-ticket-keys data[current.key]"].UsedBy).To(ConsistOf(
			"EnvoyFilter shop/gateway-ticket-key-files spec.configPatches[0].patch.value.transport_socket.typed_config.session_ticket_keys.keys[0].filename"))
		Expect(got["Secret edge/haproxy-config data[tls-ticket-keys]"].UsedBy).To(ConsistOf("Secret edge/haproxy-config data[haproxy.cfg]"))
		Expect(got).To(HaveLen(8), "nothing else: the rings' own Secrets are skipped")
		Expect(rep.UnmanagedKeys.Sources).To(ConsistOf(
			audit.Source{Resource: "configmaps", Read: audit.ReadDone},
			audit.Source{Resource: "secrets", Read: audit.ReadDone},
			audit.Source{Resource: "envoyfilters.networking.istio.io", Read: audit.ReadDone},
			audit.Source{Resource: "envoypatchpolicies.gateway.envoyproxy.io", Read: audit.ReadDone},
			audit.Source{Resource: "ciliumenvoyconfigs.cilium.io", Read: audit.ReadDone},
			audit.Source{Resource: "ciliumclusterwideenvoyconfigs.cilium.io", Read: audit.ReadNotInstalled},
		))

		table := run(admin, "audit", "-A")
		Expect(table.Code).To(Equal(0))
		Expect(table.Out).To(ContainSubstring("\nUnmanaged ticket keys:\n"))
		Expect(table.Out).To(ContainSubstring("not installed: ciliumclusterwideenvoyconfigs.cilium.io"))
		Expect(table.Out).To(MatchRegexp(`(?m)^  KIND\s+NAMESPACE\s+NAME\s+FIELD\s+SHAPE\s+KEYS\s+SIZE\s+UNCHANGED FOR$`))
		Expect(table.Out).To(MatchRegexp(`(?m)^  ConfigMap\s+ingress-nginx\s+ingress-nginx-controller\s+data\[ssl-session-ticket-key\]\s+ingress-nginx\s+1\s+80\s+\S+$`))
		Expect(table.Out).To(MatchRegexp(`(?m)^  Secret\s+edge\s+haproxy-config\s+data\[tls-ticket-keys\]\s+haproxy\s+3\s+48\s+\S+$`))

		res = run(admin, "audit", "-A", "--fail-on", "unmanaged-keys")
		Expect(res.Code).To(Equal(1))
		Expect(res.Err).To(ContainSubstring("8 problem(s) in the --fail-on categories unmanaged-keys"))
	})

	It("agrees with the operator's metrics, which it exports as its own service account with the generated RBAC", func() {
		rep, _ := auditJSON(admin, "-A")
		keys := map[[2]string]int{}
		oldest := map[[2]string]time.Time{}
		for _, f := range rep.UnmanagedKeys.Findings {
			k := [2]string{f.Kind, f.Namespace}
			keys[k] += f.Keys
			if t, ok := oldest[k]; !ok || f.Since.Time.Before(t) {
				oldest[k] = f.Since.Time
			}
		}
		Expect(keys).To(HaveLen(6), "ConfigMap, EnvoyFilter, EnvoyPatchPolicy, CiliumEnvoyConfig and two Secrets' namespaces")
		for k, n := range keys {
			labels := map[string]string{"kind": k[0], "namespace": k[1]}
			Eventually(func(g Gomega) {
				v, ok, err := testenv.Metric(registry, "ringmaster_unmanaged_ticket_keys", labels)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(ok).To(BeTrue(), "no series %v", labels)
				g.Expect(v).To(BeEquivalentTo(n), "%v", labels)
				v, ok, err = testenv.Metric(registry, "ringmaster_unmanaged_ticket_keys_last_changed_timestamp_seconds", labels)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(ok).To(BeTrue(), "no series %v", labels)
				g.Expect(v).To(BeEquivalentTo(oldest[k].Unix()), "%v", labels)
			}, timeout, poll).Should(Succeed())
		}
		// It lists; it holds no informer of what it reads (bound 5: the
		// operator keeps the findings, not the objects).
		for _, gvk := range running.Operator.Shapes.Informers() {
			Expect(gvk.Kind).NotTo(BeElementOf("ConfigMap", "EnvoyFilter", "EnvoyPatchPolicy", "CiliumEnvoyConfig", "CiliumClusterwideEnvoyConfig"))
		}
	})

	It("shows no byte of any key, in any output", func() {
		for _, args := range [][]string{
			{"audit", "-A"}, {"audit", "-A", "-o", "wide"}, {"audit", "-A", "-o", "json"}, {"audit", "-A", "-o", "yaml"},
			{"audit", "-A", "--fail-on", "all"}, {"audit", "-n", "shop", "-o", "wide"}, {"audit", "-n", "edge", "-o", "yaml"},
		} {
			res := run(admin, args...)
			Expect(res.Code).NotTo(Equal(2), "%v: %s", args, res.Err)
			if slices.ContainsFunc(args, func(a string) bool { return a == "wide" || a == "json" || a == "yaml" }) {
				Expect(res.Out).To(ContainSubstring("sha256:"), "%v: the fingerprints are shown", args)
			} else {
				Expect(res.Out).To(ContainSubstring("\nUnmanaged ticket keys:\n"), args)
			}
			Expect(keyfixtures.Leaks(res.Out+res.Err, forbidden)).To(BeEmpty(), "%v shows key bytes", args)
		}
	})

	It("covers one namespace with -n, and skips the cluster-scoped kinds there", func() {
		rep, res := auditJSON(admin, "-n", "edge")
		Expect(res.Code).To(Equal(0))
		got := findings(rep)
		Expect(got).To(HaveLen(1))
		Expect(got).To(HaveKey("Secret edge/haproxy-config data[tls-ticket-keys]"))
	})

	It("tells a user who may not list them which kinds were not read, and cannot vouch for unmanaged-keys", func() {
		rep, res := auditJSON(viewer, "-A")
		Expect(res.Code).To(Equal(0))
		Expect(res.Err).To(ContainSubstring(`Warning: configmaps, secrets, envoyfilters.networking.istio.io, envoypatchpolicies.gateway.envoyproxy.io, ciliumenvoyconfigs.cilium.io in the cluster were not listed, so the ticket keys they hold are not found: configmaps is forbidden: User "viewer" cannot list resource "configmaps"`))
		Expect(rep.UnmanagedKeys.Findings).To(BeEmpty())
		refusedKinds := 0
		for _, s := range rep.UnmanagedKeys.Sources {
			if s.Read == audit.ReadRefused {
				refusedKinds++
			}
		}
		Expect(refusedKinds).To(Equal(5))

		res = run(viewer, "audit", "-A", "--fail-on", "unmanaged-keys")
		Expect(res.Code).To(Equal(2))
		Expect(res.Err).To(ContainSubstring("error: the audit cannot vouch for --fail-on unmanaged-keys"))
	})

	It("names ringmaster's CertificatePolicy with its group, never ambiguously", func() {
		table := run(admin, "audit", "-A")
		Expect(table.Out).To(MatchRegexp(`(?m)^CertificatePolicy\.ringmaster\.io\s+-\s+edge\s`))
		Expect(table.Out).To(ContainSubstring("  CertificatePolicy.ringmaster.io edge: "))
		Expect(table.Out).NotTo(MatchRegexp(`(?m)^\s*CertificatePolicy\s`), "never the bare kind, which Open Cluster Management's shares")

		rep, _ := auditJSON(admin, "-A")
		var kinds []string
		for _, r := range rep.Rows {
			kinds = append(kinds, r.Kind)
		}
		Expect(kinds).To(ContainElement("CertificatePolicy.ringmaster.io"))
		Expect(kinds).NotTo(ContainElement("CertificatePolicy"))

		help := run(admin, "audit", "--help")
		Expect(help.Out).To(ContainSubstring("certificatepolicies.ringmaster.io"))
		Expect(help.Out).To(ContainSubstring("policy.open-cluster-management.io"))
	})
})
