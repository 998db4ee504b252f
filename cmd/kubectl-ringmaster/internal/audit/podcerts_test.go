package audit_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/audit"
	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
)

// The audit lists the pod certificates and trust bundles a policy judges,
// with the state of each pod certificate in the kubelet's words, the
// violations the operator reported, and no certificate or key bytes.
func TestPodCertificateRows(t *testing.T) {
	root, err := testpki.NewCAWith(testpki.CAOptions{Name: "mesh root", NotBefore: now.Add(-day), NotAfter: now.Add(10 * day)})
	if err != nil {
		t.Fatal(err)
	}
	key, err := testpki.NewKey(testpki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := testpki.CSR(key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := root.Issue(testpki.Leaf{DNSNames: []string{"web.shop.svc"}, PublicKey: key.Public(), NotBefore: now.Add(-20 * hour), NotAfter: now.Add(4 * hour)})
	if err != nil {
		t.Fatal(err)
	}
	pcr := func(name string, created time.Duration, issued bool) certificatesv1.PodCertificateRequest {
		p := certificatesv1.PodCertificateRequest{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, CreationTimestamp: at(created)},
			Spec: certificatesv1.PodCertificateRequestSpec{SignerName: "example.com/mesh", PodName: "web-0", PodUID: "uid-web-0",
				ServiceAccountName: "web", StubPKCS10Request: csr},
		}
		if issued {
			p.Status = certificatesv1.PodCertificateRequestStatus{
				Conditions:       []metav1.Condition{{Type: "Issued", Status: metav1.ConditionTrue}},
				CertificateChain: string(leaf.CertPEM) + string(root.PEM), BeginRefreshAt: &metav1.Time{Time: now.Add(-2 * hour)},
			}
		}
		return p
	}
	policy := v1alpha1.CertificatePolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "pods"},
		Spec: v1alpha1.CertificatePolicySpec{
			Selector: v1alpha1.CertificateSelector{Kinds: []v1alpha1.CertificateKind{v1alpha1.KindPodCertificateRequest, v1alpha1.KindClusterTrustBundle}},
			Rules:    v1alpha1.CertificateRules{RefreshOverdueAfter: &metav1.Duration{Duration: 30 * time.Minute}},
		},
		Status: v1alpha1.CertificatePolicyStatus{Violations: []v1alpha1.Violation{{
			CertificateRef: v1alpha1.CertificateRef{Kind: v1alpha1.KindPodCertificateRequest, Namespace: "shop", Name: "req-new"},
			Rule:           "refreshOverdue", Message: "not refreshed since beginRefreshAt 2026-11-30T10:00:00Z, past refreshOverdueAfter 30m0s",
		}}},
	}
	in := audit.Input{
		Now: now, Policies: []v1alpha1.CertificatePolicy{policy}, ExpiryWindow: 14 * day,
		PodCertificateRequests: []certificatesv1.PodCertificateRequest{pcr("req-old", -20*hour, true), pcr("req-new", -hour, true), pcr("req-pending", 0, false)},
		TrustBundles: []certificatesv1.ClusterTrustBundle{{ObjectMeta: metav1.ObjectMeta{Name: "example.com:mesh:roots"},
			Spec: certificatesv1.ClusterTrustBundleSpec{SignerName: "example.com/mesh", TrustBundle: string(root.PEM)}}},
	}
	rows := map[string]audit.Row{}
	for _, r := range audit.Build(in).Rows {
		rows[r.Name] = r
	}
	for name, want := range map[string]string{
		"req-old":                "fresh; pod web-0, signer example.com/mesh, key ECDSA 256", // superseded by req-new: never overdue
		"req-new":                "overdue for refresh; pod web-0",
		"req-pending":            "pending; pod web-0",
		"example.com:mesh:roots": `1 CA certificate(s), signer example.com/mesh; first to expire: "mesh root"`,
	} {
		r, ok := rows[name]
		if !ok {
			t.Errorf("no row %s in %v", name, rows)
			continue
		}
		if !strings.Contains(r.Detail, want) {
			t.Errorf("%s: detail %q, want %q", name, r.Detail, want)
		}
	}
	if r := rows["req-new"]; len(r.Problems) == 0 || !strings.Contains(r.Problems[0].Message, "pods/refreshOverdue") {
		t.Errorf("req-new problems %+v, want the policy's refreshOverdue", r.Problems)
	}
	if r := rows["example.com:mesh:roots"]; r.Expires == nil || !r.Expires.Time.Equal(now.Add(10*day)) || len(r.Problems) == 0 {
		t.Errorf("the bundle expires %v, within the window: problems %+v", r.Expires, r.Problems)
	}
	out, err := json.Marshal(audit.Build(in))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "BEGIN") || strings.Contains(string(out), string(csr[:16])) {
		t.Error("the report holds certificate or request bytes")
	}
}
