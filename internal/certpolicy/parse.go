package certpolicy

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
)

// ErrNoCertificate: the data holds no PEM CERTIFICATE block.
var ErrNoCertificate = errors.New("no PEM CERTIFICATE block")

// Parse reads the first certificate of a PEM bundle, such as a Secret's
// tls.crt, where the leaf comes first. Its errors never quote the data.
func Parse(data []byte) (Certificate, error) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return Certificate{}, ErrNoCertificate
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return Certificate{}, fmt.Errorf("parse certificate: %w", err)
		}
		return FromX509(c), nil
	}
}

// ParseAll reads every certificate of a PEM bundle, such as a CA bundle, a
// ClusterTrustBundle's trustBundle or a pod certificate's chain, in order.
// Blocks of other types are skipped; an empty bundle is ErrNoCertificate.
// Its errors never quote the data.
func ParseAll(data []byte) ([]Certificate, error) {
	var out []Certificate
	for i := 0; ; {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		i++
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse certificate %d: %w", i, err)
		}
		out = append(out, FromX509(c))
	}
	if len(out) == 0 {
		return nil, ErrNoCertificate
	}
	return out, nil
}

// PublicKey describes a public key: its algorithm and size (the RSA
// modulus or the ECDSA curve, in bits; 0 for Ed25519).
func PublicKey(k any) (Algorithm, int) {
	switch k := k.(type) {
	case *rsa.PublicKey:
		return RSA, k.N.BitLen()
	case *ecdsa.PublicKey:
		return ECDSA, k.Curve.Params().BitSize
	case ed25519.PublicKey:
		return Ed25519, 0
	}
	return Unknown, 0
}

// FromX509 extracts the public facts of c.
func FromX509(c *x509.Certificate) Certificate {
	out := Certificate{
		NotBefore:  c.NotBefore,
		NotAfter:   c.NotAfter,
		CommonName: c.Subject.CommonName,
		DNSNames:   c.DNSNames,
		KeyID:      KeyID(c.RawSubjectPublicKeyInfo),
		IsCA:       c.BasicConstraintsValid && c.IsCA,
	}
	for _, ip := range c.IPAddresses {
		if a, ok := netip.AddrFromSlice(ip); ok {
			out.IPAddresses = append(out.IPAddresses, a.Unmap())
		}
	}
	out.Algorithm, out.Size = PublicKey(c.PublicKey)
	return out
}

// KeyID identifies a public key by the first 8 bytes, in hex, of the SHA-256
// of its DER SubjectPublicKeyInfo. It is public: it reveals nothing of the
// private key.
func KeyID(spki []byte) string {
	sum := sha256.Sum256(spki)
	return hex.EncodeToString(sum[:8])
}
