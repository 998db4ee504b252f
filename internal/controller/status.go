package controller

import (
	"context"
	"errors"

	"github.com/ringmaster-io/ringmaster/internal/controller/apply"
	"github.com/ringmaster-io/ringmaster/internal/written"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// applyRingStatus is applyStatus for a ring, whose status records what a
// pass did once (an epoch published, a config published unconfirmed):
// when the object changed since it was read but its status did not (an
// annotation, a finalizer), the status is applied to the object as it is
// now, rather than lost to a requeue that would compute it again without
// what the pass did. reader reads around the cache.
func applyRingStatus[S any, O client.Object](ctx context.Context, c client.Client, reader client.Reader, obj O, old, next S, statusOf func(O) S) error {
	err := apply.Status(ctx, c, obj, old, next)
	if !errors.Is(err, apply.ErrStale) {
		return err
	}
	fresh, ok := obj.DeepCopyObject().(O)
	if !ok {
		return err
	}
	if rerr := reader.Get(ctx, client.ObjectKeyFromObject(obj), fresh); rerr != nil || apply.Changed(old, statusOf(fresh)) {
		return err
	}
	return apply.Status(ctx, c, fresh, old, next)
}

// forgetShown is the event handler, on a ring kind's informer, that ends
// an entry of m as soon as the cache shows its status
// (written.Statuses.Shown). Without it the entry would wait for the
// ring's next reconcile, which for a settled ring is its next rotation,
// hours away: at 10,000 rings, 14 MB of statuses the cache already holds.
// It enqueues nothing.
func forgetShown[S any](m *written.Statuses[S], statusOf func(client.Object) (S, bool)) handler.EventHandler {
	return handler.Funcs{UpdateFunc: func(_ context.Context, e event.UpdateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if status, ok := statusOf(e.ObjectNew); ok {
			m.Shown(e.ObjectNew, status)
		}
	}}
}

// applyRememberedStatus is applyRingStatus from the status a reconcile
// started from (statusMemory.base), recording what it wrote.
func applyRememberedStatus[S any, O client.Object](ctx context.Context, c client.Client, reader client.Reader, m *written.Statuses[S], obj O, base, next S, statusOf func(O) S) error {
	if !apply.Changed(base, next) {
		return nil
	}
	err := applyRingStatus(ctx, c, reader, obj, base, next, statusOf)
	if err == nil {
		m.Wrote(obj, next)
	}
	return err
}
