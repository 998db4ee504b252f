package confirm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// The operator keeps pods in a cache of its own, each as StripPod leaves
// it: what voting needs, bounded whatever the pod's size, so that a tenant
// who can create pods cannot grow the operator's memory with their size.
//
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch

// Limits of what StripPod keeps of one pod. A pod over one of them is kept
// with CappedAnnotation naming what was cut; Voters reports such a pod as
// not judged rather than guess.
const (
	// MaxPodLabelBytes bounds a pod's labels, keys and values together;
	// a pod with more keeps none.
	MaxPodLabelBytes = 4 << 10
	// MaxPodSecrets bounds the Secrets kept of a pod: those its running
	// containers mount, the first ones in volume order.
	MaxPodSecrets = 16
	// MaxPodPorts bounds the named TCP ports kept of a pod's running
	// containers, the first ones in container order.
	MaxPodPorts = 16
)

// CappedAnnotation is set on a pod StripPod cut, to a comma-separated list
// of what was cut: "labels", "secrets", "ports". Its key is not a valid
// annotation key (a name may not start with "_"), so the API server lets
// nobody write it on a real pod: only StripPod sets it, and it carries it
// over when it strips a pod it kept already.
const CappedAnnotation = "ringmaster.io/_capped"

// What CappedAnnotation names.
const (
	cappedLabels  = "labels"
	cappedSecrets = "secrets"
	cappedPorts   = "ports"
)

// keptContainer is the one container of a kept pod: it holds the mounts and
// named ports of all the pod's running containers.
const keptContainer = "kept"

// maxNameLen is the longest Kubernetes object name (a DNS subdomain): no
// Secret has a longer one.
const maxNameLen = 253

// StripPod is the cache transform of pods: it keeps what voting and the
// lookups by Secret need, and nothing a tenant can make large.
//   - metadata: name, namespace, uid, resourceVersion, deletionTimestamp,
//     and the labels up to MaxPodLabelBytes;
//   - spec: nodeName, hostNetwork; of the volumes, only the Secrets that a
//     running container (a container or a native sidecar) mounts, through a
//     secret volume or a projected volume's secret source, at most
//     MaxPodSecrets, as one secret volume each; and one container, "kept",
//     mounting them all and declaring the first MaxPodPorts named TCP ports
//     of the running containers;
//   - status: phase, pod IP, and the Ready condition's status.
//
// Annotations, managed fields, owner references, env, commands, images,
// other volumes and the rest of the status are dropped. Stripping a kept pod
// again changes nothing, as client-go's informers require (a watch-list
// passes every object through the transform twice).
func StripPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a deletion tombstone: passed on as it is
	}
	capped := splitCapped(p.Annotations[CappedAnnotation])
	out := &corev1.Pod{
		TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID,
			ResourceVersion: p.ResourceVersion, DeletionTimestamp: p.DeletionTimestamp,
		},
		Spec:   corev1.PodSpec{NodeName: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork},
		Status: corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP},
	}

	size := 0
	for k, v := range p.Labels {
		size += len(k) + len(v)
	}
	if size > MaxPodLabelBytes {
		capped = addCapped(capped, cappedLabels)
	} else if len(p.Labels) > 0 {
		out.Labels = p.Labels
	}

	secrets, cut := mountedSecrets(*p)
	if cut {
		capped = addCapped(capped, cappedSecrets)
	}
	ports, cut := namedPorts(*p)
	if cut {
		capped = addCapped(capped, cappedPorts)
	}
	kept := corev1.Container{Name: keptContainer, Ports: ports}
	for _, s := range secrets {
		out.Spec.Volumes = append(out.Spec.Volumes, corev1.Volume{Name: s, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: s}}})
		kept.VolumeMounts = append(kept.VolumeMounts, corev1.VolumeMount{Name: s})
	}
	if len(kept.Ports) > 0 || len(kept.VolumeMounts) > 0 {
		out.Spec.Containers = []corev1.Container{kept}
	}

	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			out.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: c.Status}}
			break
		}
	}
	if len(capped) > 0 {
		out.Annotations = map[string]string{CappedAnnotation: strings.Join(capped, ",")}
	}
	return out, nil
}

// mountedSecrets are the Secrets the pod's running containers mount, in
// volume order, at most MaxPodSecrets; cut reports that there were more.
func mountedSecrets(p corev1.Pod) (secrets []string, cut bool) {
	mounted := map[string]bool{}
	for _, c := range running(p) {
		for _, m := range c.VolumeMounts {
			mounted[m.Name] = true
		}
	}
	add := func(name string) {
		if name == "" || len(name) > maxNameLen || slices.Contains(secrets, name) {
			return
		}
		if len(secrets) == MaxPodSecrets {
			cut = true
			return
		}
		secrets = append(secrets, name)
	}
	for _, v := range p.Spec.Volumes {
		if !mounted[v.Name] {
			continue
		}
		switch {
		case v.Secret != nil:
			add(v.Secret.SecretName)
		case v.Projected != nil:
			for _, src := range v.Projected.Sources {
				if src.Secret != nil {
					add(src.Secret.Name)
				}
			}
		}
	}
	return secrets, cut
}

// namedPorts are the named TCP ports of the pod's running containers, the
// first of each name, at most MaxPodPorts; cut reports that there were more.
func namedPorts(p corev1.Pod) (ports []corev1.ContainerPort, cut bool) {
	for _, c := range running(p) {
		for _, cp := range c.Ports {
			if cp.Name == "" || (cp.Protocol != "" && cp.Protocol != corev1.ProtocolTCP) ||
				slices.ContainsFunc(ports, func(k corev1.ContainerPort) bool { return k.Name == cp.Name }) {
				continue
			}
			if len(ports) == MaxPodPorts {
				return ports, true
			}
			ports = append(ports, corev1.ContainerPort{Name: cp.Name, ContainerPort: cp.ContainerPort})
		}
	}
	return ports, false
}

func splitCapped(v string) []string {
	var out []string
	for s := range strings.SplitSeq(v, ",") {
		if s == cappedLabels || s == cappedSecrets || s == cappedPorts {
			out = addCapped(out, s)
		}
	}
	return out
}

func addCapped(list []string, what string) []string {
	if slices.Contains(list, what) {
		return list
	}
	list = append(list, what)
	slices.Sort(list)
	return list
}

// cappedOf reports whether StripPod cut what of the pod.
func cappedOf(p corev1.Pod, what string) bool {
	return slices.Contains(splitCapped(p.Annotations[CappedAnnotation]), what)
}

// SecretIndex indexes the pod cache by the Secrets a pod's running
// containers mount (namespace and name). A pod whose Secrets StripPod cut
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
	if cappedOf(*p, cappedSecrets) {
		out = append(out, anySecret)
	}
	return out
}

// PodLister finds the pods that mount a Secret. Pods does; the Prober's
// tests stand in for it.
type PodLister interface {
	// Mounting returns the pods of namespace that mount Secret secret, or
	// may (their Secrets were cut, see CappedAnnotation), as StripPod kept
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
}

// Pods is the operator's cache of pods, each as StripPod keeps it, indexed
// by the Secrets it mounts (SecretIndex). It is a manager Runnable run by
// the leader only, and it starts its cache on the first lookup: an operator
// none of whose rings asks its pods (spec.confirmation) never lists or
// watches a pod. The cache then runs until Start's context ends.
//
// Memory: about 0.5 KB per pod in the cache, at most about 12 KB whatever
// the pod's size (the limits above); an initial list or relist streams the
// pods one at a time through StripPod (client-go's watch-list), so no
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
	opts := cache.Options{
		Scheme: scheme,
		Mapper: mapper,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Transform: StripPod},
		},
	}
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
