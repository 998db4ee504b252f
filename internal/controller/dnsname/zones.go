package dnsname

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/controller/apply"
	"github.com/ringmaster-io/ringmaster/internal/controller/watch"
	"github.com/ringmaster-io/ringmaster/internal/dnszone"
	"github.com/ringmaster-io/ringmaster/internal/shape"
	"github.com/ringmaster-io/ringmaster/internal/textlimit"
)

// +kubebuilder:rbac:groups=ringmaster.io,resources=clusterdnszones,verbs=get;list;watch
// +kubebuilder:rbac:groups=ringmaster.io,resources=clusterdnszones/status,verbs=patch

// A zone's TSIG Secret is read uncached (the cache holds ringmaster's own
// Secrets only), so it is checked again this often while it works, and
// this often while it does not, so that a fixed Secret shows Ready soon.
const (
	dnsZoneRecheck = 5 * time.Minute
	dnsZoneRetry   = time.Minute
)

// summaryDelay is how long a change of a zone's names or rings waits
// before the zone's summary is made again: a burst of changes (a bulk of
// rings, their names assigned one by one) makes one summary, not one each.
const summaryDelay = 2 * time.Second

// ZoneRefIndex indexes ECHKeyRings by the ClusterDNSZone they name.
const ZoneRefIndex = "spec.dns.zoneRef.name"

// ZoneReconciler reports in each ClusterDNSZone's Ready
// condition whether its TSIG Secret, in the operator's namespace, holds a
// well-formed key; in NamesOverlap, whether other zones allow names it
// allows; and in status.names and status.nameCounts, a bounded summary of
// the names owned through it. Who owns a name is not the zone's to decide
// (a name has one owner across every zone that allows it): the DNS name
// controller decides it, and records it in the name's record.
type ZoneReconciler struct {
	client.Client
	// APIReader reads the TSIG Secret (no cache, no watch).
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// Namespace is the operator's, where TSIG Secrets and the names'
	// records live.
	Namespace string
}

// SetupWithManager registers the controller: it watches the zones (their
// own spec, and the others', which may overlap them), the names' records,
// the ECHKeyRings that name them and the namespaces whose labels decide
// which rings they admit.
func (r *ZoneReconciler) SetupWithManager(mgr manager.Manager) error {
	return builder.ControllerManagedBy(mgr).Named("clusterdnszone").
		For(&v1alpha1.ClusterDNSZone{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.ClusterDNSZone{}, handler.EnqueueRequestsFromMapFunc(r.allZones), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&coordinationv1.Lease{}, coalesced(zoneOfRecord)).
		Watches(&v1alpha1.ECHKeyRing{}, coalesced(zoneOfRing), builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, watch.DeletionChanged()))).
		Watches(&corev1.Namespace{}, coalesced(r.allZones), builder.WithPredicates(watch.LabelsChanged())).
		Complete(r)
}

// coalesced enqueues what m maps an event to summaryDelay later, so that
// the events of a burst make one reconcile: the queue keeps the earliest
// time of an item waiting.
func coalesced(m handler.MapFunc) handler.EventHandler {
	add := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], objs ...client.Object) {
		for _, o := range objs {
			for _, req := range m(ctx, o) {
				q.AddAfter(req, summaryDelay)
			}
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q, e.Object)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q, e.ObjectOld, e.ObjectNew)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q, e.Object)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q, e.Object)
		},
	}
}

// zoneOfRecord maps a name's record to the zone that admitted its owner.
func zoneOfRecord(_ context.Context, o client.Object) []reconcile.Request {
	if z := o.GetAnnotations()[v1alpha1.DNSZoneAnnotation]; z != "" {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: z}}}
	}
	return nil
}

// zoneOfRing maps an ECHKeyRing to the zone it names.
func zoneOfRing(_ context.Context, o client.Object) []reconcile.Request {
	if x, ok := o.(*v1alpha1.ECHKeyRing); ok {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: x.Spec.DNS.ZoneRef.Name}}}
	}
	return nil
}

func (r *ZoneReconciler) allZones(ctx context.Context, _ client.Object) []reconcile.Request {
	zones := &v1alpha1.ClusterDNSZoneList{}
	if err := r.List(ctx, zones); err != nil {
		return nil
	}
	out := make([]reconcile.Request, len(zones.Items))
	for i, z := range zones.Items {
		out[i] = reconcile.Request{NamespacedName: types.NamespacedName{Name: z.Name}}
	}
	return out
}

// Reconcile checks one zone, and summarises the names owned through it.
func (r *ZoneReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	z := &v1alpha1.ClusterDNSZone{}
	if err := r.Get(ctx, req.NamespacedName, z); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("dnsZone", klog.KObj(z)))
	reason, message, _, err := zoneTSIG(ctx, r.APIReader, r.Namespace, z)
	if err != nil {
		return reconcile.Result{}, err
	}
	if msg := shape.SpecCut(z); msg != "" {
		reason, message = v1alpha1.ReasonInvalidSpec, msg // it admits no namespace
	}
	zones := &v1alpha1.ClusterDNSZoneList{}
	if err := r.List(ctx, zones); err != nil {
		return reconcile.Result{}, err
	}
	if err := r.migrate(ctx, z, zones.Items); err != nil {
		return reconcile.Result{}, err
	}
	status := *z.Status.DeepCopy()
	status.ObservedGeneration = z.Generation
	var counts v1alpha1.DNSNameCounts
	if status.Names, counts, err = r.summary(ctx, z); err != nil {
		return reconcile.Result{}, err
	}
	status.NameCounts = &counts
	now := r.Clock.Now()
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: reason, Message: textlimit.Cut(message, textlimit.MessageLimit),
		ObservedGeneration: z.Generation, LastTransitionTime: metav1.NewTime(now)}
	res := reconcile.Result{RequeueAfter: dnsZoneRecheck}
	if reason != v1alpha1.ReasonZoneReady {
		ready.Status, res.RequeueAfter = metav1.ConditionFalse, dnsZoneRetry
	}
	overlap := metav1.Condition{Type: v1alpha1.ConditionNamesOverlap, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonNoOverlap,
		Message: "No other ClusterDNSZone allows a name this zone allows", ObservedGeneration: z.Generation, LastTransitionTime: metav1.NewTime(now)}
	if others := dnszone.Overlapping(z, zones.Items); len(others) > 0 {
		overlap.Status, overlap.Reason, overlap.Message = metav1.ConditionTrue, v1alpha1.ReasonZonesOverlap, dnszone.OverlapMessage(others)
	}
	meta.SetStatusCondition(&status.Conditions, ready)
	meta.SetStatusCondition(&status.Conditions, overlap)
	err = apply.Status(ctx, r.Client, z, z.Status, status)
	if err == nil {
		r.announce(ctx, z, ready, overlap)
	}
	return apply.Result(res, err)
}

// announce emits the events of the zone's changes: Ready changing, and
// the zone coming to overlap others. It is called once the status saying
// so is written: a pass that read a stale zone, whose write is refused,
// announces nothing, and the pass after it, reading the new status, finds
// nothing to announce.
func (r *ZoneReconciler) announce(ctx context.Context, z *v1alpha1.ClusterDNSZone, ready, overlap metav1.Condition) {
	if old := meta.FindStatusCondition(z.Status.Conditions, v1alpha1.ConditionReady); old == nil || old.Status != ready.Status || old.Reason != ready.Reason || old.Message != ready.Message {
		typ := corev1.EventTypeNormal
		if ready.Status == metav1.ConditionFalse {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(z, nil, typ, ready.Reason, "Check", "%s", ready.Message)
		log.FromContext(ctx).Info("DNS zone checked", "ready", ready.Status, "reason", ready.Reason, "message", ready.Message)
	}
	if old := meta.FindStatusCondition(z.Status.Conditions, v1alpha1.ConditionNamesOverlap); overlap.Status == metav1.ConditionTrue &&
		(old == nil || old.Status != overlap.Status || old.Message != overlap.Message) {
		r.Recorder.Eventf(z, nil, corev1.EventTypeWarning, overlap.Reason, "Check", "%s", overlap.Message)
		log.FromContext(ctx).Info("DNS zone overlaps others", "message", overlap.Message)
	}
}

// migrate records the owner of every name the zone's status listed before
// names had records of their own (a status without nameCounts), before the
// summary replaces that list: no name it recorded is ever free for another
// ring to take. A name that has a record keeps it.
func (r *ZoneReconciler) migrate(ctx context.Context, z *v1alpha1.ClusterDNSZone, zones []v1alpha1.ClusterDNSZone) error {
	if z.Status.NameCounts != nil || len(z.Status.Names) == 0 {
		return nil
	}
	legacy := dnszone.LegacyRecords(zones)
	for _, e := range z.Status.Names {
		rec, ok := legacy[dnszone.Canonical(e.Name)]
		if !ok {
			continue
		}
		lease, _, err := ReadRecord(ctx, r.Client, r.Namespace, rec.Name)
		if err != nil && lease == nil {
			return err
		}
		if lease != nil {
			continue // recorded already, or a conflict the name's controller reports
		}
		if err := createLegacyRecord(ctx, r.Client, r.Namespace, rec); err != nil {
			return err
		}
	}
	return nil
}

// summary is the zone's status.names and status.nameCounts: the records
// of the names owned through it, and the rings it admits that wait for
// their name.
func (r *ZoneReconciler) summary(ctx context.Context, z *v1alpha1.ClusterDNSZone) ([]v1alpha1.DNSNameOwner, v1alpha1.DNSNameCounts, error) {
	leases := &coordinationv1.LeaseList{}
	if err := r.List(ctx, leases, client.InNamespace(r.Namespace), client.MatchingFields{RecordZoneIndex: z.Name}); err != nil {
		return nil, v1alpha1.DNSNameCounts{}, fmt.Errorf("list the zone's records: %w", err)
	}
	var records []dnszone.Record
	for i := range leases.Items {
		l := &leases.Items[i]
		if rec, err := dnszone.RecordOf(l, l.Annotations[v1alpha1.DNSNameAnnotation]); err == nil {
			records = append(records, rec)
		}
	}
	cr := newClaimReader(r.Client)
	rings := &v1alpha1.ECHKeyRingList{}
	if err := r.List(ctx, rings, client.MatchingFields{ZoneRefIndex: z.Name}); err != nil {
		return nil, v1alpha1.DNSNameCounts{}, fmt.Errorf("list the zone's ECHKeyRings: %w", err)
	}
	var waiting int32
	for i := range rings.Items {
		x := &rings.Items[i]
		name := dnszone.Canonical(x.Spec.DNS.Name)
		c, err := cr.claimant(ctx, name, x)
		if err != nil {
			return nil, v1alpha1.DNSNameCounts{}, err
		}
		if !c.Claims {
			continue
		}
		_, rec, _ := ReadRecord(ctx, r.Client, r.Namespace, name)
		if rec == nil || rec.Ring.UID != c.Ref.UID || rec.State != v1alpha1.DNSNameOwned || rec.Zone != z.Name {
			waiting++
		}
	}
	var errs []error
	names, counts := dnszone.Summarize(records, waiting, func(name string) int32 {
		n, err := r.othersClaiming(ctx, cr, name, records)
		errs = append(errs, err)
		return n
	})
	for _, err := range errs {
		if err != nil {
			return nil, v1alpha1.DNSNameCounts{}, err
		}
	}
	return names, counts, nil
}

// othersClaiming counts the rings that claim name, through any zone, and
// do not own it (dnszone.Waiting).
func (r *ZoneReconciler) othersClaiming(ctx context.Context, cr *claimReader, name string, records []dnszone.Record) (int32, error) {
	list := &v1alpha1.ECHKeyRingList{}
	if err := r.List(ctx, list, client.MatchingFields{NameIndex: name}); err != nil {
		return 0, err
	}
	var rec *dnszone.Record
	for i := range records {
		if records[i].Name == name {
			rec = &records[i]
		}
	}
	rings := make([]dnszone.Claimant, 0, len(list.Items))
	for i := range list.Items {
		c, err := cr.claimant(ctx, name, &list.Items[i])
		if err != nil {
			return 0, err
		}
		rings = append(rings, c)
	}
	return dnszone.Waiting(rec, rings), nil
}
