//go:build integration

package plugin_test

import (
	"encoding/json"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/audit"
)

// auditJSON runs audit -o json and decodes its report.
func auditJSON(kubeconfig string, args ...string) (audit.Report, result) {
	GinkgoHelper()
	res := run(kubeconfig, append([]string{"audit", "-o", "json"}, args...)...)
	var rep audit.Report
	Expect(json.Unmarshal([]byte(res.Out), &rep)).To(Succeed(), res.Err)
	return rep, res
}

func rowOf(rep audit.Report, ref string) audit.Row {
	GinkgoHelper()
	for _, r := range rep.Rows {
		if r.Ref() == ref {
			return r
		}
	}
	Fail("no row " + ref)
	return audit.Row{}
}

func categories(r audit.Row) []audit.Category {
	var out []audit.Category
	for _, p := range r.Problems {
		out = append(out, p.Categories...)
	}
	return out
}

var _ = Describe("audit", func() {
	It("lists every ring of the cluster, problems first, as the operator reports them", func(ctx SpecContext) {
		// late's staged key activates a minute after it was created; with
		// its key source gone, no successor can be minted.
		Eventually(func(g Gomega) {
			c := meta.FindStatusCondition(getRing("shop", "late").Status.Conditions, v1alpha1.ConditionRotationOverdue)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		}, 3*time.Minute, time.Second).Should(Succeed())

		rep, res := auditJSON(admin, "-A")
		Expect(res.Code).To(Equal(0))
		Expect(res.Err).To(BeEmpty())

		late := rowOf(rep, "TicketKeyRing shop/late")
		Expect(categories(late)).To(ContainElement(audit.Overdue))
		Expect(late.Problems[0].Message).To(ContainSubstring("rotation overdue (KeySourceNotFound)"))

		edge := rowOf(rep, "ClusterTicketKeyRing edge")
		Expect(categories(edge)).To(ConsistOf(audit.FailedTargets))
		Expect(edge.Problems[0].Message).To(ContainSubstring("legacy (SecretConflict"))

		web := getRing("shop", "web")
		row := rowOf(rep, "TicketKeyRing shop/web")
		Expect(row.Problems).To(BeEmpty())
		Expect(row.KeyID).To(Equal(web.Status.ActiveKey.ID), "the active key, by the clock, is the one status names")
		Expect(row.KeySince.Time).To(BeTemporally("==", web.Status.ActiveKey.ActiveFrom.Time))
		Expect(row.MaxKeyAge.Duration).To(Equal(time.Hour))
		Expect(row.Expires.Time).To(BeTemporally("==", web.Status.Keys[len(web.Status.Keys)-1].ExpiresAt.Time), "the oldest key's expiry")

		var firstHealthy int
		for i, r := range rep.Rows {
			if len(r.Problems) == 0 {
				firstHealthy = i
				break
			}
		}
		for _, r := range rep.Rows[firstHealthy:] {
			Expect(r.Problems).To(BeEmpty(), "problems come first: %s", r.Ref())
		}

		table := run(admin, "audit", "-A")
		Expect(table.Code).To(Equal(0))
		Expect(table.Out).To(MatchRegexp(`(?m)^KIND\s+NAMESPACE\s+NAME\s+KEY\s+KEY AGE\s+MAX AGE\s+EXPIRES\s+PROBLEMS$`))
		Expect(table.Out).To(MatchRegexp(`(?m)^TicketKeyRing\s+shop\s+web\s+` + web.Status.ActiveKey.ID + `\s+\S+\s+1h\s+in \S+\s+-$`))
		Expect(table.Out).To(ContainSubstring("Problems:\n"))
		Expect(table.Out).To(ContainSubstring("  ClusterTicketKeyRing edge: "))
	})

	It("dates certificate keys as the operator does, and shows its violations", func(ctx SpecContext) {
		rep, res := auditJSON(admin, "-A")
		Expect(res.Code).To(Equal(0))
		for _, c := range certificates {
			row := rowOf(rep, c.Kind+" certs/"+c.Name)
			Expect(row.Policies).To(Equal([]string{"edge"}))
			// The operator's metric is the key's age when scraped: the
			// key's date by the operator lies within the scrape, less the
			// age.
			from := time.Now()
			age, ok := metric("ringmaster_certificate_key_age_seconds", map[string]string{"namespace": "certs", "name": c.Name})
			to := time.Now()
			Expect(ok).To(BeTrue())
			ageOf := time.Duration(age * float64(time.Second))
			Expect(row.KeySince.Time).To(And(
				BeTemporally(">=", from.Add(-ageOf-time.Millisecond)),
				BeTemporally("<=", to.Add(-ageOf+time.Millisecond))),
				"%s: the operator's key age %s when scraped between %s and %s", row.Ref(), ageOf, from, to)
		}
		Expect(rowOf(rep, "Secret certs/shared-b").KeySince.Time).To(BeTemporally("==", rowOf(rep, "Secret certs/shared-a").KeySince.Time),
			"one key in two Secrets is as old as its first certificate")

		policy := &v1alpha1.CertificatePolicy{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: "edge"}, policy)).To(Succeed())
		oldest := policy.Status.OldestKey
		Expect(rowOf(rep, string(oldest.Kind)+" certs/"+oldest.Name).KeySince.Time).To(BeTemporally("==", oldest.Since.Time), "the policy's oldest key")

		old := rowOf(rep, "Secret certs/old")
		Expect(categories(old)).To(ConsistOf(audit.Violations, audit.KeyAge))
		Expect(old.Problems[0].Message).To(HavePrefix("edge/maxKeyAge: key " + old.KeyID))
		api := rowOf(rep, "Certificate certs/api")
		Expect(categories(api)).To(ConsistOf(audit.Violations, audit.ExpiredSoon))
		Expect(rep.Rows).NotTo(ContainElement(HaveField("Name", "other")), "dev/other is not selected")
		Expect(categories(rowOf(rep, "CertificatePolicy.ringmaster.io edge"))).To(ConsistOf(audit.Violations, audit.ExpiredSoon))
		Expect(res.Out).NotTo(ContainSubstring(lastAppliedMarker))
	})

	It("states the keys' posture at rest: the Secrets holding keys, that backups skip them, and encryption by the API server's metrics", func() {
		rep, res := auditJSON(admin, "-A")
		Expect(res.Code).To(Equal(0))
		p := rep.AtRest
		Expect(p).NotTo(BeNil())
		Expect(p.Encryption).To(Equal(audit.EncryptionOn), "the suite's API server encrypts Secrets with secretbox")
		Expect(p.Provider).To(ContainSubstring("k8s:enc:secretbox:v1:"))
		Expect(p.Snapshots).To(BeNumerically(">=", 4), "web, late, stuck, calm, edge")
		Expect(p.Projections).To(BeNumerically(">=", 4))
		Expect(p.Namespaces).To(ContainElements("shop", "quiet"))
		Expect(p.InBackups).To(BeEmpty())
		Expect(p.Problems).To(BeEmpty())
		Expect(p.Verify).To(MatchRegexp(`^ETCDCTL_API=3 etcdctl get /registry/secrets/\S+/\S+ --print-value-only`))

		table := run(admin, "audit", "-A", "--fail-on", "at-rest")
		Expect(table.Code).To(Equal(0))
		Expect(table.Out).To(ContainSubstring("\nKeys at rest:\n"))
		Expect(table.Out).To(ContainSubstring("Encryption at rest: on, by the API server's metrics (Secrets written as k8s:enc:secretbox:v1:"))
		Expect(table.Out).To(ContainSubstring("The operator cannot see how kube-apiserver stores Secrets"))
		Expect(table.Out).To(ContainSubstring("Backups: every one is labelled velero.io/exclude-from-backup=true"))

		res = run(viewer, "audit", "-A", "--fail-on", "at-rest")
		Expect(res.Code).To(Equal(2), "a viewer may not read /metrics: the audit cannot vouch for at-rest")
	})

	It("exits 1 when a problem of --fail-on's categories is found, 0 when none is", func() {
		res := run(admin, "audit", "-A", "--fail-on", "violations,failed-targets")
		Expect(res.Code).To(Equal(1))
		Expect(res.Err).To(ContainSubstring("error: "))
		Expect(res.Err).To(ContainSubstring("problem(s) in the --fail-on categories violations,failed-targets\n"))

		res = run(admin, "audit", "-n", "quiet", "--fail-on", "all")
		Expect(res.Code).To(Equal(0), "calm is on schedule, and nothing in quiet is certified")
		Expect(res.Out).To(MatchRegexp(`(?m)^TicketKeyRing\s+quiet\s+calm\s`))
		Expect(res.Out).NotTo(ContainSubstring("ClusterTicketKeyRing"), "edge does not deliver into quiet")

		res = run(admin, "audit", "-n", "shop", "--fail-on", "overdue")
		Expect(res.Code).To(Equal(1), "late is overdue")
		Expect(res.Out).To(MatchRegexp(`(?m)^ClusterTicketKeyRing\s+-\s+edge\s`), "edge delivers into shop")

		res = run(admin, "audit", "-A", "--fail-on", "stale")
		Expect(res.Code).To(Equal(2))
		Expect(res.Err).To(ContainSubstring(`unknown category "stale"`))
	})

	It("tells a viewer, who may not read Secrets, what it could not read, and shows what the policies report", func() {
		rep, res := auditJSON(viewer, "-A")
		Expect(res.Code).To(Equal(0))
		Expect(res.Err).To(ContainSubstring(`Warning: cert-manager Certificates in the cluster were not listed, so their keys are dated only where a CertificatePolicy's status names them: certificates.cert-manager.io is forbidden: User "viewer" cannot list resource "certificates" in API group "cert-manager.io" at the cluster scope`))
		Expect(res.Err).To(ContainSubstring(`Warning: kubernetes.io/tls Secrets in the cluster were not listed`))
		Expect(res.Err).To(ContainSubstring(`secrets is forbidden: User "viewer" cannot list resource "secrets" in API group "" at the cluster scope`))
		Expect(rep.Notes).To(HaveLen(6), "namespaces, Certificates, TLS Secrets, the Secrets holding keys, /metrics, the kinds that may hold unmanaged ticket keys: %v", rep.Notes)
		Expect(res.Err).To(ContainSubstring("Warning: the API server's /metrics were not read, so encryption at rest is not checked"))

		Expect(categories(rowOf(rep, "TicketKeyRing shop/late"))).To(ContainElement(audit.Overdue))
		old := rowOf(rep, "Secret certs/old")
		Expect(old.KeyID).To(BeEmpty())
		Expect(old.Detail).To(HavePrefix("not read"))
		Expect(categories(old)).To(ConsistOf(audit.Violations, audit.KeyAge))

		res = run(viewer, "audit", "-A", "--fail-on", "overdue")
		Expect(res.Code).To(Equal(1), "late is overdue, and the viewer can see it")
	})

	It("exits 2 when a team may not read what --fail-on needs, saying why", func() {
		res := run(team, "audit", "-n", "quiet", "--fail-on", "overdue")
		Expect(res.Code).To(Equal(2))
		Expect(res.Err).To(ContainSubstring(`Warning: ClusterTicketKeyRings were not listed: clusterticketkeyrings.ringmaster.io is forbidden: User "team" cannot list resource "clusterticketkeyrings" in API group "ringmaster.io" at the cluster scope`))
		Expect(res.Err).To(ContainSubstring("error: the audit cannot vouch for --fail-on overdue"))
		Expect(res.Out).To(MatchRegexp(`(?m)^TicketKeyRing\s+quiet\s+calm\s`), "what the team may read is still shown")
	})
})
