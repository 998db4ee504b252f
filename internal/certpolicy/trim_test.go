package certpolicy_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ringmaster-io/ringmaster/internal/certpolicy"
)

func dnsNames(n int, format string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(format, i)
	}
	return out
}

func ipAddrs(n int) []netip.Addr {
	out := make([]netip.Addr, n)
	for i := range out {
		out[i] = netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
	}
	return out
}

func TestTrim(t *testing.T) {
	long := strings.Repeat("a", 254) + ".example.com"
	tests := []struct {
		name      string
		cert      certpolicy.Certificate
		wantNames []string
		wantIPs   int
		wantCN    string
		// The counts NamesCut reports.
		wantDNSCut, wantIPCut int
	}{
		{name: "a certificate of a few names is kept whole", cert: certpolicy.Certificate{CommonName: "web", DNSNames: []string{"a.example.com", "b.example.com"}, IPAddresses: ipAddrs(2)},
			wantNames: []string{"a.example.com", "b.example.com"}, wantIPs: 2, wantCN: "web"},
		{name: "256 names, more than a public CA issues, are kept whole", cert: certpolicy.Certificate{DNSNames: dnsNames(256, "host-%03d.example.com")},
			wantNames: dnsNames(256, "host-%03d.example.com")},
		{name: "15,500 names: the first 256", cert: certpolicy.Certificate{DNSNames: dnsNames(15500, "host-%05d.example.com")},
			wantNames: dnsNames(256, "host-%05d.example.com"), wantDNSCut: 15244},
		{name: "long names: the first that fit in 16 KiB", cert: certpolicy.Certificate{DNSNames: dnsNames(100, strings.Repeat("x", 190)+"-%02d.example.com")},
			wantNames: dnsNames(79, strings.Repeat("x", 190)+"-%02d.example.com"), wantDNSCut: 21},
		{name: "a SAN longer than a DNS name can be is not kept, the next ones are", cert: certpolicy.Certificate{DNSNames: []string{long, "www.example.com"}},
			wantNames: []string{"www.example.com"}, wantDNSCut: 1},
		{name: "IP SANs: the first 256", cert: certpolicy.Certificate{IPAddresses: ipAddrs(1000)},
			wantIPs: 256, wantIPCut: 744},
		{name: "a common name is cut to 253 bytes", cert: certpolicy.Certificate{CommonName: long},
			wantCN: long[:253]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.cert.Trim()
			if !slices.Equal(got.DNSNames, tc.wantNames) || len(got.IPAddresses) != tc.wantIPs || got.CommonName != tc.wantCN {
				t.Errorf("kept %d names (%.3q...), %d IPs, common name of %d bytes", len(got.DNSNames), got.DNSNames, len(got.IPAddresses), len(got.CommonName))
			}
			if dns, ips := got.NamesCut(); dns != tc.wantDNSCut || ips != tc.wantIPCut {
				t.Errorf("NamesCut = %d, %d; want %d, %d", dns, ips, tc.wantDNSCut, tc.wantIPCut)
			}
			if got.DNSNameCount != len(tc.cert.DNSNames) || got.IPAddressCount != len(tc.cert.IPAddresses) {
				t.Errorf("counts %d, %d; want %d, %d", got.DNSNameCount, got.IPAddressCount, len(tc.cert.DNSNames), len(tc.cert.IPAddresses))
			}
			size := 0
			for _, n := range got.DNSNames {
				size += len(n)
			}
			if len(got.DNSNames) > certpolicy.MaxDNSNames || size > certpolicy.MaxDNSNameBytes {
				t.Errorf("kept %d names, %d bytes", len(got.DNSNames), size)
			}
			if again := got.Trim(); !slices.Equal(again.DNSNames, got.DNSNames) || again.DNSNameCount != got.DNSNameCount ||
				len(again.IPAddresses) != len(got.IPAddresses) || again.IPAddressCount != got.IPAddressCount || again.CommonName != got.CommonName {
				t.Errorf("trimming again changed it: %+v", again)
			}
		})
	}
}

// Rules that read names judge what was kept, and say what was not.
func TestEvaluateTrimmed(t *testing.T) {
	now := t0
	base := certpolicy.Certificate{NotBefore: now.Add(-day), NotAfter: now.Add(89 * day), Algorithm: certpolicy.ECDSA, Size: 256, KeyID: "k"}
	with := func(names []string, ips []netip.Addr) certpolicy.Certificate {
		c := base
		c.DNSNames, c.IPAddresses = names, ips
		return c.Trim()
	}
	many := append([]string{"www.example.com"}, dnsNames(15499, "host-%05d.example.com")...)
	manyEvil := append(slices.Clone(many[:50]), "evil.org")
	manyEvil = append(manyEvil, many[50:]...)
	tests := []struct {
		name   string
		policy certpolicy.Policy
		cert   certpolicy.Certificate
		// want maps each rule broken to what its message must hold; rules
		// not named must not be broken.
		want map[certpolicy.Rule][]string
	}{
		{name: "allowed names, all kept: complies", policy: certpolicy.Policy{AllowedDNSNames: []string{"*.example.com"}},
			cert: with(many[:256], nil)},
		{name: "allowed names, some not kept: cannot be checked, and says why",
			policy: certpolicy.Policy{AllowedDNSNames: []string{"*.example.com"}}, cert: with(many, nil),
			want: map[certpolicy.Rule][]string{certpolicy.AllowedDNSNames: {"allowedDNSNames cannot be checked", "15244 of its 15500 DNS names were not judged", "at most 256 names"}}},
		{name: "a disallowed name among those kept is named, with what was not judged",
			policy: certpolicy.Policy{AllowedDNSNames: []string{"*.example.com"}}, cert: with(manyEvil, nil),
			want: map[certpolicy.Rule][]string{certpolicy.AllowedDNSNames: {`"evil.org" not allowed by allowedDNSNames; 15245 of its 15501 DNS names were not judged`}}},
		{name: "a required name among those kept: complies", policy: certpolicy.Policy{RequiredDNSNames: []string{"www.example.com"}},
			cert: with(many, nil)},
		{name: "a required name not among those kept: named, with what was not judged",
			policy: certpolicy.Policy{RequiredDNSNames: []string{"host-15000.example.com"}}, cert: with(many, nil),
			want: map[certpolicy.Rule][]string{certpolicy.RequiredDNSNames: {`"host-15000.example.com" required by requiredDNSNames, not among the DNS names kept: 15244 of its 15500`}}},
		{name: "names cut, no rule reads them: complies", policy: certpolicy.Policy{MaxValidity: 91 * day}, cert: with(many, nil)},
		{name: "every SAN too long to keep: not judged by the common name", policy: certpolicy.Policy{AllowedDNSNames: []string{"*.example.com"}},
			cert: func() certpolicy.Certificate {
				c := base
				c.CommonName, c.DNSNames = "www.example.com", []string{strings.Repeat("a", 300)}
				return c.Trim()
			}(),
			want: map[certpolicy.Rule][]string{certpolicy.AllowedDNSNames: {"1 of its 1 DNS names were not judged"}}},
		{name: "IP ranges, some addresses not kept", policy: certpolicy.Policy{AllowedIPRanges: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}},
			cert: with(nil, ipAddrs(600)),
			want: map[certpolicy.Rule][]string{certpolicy.AllowedIPRanges: {"allowedIPRanges cannot be checked: 344 of its 600 IP addresses were not judged"}}},
		{name: "IP ranges, an address outside among those kept", policy: certpolicy.Policy{AllowedIPRanges: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/26")}},
			cert: with(nil, ipAddrs(600)),
			want: map[certpolicy.Rule][]string{certpolicy.AllowedIPRanges: {`"10.0.0.64"`, "and 187 more outside allowedIPRanges; 344 of its 600 IP addresses were not judged"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := certpolicy.Evaluate(tc.policy, certpolicy.Subject{Cert: &tc.cert}, now)
			for _, r := range certpolicy.Rules {
				wants, broken := tc.want[r]
				if v.Violates(r) != broken {
					t.Errorf("rule %s broken: %v, want %v (%+v)", r, v.Violates(r), broken, v.Violations)
					continue
				}
				for _, x := range v.Violations {
					if x.Rule != r {
						continue
					}
					for _, w := range wants {
						if !strings.Contains(x.Message, w) {
							t.Errorf("rule %s: message %q lacks %q", r, x.Message, w)
						}
					}
					if len(x.Message) > 1024 {
						t.Errorf("rule %s: a message of %d bytes", r, len(x.Message))
					}
				}
			}
		})
	}
}
