package controller

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/shape"
)

// CacheOptions keeps the manager's cache narrow. Of all the cluster's
// Secrets it lists only those of ringmaster's own type, and of Leases only
// the records of DNS names' owners, in the operator's namespace (not the
// leader election's Lease, nor any other); every kind it holds is kept to
// its shape (internal/shape, made so by the registry shapes), which keeps
// whole only the operator's own Secrets. Other Secrets, and their key
// material, never enter the operator's memory.
func CacheOptions(shapes *shape.Registry, namespace string) cache.Options {
	return shapes.Options(cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Field: fields.OneTermEqualSelector("type", string(distribute.SecretType))},
			&coordinationv1.Lease{}: {
				Namespaces: map[string]cache.Config{namespace: {}},
				Label:      labels.SelectorFromSet(labels.Set{v1alpha1.ComponentLabel: v1alpha1.ComponentDNSName}),
			},
		},
	})
}
