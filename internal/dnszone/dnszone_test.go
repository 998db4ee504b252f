package dnszone_test

import (
	"encoding/base64"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/dnszone"
)

func zone(mutate func(*v1alpha1.ClusterDNSZoneSpec)) *v1alpha1.ClusterDNSZone {
	z := &v1alpha1.ClusterDNSZone{ObjectMeta: metav1.ObjectMeta{Name: "shop"}, Spec: v1alpha1.ClusterDNSZoneSpec{
		Zone:              "example.com",
		Primary:           "ns1.example.com:53",
		TSIGSecretRef:     &v1alpha1.SecretReference{Name: "tsig"},
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "shop"}},
		AllowedNames:      []string{"shop.example.com", "*.shop.example.com"},
	}}
	if mutate != nil {
		mutate(&z.Spec)
	}
	return z
}

func TestAdmit(t *testing.T) {
	shop := map[string]string{"team": "shop", "env": "prod"}
	for _, c := range []struct {
		name   string
		zone   *v1alpha1.ClusterDNSZone
		labels map[string]string
		record string
		ttl    int32
		err    string // "" admitted
	}{
		{"an allowed name", zone(nil), shop, "shop.example.com", 300, ""},
		{"with the final dot, in upper case", zone(nil), shop, "SHOP.example.com.", 300, ""},
		{"below a pattern", zone(nil), shop, "www.shop.example.com", 300, ""},
		{"two labels below a pattern", zone(nil), shop, "a.b.shop.example.com", 300, ""},
		{"a name not allowed", zone(nil), shop, "www.example.com", 300, "does not allow the name www.example.com"},
		{"a name ending like an allowed one", zone(nil), shop, "evilshop.example.com", 300, "does not allow the name evilshop.example.com"},
		{"the pattern's own name is not below it", zone(func(s *v1alpha1.ClusterDNSZoneSpec) { s.AllowedNames = []string{"*.shop.example.com"} }),
			shop, "shop.example.com", 300, "does not allow"},
		{"outside the zone", zone(func(s *v1alpha1.ClusterDNSZoneSpec) { s.AllowedNames = []string{"*.com"} }), shop, "shop.example.org", 300,
			"shop.example.org is not inside zone example.com"},
		{"the zone's apex", zone(func(s *v1alpha1.ClusterDNSZoneSpec) { s.AllowedNames = []string{"example.com"} }), shop, "example.com.", 300, ""},
		{"a namespace not selected", zone(nil), map[string]string{"team": "ads"}, "shop.example.com", 300, "does not select the ring's namespace"},
		{"no selector", zone(func(s *v1alpha1.ClusterDNSZoneSpec) { s.NamespaceSelector = nil }), shop, "shop.example.com", 300, "selects no namespace"},
		{"{} selects every namespace", zone(func(s *v1alpha1.ClusterDNSZoneSpec) { s.NamespaceSelector = &metav1.LabelSelector{} }), nil, "shop.example.com", 300, ""},
		{"an invalid selector", zone(func(s *v1alpha1.ClusterDNSZoneSpec) {
			s.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Near"}}}
		}), shop, "shop.example.com", 300, "invalid spec.namespaceSelector"},
		{"ttl at maxTTL", zone(func(s *v1alpha1.ClusterDNSZoneSpec) { s.MaxTTL = ptr.To[int32](600) }), shop, "shop.example.com", 600, ""},
		{"ttl over maxTTL", zone(func(s *v1alpha1.ClusterDNSZoneSpec) { s.MaxTTL = ptr.To[int32](600) }), shop, "shop.example.com", 601,
			"ttl 601s is outside ClusterDNSZone shop's bounds: 1s to 600s"},
		{"no maxTTL: an hour", zone(nil), shop, "shop.example.com", 3600, ""},
		{"no maxTTL: over an hour", zone(nil), shop, "shop.example.com", 3601, "1s to 3600s"},
		{"maxTTL raised to a day", zone(func(s *v1alpha1.ClusterDNSZoneSpec) { s.MaxTTL = ptr.To[int32](86400) }), shop, "shop.example.com", 86400, ""},
		{"a literal wildcard below a pattern", zone(nil), shop, "*.shop.example.com", 300, "is a wildcard"},
		{"a name not allowed does not list the zone's names", zone(nil), shop, "ads.example.com", 300, "does not allow the name ads.example.com to this namespace"},
		{"ttl 0", zone(nil), shop, "shop.example.com", 0, "ttl 0s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := dnszone.Admit(c.zone, c.labels, c.record, c.ttl)
			switch {
			case c.err == "" && err != nil:
				t.Fatalf("Admit = %v, want admitted", err)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Fatalf("Admit = %v, want an error saying %q", err, c.err)
			}
		})
	}
}

func TestTSIG(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	b64 := base64.StdEncoding.EncodeToString(secret)
	for _, c := range []struct {
		name    string
		data    map[string]string
		wantAlg string
		err     string
	}{
		{"defaults to hmac-sha256", map[string]string{"name": "ringmaster", "secret": b64}, "hmac-sha256", ""},
		{"an algorithm, with a dot and spaces", map[string]string{"name": "ringmaster.", "secret": b64 + "\n", "algorithm": " HMAC-SHA512.\n"}, "hmac-sha512", ""},
		{"no name", map[string]string{"secret": b64}, "", `no "name" key`},
		{"no secret", map[string]string{"name": "k"}, "", `no "secret" key`},
		{"not base64", map[string]string{"name": "k", "secret": "not base64!"}, "", "not base64"},
		{"too short", map[string]string{"name": "k", "secret": "c2hvcnQ="}, "", "5 bytes, want at least 16"},
		{"hmac-md5", map[string]string{"name": "k", "secret": b64, "algorithm": "hmac-md5"}, "", `"algorithm" key names no algorithm of`},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := map[string][]byte{}
			for k, v := range c.data {
				data[k] = []byte(v)
			}
			k, err := dnszone.TSIG(data)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("TSIG = %v, %v; want an error saying %q", k, err, c.err)
				}
				if strings.Contains(err.Error(), c.data["secret"]) && c.data["secret"] != "" {
					t.Fatalf("error %q quotes the secret", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if k.Name != "ringmaster." || k.Algorithm != c.wantAlg || string(k.Secret) != string(secret) {
				t.Fatalf("TSIG = %s %x, want ringmaster. %s and the decoded secret", k, k.Secret, c.wantAlg)
			}
		})
	}
}

func TestTarget(t *testing.T) {
	key, err := dnszone.TSIG(map[string][]byte{"name": []byte("k"), "secret": []byte(base64.StdEncoding.EncodeToString(make([]byte, 32)))})
	if err != nil {
		t.Fatal(err)
	}
	tg := dnszone.Target(zone(nil), "WWW.shop.example.com", 120, key)
	if tg.Zone != "example.com." || tg.Name != "www.shop.example.com." || tg.Primary != "ns1.example.com:53" || tg.TTL != 120 || tg.TSIG != key || len(tg.Servers) != 0 {
		t.Fatalf("Target = %+v", tg)
	}
	verifyOnly := zone(func(s *v1alpha1.ClusterDNSZoneSpec) { s.Primary, s.Servers = "", []string{"a:53", "b:53"} })
	tg = dnszone.Target(verifyOnly, "shop.example.com.", 300, key)
	if tg.Primary != "" || tg.TSIG != nil || strings.Join(tg.Servers, ",") != "a:53,b:53" || tg.Name != "shop.example.com." {
		t.Fatalf("verify-only Target = %+v", tg)
	}
}
