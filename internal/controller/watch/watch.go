// Package watch is what a change of an object must be to start a
// reconcile, and at which priority its request is queued: the predicates
// and event handlers the operator's controllers share.
package watch

import (
	"context"
	"maps"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// LabelsChanged passes namespaces created or deleted, and those whose labels
// changed: what a namespace selector sees.
func LabelsChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels()) ||
				e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
		},
	}
}

// DeletionChanged passes an object whose deletion began.
func DeletionChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
	}}
}

// Scheduled is the work queue priority of a ring's work that nobody waits
// on: the look its RequeueAfter schedules (the next rotation, the next
// expiry), and the reconcile that the watch events of its own Secret
// writes start. A ring created, edited or annotated (rotate-now, revoke)
// is enqueued at the default priority, 0, and goes first: the priority
// queue serves higher priorities first, so no ring waits behind a bulk's
// routine work. The events of the cache's first list come at this
// priority too (controller-runtime's handler.LowPriority).
const Scheduled = handler.LowPriority

// Bulk is the work queue priority of a ring's share of a FleetRequest: a
// bulk that may hold every ring of the cluster, which yields to fresh
// work (a ring created, edited or annotated, at the default priority 0)
// so that no new ring and no tenant's own rotate-now waits behind it, and
// goes before routine work (Scheduled).
const Bulk = handler.LowPriority / 2

// AtPriority has h enqueue what it enqueues at priority p, or lower.
func AtPriority(p int, h handler.EventHandler) handler.EventHandler {
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
