package certpolicy

import (
	"fmt"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
)

// Read parses the certificate in a Secret's tls.crt (the Secret
// namespace/name, given for the message) as the subject id holds it, and
// dates its key with the ledger: the operator and `kubectl ringmaster audit`
// both date keys this way. A certificate that does not parse releases id's
// key from the ledger and is reported in ReadError, which never quotes the
// data.
func (l *Ledger) Read(id ID, namespace, name string, tlsCrt []byte, cm *CertManager) Subject {
	s := Subject{CertManager: cm}
	c, err := Parse(tlsCrt)
	if err != nil {
		s.ReadError = fmt.Sprintf("Secret %s/%s: tls.crt: %v", namespace, name, err)
		l.Release(id.String())
		return s
	}
	s.Cert = &c
	s.KeySince = KeySince(c, cm, l.Observe(id.String(), c))
	return s
}

// Manages reports whether the Certificate manages the Secret secretName of
// its namespace: it names it as spec.secretName and is not being deleted. A
// Secret a Certificate manages is judged as that Certificate.
func Manages(crt *cmapi.Certificate, secretName string) bool {
	return crt.Spec.SecretName == secretName && crt.DeletionTimestamp.IsZero()
}
