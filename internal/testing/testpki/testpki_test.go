package testpki

import (
	"crypto/x509"
	"testing"
	"time"
)

func TestIssuedCertificatesChainToTheirCAOnly(t *testing.T) {
	ca, err := NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA("other CA")
	if err != nil {
		t.Fatal(err)
	}
	for _, kt := range []KeyType{ECDSAP256, ECDSAP384, RSA2048, Ed25519} {
		leaf, err := ca.Issue(Leaf{DNSNames: []string{"web.shop.svc"}, KeyType: kt})
		if err != nil {
			t.Fatalf("%s: %v", kt, err)
		}
		opts := x509.VerifyOptions{DNSName: "web.shop.svc", Roots: ca.Pool()}
		if _, err := leaf.Cert.Verify(opts); err != nil {
			t.Errorf("%s: does not verify against its CA: %v", kt, err)
		}
		opts.Roots = other.Pool()
		if _, err := leaf.Cert.Verify(opts); err == nil {
			t.Errorf("%s: verifies against another CA", kt)
		}
		if leaf.TLS.Leaf == nil || len(leaf.TLS.Certificate) != 1 {
			t.Errorf("%s: tls pair holds %d certificates", kt, len(leaf.TLS.Certificate))
		}
	}
	past := time.Now().Add(-48 * time.Hour)
	old, err := ca.Issue(Leaf{DNSNames: []string{"old"}, NotBefore: past, NotAfter: past.Add(time.Hour)})
	if err != nil || !old.Cert.NotAfter.Equal(past.Add(time.Hour).Truncate(time.Second)) {
		t.Errorf("explicit validity not kept: %v %v", old.Cert.NotAfter, err)
	}
}
