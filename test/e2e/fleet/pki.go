package fleet

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/atomicdir"
)

// ServerName is the name every replica's certificate carries and every
// client asks for: the fleet's one public name behind the load balancer.
const ServerName = "fleet.ringmaster.test"

// KeyType is the algorithm of the replicas' certificate key. It decides what
// a full handshake costs the server: one signature per full handshake, none
// per resumed one.
type KeyType string

// The supported certificate key types.
const (
	ECDSAP256 KeyType = "ecdsa-p256"
	RSA2048   KeyType = "rsa-2048"
)

// PKI is a throwaway certificate authority and the one server certificate it
// issued for the fleet, as a kubernetes.io/tls Secret would carry it.
type PKI struct {
	// Roots trusts the authority; clients verify the replicas with it.
	Roots *x509.CertPool
	// CertPEM and KeyPEM are tls.crt and tls.key.
	CertPEM, KeyPEM []byte
}

// NewPKI creates an ECDSA P-256 authority and a server certificate for
// ServerName and 127.0.0.1 whose key is of type kt, valid for a day.
func NewPKI(kt KeyType) (*PKI, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "ringmaster e2e CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}

	var key crypto.Signer
	switch kt {
	case ECDSAP256, "":
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case RSA2048:
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	default:
		return nil, fmt.Errorf("unknown certificate key type %q: want %s or %s", kt, ECDSAP256, RSA2048)
	}
	if err != nil {
		return nil, err
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: ServerName},
		DNSNames:     []string{ServerName},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	return &PKI{
		Roots:   roots,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// Files returns tls.crt and tls.key, the layout of a kubernetes.io/tls
// Secret, for a replica's volume.
func (p *PKI) Files() map[string]atomicdir.File {
	return map[string]atomicdir.File{
		"tls.crt": {Data: p.CertPEM},
		"tls.key": {Data: p.KeyPEM, Mode: 0o600},
	}
}
