package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/controller/apply"
	"github.com/ringmaster-io/ringmaster/internal/controller/watch"
	"github.com/ringmaster-io/ringmaster/internal/fleet"
	"github.com/ringmaster-io/ringmaster/internal/shape"
)

// +kubebuilder:rbac:groups=ringmaster.io,resources=fleetrequests,verbs=get;list;watch
// +kubebuilder:rbac:groups=ringmaster.io,resources=fleetrequests/status,verbs=patch

// FleetPoll is how often an incomplete FleetRequest's progress is read
// again from its rings' statuses, per thousand rings selected (at least
// once a second, at most every ten): one status write at most per poll,
// and a read of every ring that grows no more often than the rings. The
// times it reports are the rings' own, not the poll's.
const FleetPoll = time.Second

// fleetPoll is the poll of a request that selects n rings.
func fleetPoll(n int32) time.Duration {
	return min(max(FleetPoll, time.Duration(n)*FleetPoll/1000), 10*FleetPoll)
}

// FleetRequestReconciler reports how far each FleetRequest got, from the
// statuses of the rings it selects, as the cache holds them: it writes
// nothing but the request's own status, and one event on the request when
// it completes. The rings carry the request out in their own passes
// (rings.fleetFor).
type FleetRequestReconciler struct {
	client.Client
	Recorder events.EventRecorder
	Clock    clock.PassiveClock
}

// SetupWithManager registers the controller. Rings are not watched: an
// incomplete request polls their statuses every FleetPoll, so that a
// bulk of ten thousand ring writes costs it no more reconciles than a
// quiet second.
func (r *FleetRequestReconciler) SetupWithManager(mgr manager.Manager) error {
	return builder.ControllerManagedBy(mgr).Named("fleetrequest").
		For(&v1alpha1.FleetRequest{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(r)
}

// Reconcile computes the request's progress (fleet.Progress) and writes
// its status when it changed.
func (r *FleetRequestReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	fr := &v1alpha1.FleetRequest{}
	if err := r.Get(ctx, req.NamespacedName, fr); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if fleet.Complete(fr.Status) || !fr.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("fleetRequest", klog.KObj(fr)))
	rings, err := fleetRings(ctx, r.Client)
	if err != nil {
		return reconcile.Result{}, err
	}
	now := r.Clock.Now()
	var next v1alpha1.FleetRequestStatus
	if msg := shape.SpecCut(fr); msg != "" {
		next = fleet.Progress(fr, fr.Status, nil, now)
		next.Conditions[0].Reason, next.Conditions[0].Message = v1alpha1.ReasonInvalidSpec, msg
	} else {
		next = fleet.Progress(fr, fr.Status, rings, now)
	}
	if err := apply.Status(ctx, r.Client, fr, fr.Status, next); err != nil {
		return apply.Result(reconcile.Result{}, err)
	}
	if !fleet.Complete(next) {
		return reconcile.Result{RequeueAfter: fleetPoll(next.Selected)}, nil
	}
	took := next.LastPodConfirmedAt.Sub(next.StartedAt.Time).Round(time.Second)
	r.Recorder.Eventf(fr, nil, corev1.EventTypeNormal, v1alpha1.ReasonCompleted, string(fr.Spec.Action),
		"%s of %d rings complete in %s: %d served, %d of %d pods confirmed", fr.Spec.Action, next.Selected, took, next.Served, next.PodsConfirmed, next.PodsTotal)
	log.FromContext(ctx).Info("Completed fleet request", "selected", next.Selected, "served", next.Served)
	return reconcile.Result{}, nil
}

// fleetRings are the rings of every kind a FleetRequest can select, with
// what selects them and their statuses, from the cache. They are the
// cache's own objects, not copies (an incomplete request reads them every
// FleetPoll, ten thousand rings and more): nothing may change them.
func fleetRings(ctx context.Context, c client.Reader) ([]fleet.RingState, error) {
	namespaces := &corev1.NamespaceList{}
	if err := c.List(ctx, namespaces, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	nsByName := make(map[string]*corev1.Namespace, len(namespaces.Items))
	for i := range namespaces.Items {
		nsByName[namespaces.Items[i].Name] = &namespaces.Items[i]
	}
	tkrs := &v1alpha1.TicketKeyRingList{}
	if err := c.List(ctx, tkrs, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list ticket key rings: %w", err)
	}
	ctkrs := &v1alpha1.ClusterTicketKeyRingList{}
	if err := c.List(ctx, ctkrs, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list cluster ticket key rings: %w", err)
	}
	out := make([]fleet.RingState, 0, len(tkrs.Items)+len(ctkrs.Items))
	for i := range tkrs.Items {
		x := &tkrs.Items[i]
		out = append(out, fleet.RingState{Ring: fleetRing(x, v1alpha1.KindTicketKeyRing, x.Spec.SourceRef, nsByName[x.Namespace]),
			Status: x.Status, Confirms: x.Spec.Confirmation != nil})
	}
	for i := range ctkrs.Items {
		x := &ctkrs.Items[i]
		out = append(out, fleet.RingState{Ring: fleetRing(x, v1alpha1.KindClusterTicketKeyRing, x.Spec.SourceRef, nil),
			Status: x.Status, Confirms: x.Spec.Confirmation != nil})
	}
	return out, nil
}

// fleetRing is what a FleetRequest's selection reads of a ring; ns is a
// namespaced ring's namespace, as the cache holds it (nil when it is not
// there: no namespace selector then selects the ring).
func fleetRing(obj client.Object, kind string, src *v1alpha1.KeySourceReference, ns *corev1.Namespace) fleet.Ring {
	r := fleet.Ring{Kind: v1alpha1.RingKind(kind), Namespace: obj.GetNamespace(), Name: obj.GetName(), Created: obj.GetCreationTimestamp().Time,
		Labels: obj.GetLabels(), LabelsCut: shape.WasCut(obj, shape.CutLabels)}
	if src != nil {
		r.KeySource = src.Name
	}
	if ns != nil {
		r.NamespaceLabels, r.NamespaceCut = ns.Labels, shape.WasCut(ns, shape.CutLabels)
	}
	return r
}

// fleetFor is the FleetRequest the ring carries out in this pass
// (fleet.Next), as it records it; nil for none. The requests and the
// ring's namespace are read from the cache.
func (r *rings) fleetFor(ctx context.Context, rg ring) *v1alpha1.FleetRequestRecord {
	list := &v1alpha1.FleetRequestList{}
	if err := r.List(ctx, list); err != nil || len(list.Items) == 0 {
		return nil // a cache read: it fails only when shutting down
	}
	var ns *corev1.Namespace
	if rg.namespace != "" {
		ns = &corev1.Namespace{}
		if err := r.Get(ctx, types.NamespacedName{Name: rg.namespace}, ns); err != nil {
			ns = nil
		}
	}
	reqs := make([]*v1alpha1.FleetRequest, len(list.Items))
	for i := range list.Items {
		reqs[i] = &list.Items[i]
	}
	next := fleet.Next(reqs, fleetRing(rg.obj, rg.owner.Kind, rg.spec.SourceRef, ns), rg.status.FleetRequest)
	if next == nil {
		return nil
	}
	rec := fleet.Record(next)
	return &rec
}

// ringsOfFleetRequest maps a FleetRequest to the rings of one kind it
// selects, so that each carries it out; the handler enqueues them at
// watch.Bulk, behind new rings and tenants' own requests.
func ringsOfFleetRequest(c client.Reader, kind string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		fr, ok := o.(*v1alpha1.FleetRequest)
		if !ok || fleet.Complete(fr.Status) || !fr.DeletionTimestamp.IsZero() {
			return nil
		}
		rings, err := fleetRings(ctx, c)
		if err != nil {
			return nil // a cache read: it fails only when shutting down
		}
		var out []reconcile.Request
		sel := fleet.Compile(fr)
		for _, rs := range rings {
			if string(rs.Kind) != kind || fleet.Done(fr, rs.Status.FleetRequest) {
				continue
			}
			if ok, _ := sel.Selects(rs.Ring); ok {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: rs.Namespace, Name: rs.Name}})
			}
		}
		return out
	}
}

// fleetWatch is the watch of FleetRequests a ring controller of kind
// keeps: a request created enqueues the rings it selects, at watch.Bulk.
func fleetWatch(c client.Reader, kind string) handler.EventHandler {
	return watch.AtPriority(watch.Bulk, handler.EnqueueRequestsFromMapFunc(ringsOfFleetRequest(c, kind)))
}
