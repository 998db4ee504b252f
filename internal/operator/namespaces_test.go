package operator

import (
	certificatesv1 "k8s.io/api/certificates/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"slices"
	"strings"
	"testing"
)

func TestParseNamespaces(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr string
	}{
		{"", nil, ""},
		{"  ", nil, ""},
		{"shop", []string{"shop"}, ""},
		{"shop, web ,edge", []string{"shop", "web", "edge"}, ""},
		{"shop,,web", nil, `"" is no namespace name`},
		{"Shop", nil, `"Shop" is no namespace name`},
		{"shop,web,shop", nil, `"shop" is listed twice`},
		{strings.Repeat("a", 64), nil, "is no namespace name"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseNamespaces(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "--watch-namespaces: ") {
					t.Fatalf("ParseNamespaces(%q) = %v, %v; want an error naming the flag and %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("ParseNamespaces(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestCacheOptions(t *testing.T) {
	if co := cacheOptions(Options{}); co.DefaultNamespaces != nil {
		t.Errorf("no namespaces listed: the cache watches them all, got %v", co.DefaultNamespaces)
	}
	o := Options{WatchNamespaces: []string{"shop", "web"}}
	o.Namespace = "ringmaster-system"
	co := cacheOptions(o)
	for _, ns := range []string{"shop", "web", "ringmaster-system"} {
		if _, ok := co.DefaultNamespaces[ns]; !ok {
			t.Errorf("the cache does not watch %s: %v", ns, co.DefaultNamespaces)
		}
	}
	if len(co.DefaultNamespaces) != 3 {
		t.Errorf("the cache watches %v", co.DefaultNamespaces)
	}
	// PodCertificateRequests, like Certificates, are judged in every
	// namespace, where the API serves them; a cache cannot name a kind
	// the API does not serve.
	hasPCR := func(co cache.Options) bool {
		for obj, by := range co.ByObject {
			if _, ok := obj.(*certificatesv1.PodCertificateRequest); ok {
				_, all := by.Namespaces[cache.AllNamespaces]
				return all
			}
		}
		return false
	}
	if hasPCR(co) {
		t.Error("the cache names PodCertificateRequests, which the API does not serve")
	}
	o.podCertificatesServed = true
	if !hasPCR(cacheOptions(o)) {
		t.Error("the cache watches PodCertificateRequests in the listed namespaces only")
	}
}
