package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/confirm"
	"github.com/ringmaster-io/ringmaster/internal/controller/apply"
	"github.com/ringmaster-io/ringmaster/internal/controller/dnsname"
	"github.com/ringmaster-io/ringmaster/internal/controller/watch"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/dnswork"
	"github.com/ringmaster-io/ringmaster/internal/fairqueue"
	"github.com/ringmaster-io/ringmaster/internal/mint"
	"github.com/ringmaster-io/ringmaster/internal/nudge"
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
	// WatchedNamespaces are the namespaces whose namespaced objects the
	// manager's cache watches (--watch-namespaces; the operator's own is
	// one); empty means every namespace. A DNS name whose recorded owner
	// is elsewhere is left as it is, and reported once.
	WatchedNamespaces []string
}

// Setup registers the controllers of rings and what they use with the
// manager: TicketKeyRing, ClusterTicketKeyRing, ECHKeyRing, the orphans
// of all three, ClusterKeySource, the owners of DNS names and
// ClusterDNSZone. (CertificatePolicy is a package of its own.)
func Setup(ctx context.Context, mgr manager.Manager, o Options) error {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.RingWorkers <= 0 {
		o.RingWorkers = DefaultRingWorkers
	}
	if o.Namespace == "" {
		return errors.New("the operator's namespace is not set (--cluster-resource-namespace or $POD_NAMESPACE)")
	}
	if o.Prober == nil {
		return errors.New("no prober to ask the rings' pods")
	}
	if o.DNS == nil {
		return errors.New("no DNS worker to write the ECH rings' records")
	}
	o.DNS.Updates = func(zone, result string) { dnsUpdatesTotal.WithLabelValues(zone, result).Inc() }
	sources := &mint.Sources{Reader: mgr.GetAPIReader(), Client: mgr.GetClient(), Namespace: o.Namespace, ServiceAccount: o.ServiceAccount, Timeout: o.MintTimeout}
	// Every controller's events go through one recorder that keeps notes
	// within the API's limit.
	recorder := apply.Recorder(mgr.GetEventRecorder("ringmaster"))
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
			return err
		}
	}
	if err := setupRings(ctx, mgr, shared, o); err != nil {
		return err
	}
	orphans := &OrphanReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Clock: o.Clock, Namespace: o.Namespace}
	if err := orphans.SetupWithManager(mgr, o.Registry); err != nil {
		return fmt.Errorf("set up the orphan controller: %w", err)
	}
	if err := dnsname.Index(ctx, mgr); err != nil {
		return err
	}
	watched := dnsname.Namespaces(o.WatchedNamespaces)
	ech := &ECHKeyRingReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder, Clock: o.Clock,
		Sources: sources, Prober: o.Prober, DNS: o.DNS, Namespace: o.Namespace, Watched: watched, KeepInBackups: o.KeepSecretsInBackups, secrets: secrets}
	if err := ech.SetupWithManager(mgr, o.RingWorkers); err != nil {
		return fmt.Errorf("set up the ECHKeyRing controller: %w", err)
	}
	names := &dnsname.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder, Clock: o.Clock, DNS: o.DNS,
		Namespace: o.Namespace, Watched: watched}
	if err := names.SetupWithManager(mgr, o.RingWorkers); err != nil {
		return fmt.Errorf("set up the DNS name controller: %w", err)
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
		return fmt.Errorf("set up the ClusterKeySource controller: %w", err)
	}
	fleets := &FleetRequestReconciler{Client: mgr.GetClient(), Recorder: recorder, Clock: o.Clock}
	if err := fleets.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up the FleetRequest controller: %w", err)
	}
	dnsZones := &dnsname.ZoneReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder, Clock: o.Clock, Namespace: o.Namespace}
	if err := dnsZones.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up the ClusterDNSZone controller: %w", err)
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
	specOrAnnotations := builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, watch.DeletionChanged()))

	if err := builder.ControllerManagedBy(mgr).Named("ticketkeyring").WithOptions(workers).
		For(&v1alpha1.TicketKeyRing{}, specOrAnnotations).
		Watches(&v1alpha1.TicketKeyRing{}, forgetShown(&shared.statuses, ringStatus)).
		Watches(&corev1.Secret{}, watch.AtPriority(watch.Scheduled, handler.EnqueueRequestsFromMapFunc(ringsOfSecret(v1alpha1.KindTicketKeyRing)))).
		Watches(&v1alpha1.ClusterKeySource{}, handler.EnqueueRequestsFromMapFunc(shared.ringsUsing(&v1alpha1.TicketKeyRingList{}))).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(shared.sourcedRingsIn), builder.WithPredicates(watch.LabelsChanged())).
		Watches(&v1alpha1.FleetRequest{}, fleetWatch(mgr.GetClient(), v1alpha1.KindTicketKeyRing), builder.WithPredicates(created())).
		WatchesRawSource(shared.Prober.Source(v1alpha1.KindTicketKeyRing)).
		Complete(&TicketKeyRingReconciler{rings: shared}); err != nil {
		return fmt.Errorf("set up the TicketKeyRing controller: %w", err)
	}
	ctkr := &ClusterTicketKeyRingReconciler{rings: shared, Namespace: o.Namespace}
	if err := builder.ControllerManagedBy(mgr).Named("clusterticketkeyring").WithOptions(workers).
		For(&v1alpha1.ClusterTicketKeyRing{}, specOrAnnotations).
		Watches(&v1alpha1.ClusterTicketKeyRing{}, forgetShown(&shared.statuses, ringStatus)).
		Watches(&corev1.Secret{}, watch.AtPriority(watch.Scheduled, handler.EnqueueRequestsFromMapFunc(ringsOfSecret(v1alpha1.KindClusterTicketKeyRing)))).
		Watches(&v1alpha1.ClusterKeySource{}, handler.EnqueueRequestsFromMapFunc(shared.ringsUsing(&v1alpha1.ClusterTicketKeyRingList{}))).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(ctkr.allRings), builder.WithPredicates(watch.LabelsChanged())).
		Watches(&v1alpha1.FleetRequest{}, fleetWatch(mgr.GetClient(), v1alpha1.KindClusterTicketKeyRing), builder.WithPredicates(created())).
		WatchesRawSource(shared.Prober.Source(v1alpha1.KindClusterTicketKeyRing)).
		Complete(ctkr); err != nil {
		return fmt.Errorf("set up the ClusterTicketKeyRing controller: %w", err)
	}
	return nil
}

// created passes only objects created (and those the cache lists first):
// a FleetRequest's spec never changes, and its status is its own.
func created() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(event.UpdateEvent) bool { return false },
		DeleteFunc: func(event.DeleteEvent) bool { return false },
	}
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
