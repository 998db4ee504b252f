package shape

import (
	"encoding/json"
	"fmt"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/certpolicy"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
)

// MaxOwnedSecretBytes bounds a Secret of ringmaster's type that the cache
// keeps whole (its data, labels and annotations together). A ring's
// snapshot holds at most keyring.MaxKeys keys in a few formats, a few
// KiB; one over the bound was not written by the operator (only a Secret
// forged where the admission guard is not installed can be), and is kept
// as the Secrets of ringmaster's type that no ring controls are: its
// ring then reads no keys from it, and says so.
const MaxOwnedSecretBytes = 64 << 10

// maxOwnerRefs bounds the owner references kept of a Secret the cache does
// not keep whole; past it, one that names no ring is kept in their place,
// so that such a Secret is never taken for a ring's (distribute.ClaimOf).
const maxOwnerRefs = 2

// ringLabels are the labels by which a Secret says which ring's it is
// (distribute.RingOf and ClaimOf): all a Secret the cache does not keep
// whole keeps of its labels.
var ringLabels = []string{v1alpha1.RingLabel, v1alpha1.ClusterRingLabel, v1alpha1.ECHRingLabel, v1alpha1.ComponentLabel, v1alpha1.EpochLabel}

// OwnedSecrets is the shape of ringmaster.io/ticket-keys Secrets, for an
// operator whose namespace is namespace. A Secret that a ring controls
// (whose data the operator plans from or compares with what it would
// write), or that lives in the operator's namespace (where cluster rings'
// snapshots live and only administrators write), is kept whole but for its
// managed fields, up to MaxOwnedSecretBytes; of a ring's projection it
// keeps the digest of the data, not the data (distribute.DigestKey): the
// operator compares a projection with what it would write, and never reads
// its keys. Of any other, it keeps the name, the ring labels, up to
// maxOwnerRefs owner references, and the type: enough to map it to a ring
// and to see that it is not the ring's, and nothing a tenant could inflate
// it with. distribute.Owner.Owns decides ownership by the ring's UID; a
// controller reference to any ring keeps a Secret whole here, which only
// the operator can write where the admission guard is installed.
func OwnedSecrets(namespace string) Func {
	return func(obj any) (any, error) {
		s, ok := obj.(*corev1.Secret)
		if !ok {
			return obj, tombstone(obj, "*corev1.Secret")
		}
		s.ManagedFields = nil
		whole := (s.Namespace == namespace || controlledByRing(s)) && secretSize(s) <= MaxOwnedSecretBytes
		switch {
		case whole && controlledByRing(s) && s.Labels[v1alpha1.ComponentLabel] == v1alpha1.ComponentProjection:
			digestData(s)
		case whole:
		default:
			out := &corev1.Secret{
				TypeMeta: s.TypeMeta,
				ObjectMeta: metav1.ObjectMeta{
					Name: s.Name, Namespace: s.Namespace, UID: s.UID,
					ResourceVersion: s.ResourceVersion, CreationTimestamp: s.CreationTimestamp, DeletionTimestamp: s.DeletionTimestamp,
					OwnerReferences: ownerRefs(s.OwnerReferences),
				},
				Type: s.Type,
			}
			for _, k := range ringLabels {
				if v, ok := s.Labels[k]; ok {
					if out.Labels == nil {
						out.Labels = map[string]string{}
					}
					out.Labels[k] = v
				}
			}
			s = out
		}
		internSecret(s)
		return s, nil
	}
}

// secretSize is what a Secret holds beside its identity: data, labels and
// annotations. A digested projection counts its digest.
func secretSize(s *corev1.Secret) int {
	n := 0
	for k, v := range s.Data {
		n += len(k) + len(v)
	}
	for k, v := range s.StringData {
		n += len(k) + len(v)
	}
	for k, v := range s.Labels {
		n += len(k) + len(v)
	}
	for k, v := range s.Annotations {
		n += len(k) + len(v)
	}
	return n
}

// ownerRefs are the owner references kept of a Secret not kept whole.
func ownerRefs(refs []metav1.OwnerReference) []metav1.OwnerReference {
	if len(refs) <= maxOwnerRefs {
		return refs
	}
	out := append([]metav1.OwnerReference(nil), refs[:maxOwnerRefs-1]...)
	return append(out, metav1.OwnerReference{APIVersion: "ringmaster.io/not-kept", Kind: "NotKept", Name: "owner-references-not-kept", UID: "not-kept"})
}

// digestData replaces a projection's data with its digest
// (distribute.DigestKey), zeroing the keys it held; a projection
// shaped already keeps its digest.
func digestData(s *corev1.Secret) {
	if distribute.Digested(s) {
		return
	}
	digest := distribute.DataDigest(s.Data)
	for _, v := range s.Data {
		clear(v)
	}
	// The decoded map, emptied, holds the digest: a small map keeps its
	// storage, and a new one would cost as much as the digest's Secret.
	clear(s.Data)
	s.Data[distribute.DigestKey] = digest
}

// internSecret makes the strings that the operator's Secrets share
// (namespace, labels, annotations, owner references, type) one copy each:
// at 10,000 rings the cache holds 20,000 to 40,000 of these Secrets, each
// with the same dozen strings, and a ring's Secrets share its name and UID.
func internSecret(s *corev1.Secret) {
	s.Namespace, s.Type = in(s.Namespace), corev1.SecretType(in(string(s.Type)))
	// In place: assigning to a key a map holds stores the key given (Go
	// updates string keys), and allocates nothing.
	for k, v := range s.Labels {
		s.Labels[in(k)] = in(v)
	}
	for k, v := range s.Annotations {
		s.Annotations[in(k)] = in(v)
	}
	for i := range s.OwnerReferences {
		r := &s.OwnerReferences[i]
		r.APIVersion, r.Kind, r.Name, r.UID = in(r.APIVersion), in(r.Kind), in(r.Name), uidOf(r.UID)
		r.Controller, r.BlockOwnerDeletion = internBool(r.Controller), internBool(r.BlockOwnerDeletion)
	}
}

// internBool is a pointer to the one true or the one false, for an owner
// reference's flags.
func internBool(b *bool) *bool {
	switch {
	case b == nil:
		return nil
	case *b:
		return &trueValue
	}
	return &falseValue
}

// trueValue and falseValue are what internBool points to. Nothing writes
// through a cached object's pointers: controller-runtime's cache hands out
// deep copies.
var trueValue, falseValue = true, false

// controlledByRing reports whether a ring of any kind is s's controller.
func controlledByRing(s *corev1.Secret) bool {
	ref := metav1.GetControllerOfNoCopy(s)
	return ref != nil && ref.APIVersion == v1alpha1.GroupVersion.String() &&
		(ref.Kind == v1alpha1.KindTicketKeyRing || ref.Kind == v1alpha1.KindClusterTicketKeyRing || ref.Kind == v1alpha1.KindECHKeyRing)
}

// TLSFactsKey is the one data key of a kubernetes.io/tls Secret in the TLS
// Secret cache: the JSON of its TLSFacts, in place of tls.crt and tls.key.
const TLSFactsKey = "ringmaster.io/facts"

// TLSFacts is what CertificatePolicy evaluation reads of a Secret's
// tls.crt: the facts of its leaf certificate, or why it could not be
// parsed (a message that never quotes the data).
type TLSFacts struct {
	Cert  *certpolicy.Certificate `json:"cert,omitempty"`
	Error string                  `json:"error,omitempty"`
	// CAs are the CA certificates of ca.crt (certpolicy.CAChain), judged
	// by a policy's CA rules; empty when it has none that parse.
	CAs certpolicy.Chain `json:"cas,omitzero"`
}

// FactsOf reads back what TLSSecret kept of a cached Secret.
func FactsOf(s *corev1.Secret) TLSFacts {
	var f TLSFacts
	if err := json.Unmarshal(s.Data[TLSFactsKey], &f); err != nil || (f.Cert == nil && f.Error == "") {
		return TLSFacts{Error: "no facts cached"}
	}
	return f
}

// certManagerAnnotations are the annotations of a TLS Secret that
// CertificatePolicy reads: the issuer and the Certificate cert-manager
// wrote it for.
var certManagerAnnotations = []string{cmapi.IssuerNameAnnotationKey, cmapi.IssuerKindAnnotationKey, cmapi.IssuerGroupAnnotationKey, cmapi.CertificateNameKey}

// TLSSecret is the shape of kubernetes.io/tls Secrets. It keeps what
// CertificatePolicy reads, and no more than a bounded amount of it
// whatever the Secret's size: its identity, its labels (up to
// MaxLabelBytes), cert-manager's four annotations naming its issuer and
// Certificate (each up to 253 bytes), and the facts of tls.crt's leaf
// certificate (TLSFactsKey) and of up to certpolicy.MaxCAs CA certificates
// of ca.crt, with at most certpolicy.MaxDNSNames DNS names
// and certpolicy.MaxIPAddresses IP addresses and the true counts
// (certpolicy.Certificate.Trim). tls.key, the certificate chain, any other
// data or annotation, and the SANs past those bounds never stay in the
// operator's memory. The certificate is parsed once, here, rather than at
// each evaluation.
func TLSSecret(obj any) (any, error) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return obj, tombstone(obj, "*corev1.Secret")
	}
	if _, done := s.Data[TLSFactsKey]; done && len(s.Data) == 1 {
		// Shaped already: an informer may pass a stored object through
		// its transform again (client-go does on a relist).
		return s, nil
	}
	c := carried(s)
	out := &corev1.Secret{TypeMeta: s.TypeMeta, ObjectMeta: identity(&s.ObjectMeta), Type: s.Type}
	out.Labels = labelsUpTo(s.Labels, MaxLabelBytes, &c)
	for _, k := range certManagerAnnotations {
		if v, ok := s.Annotations[k]; ok && len(v) <= maxNameLen {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	var facts TLSFacts
	if cert, err := certpolicy.Parse(s.Data[corev1.TLSCertKey]); err != nil {
		facts.Error = err.Error()
	} else {
		cert = cert.Trim()
		facts.Cert = &cert
	}
	if cas, err := certpolicy.ParseAll(s.Data["ca.crt"]); err == nil {
		facts.CAs = certpolicy.CAChain(cas)
	}
	data, err := json.Marshal(facts)
	if err != nil {
		return nil, fmt.Errorf("encode the facts of Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	out.Data = map[string][]byte{TLSFactsKey: data}
	c.mark(&out.ObjectMeta)
	return out, nil
}

// Certificate is the shape of cert-manager Certificates: it keeps what
// CertificatePolicy reads, bounded whatever the Certificate's size. Of the
// metadata: identity, generation, deletion and labels up to MaxLabelBytes;
// of the spec: secretName, issuerRef, duration and
// privateKey.rotationPolicy (names cut to 253 bytes); of the status:
// revision, notAfter and the Issuing condition's status. The DNS names,
// annotations, managed fields and the rest never stay in the operator's
// memory.
func Certificate(obj any) (any, error) {
	crt, ok := obj.(*cmapi.Certificate)
	if !ok {
		return obj, tombstone(obj, "*cmapi.Certificate")
	}
	c := carried(crt)
	out := &cmapi.Certificate{
		TypeMeta:   crt.TypeMeta,
		ObjectMeta: identity(&crt.ObjectMeta),
		Spec: cmapi.CertificateSpec{
			SecretName: cut(crt.Spec.SecretName),
			IssuerRef:  cmmeta.IssuerReference{Name: cut(crt.Spec.IssuerRef.Name), Kind: cut(crt.Spec.IssuerRef.Kind), Group: cut(crt.Spec.IssuerRef.Group)},
			Duration:   crt.Spec.Duration,
		},
		Status: cmapi.CertificateStatus{Revision: crt.Status.Revision, NotAfter: crt.Status.NotAfter},
	}
	out.Labels = labelsUpTo(crt.Labels, MaxLabelBytes, &c)
	if pk := crt.Spec.PrivateKey; pk != nil {
		out.Spec.PrivateKey = &cmapi.CertificatePrivateKey{RotationPolicy: pk.RotationPolicy}
	}
	for _, cond := range crt.Status.Conditions {
		if cond.Type == cmapi.CertificateConditionIssuing {
			out.Status.Conditions = []cmapi.CertificateCondition{{Type: cond.Type, Status: cond.Status}}
			break
		}
	}
	c.mark(&out.ObjectMeta)
	return out, nil
}
