package controllers

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/internal/distribute"
)

// CacheOptions keeps the manager's cache narrow: of all the cluster's Secrets
// it holds only those of ringmaster's own type, its snapshots and
// projections. Other Secrets, and their key material, never enter the
// operator's memory.
func CacheOptions() cache.Options {
	return cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Field: fields.OneTermEqualSelector("type", string(distribute.SecretType))},
		},
	}
}

// NewTLSSecretCache makes the cache of kubernetes.io/tls Secrets that
// CertificatePolicies judge. It is separate from the manager's cache, whose
// Secrets are ringmaster's own (CacheOptions), and it holds no private key:
// StripTLSSecret drops every Secret's tls.key before the Secret is stored.
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

// StripTLSSecret is the cache transform of kubernetes.io/tls Secrets. It
// keeps what CertificatePolicy reads, their identity, labels, cert-manager's
// annotations and tls.crt, and drops the rest: tls.key and any other data
// never stay in the operator's memory.
func StripTLSSecret(obj any) (any, error) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return obj, nil // a deletion tombstone: passed on as it is
	}
	out := &corev1.Secret{
		TypeMeta: s.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: s.Name, Namespace: s.Namespace, UID: s.UID,
			ResourceVersion: s.ResourceVersion, CreationTimestamp: s.CreationTimestamp, DeletionTimestamp: s.DeletionTimestamp,
			Labels: s.Labels,
		},
		Type: s.Type,
	}
	for k, v := range s.Annotations {
		if strings.HasPrefix(k, "cert-manager.io/") {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	if crt, ok := s.Data[corev1.TLSCertKey]; ok {
		out.Data = map[string][]byte{corev1.TLSCertKey: crt}
	}
	return out, nil
}
