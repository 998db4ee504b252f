package confirm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/ringmaster-io/ringmaster/internal/shape"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// The operator keeps pods in a cache of its own, each as shape.Pod leaves
// it: what voting needs, bounded whatever the pod's size, so that a tenant
// who can create pods cannot grow the operator's memory with their size.
//
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch

// SecretIndex indexes the pod cache by the Secrets a pod's running
// containers mount (namespace and name). A pod whose Secrets shape.Pod cut
// is also indexed under anySecret: it may mount any Secret of its
// namespace.
const SecretIndex = "ringmaster.io/mounted-secret"

// anySecret is no Secret's name.
const anySecret = "*"

// secretsOf is SecretIndex's function, over kept pods.
func secretsOf(o client.Object) []string {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return nil
	}
	var out []string
	for _, v := range p.Spec.Volumes {
		if v.Secret != nil {
			out = append(out, v.Secret.SecretName)
		}
	}
	if shape.WasCut(p, shape.CutSecrets) {
		out = append(out, anySecret)
	}
	return out
}

// PodLister finds the pods that mount a Secret. Pods does; the Prober's
// tests stand in for it.
type PodLister interface {
	// Mounting returns the pods of namespace that mount Secret secret, or
	// may (their Secrets were cut, see shape.CappedAnnotation), as shape.Pod kept
	// them. They are shared with the cache: the caller must not change
	// them.
	Mounting(ctx context.Context, namespace, secret string) ([]corev1.Pod, error)
}

// PodsOptions configure Pods.
type PodsOptions struct {
	// Namespaces, when set, are the only ones whose pods are cached, for
	// an operator allowed to read pods only there; empty means every
	// namespace.
	Namespaces []string
	// Shapes keeps each pod the cache holds to shape.Pod.
	Shapes *shape.Registry
}

// Pods is the operator's cache of pods, each as shape.Pod keeps it, indexed
// by the Secrets it mounts (SecretIndex). It is a manager Runnable run by
// the leader only, and it starts its cache on the first lookup: an operator
// none of whose rings asks its pods (spec.confirmation) never lists or
// watches a pod. The cache then runs until Start's context ends.
//
// Memory: about 0.5 KB per pod in the cache, at most about 12 KB whatever
// the pod's size (the limits above); an initial list or relist streams the
// pods one at a time through shape.Pod (client-go's watch-list), so no
// moment holds every pod whole.
type Pods struct {
	cache   cache.Cache
	started chan struct{} // closed by Start

	mu      sync.Mutex
	ctx     context.Context // Start's
	running bool
	wg      sync.WaitGroup
	err     error // the cache's, once it ended
}

// NewPods makes the pod cache; the manager must run it (Add).
func NewPods(cfg *rest.Config, scheme *runtime.Scheme, mapper meta.RESTMapper, o PodsOptions) (*Pods, error) {
	if o.Shapes == nil {
		return nil, errors.New("create the pod cache: no shapes to keep the pods to")
	}
	opts := o.Shapes.Options(cache.Options{Scheme: scheme, Mapper: mapper})
	if len(o.Namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range o.Namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	c, err := cache.New(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("create the pod cache: %w", err)
	}
	// Registered before the cache starts; it creates the pod informer,
	// which runs only once the cache does.
	if err := c.IndexField(context.Background(), &corev1.Pod{}, SecretIndex, secretsOf); err != nil {
		return nil, fmt.Errorf("index pods by the Secrets they mount: %w", err)
	}
	return &Pods{cache: c, started: make(chan struct{})}, nil
}

// NeedLeaderElection: only the leader probes (and will nudge) pods.
func (p *Pods) NeedLeaderElection() bool { return true }

// Start makes the cache available to Mounting until ctx ends, and returns
// once the cache, if it was started, has stopped.
func (p *Pods) Start(ctx context.Context) error {
	p.mu.Lock()
	p.ctx = ctx
	p.mu.Unlock()
	close(p.started)
	<-ctx.Done()
	p.mu.Lock()
	p.ctx = nil
	p.mu.Unlock()
	p.wg.Wait()
	return p.err
}

// errNotRunning: Mounting after Start returned, or while it has not been
// called.
var errNotRunning = errors.New("the pod cache is not running: only the leader reads pods")

// run starts the cache on the first call, once Start has been called
// (waiting for it within ctx: the manager starts the prober and the cache
// together).
func (p *Pods) run(ctx context.Context) error {
	select {
	case <-p.started:
	case <-ctx.Done():
		return errNotRunning
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx == nil {
		return errNotRunning
	}
	if !p.running {
		p.running = true
		ctx := p.ctx
		log.FromContext(ctx).Info("Started the pod cache: a ring asks its pods")
		p.wg.Go(func() {
			if err := p.cache.Start(ctx); err != nil {
				p.mu.Lock()
				p.err = fmt.Errorf("the pod cache: %w", err)
				p.mu.Unlock()
			}
		})
	}
	return nil
}

// Mounting returns the pods of namespace that mount Secret secret, or may
// (see PodLister), in name order. The first call starts the cache and waits,
// within ctx, for its first list; a call before Start waits for it.
func (p *Pods) Mounting(ctx context.Context, namespace, secret string) ([]corev1.Pod, error) {
	if err := p.run(ctx); err != nil {
		return nil, err
	}
	if !p.cache.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("the pod cache has not listed the pods yet: %w", cmp.Or(ctx.Err(), errNotRunning))
	}
	list := func(key string) ([]corev1.Pod, error) {
		l := &corev1.PodList{}
		if err := p.cache.List(ctx, l, client.InNamespace(namespace), client.MatchingFields{SecretIndex: key}, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("list the pods of namespace %s mounting Secret %s: %w", namespace, secret, err)
		}
		return l.Items, nil
	}
	out, err := list(secret)
	if err != nil {
		return nil, err
	}
	maybe, err := list(anySecret)
	if err != nil {
		return nil, err
	}
	if len(maybe) > 0 {
		names := map[string]bool{}
		for _, pod := range out {
			names[pod.Name] = true
		}
		for _, pod := range maybe {
			if !names[pod.Name] {
				out = append(out, pod)
			}
		}
	}
	slices.SortFunc(out, func(a, b corev1.Pod) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}
