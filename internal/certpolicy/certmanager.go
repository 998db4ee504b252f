package certpolicy

import (
	"cmp"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/textlimit"
)

// What cert-manager's objects say, read the way cert-manager means it.

// CertificateFacts are the facts of a cert-manager Certificate, before the
// certificate in its Secret is read: its labels, issuer, spec, revision and
// whether it is issuing.
func CertificateFacts(crt *cmapi.Certificate) *Facts {
	f := &Facts{
		ID:     ID{Kind: v1alpha1.KindCertificate, Namespace: crt.Namespace, Name: crt.Name},
		Labels: crt.Labels,
		Issuer: IssuerRef{
			Name:  crt.Spec.IssuerRef.Name,
			Kind:  cmp.Or(crt.Spec.IssuerRef.Kind, cmapi.IssuerKind),
			Group: cmp.Or(crt.Spec.IssuerRef.Group, "cert-manager.io"),
		},
		Subject: Subject{CertManager: CertManagerSpec(crt)},
		Issuing: IsIssuing(crt),
	}
	if crt.Status.Revision != nil {
		f.Revision = *crt.Status.Revision
	}
	return f
}

// CertManagerSpec is what a Certificate's spec says of its key and
// duration. An unset rotationPolicy is Always, as in cert-manager since
// v1.18.
func CertManagerSpec(crt *cmapi.Certificate) *CertManager {
	cm := &CertManager{RotationPolicy: RotateAlways}
	if pk := crt.Spec.PrivateKey; pk != nil && pk.RotationPolicy != "" {
		cm.RotationPolicy = RotationPolicy(pk.RotationPolicy)
	}
	if crt.Spec.Duration != nil {
		cm.Duration = crt.Spec.Duration.Duration
	}
	return cm
}

// IsIssuing reports whether the Certificate's Issuing condition is True.
func IsIssuing(crt *cmapi.Certificate) bool {
	for _, c := range crt.Status.Conditions {
		if c.Type == cmapi.CertificateConditionIssuing && c.Status == cmmeta.ConditionTrue {
			return true
		}
	}
	return false
}

// IsCurrent reports whether cert, read from the Certificate's Secret, is the
// one the Certificate's status describes. Until the cache of Secrets has
// seen what cert-manager wrote the two disagree, and Enforce waits rather
// than judge a renewal by the certificate it replaced.
func IsCurrent(crt *cmapi.Certificate, cert *Certificate) bool {
	return cert != nil && crt.Status.NotAfter != nil && crt.Status.NotAfter.Time.Equal(cert.NotAfter)
}

// IssuerOfSecret is the issuer cert-manager annotated a Secret with; zero
// for a Secret it did not write.
func IssuerOfSecret(annotations map[string]string) IssuerRef {
	name := annotations[cmapi.IssuerNameAnnotationKey]
	if name == "" {
		return IssuerRef{}
	}
	return IssuerRef{Name: name, Kind: cmp.Or(annotations[cmapi.IssuerKindAnnotationKey], cmapi.IssuerKind),
		Group: cmp.Or(annotations[cmapi.IssuerGroupAnnotationKey], "cert-manager.io")}
}

// CertificateOfSecret names the Certificate cert-manager says manages a
// Secret, from its annotation; ok is false when none does.
func CertificateOfSecret(namespace string, annotations map[string]string) (types.NamespacedName, bool) {
	name := annotations[cmapi.CertificateNameKey]
	return types.NamespacedName{Namespace: namespace, Name: name}, name != ""
}

// SetIssuing sets a Certificate's Issuing condition the way `cmctl renew`
// does, with ringmaster's reason and the message given.
func SetIssuing(crt *cmapi.Certificate, msg string, now metav1.Time) {
	cond := cmapi.CertificateCondition{
		Type: cmapi.CertificateConditionIssuing, Status: cmmeta.ConditionTrue,
		Reason: v1alpha1.IssuingReason, Message: textlimit.Cut(msg, textlimit.MessageLimit),
		LastTransitionTime: &now, ObservedGeneration: crt.Generation,
	}
	for i, c := range crt.Status.Conditions {
		if c.Type == cond.Type {
			crt.Status.Conditions[i] = cond
			return
		}
	}
	crt.Status.Conditions = append(crt.Status.Conditions, cond)
}
