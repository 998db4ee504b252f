package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/confirm"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/dnswork"
	"github.com/ringmaster-io/ringmaster/internal/dnszone"
	"github.com/ringmaster-io/ringmaster/internal/fairqueue"
	"github.com/ringmaster-io/ringmaster/internal/mint"
	"github.com/ringmaster-io/ringmaster/internal/nudge"
	"github.com/ringmaster-io/ringmaster/internal/shape"
)

// DefaultRingWorkers is how many rings are reconciled at once, per kind, so
// that one ring waiting on a slow key source does not hold up the others.
const DefaultRingWorkers = 4

// sourceRefIndex indexes rings of both kinds by the key source they name.
const sourceRefIndex = "spec.sourceRef.name"

// Options configure the controllers.
type Options struct {
	// Namespace is the operator's own: where ClusterTicketKeyRing snapshots
	// live, and the Secrets and ConfigMaps ClusterKeySources name.
	Namespace string
	// ServiceAccount is the operator's own, in Namespace, which Vault's
	// Kubernetes auth logs in as.
	ServiceAccount string
	// RingWorkers reconcile rings of each kind at once; 0 means
	// DefaultRingWorkers.
	RingWorkers int
	// MaxRenewalsPerMinute bounds Enforce's renewals across the cluster; 0
	// means DefaultMaxRenewalsPerMinute.
	MaxRenewalsPerMinute int
	// MintTimeout bounds each mint and key source check; 0 means
	// mint.DefaultTimeout.
	MintTimeout time.Duration
	// Clock drives rotation and evaluation; nil means the real clock.
	Clock clock.PassiveClock
	// Registry receives the controllers' metrics.
	Registry prometheus.Registerer
	// KeepSecretsInBackups leaves the label by which Velero skips an object
	// (distribute.ExcludeFromBackupLabel) off the Secrets that hold keys.
	// Off by default: a key must never outlive its expiresAt in a backup.
	KeepSecretsInBackups bool
	// Prober asks rings' pods what they hold (spec.confirmation); the
	// manager must run it.
	Prober *confirm.Prober
	// DNS writes and checks ECH records off the reconcile path; the
	// manager must run it.
	DNS *dnswork.Worker
	// Nudger, when set, patches the pods mounting each projection written
	// with a new epoch, so that their kubelets re-mount it at once; the
	// manager must run it. Nil: pods are left to their kubelets' own sync.
	Nudger *nudge.Nudger
	// Shapes is what every cache of the operator keeps of each kind
	// (shape.Operator); the TLS Secret cache is made with it.
	Shapes *shape.Registry
	// WatchedNamespaces are the namespaces whose namespaced objects the
	// manager's cache watches (--watch-namespaces; the operator's own is
	// one); empty means every namespace. A DNS name whose recorded owner
	// is elsewhere is left as it is, and reported once.
	WatchedNamespaces []string
	// NoCertificatePolicy leaves the CertificatePolicy controller out, and
	// with it every read of Secrets other than ringmaster's own: the
	// operator then needs no cluster-wide Secret read (docs/security.md).
	NoCertificatePolicy bool
}

// Controllers are the controllers Setup registered, for what tests observe
// of them.
type Controllers struct {
	// CertificatePolicy is nil under Options.NoCertificatePolicy.
	CertificatePolicy *CertificatePolicyReconciler
}

// Setup registers every controller with the manager: TicketKeyRing,
// ClusterTicketKeyRing, ECHKeyRing, the orphans of all three,
// ClusterKeySource, the owners of DNS names, ClusterDNSZone and
// CertificatePolicy.
func Setup(ctx context.Context, mgr manager.Manager, o Options) (*Controllers, error) {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.RingWorkers <= 0 {
		o.RingWorkers = DefaultRingWorkers
	}
	if o.Namespace == "" {
		return nil, errors.New("the operator's namespace is not set (--cluster-resource-namespace or $POD_NAMESPACE)")
	}
	if o.Prober == nil {
		return nil, errors.New("no prober to ask the rings' pods")
	}
	if o.DNS == nil {
		return nil, errors.New("no DNS worker to write the ECH rings' records")
	}
	o.DNS.Updates = func(zone, result string) { dnsUpdatesTotal.WithLabelValues(zone, result).Inc() }
	sources := &mint.Sources{Reader: mgr.GetAPIReader(), Client: mgr.GetClient(), Namespace: o.Namespace, ServiceAccount: o.ServiceAccount, Timeout: o.MintTimeout}
	// Every controller's events go through one recorder that keeps notes
	// within the API's limit.
	recorder := newRecorder(mgr.GetEventRecorder("ringmaster"))
	secrets := &ringSecrets{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}
	shared := &rings{Client: mgr.GetClient(), secrets: secrets, Recorder: recorder, Clock: o.Clock, Sources: sources,
		Prober: o.Prober, gauges: newRingGauges(o.Clock), keepInBackups: o.KeepSecretsInBackups}
	collectors := []prometheus.Collector{rotationsTotal, snapshotReadsTotal, unconfirmedActivationsTotal, unconfirmedPublicationsTotal, dnsUpdatesTotal,
		sharedWritesTotal, sharedPropagationSeconds, shared.gauges}
	if o.Nudger != nil {
		secrets.Nudger = o.Nudger
		collectors = append(collectors, o.Nudger.Collectors()...)
	}
	for _, c := range collectors {
		if err := o.Registry.Register(c); err != nil && !errors.As(err, &prometheus.AlreadyRegisteredError{}) {
			return nil, err
		}
	}
	if err := setupRings(ctx, mgr, shared, o); err != nil {
		return nil, err
	}
	orphans := &OrphanReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Clock: o.Clock, Namespace: o.Namespace}
	if err := orphans.SetupWithManager(mgr, o.Registry); err != nil {
		return nil, fmt.Errorf("set up the orphan controller: %w", err)
	}
	if err := indexDNSNames(ctx, mgr); err != nil {
		return nil, err
	}
	watched := watchedNamespaces(o.WatchedNamespaces)
	ech := &ECHKeyRingReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder, Clock: o.Clock,
		Sources: sources, Prober: o.Prober, DNS: o.DNS, Namespace: o.Namespace, Watched: watched, KeepInBackups: o.KeepSecretsInBackups, secrets: secrets}
	if err := ech.SetupWithManager(mgr, o.RingWorkers); err != nil {
		return nil, fmt.Errorf("set up the ECHKeyRing controller: %w", err)
	}
	names := &DNSNameReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder, Clock: o.Clock, DNS: o.DNS,
		Namespace: o.Namespace, Watched: watched}
	if err := names.SetupWithManager(mgr, o.RingWorkers); err != nil {
		return nil, fmt.Errorf("set up the DNS name controller: %w", err)
	}
	// A mint whose outcome changed has its key source checked again at
	// once, so that its status holds the details its rings leave out.
	minted := make(chan event.TypedGenericEvent[*v1alpha1.ClusterKeySource], 64)
	sources.Minted = func(name string) {
		select {
		case minted <- event.TypedGenericEvent[*v1alpha1.ClusterKeySource]{Object: &v1alpha1.ClusterKeySource{ObjectMeta: metav1.ObjectMeta{Name: name}}}:
		default: // a burst: the periodic check reports it
		}
	}
	if err := builder.ControllerManagedBy(mgr).Named("clusterkeysource").
		For(&v1alpha1.ClusterKeySource{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Channel(minted, &handler.TypedEnqueueRequestForObject[*v1alpha1.ClusterKeySource]{})).
		Complete(&ClusterKeySourceReconciler{Client: mgr.GetClient(), Recorder: recorder, Clock: o.Clock, Sources: sources}); err != nil {
		return nil, fmt.Errorf("set up the ClusterKeySource controller: %w", err)
	}
	dnsZones := &ClusterDNSZoneReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder, Clock: o.Clock, Namespace: o.Namespace}
	if err := dnsZones.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up the ClusterDNSZone controller: %w", err)
	}
	if o.NoCertificatePolicy {
		return &Controllers{}, nil
	}
	cpol := &CertificatePolicyReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder, Clock: o.Clock,
		MaxRenewalsPerMinute: o.MaxRenewalsPerMinute, Shapes: o.Shapes,
	}
	if err := cpol.SetupWithManager(mgr, o.Registry); err != nil {
		return nil, fmt.Errorf("set up the CertificatePolicy controller: %w", err)
	}
	return &Controllers{CertificatePolicy: cpol}, nil
}

// indexDNSNames indexes ECHKeyRings by the zone they name and their
// canonical DNS name, and the records of DNS names' owners by their
// owner's UID and the zone that admitted it: every map from one to the
// others is a lookup.
func indexDNSNames(ctx context.Context, mgr manager.Manager) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &v1alpha1.ECHKeyRing{}, zoneRefIndex, func(o client.Object) []string {
		return []string{o.(*v1alpha1.ECHKeyRing).Spec.DNS.ZoneRef.Name}
	}); err != nil {
		return fmt.Errorf("index ECHKeyRings by zone: %w", err)
	}
	if err := idx.IndexField(ctx, &v1alpha1.ECHKeyRing{}, dnsNameIndex, func(o client.Object) []string {
		return []string{dnszone.Canonical(o.(*v1alpha1.ECHKeyRing).Spec.DNS.Name)}
	}); err != nil {
		return fmt.Errorf("index ECHKeyRings by DNS name: %w", err)
	}
	for index, key := range map[string]func(client.Object) string{
		recordOwnerIndex: func(o client.Object) string { return o.GetLabels()[v1alpha1.DNSOwnerUIDLabel] },
		recordZoneIndex:  func(o client.Object) string { return o.GetAnnotations()[v1alpha1.DNSZoneAnnotation] },
	} {
		if err := idx.IndexField(ctx, &coordinationv1.Lease{}, index, func(o client.Object) []string {
			if v := key(o); v != "" {
				return []string{v}
			}
			return nil
		}); err != nil {
			return fmt.Errorf("index the records of DNS names (%s): %w", index, err)
		}
	}
	return nil
}

// setupRings registers the controllers of both ring kinds, which share one
// reconcile: each watches its rings, their Secrets, the key sources they
// name, and the namespaces that decide where they may mint or deliver.
func setupRings(ctx context.Context, mgr manager.Manager, shared *rings, o Options) error {
	for _, obj := range []client.Object{&v1alpha1.TicketKeyRing{}, &v1alpha1.ClusterTicketKeyRing{}} {
		if err := mgr.GetFieldIndexer().IndexField(ctx, obj, sourceRefIndex, sourceRefOf); err != nil {
			return fmt.Errorf("index %T by key source: %w", obj, err)
		}
	}
	workers := ringWork(o.RingWorkers)
	specOrAnnotations := builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, deletionChanged()))

	if err := builder.ControllerManagedBy(mgr).Named("ticketkeyring").WithOptions(workers).
		For(&v1alpha1.TicketKeyRing{}, specOrAnnotations).
		Watches(&v1alpha1.TicketKeyRing{}, shared.statuses.forgetShown(ringStatus)).
		Watches(&corev1.Secret{}, atPriority(scheduled, handler.EnqueueRequestsFromMapFunc(ringsOfSecret(v1alpha1.KindTicketKeyRing)))).
		Watches(&v1alpha1.ClusterKeySource{}, handler.EnqueueRequestsFromMapFunc(shared.ringsUsing(&v1alpha1.TicketKeyRingList{}))).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(shared.sourcedRingsIn), builder.WithPredicates(labelsChanged())).
		WatchesRawSource(shared.Prober.Source(v1alpha1.KindTicketKeyRing)).
		Complete(&TicketKeyRingReconciler{rings: shared}); err != nil {
		return fmt.Errorf("set up the TicketKeyRing controller: %w", err)
	}
	ctkr := &ClusterTicketKeyRingReconciler{rings: shared, Namespace: o.Namespace}
	if err := builder.ControllerManagedBy(mgr).Named("clusterticketkeyring").WithOptions(workers).
		For(&v1alpha1.ClusterTicketKeyRing{}, specOrAnnotations).
		Watches(&v1alpha1.ClusterTicketKeyRing{}, shared.statuses.forgetShown(ringStatus)).
		Watches(&corev1.Secret{}, atPriority(scheduled, handler.EnqueueRequestsFromMapFunc(ringsOfSecret(v1alpha1.KindClusterTicketKeyRing)))).
		Watches(&v1alpha1.ClusterKeySource{}, handler.EnqueueRequestsFromMapFunc(shared.ringsUsing(&v1alpha1.ClusterTicketKeyRingList{}))).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(ctkr.allRings), builder.WithPredicates(labelsChanged())).
		WatchesRawSource(shared.Prober.Source(v1alpha1.KindClusterTicketKeyRing)).
		Complete(ctkr); err != nil {
		return fmt.Errorf("set up the ClusterTicketKeyRing controller: %w", err)
	}
	return nil
}

// ringStatus is the status of a ring of either ticket kind.
func ringStatus(obj client.Object) (v1alpha1.TicketKeyRingStatus, bool) {
	switch r := obj.(type) {
	case *v1alpha1.TicketKeyRing:
		return r.Status, true
	case *v1alpha1.ClusterTicketKeyRing:
		return r.Status, true
	}
	return v1alpha1.TicketKeyRingStatus{}, false
}

// ringWork is the work queue of every ring controller: controller-runtime's
// priority queue, fair between namespaces within a priority (package
// fairqueue), served by workers reconciles at a time.
func ringWork(workers int) controller.Options {
	return controller.Options{MaxConcurrentReconciles: workers, UsePriorityQueue: ptr.To(true), NewQueue: fairqueue.NewQueue}
}

// scheduled is the work queue priority of a ring's work that nobody waits
// on: the look its RequeueAfter schedules (the next rotation, the next
// expiry), and the reconcile that the watch events of its own Secret
// writes start. A ring created, edited or annotated (rotate-now, revoke)
// is enqueued at the default priority, 0, and goes first: the priority
// queue serves higher priorities first, so no ring waits behind a bulk's
// routine work. The events of the cache's first list come at this
// priority too (controller-runtime's handler.LowPriority).
const scheduled = handler.LowPriority

// atPriority has h enqueue what it enqueues at priority p, or lower.
func atPriority(p int, h handler.EventHandler) handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Create(ctx, e, lowered(q, p))
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Update(ctx, e, lowered(q, p))
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Delete(ctx, e, lowered(q, p))
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Generic(ctx, e, lowered(q, p))
		},
	}
}

// lowered is q adding at priority p or lower; q itself when it is not a
// priority queue.
func lowered(q workqueue.TypedRateLimitingInterface[reconcile.Request], p int) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request])
	if !ok {
		return q
	}
	return loweredQueue{PriorityQueue: pq, priority: p}
}

type loweredQueue struct {
	priorityqueue.PriorityQueue[reconcile.Request]
	priority int
}

func (q loweredQueue) Add(item reconcile.Request) { q.AddWithOpts(priorityqueue.AddOpts{}, item) }

func (q loweredQueue) AddAfter(item reconcile.Request, after time.Duration) {
	q.AddWithOpts(priorityqueue.AddOpts{After: after}, item)
}

func (q loweredQueue) AddRateLimited(item reconcile.Request) {
	q.AddWithOpts(priorityqueue.AddOpts{RateLimited: true}, item)
}

func (q loweredQueue) AddWithOpts(o priorityqueue.AddOpts, items ...reconcile.Request) {
	o.Priority = ptr.To(min(ptr.Deref(o.Priority, 0), q.priority))
	q.PriorityQueue.AddWithOpts(o, items...)
}

// sourceRefOf is the key source a ring names, for sourceRefIndex.
func sourceRefOf(o client.Object) []string {
	var ref *v1alpha1.KeySourceReference
	switch r := o.(type) {
	case *v1alpha1.TicketKeyRing:
		ref = r.Spec.SourceRef
	case *v1alpha1.ClusterTicketKeyRing:
		ref = r.Spec.SourceRef
	}
	if ref == nil {
		return nil
	}
	return []string{ref.Name}
}

// ringsOfSecret maps a snapshot or projection Secret to its ring of the
// given kind, so that a Secret deleted or edited by hand is restored.
func ringsOfSecret(kind string) handler.MapFunc {
	return func(_ context.Context, o client.Object) []reconcile.Request {
		k, key, ok := distribute.RingOf(o)
		if !ok || k != kind {
			return nil
		}
		return []reconcile.Request{{NamespacedName: key}}
	}
}

// ringsUsing maps a key source to the rings, of the list's kind, that name
// it: they retry a mint once it changes.
func (r *rings) ringsUsing(list client.ObjectList) handler.MapFunc {
	return func(ctx context.Context, cks client.Object) []reconcile.Request {
		return r.requests(ctx, list, client.MatchingFields{sourceRefIndex: cks.GetName()})
	}
}

// sourcedRingsIn maps a namespace whose labels changed to its
// TicketKeyRings that name a key source: whether the source allows them may
// have changed.
func (r *rings) sourcedRingsIn(ctx context.Context, ns client.Object) []reconcile.Request {
	list := &v1alpha1.TicketKeyRingList{}
	if err := r.List(ctx, list, client.InNamespace(ns.GetName())); err != nil {
		return nil // a cache read: it fails only when shutting down
	}
	var out []reconcile.Request
	for _, x := range list.Items {
		if x.Spec.SourceRef != nil {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: x.Namespace, Name: x.Name}})
		}
	}
	return out
}

func (r *rings) requests(ctx context.Context, list client.ObjectList, opts ...client.ListOption) []reconcile.Request {
	if err := r.List(ctx, list, opts...); err != nil {
		return nil // a cache read: it fails only when shutting down
	}
	var out []reconcile.Request
	switch l := list.(type) {
	case *v1alpha1.TicketKeyRingList:
		for _, x := range l.Items {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: x.Namespace, Name: x.Name}})
		}
	case *v1alpha1.ClusterTicketKeyRingList:
		for _, x := range l.Items {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: x.Name}})
		}
	}
	return out
}

// labelsChanged passes namespaces created or deleted, and those whose labels
// changed: what a namespace selector sees.
func labelsChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels()) ||
				e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
		},
	}
}
