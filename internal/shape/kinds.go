package shape

import (
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
)

// Operator is the registry of every kind the operator's caches hold, for
// an operator whose own namespace is namespace (where cluster rings'
// snapshots live). Its caches hold these kinds and no other: a kind
// missing here fails the cache that would hold it.
func Operator(scheme *runtime.Scheme, namespace string) *Registry {
	ring := func(kind string) schema.GroupKind { return v1alpha1.GroupVersion.WithKind(kind).GroupKind() }
	return NewRegistry(scheme, map[schema.GroupKind]Func{
		ring(v1alpha1.KindTicketKeyRing):                                     TicketKeyRing,
		ring(v1alpha1.KindClusterTicketKeyRing):                              ClusterTicketKeyRing,
		ring(v1alpha1.KindECHKeyRing):                                        ECHKeyRing,
		ring(v1alpha1.KindClusterKeySource):                                  ClusterKeySource,
		ring(v1alpha1.KindClusterDNSZone):                                    ClusterDNSZone,
		ring(v1alpha1.KindCertificatePolicy):                                 CertificatePolicy,
		ring(v1alpha1.KindFleetRequest):                                      FleetRequest,
		{Kind: "Namespace"}:                                                  Namespace,
		{Kind: "Pod"}:                                                        Pod,
		{Kind: "Secret"}:                                                     Secrets(namespace),
		{Group: coordinationv1.GroupName, Kind: "Lease"}:                     DNSRecord,
		cmapi.SchemeGroupVersion.WithKind(cmapi.CertificateKind).GroupKind(): Certificate,
		{Group: certificatesv1.GroupName, Kind: "PodCertificateRequest"}:     PodCertificateRequest,
		{Group: certificatesv1.GroupName, Kind: "ClusterTrustBundle"}:        ClusterTrustBundle,
	})
}

// Secrets is the shape of Secrets, by their type: ringmaster's own
// (OwnedSecrets), kubernetes.io/tls (TLSSecret), and of any other type
// only what names and dates it (no cache of the operator's lists those:
// each selects its type on the API server).
func Secrets(namespace string) Func {
	owned := OwnedSecrets(namespace)
	return func(obj any) (any, error) {
		s, ok := obj.(*corev1.Secret)
		if !ok {
			return obj, tombstone(obj, "*corev1.Secret")
		}
		switch s.Type {
		case distribute.SecretType:
			return owned(s)
		case corev1.SecretTypeTLS:
			return TLSSecret(s)
		}
		return &corev1.Secret{TypeMeta: s.TypeMeta, ObjectMeta: identity(&s.ObjectMeta), Type: s.Type}, nil
	}
}
