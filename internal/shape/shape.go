// Package shape decides what the operator's caches keep of each kind they
// hold, and makes every cache keep to it.
//
// Anyone allowed to create an object can make it as large as the API
// server takes (about 1.5 MiB): a tenant's ring with a thousand labels, a
// pod with a megabyte of environment. A cache that keeps objects whole
// grows with their size, and an operator killed for its memory at every
// start stops rotating and destroying keys for every namespace (bound 5 of
// the design). So each kind a cache holds passes a transform, its shape,
// that keeps what the operator reads of it and a bounded amount of that,
// whatever the object's size: what the cache holds grows with the number
// of objects, never with their size.
//
// This holds by construction: a cache built with Registry.Options makes
// every informer through Registry.NewInformer, which gives it its kind's
// shape, and refuses to make one for a kind that has none. A new kind the
// operator starts to watch fails at start until it is given a shape here.
// The registry also records every informer it made, so that a test can
// walk them from the running manager (Registry.Informers).
package shape

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Func is a shape: a cache transform. It takes an object as the API server
// sent it and returns what the cache keeps of it. Shaping an object twice
// changes nothing (client-go may pass a stored object through again), and a
// deletion tombstone (toolscache.DeletedFinalStateUnknown) passes as it is.
type Func = toolscache.TransformFunc

// Registry holds the shape of every kind the caches built with Options may
// hold, and records the informers they made.
type Registry struct {
	scheme *runtime.Scheme
	shapes map[schema.GroupKind]Func

	mu   sync.Mutex
	made []schema.GroupVersionKind
}

// NewRegistry is a registry of shapes by kind; the scheme names the Go
// types of the kinds.
func NewRegistry(scheme *runtime.Scheme, shapes map[schema.GroupKind]Func) *Registry {
	return &Registry{scheme: scheme, shapes: shapes}
}

// Options has every informer of a cache built with o made by the
// registry's NewInformer, which shapes it; the transforms o sets
// (DefaultTransform, ByObject's) run after the kind's shape.
func (r *Registry) Options(o cache.Options) cache.Options {
	o.NewInformer = r.NewInformer
	return o
}

// Shape is the shape of the kind gk; false when it has none.
func (r *Registry) Shape(gk schema.GroupKind) (Func, bool) {
	f, ok := r.shapes[gk]
	return f, ok
}

// Kinds are the kinds the registry has a shape for.
func (r *Registry) Kinds() []schema.GroupKind {
	out := make([]schema.GroupKind, 0, len(r.shapes))
	for gk := range r.shapes {
		out = append(out, gk)
	}
	slices.SortFunc(out, func(a, b schema.GroupKind) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Kind, b.Kind))
	})
	return out
}

// Informers are the kinds of the informers the registry's caches made so
// far, in the order they were made (one per namespace a cache watches).
func (r *Registry) Informers() []schema.GroupVersionKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.made)
}

// NewInformer is cache.Options.NewInformer: it makes the informer as
// controller-runtime would, and has it shape what it stores. The cache sets
// the informer's transform right after it makes it: the informer returned
// answers that with the kind's shape (and the cache's transform after it),
// or, for a kind without a shape, with an error, which fails the cache's
// read or watch of the kind.
func (r *Registry) NewInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	inf := toolscache.NewSharedIndexInformer(lw, obj, resync, indexers)
	gvk, err := apiutil.GVKForObject(obj, r.scheme)
	if err != nil {
		return &shaped{SharedIndexInformer: inf, err: fmt.Errorf("shape: the kind of %T: %w", obj, err)}
	}
	r.mu.Lock()
	r.made = append(r.made, gvk)
	r.mu.Unlock()
	f, ok := r.shapes[gvk.GroupKind()]
	if !ok {
		return &shaped{SharedIndexInformer: inf, err: fmt.Errorf("shape: no shape for %s: every kind the operator caches must say what it keeps of it (internal/shape)", gvk.GroupKind())}
	}
	return &shaped{SharedIndexInformer: inf, shape: f}
}

// shaped is an informer whose transform starts with its kind's shape.
type shaped struct {
	toolscache.SharedIndexInformer
	shape Func
	err   error
}

// SetTransform sets the shape, then then.
func (s *shaped) SetTransform(then toolscache.TransformFunc) error {
	if s.err != nil {
		return s.err
	}
	if then == nil {
		return s.SharedIndexInformer.SetTransform(s.shape)
	}
	shape := s.shape
	return s.SharedIndexInformer.SetTransform(func(obj any) (any, error) {
		kept, err := shape(obj)
		if err != nil {
			return nil, err
		}
		return then(kept)
	})
}
