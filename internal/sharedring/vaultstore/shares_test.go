package vaultstore

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/mint"
)

func TestShares(t *testing.T) {
	source := func(sr *v1alpha1.VaultSharedRings) *v1alpha1.ClusterKeySource {
		return &v1alpha1.ClusterKeySource{ObjectMeta: metav1.ObjectMeta{Name: "vault-global"},
			Spec: v1alpha1.ClusterKeySourceSpec{NamespaceSelector: &metav1.LabelSelector{}, Vault: &v1alpha1.VaultSource{SharedRings: sr}}}
	}
	shared := func(sel *metav1.LabelSelector) *v1alpha1.ClusterKeySource {
		return source(&v1alpha1.VaultSharedRings{Path: "ringmaster/prod", NamespaceSelector: sel})
	}
	shop := labels.Set{"kubernetes.io/metadata.name": "shop", "team": "shop"}
	tests := []struct {
		name   string
		source *v1alpha1.ClusterKeySource
		ns     string
		labels labels.Set
		want   bool
		reason string
	}{
		{"a key source without sharedRings shares nothing", source(nil), "", nil, false, ""},
		{"a cluster ring is shared", shared(nil), "", nil, true, ""},
		{"no selector: no namespaced ring is shared", shared(nil), "shop", shop, false, ""},
		{"{} shares every namespace", shared(&metav1.LabelSelector{}), "shop", shop, true, ""},
		{"a matching selector", shared(&metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "shop"}}), "shop", shop, true, ""},
		{"a selector that does not match", shared(&metav1.LabelSelector{MatchLabels: map[string]string{"team": "payments"}}), "shop", shop, false, ""},
		{"an invalid selector fails closed", shared(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Sometimes"}}}), "shop", shop, false, v1alpha1.ReasonVaultConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Shares(tt.source, tt.ns, tt.labels)
			if got != tt.want || mint.CarriedReason(err) != tt.reason {
				t.Fatalf("Shares = %t, %v; want %t with reason %q", got, err, tt.want, tt.reason)
			}
		})
	}
}
