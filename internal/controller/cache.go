package controller

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unique"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/certpolicy"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
)

// CacheOptions keeps the manager's cache narrow. Of all the cluster's
// Secrets it holds only those of ringmaster's own type, and of those it
// keeps whole only the operator's: the Secrets a ring controls and those in
// the operator's namespace. Of the others, which anyone who may create a
// Secret can make, it keeps what tells them apart from the operator's
// (KeepOwnedSecrets). Other Secrets, and their key material, never enter the
// operator's memory. cert-manager Certificates, which any tenant allowed
// to create them can make large, are kept as CertificatePolicy reads them
// (StripCertificate). Of Leases it holds only the records of DNS names'
// owners, in the operator's namespace, as StripDNSRecord keeps them: not
// the leader election's Lease, nor any other.
func CacheOptions(namespace string) cache.Options {
	return cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {
				Field:     fields.OneTermEqualSelector("type", string(distribute.SecretType)),
				Transform: KeepOwnedSecrets(namespace),
			},
			&coordinationv1.Lease{}: {
				Namespaces: map[string]cache.Config{namespace: {}},
				Label:      labels.SelectorFromSet(labels.Set{v1alpha1.ComponentLabel: v1alpha1.ComponentDNSName}),
				Transform:  StripDNSRecord,
			},
		},
		// Not a ByObject entry: that would need cert-manager's API served
		// when the operator starts.
		DefaultTransform: func(obj any) (any, error) {
			switch o := obj.(type) {
			case *cmapi.Certificate:
				return StripCertificate(o)
			case *v1alpha1.TicketKeyRing, *v1alpha1.ClusterTicketKeyRing:
				return StripRing(o.(client.Object)), nil
			}
			return obj, nil
		},
	}
}

// StripCertificate is the cache transform of cert-manager Certificates: it
// keeps what CertificatePolicy reads, bounded whatever the Certificate's
// size. Of the metadata: identity, generation, deletion and labels up to
// 4 KiB; of the spec: secretName, issuerRef, duration and
// privateKey.rotationPolicy (names cut to 253 bytes); of the status:
// revision, notAfter and the Issuing condition's status. The DNS names,
// annotations, managed fields and the rest never stay in the operator's
// memory. Transforming its own output changes nothing.
func StripCertificate(obj any) (any, error) {
	c, ok := obj.(*cmapi.Certificate)
	if !ok {
		return obj, nil // a deletion tombstone: passed on as it is
	}
	out := &cmapi.Certificate{
		TypeMeta: c.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: c.Name, Namespace: c.Namespace, UID: c.UID, ResourceVersion: c.ResourceVersion, Generation: c.Generation,
			CreationTimestamp: c.CreationTimestamp, DeletionTimestamp: c.DeletionTimestamp, Labels: keptLabels(c.Labels),
		},
		Spec: cmapi.CertificateSpec{
			SecretName: cut(c.Spec.SecretName),
			IssuerRef:  cmmeta.IssuerReference{Name: cut(c.Spec.IssuerRef.Name), Kind: cut(c.Spec.IssuerRef.Kind), Group: cut(c.Spec.IssuerRef.Group)},
			Duration:   c.Spec.Duration,
		},
		Status: cmapi.CertificateStatus{Revision: c.Status.Revision, NotAfter: c.Status.NotAfter},
	}
	if pk := c.Spec.PrivateKey; pk != nil {
		out.Spec.PrivateKey = &cmapi.CertificatePrivateKey{RotationPolicy: pk.RotationPolicy}
	}
	for _, cond := range c.Status.Conditions {
		if cond.Type == cmapi.CertificateConditionIssuing {
			out.Status.Conditions = []cmapi.CertificateCondition{{Type: cond.Type, Status: cond.Status}}
			break
		}
	}
	return out, nil
}

// requestAnnotations are the annotations whose managers a ring's
// reconcile reads (ringstatus.RequestedBy).
var requestAnnotations = []string{v1alpha1.RotateRequestedAtAnnotation, v1alpha1.RevokeRequestedAtAnnotation}

// StripRing is the cache transform of TicketKeyRings and
// ClusterTicketKeyRings: of their managed fields it keeps only what
// ringstatus.RequestedBy reads, the manager and time of each entry that
// owns a request annotation, with the fields of those annotations alone.
// The rest, the status's entry above all (every key and condition the
// operator applied), is the largest part of a ring the cache would hold,
// and nothing reads it. It also makes the strings rings share one copy
// each (in). Transforming its own output changes nothing.
func StripRing(obj client.Object) client.Object {
	var kept []metav1.ManagedFieldsEntry
	for _, f := range obj.GetManagedFields() {
		if f.FieldsV1 == nil {
			continue
		}
		var owned []string
		for _, a := range requestAnnotations {
			if bytes.Contains(f.FieldsV1.GetRawBytes(), []byte(`"f:`+a+`"`)) {
				owned = append(owned, fmt.Sprintf(`%q:{}`, "f:"+a))
			}
		}
		if len(owned) == 0 {
			continue
		}
		raw := `{"f:metadata":{"f:annotations":{` + strings.Join(owned, ",") + `}}}`
		kept = append(kept, metav1.ManagedFieldsEntry{Manager: in(f.Manager), Operation: f.Operation, APIVersion: in(f.APIVersion), Time: f.Time,
			FieldsType: in(f.FieldsType), FieldsV1: metav1.NewFieldsV1(raw), Subresource: in(f.Subresource)})
	}
	obj.SetManagedFields(kept)
	obj.SetNamespace(in(obj.GetNamespace()))
	if ann := obj.GetAnnotations(); ann != nil {
		for k, v := range ann {
			ann[in(k)] = in(v)
		}
	}
	switch r := obj.(type) {
	case *v1alpha1.TicketKeyRing:
		internStatus(&r.Status)
	case *v1alpha1.ClusterTicketKeyRing:
		internStatus(&r.Status)
	}
	return obj
}

// internStatus makes the strings of a ring's status one copy each: the
// conditions' types, reasons and messages, which most rings share, and the
// key ids and states, each of which appears twice in a status.
func internStatus(st *v1alpha1.TicketKeyRingStatus) {
	for i := range st.Conditions {
		c := &st.Conditions[i]
		c.Type, c.Status, c.Reason, c.Message = in(c.Type), metav1.ConditionStatus(in(string(c.Status))), in(c.Reason), in(c.Message)
	}
	for i := range st.Keys {
		k := &st.Keys[i]
		k.ID, k.State = in(k.ID), v1alpha1.KeyState(in(string(k.State)))
	}
	if st.ActiveKey != nil {
		st.ActiveKey.ID = in(st.ActiveKey.ID)
	}
	st.LastRotateRequestedAt, st.LastRevokeRequestedAt = in(st.LastRotateRequestedAt), in(st.LastRevokeRequestedAt)
}

// keptLabels are labels as the caches keep them: all, or none if they are
// over maxLabelBytes (an object is then selected as if unlabelled, which its
// author, who could remove them, gains nothing by).
func keptLabels(l map[string]string) map[string]string {
	size := 0
	for k, v := range l {
		size += len(k) + len(v)
	}
	if size > maxLabelBytes || len(l) == 0 {
		return nil
	}
	return l
}

// cut keeps at most maxNameLen bytes of a name: no object has a longer one.
func cut(s string) string {
	if len(s) > maxNameLen {
		return s[:maxNameLen]
	}
	return s
}

// KeepOwnedSecrets is the cache transform of ringmaster.io/ticket-keys
// Secrets. A Secret that a ring controls (whose data the operator plans
// from or compares with what it would write), or that lives in the
// operator's namespace (where cluster rings' snapshots live and only
// administrators write), is kept whole but for its managed fields; of a
// ring's projection it keeps the digest of the data, not the data
// (distribute.DigestKey): the operator compares a projection with what it
// would write, and never reads its keys. Of any
// other, it keeps the name, labels, owner references and type: enough to
// map it to a ring and to see that it is not the ring's, and nothing a
// tenant could inflate it with. Owner.Owns decides ownership by the ring's
// UID; a controller reference to any ring keeps a Secret whole here, which
// only the operator can write where the admission guard is installed.
func KeepOwnedSecrets(namespace string) toolscache.TransformFunc {
	return func(obj any) (any, error) {
		s, ok := obj.(*corev1.Secret)
		if !ok {
			return obj, nil // a deletion tombstone: passed on as it is
		}
		s.ManagedFields = nil
		switch {
		case controlledByRing(s) && s.Labels[v1alpha1.ComponentLabel] == v1alpha1.ComponentProjection:
			digestData(s)
		case s.Namespace == namespace || controlledByRing(s):
		default:
			s = &corev1.Secret{
				TypeMeta: s.TypeMeta,
				ObjectMeta: metav1.ObjectMeta{
					Name: s.Name, Namespace: s.Namespace, UID: s.UID,
					ResourceVersion: s.ResourceVersion, CreationTimestamp: s.CreationTimestamp, DeletionTimestamp: s.DeletionTimestamp,
					Labels: s.Labels, OwnerReferences: s.OwnerReferences,
				},
				Type: s.Type,
			}
		}
		intern(s)
		return s, nil
	}
}

// digestData replaces a projection's data with its digest
// (distribute.DigestKey), zeroing the keys it held; a projection
// transformed already keeps its digest.
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

// intern makes the strings that the operator's Secrets share (namespace,
// labels, annotations, owner references, type) one copy each: at 10,000
// rings the cache holds 20,000 to 40,000 of these Secrets, each with the
// same dozen strings, and a ring's Secrets share its name and UID.
func intern(s *corev1.Secret) {
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
		r.APIVersion, r.Kind, r.Name, r.UID = in(r.APIVersion), in(r.Kind), in(r.Name), types.UID(in(string(r.UID)))
		r.Controller, r.BlockOwnerDeletion = internBool(r.Controller), internBool(r.BlockOwnerDeletion)
	}
}

// in is s's one copy (unique.Make): it lives while anything the caches
// keep refers to it, and no longer.
func in(s string) string { return unique.Make(s).Value() }

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

// NewTLSSecretCache makes the cache of kubernetes.io/tls Secrets that
// CertificatePolicies judge. It is separate from the manager's cache, whose
// Secrets are ringmaster's own (CacheOptions), started only once a
// CertificatePolicy exists, and it holds neither private key nor
// certificate: StripTLSSecret keeps the parsed facts of tls.crt instead.
func NewTLSSecretCache(cfg *rest.Config, scheme *runtime.Scheme, mapper meta.RESTMapper) (cache.Cache, error) {
	return cache.New(cfg, cache.Options{
		Scheme: scheme,
		Mapper: mapper,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {
				Field:     fields.OneTermEqualSelector("type", string(corev1.SecretTypeTLS)),
				Transform: StripTLSSecret,
			},
		},
	})
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
}

// certManagerAnnotations are the annotations of a TLS Secret that
// CertificatePolicy reads: the issuer and the Certificate cert-manager
// wrote it for.
var certManagerAnnotations = []string{cmapi.IssuerNameAnnotationKey, cmapi.IssuerKindAnnotationKey, cmapi.IssuerGroupAnnotationKey, cmapi.CertificateNameKey}

// Bounds of what the caches keep of a tenant's TLS Secret or Certificate
// beside a certificate's facts (certpolicy.Certificate.Trim bounds those).
const (
	// maxLabelBytes bounds an object's labels, keys and values together;
	// one with more keeps none (keptLabels).
	maxLabelBytes = 4 << 10
	// maxNameLen is the longest object name: an annotation naming an
	// issuer or a Certificate is kept only up to it.
	maxNameLen = 253
)

// StripTLSSecret is the cache transform of kubernetes.io/tls Secrets. It
// keeps what CertificatePolicy reads, and no more than a bounded amount of
// it whatever the Secret's size: its identity, its labels (up to 4 KiB),
// cert-manager's four annotations naming its issuer and Certificate (each
// up to 253 bytes), and the facts of tls.crt's leaf certificate
// (TLSFactsKey), with at most certpolicy.MaxDNSNames DNS names and
// certpolicy.MaxIPAddresses IP addresses and the true counts
// (certpolicy.Certificate.Trim). tls.key, the certificate chain, any other
// data or annotation, and the SANs past those bounds never stay in the
// operator's memory. The certificate is parsed once, here, rather than at
// each evaluation. Transforming its own output changes nothing.
func StripTLSSecret(obj any) (any, error) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return obj, nil // a deletion tombstone: passed on as it is
	}
	if _, done := s.Data[TLSFactsKey]; done && len(s.Data) == 1 {
		// Transformed already: an informer may pass a stored object
		// through its transform again (client-go does on a relist).
		return s, nil
	}
	out := &corev1.Secret{
		TypeMeta: s.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: s.Name, Namespace: s.Namespace, UID: s.UID,
			ResourceVersion: s.ResourceVersion, CreationTimestamp: s.CreationTimestamp, DeletionTimestamp: s.DeletionTimestamp,
		},
		Type: s.Type,
	}
	out.Labels = keptLabels(s.Labels)
	for _, k := range certManagerAnnotations {
		if v, ok := s.Annotations[k]; ok && len(v) <= maxNameLen {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	var facts TLSFacts
	if c, err := certpolicy.Parse(s.Data[corev1.TLSCertKey]); err != nil {
		facts.Error = err.Error()
	} else {
		c = c.Trim()
		facts.Cert = &c
	}
	data, err := json.Marshal(facts)
	if err != nil {
		return nil, fmt.Errorf("encode the facts of Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	out.Data = map[string][]byte{TLSFactsKey: data}
	return out, nil
}

// tlsFactsOf reads back what StripTLSSecret kept of a cached Secret.
func tlsFactsOf(s *corev1.Secret) TLSFacts {
	var f TLSFacts
	if err := json.Unmarshal(s.Data[TLSFactsKey], &f); err != nil || (f.Cert == nil && f.Error == "") {
		return TLSFacts{Error: "no facts cached"}
	}
	return f
}
