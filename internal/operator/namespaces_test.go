package operator

import (
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
}
