package fleet

import (
	"crypto/x509"
	"fmt"
	"net"

	"github.com/ringmaster-io/ringmaster/internal/testing/atomicdir"
	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
)

// ServerName is the name every replica's certificate carries and every
// client asks for: the fleet's one public name behind the load balancer.
const ServerName = "fleet.ringmaster.test"

// KeyType is the algorithm of the replicas' certificate key. It decides what
// a full handshake costs the server: one signature per full handshake, none
// per resumed one.
type KeyType = testpki.KeyType

// The supported certificate key types.
const (
	ECDSAP256 = testpki.ECDSAP256
	RSA2048   = testpki.RSA2048
)

// PKI is a throwaway certificate authority and the one server certificate it
// issued for the fleet, as a kubernetes.io/tls Secret would carry it.
type PKI struct {
	// Roots trusts the authority; clients verify the replicas with it.
	Roots *x509.CertPool
	// CAPEM is the authority's certificate, as a CA bundle file holds it.
	CAPEM []byte
	// CertPEM and KeyPEM are tls.crt and tls.key.
	CertPEM, KeyPEM []byte
}

// NewPKI creates an authority and a server certificate for ServerName and
// 127.0.0.1 whose key is of type kt, valid for a day.
func NewPKI(kt KeyType) (*PKI, error) {
	if kt != "" && kt != ECDSAP256 && kt != RSA2048 {
		return nil, fmt.Errorf("unknown certificate key type %q: want %s or %s", kt, ECDSAP256, RSA2048)
	}
	ca, err := testpki.NewCA("ringmaster e2e CA")
	if err != nil {
		return nil, err
	}
	leaf, err := ca.Issue(testpki.Leaf{DNSNames: []string{ServerName}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyType: kt})
	if err != nil {
		return nil, err
	}
	return &PKI{Roots: ca.Pool(), CAPEM: ca.PEM, CertPEM: leaf.CertPEM, KeyPEM: leaf.KeyPEM}, nil
}

// Files returns tls.crt and tls.key, the layout of a kubernetes.io/tls
// Secret, for a replica's volume.
func (p *PKI) Files() map[string]atomicdir.File {
	return map[string]atomicdir.File{
		"tls.crt": {Data: p.CertPEM},
		"tls.key": {Data: p.KeyPEM, Mode: 0o600},
	}
}
