package certpolicy_test

import (
	"strings"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/certpolicy"
)

func TestLedgerRead(t *testing.T) {
	var l certpolicy.Ledger
	secret := certpolicy.ID{Kind: v1alpha1.KindSecret, Namespace: "shop", Name: "old"}
	copied := certpolicy.ID{Kind: v1alpha1.KindSecret, Namespace: "shop", Name: "copy"}
	crt := certpolicy.ID{Kind: v1alpha1.KindCertificate, Namespace: "shop", Name: "web"}

	old := l.Read(secret, "shop", "old", issue(t, spec{key: rsa2048, from: -100 * day, to: day}), nil)
	if old.Cert == nil || old.ReadError != "" || !old.KeySince.Equal(t0.Add(-100*day)) {
		t.Fatalf("first sighting: %+v", old)
	}
	// The same key in a younger certificate of another Secret is as old as
	// its first certificate; a rotating Certificate's key is as old as its
	// own certificate.
	if got := l.Read(copied, "shop", "copy", issue(t, spec{key: rsa2048, from: -day, to: day}), nil); !got.KeySince.Equal(t0.Add(-100 * day)) {
		t.Errorf("reused key: since %v, want the first certificate's", got.KeySince)
	}
	rotating := &certpolicy.CertManager{RotationPolicy: certpolicy.RotateAlways}
	if got := l.Read(crt, "shop", "web-tls", issue(t, spec{key: rsa2048, from: -2 * day, to: day}), rotating); !got.KeySince.Equal(t0.Add(-2 * day)) {
		t.Errorf("rotating Certificate: since %v, want its notBefore", got.KeySince)
	}

	bad := l.Read(copied, "shop", "copy", []byte("-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----\n"), nil)
	if bad.Cert != nil || bad.ReadError != "Secret shop/copy: tls.crt: no PEM CERTIFICATE block" || strings.Contains(bad.ReadError, "c2VjcmV0") {
		t.Errorf("unreadable: %+v", bad)
	}
	if l.Len() != 1 {
		t.Errorf("Len = %d: the unreadable holder still holds its key", l.Len())
	}
}

func TestManages(t *testing.T) {
	crt := &cmapi.Certificate{Spec: cmapi.CertificateSpec{SecretName: "web-tls"}}
	if !certpolicy.Manages(crt, "web-tls") || certpolicy.Manages(crt, "other") {
		t.Error("Manages does not compare spec.secretName")
	}
	crt.DeletionTimestamp = &metav1.Time{Time: t0}
	if certpolicy.Manages(crt, "web-tls") {
		t.Error("a Certificate being deleted still manages its Secret")
	}
}
