package certificatepolicy

import (
	"github.com/ringmaster-io/ringmaster/internal/shape"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NewTLSSecretCache makes the cache of kubernetes.io/tls Secrets that
// CertificatePolicies judge. It is separate from the manager's cache, whose
// Secrets are ringmaster's own (CacheOptions), started only once a
// CertificatePolicy exists, and it holds neither private key nor
// certificate: their shape (shape.TLSSecret) keeps the parsed facts of
// tls.crt instead.
func NewTLSSecretCache(cfg *rest.Config, scheme *runtime.Scheme, mapper meta.RESTMapper, shapes *shape.Registry) (cache.Cache, error) {
	return cache.New(cfg, shapes.Options(cache.Options{
		Scheme: scheme,
		Mapper: mapper,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Field: fields.OneTermEqualSelector("type", string(corev1.SecretTypeTLS))},
		},
	}))
}
