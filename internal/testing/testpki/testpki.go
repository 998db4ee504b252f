// Package testpki issues throwaway certificate authorities, leaf
// certificates and key pairs for tests and the local demo. It uses the
// standard library alone, so that any test may import it, pkg/agent's
// included, without pulling in a dependency.
package testpki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// KeyType is a key algorithm and size.
type KeyType string

// The key types tests use.
const (
	ECDSAP256 KeyType = "ecdsa-p256"
	ECDSAP384 KeyType = "ecdsa-p384"
	RSA1024   KeyType = "rsa-1024"
	RSA2048   KeyType = "rsa-2048"
	// RSA3072 and RSA4096 are the RSA keys a kubelet makes for a pod
	// certificate.
	RSA3072 KeyType = "rsa-3072"
	RSA4096 KeyType = "rsa-4096"
	Ed25519 KeyType = "ed25519"
)

// NewKey makes a fresh private key of type kt; "" is ECDSA P-256.
func NewKey(kt KeyType) (crypto.Signer, error) {
	switch kt {
	case ECDSAP256, "":
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case ECDSAP384:
		return ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case RSA1024:
		return rsa.GenerateKey(rand.Reader, 1024) //nolint:gosec // tests of key-size rules need a weak key
	case RSA2048:
		return rsa.GenerateKey(rand.Reader, 2048)
	case RSA3072:
		return rsa.GenerateKey(rand.Reader, 3072)
	case RSA4096:
		return rsa.GenerateKey(rand.Reader, 4096)
	case Ed25519:
		_, k, err := ed25519.GenerateKey(rand.Reader)
		return k, err
	}
	return nil, fmt.Errorf("unknown key type %q", kt)
}

// CA is a certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// PEM is the CA certificate, as a CA bundle carries it.
	PEM []byte
}

// NewCA makes a self-signed ECDSA P-256 authority valid from an hour ago
// for a day.
func NewCA(name string) (*CA, error) { return NewCAWith(CAOptions{Name: name}) }

// CAOptions describe an authority. Zero times mean from an hour ago for a
// day; an empty KeyType is ECDSA P-256; a nil Parent makes it self-signed.
type CAOptions struct {
	Name                string
	KeyType             KeyType
	NotBefore, NotAfter time.Time
	// Parent signs the authority: an intermediate.
	Parent *CA
}

// NewCAWith makes an authority as o describes it.
func NewCAWith(o CAOptions) (*CA, error) {
	key, err := NewKey(o.KeyType)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if o.NotBefore.IsZero() {
		o.NotBefore = now.Add(-time.Hour)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = now.Add(24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: o.Name},
		NotBefore:             o.NotBefore,
		NotAfter:              o.NotAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	parent, signer := tmpl, key
	if o.Parent != nil {
		parent, signer = o.Parent.Cert, o.Parent.Key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), signer)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, PEM: pemOf("CERTIFICATE", der)}, nil
}

// Pool is a certificate pool trusting the authority.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Leaf describes a certificate to issue. Zero times mean from an hour ago
// for a day; a nil Key means a new key of KeyType.
type Leaf struct {
	CommonName string
	DNSNames   []string
	IPs        []net.IP
	NotBefore  time.Time
	NotAfter   time.Time
	KeyType    KeyType
	Key        crypto.Signer
	// PublicKey, when set, is the key certified, as a signer certifies
	// the key of a request it never holds: Issued then has no Key, KeyPEM
	// nor TLS.
	PublicKey crypto.PublicKey
	// Client issues a client certificate instead of a server one.
	Client bool
}

// Issued is a certificate and its key, in every form tests need.
type Issued struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// CertPEM and KeyPEM are tls.crt and tls.key of a kubernetes.io/tls
	// Secret.
	CertPEM, KeyPEM []byte
	// TLS is the pair for a tls.Config.
	TLS tls.Certificate
}

// Issue signs a leaf certificate.
func (ca *CA) Issue(l Leaf) (*Issued, error) {
	key := l.Key
	if key == nil && l.PublicKey == nil {
		var err error
		if key, err = NewKey(l.KeyType); err != nil {
			return nil, err
		}
	}
	now := time.Now()
	if l.NotBefore.IsZero() {
		l.NotBefore = now.Add(-time.Hour)
	}
	if l.NotAfter.IsZero() {
		l.NotAfter = now.Add(24 * time.Hour)
	}
	cn := l.CommonName
	if cn == "" && len(l.DNSNames) > 0 {
		cn = l.DNSNames[0]
	}
	usage := x509.ExtKeyUsageServerAuth
	if l.Client {
		usage = x509.ExtKeyUsageClientAuth
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn},
		DNSNames:     l.DNSNames,
		IPAddresses:  l.IPs,
		NotBefore:    l.NotBefore,
		NotAfter:     l.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	pub := l.PublicKey
	if pub == nil {
		pub = key.Public()
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	if key == nil {
		return &Issued{Cert: cert, CertPEM: pemOf("CERTIFICATE", der)}, nil
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	out := &Issued{Cert: cert, Key: key, CertPEM: pemOf("CERTIFICATE", der), KeyPEM: pemOf("PRIVATE KEY", keyDER)}
	out.TLS, err = tls.X509KeyPair(out.CertPEM, out.KeyPEM)
	return out, err
}

// CSR is an empty PKCS#10 request signed by key, DER-encoded: what a
// kubelet puts in a PodCertificateRequest's spec.stubPKCS10Request.
func CSR(key crypto.Signer) ([]byte, error) {
	return x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
}

// Localhost issues a server certificate for localhost and 127.0.0.1.
func (ca *CA) Localhost() (*Issued, error) {
	return ca.Issue(Leaf{DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

func pemOf(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
