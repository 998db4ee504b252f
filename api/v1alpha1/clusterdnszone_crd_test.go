//go:build integration

package v1alpha1_test

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
)

// The API server, with the generated CRD, accepts the ClusterDNSZones a
// cluster administrator means and refuses the others with the rule's
// message.
func TestClusterDNSZoneValidation(t *testing.T) {
	env, err := testenv.StartWith(testenv.Options{Plaintext: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	valid := func() *v1alpha1.ClusterDNSZone {
		return &v1alpha1.ClusterDNSZone{ObjectMeta: metav1.ObjectMeta{Name: "shop"}, Spec: v1alpha1.ClusterDNSZoneSpec{
			Zone:              "example.com",
			Primary:           "ns1.example.com:53",
			TSIGSecretRef:     &v1alpha1.SecretReference{Name: "tsig"},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "shop"}},
			AllowedNames:      []string{"shop.example.com", "*.shop.example.com"},
		}}
	}
	for _, c := range []struct {
		name    string
		mutate  func(*v1alpha1.ClusterDNSZoneSpec)
		message string // "" accepted
	}{
		{"a zone with a primary", func(*v1alpha1.ClusterDNSZoneSpec) {}, ""},
		{"an IPv4 primary, secondaries, the apex, maxTTL", func(s *v1alpha1.ClusterDNSZoneSpec) {
			s.Primary, s.Servers, s.AllowedNames, s.MaxTTL = "192.0.2.1:5353", []string{"192.0.2.1:5353", "ns2.example.com:53"}, []string{"example.com"}, ptr.To[int32](3600)
		}, ""},
		{"an IPv6 primary", func(s *v1alpha1.ClusterDNSZoneSpec) { s.Primary = "[2001:db8::1]:53" }, ""},
		{"verify-only", func(s *v1alpha1.ClusterDNSZoneSpec) {
			s.Primary, s.TSIGSecretRef, s.Servers = "", nil, []string{"ns1.example.com:53"}
		}, ""},
		{"verify-only without servers", func(s *v1alpha1.ClusterDNSZoneSpec) { s.Primary, s.TSIGSecretRef = "", nil },
			"a verify-only zone (no primary) needs servers"},
		{"a primary without a TSIG key", func(s *v1alpha1.ClusterDNSZoneSpec) { s.TSIGSecretRef = nil },
			"tsigSecretRef is required with primary"},
		{"a TSIG key without a primary", func(s *v1alpha1.ClusterDNSZoneSpec) { s.Primary, s.Servers = "", []string{"ns1.example.com:53"} },
			"tsigSecretRef needs primary: a verify-only zone sends no update"},
		{"an allowed name outside the zone", func(s *v1alpha1.ClusterDNSZoneSpec) { s.AllowedNames = []string{"shop.example.org"} },
			"allowedNames must be inside zone"},
		{"an allowed name only ending like the zone", func(s *v1alpha1.ClusterDNSZoneSpec) { s.AllowedNames = []string{"evilexample.com"} },
			"allowedNames must be inside zone"},
		{"a pattern for the whole zone", func(s *v1alpha1.ClusterDNSZoneSpec) { s.AllowedNames = []string{"*.example.com"} }, ""},
		{"a pattern outside the zone", func(s *v1alpha1.ClusterDNSZoneSpec) { s.AllowedNames = []string{"*.com"} },
			"allowedNames must be inside zone"},
		{"a wildcard inside a name", func(s *v1alpha1.ClusterDNSZoneSpec) { s.AllowedNames = []string{"shop.*.example.com"} },
			"spec.allowedNames[0]: Invalid value"},
		{"no allowed name", func(s *v1alpha1.ClusterDNSZoneSpec) { s.AllowedNames = nil }, "spec.allowedNames: Required value"},
		{"a zone with the final dot", func(s *v1alpha1.ClusterDNSZoneSpec) { s.Zone = "example.com." }, "spec.zone: Invalid value"},
		{"a zone in upper case", func(s *v1alpha1.ClusterDNSZoneSpec) { s.Zone = "Example.com" }, "spec.zone: Invalid value"},
		{"a primary without a port", func(s *v1alpha1.ClusterDNSZoneSpec) { s.Primary = "ns1.example.com" }, "spec.primary: Invalid value"},
		{"a primary with port 0", func(s *v1alpha1.ClusterDNSZoneSpec) { s.Primary = "ns1.example.com:0" }, "primary's port must be between 1 and 65535"},
		{"a primary with port 65536", func(s *v1alpha1.ClusterDNSZoneSpec) { s.Primary = "ns1.example.com:65536" }, "primary's port must be between 1 and 65535"},
		{"a URL for a primary", func(s *v1alpha1.ClusterDNSZoneSpec) { s.Primary = "dns://ns1.example.com:53" }, "spec.primary: Invalid value"},
		{"a server without a port", func(s *v1alpha1.ClusterDNSZoneSpec) { s.Servers = []string{"ns2.example.com"} }, "spec.servers[0]: Invalid value"},
		{"the same server twice", func(s *v1alpha1.ClusterDNSZoneSpec) { s.Servers = []string{"ns2.example.com:53", "ns2.example.com:53"} },
			"spec.servers[1]: Duplicate value"},
		{"maxTTL 0", func(s *v1alpha1.ClusterDNSZoneSpec) { s.MaxTTL = ptr.To[int32](0) }, "spec.maxTTL: Invalid value: 0"},
		{"maxTTL over a day", func(s *v1alpha1.ClusterDNSZoneSpec) { s.MaxTTL = ptr.To[int32](86401) }, "spec.maxTTL: Invalid value: 86401"},
		{"an empty TSIG Secret name", func(s *v1alpha1.ClusterDNSZoneSpec) { s.TSIGSecretRef.Name = "" }, "spec.tsigSecretRef.name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			z := valid()
			c.mutate(&z.Spec)
			err := env.Client.Create(ctx, z)
			if c.message == "" {
				if err != nil {
					t.Fatalf("a valid zone refused: %v", err)
				}
				if err := env.Client.Delete(ctx, z); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				_ = env.Client.Delete(ctx, z)
				t.Fatalf("accepted; want refused with %q", c.message)
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), c.message) {
				t.Fatalf("error %v; want Invalid with %q", err, c.message)
			}
		})
	}
}
