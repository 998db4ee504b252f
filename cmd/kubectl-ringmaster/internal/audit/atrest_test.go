package audit_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/audit"
)

func TestEncryptionFromMetrics(t *testing.T) {
	const head = "# TYPE apiserver_storage_transformation_operations_total counter\n"
	line := func(resource, typ, prefix, status, value string) string {
		return `apiserver_storage_transformation_operations_total{resource="` + resource + `",status="` + status +
			`",transformation_type="` + typ + `",transformer_prefix="` + prefix + `"} ` + value + "\n"
	}
	for _, tc := range []struct {
		name     string
		metrics  string
		want     audit.Encryption
		provider string
	}{
		{"secretbox, as kube-apiserver counts it: the provider's prefix and the key's name", head + line("secrets", "to_storage", "k8s:enc:secretbox:v1:", "OK", "12") +
			line("secrets", "to_storage", "ringmaster:", "OK", "12") + line("secrets", "from_storage", "k8s:enc:secretbox:v1:", "OK", "40"),
			audit.EncryptionOn, "k8s:enc:secretbox:v1:"},
		{"KMS v2", head + line("secrets", "to_storage", "k8s:enc:kms:v2:vault:", "OK", "3"), audit.EncryptionOn, "k8s:enc:kms:v2:vault:"},
		{"identity first: plaintext", head + line("secrets", "to_storage", "identity", "OK", "5"), audit.EncryptionOff, ""},
		{"a plaintext write beside encrypted ones", head + line("secrets", "to_storage", "identity", "OK", "1") + line("secrets", "to_storage", "k8s:enc:aesgcm:v1:", "OK", "9"),
			audit.EncryptionOff, ""},
		{"only ConfigMaps encrypted", head + line("configmaps", "to_storage", "k8s:enc:aescbc:v1:", "OK", "9"), audit.EncryptionUnknown, ""},
		{"failed encryptions only", head + line("secrets", "to_storage", "k8s:enc:kms:v2:vault:", "Internal", "4"), audit.EncryptionUnknown, ""},
		{"no such metric: no EncryptionConfiguration", "# TYPE apiserver_request_total counter\napiserver_request_total 7\n", audit.EncryptionUnknown, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, provider, err := audit.EncryptionFromMetrics([]byte(tc.metrics))
			if err != nil || got != tc.want || provider != tc.provider {
				t.Errorf("EncryptionFromMetrics = %q, %q, %v; want %q, %q", got, provider, err, tc.want, tc.provider)
			}
		})
	}
	if got, _, err := audit.EncryptionFromMetrics([]byte("not { metrics")); err == nil || got != audit.EncryptionUnread {
		t.Errorf("garbage: %q, %v", got, err)
	}
}

func TestPosture(t *testing.T) {
	labelled := []audit.KeySecret{
		{Namespace: "shop", Name: "web-e3", Component: "snapshot", Excluded: true},
		{Namespace: "shop", Name: "web-ticket-keys", Component: "projection", Excluded: true},
		{Namespace: "edge", Name: "edge-keys", Component: "projection", Excluded: true},
	}
	bare := append(slices.Clone(labelled), audit.KeySecret{Namespace: "shop", Name: "old-e9", Component: "snapshot"})
	for _, tc := range []struct {
		name     string
		in       audit.Input
		problems []string // substrings, one per problem
	}{
		{"encrypted and excluded from backups", audit.Input{KeySecrets: labelled, Encryption: audit.EncryptionOn, Provider: "k8s:enc:secretbox:v1:"}, nil},
		{"a Secret backups keep", audit.Input{KeySecrets: bare, Encryption: audit.EncryptionOn}, []string{"1 Secret(s) holding keys lack velero.io/exclude-from-backup=true"}},
		{"plaintext", audit.Input{KeySecrets: labelled, Encryption: audit.EncryptionOff}, []string{"writes Secrets in plaintext"}},
		{"no sign of encryption", audit.Input{KeySecrets: labelled, Encryption: audit.EncryptionUnknown}, []string{"most likely stored in plaintext"}},
		{"metrics not read: encryption not judged", audit.Input{KeySecrets: labelled}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := audit.Build(tc.in)
			p := rep.AtRest
			if p == nil {
				t.Fatal("no posture")
			}
			if p.Snapshots+p.Projections != len(tc.in.KeySecrets) || !strings.Contains(p.Verify, "etcdctl get /registry/secrets/shop/") {
				t.Errorf("posture %+v", p)
			}
			if len(p.Problems) != len(tc.problems) {
				t.Fatalf("problems %+v, want %d", p.Problems, len(tc.problems))
			}
			for i, want := range tc.problems {
				if !strings.Contains(p.Problems[i].Message, want) || !slices.Equal(p.Problems[i].Categories, []audit.Category{audit.AtRest}) {
					t.Errorf("problem %d %+v, want %q", i, p.Problems[i], want)
				}
			}
			if got := rep.Broken([]audit.Category{audit.AtRest}); len(got) != len(tc.problems) {
				t.Errorf("Broken(at-rest) = %d findings, want %d", len(got), len(tc.problems))
			}
		})
	}
	if rep := audit.Build(audit.Input{}); rep.AtRest != nil {
		t.Errorf("posture %+v with nothing read", rep.AtRest)
	}
}
