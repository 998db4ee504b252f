package certpolicy

import "fmt"

// What the operator keeps of one certificate (Trim): its rules read the
// DNS and IP SANs, which a certificate can carry by the ten thousand, so
// the operator keeps the first ones and the true counts, and a rule that
// reads the names says when some were not kept.
const (
	// MaxDNSNames bounds the DNS SANs kept: more than public CAs put in one
	// certificate (Let's Encrypt 100, others up to 250), so that a
	// publicly trusted certificate is kept whole.
	MaxDNSNames = 256
	// MaxDNSNameBytes bounds the DNS SANs kept, all together: 256 names
	// of 64 bytes.
	MaxDNSNameBytes = 16 << 10
	// MaxIPAddresses bounds the IP address SANs kept.
	MaxIPAddresses = 256
	// maxNameLen is the longest DNS name (RFC 1035); a longer SAN names
	// nothing a client can ask for, and is not kept; a longer common name
	// is cut to it.
	maxNameLen = 253
)

// Trim returns what the operator keeps of c: the first DNS SANs within
// MaxDNSNames and MaxDNSNameBytes (a SAN longer than a DNS name can be is
// skipped), the first MaxIPAddresses IP SANs, the common name cut to 253
// bytes, and everything else. DNSNameCount and IPAddressCount keep the true
// counts, so that a rule reading the names knows what it did not see
// (NamesCut). Trimming a trimmed certificate changes nothing.
func (c Certificate) Trim() Certificate {
	dns, ips := max(c.DNSNameCount, len(c.DNSNames)), max(c.IPAddressCount, len(c.IPAddresses))
	var kept []string
	size := 0
	for _, n := range c.DNSNames {
		if len(n) > maxNameLen {
			continue
		}
		if len(kept) == MaxDNSNames || size+len(n) > MaxDNSNameBytes {
			break
		}
		kept = append(kept, n)
		size += len(n)
	}
	c.DNSNames, c.DNSNameCount = kept, dns
	if len(c.IPAddresses) > MaxIPAddresses {
		c.IPAddresses = c.IPAddresses[:MaxIPAddresses:MaxIPAddresses]
	}
	c.IPAddressCount = ips
	if len(c.CommonName) > maxNameLen {
		c.CommonName = c.CommonName[:maxNameLen]
	}
	return c
}

// NamesCut reports how many of c's DNS and IP SANs Trim did not keep.
func (c Certificate) NamesCut() (dns, ips int) {
	return max(0, c.DNSNameCount-len(c.DNSNames)), max(0, c.IPAddressCount-len(c.IPAddresses))
}

// dnsCutNote says which DNS names a rule did not see; empty when it saw
// them all.
func (c Certificate) dnsCutNote() string {
	cut, _ := c.NamesCut()
	if cut == 0 {
		return ""
	}
	return fmt.Sprintf("%d of its %d DNS names were not judged: the operator keeps at most %d names of up to %d bytes, %d bytes in all",
		cut, c.DNSNameCount, MaxDNSNames, maxNameLen, MaxDNSNameBytes)
}

// ipCutNote says which IP addresses a rule did not see; empty when it saw
// them all.
func (c Certificate) ipCutNote() string {
	_, cut := c.NamesCut()
	if cut == 0 {
		return ""
	}
	return fmt.Sprintf("%d of its %d IP addresses were not judged: the operator keeps at most %d", cut, c.IPAddressCount, MaxIPAddresses)
}
