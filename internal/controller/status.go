package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// FieldOwner is the field manager of everything ringmaster writes by
// server-side apply: the status of every kind it reconciles.
const FieldOwner = "ringmaster"

// applyStatus writes obj's status as next by server-side apply, owning the
// whole status, and only when next differs from old: one write per
// reconcile at most, none when nothing changed. Fields ringmaster no longer
// sets are removed, as an apply of the whole status removes them. The apply
// carries the resourceVersion the status was computed from: a reconcile
// that read a stale object fails with a conflict and runs again on a fresh
// one, rather than write back what another reconcile already changed.
func applyStatus[S any](ctx context.Context, c client.Client, obj client.Object, old, next S) error {
	if !statusChanged(old, next) {
		return nil
	}
	status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&next)
	if err != nil {
		return fmt.Errorf("write status: %w", err)
	}
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil {
		return fmt.Errorf("write status: %w", err)
	}
	meta := map[string]any{"name": obj.GetName(), "resourceVersion": obj.GetResourceVersion()}
	if ns := obj.GetNamespace(); ns != "" {
		meta["namespace"] = ns
	}
	u := &unstructured.Unstructured{Object: map[string]any{"metadata": meta, "status": status}}
	u.SetGroupVersionKind(gvk)
	if err := c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		if apierrors.IsConflict(err) {
			// Someone edited the object since it was read: expected, and
			// no failure. The reconcile runs again on the fresh object.
			log.FromContext(ctx).V(1).Info("Status not written: the object changed since it was read; reconciling again", "resourceVersion", obj.GetResourceVersion())
			return errStaleStatus
		}
		return client.IgnoreNotFound(fmt.Errorf("write status: %w", err))
	}
	return nil
}

// applyRingStatus is applyStatus for a ring, whose status records what a
// pass did once (an epoch published, a config published unconfirmed):
// when the object changed since it was read but its status did not (an
// annotation, a finalizer), the status is applied to the object as it is
// now, rather than lost to a requeue that would compute it again without
// what the pass did. reader reads around the cache.
func applyRingStatus[S any, O client.Object](ctx context.Context, c client.Client, reader client.Reader, obj O, old, next S, statusOf func(O) S) error {
	err := applyStatus(ctx, c, obj, old, next)
	if !errors.Is(err, errStaleStatus) {
		return err
	}
	fresh, ok := obj.DeepCopyObject().(O)
	if !ok {
		return err
	}
	if rerr := reader.Get(ctx, client.ObjectKeyFromObject(obj), fresh); rerr != nil || statusChanged(old, statusOf(fresh)) {
		return err
	}
	return applyStatus(ctx, c, fresh, old, next)
}

// errStaleStatus is applyStatus's answer when the object changed since it
// was read. result turns it into a requeue, not an error: a concurrent
// edit (a user's, another operator's during a leader handover) is part of
// normal operation, and the work queue would count and log it as a
// reconciler error.
var errStaleStatus = errors.New("status computed from a stale object")

// staleRetry is how soon a reconcile whose status write met a concurrent
// edit runs again: the cache holds the edit by then, as a rule.
const staleRetry = 100 * time.Millisecond

// onlyStale reports whether err is errStaleStatus and nothing else, alone
// or joined.
func onlyStale(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !onlyStale(e) {
				return false
			}
		}
		return len(j.Unwrap()) > 0
	}
	return errors.Is(err, errStaleStatus)
}

// statusChanged reports whether a status must be written.
func statusChanged[S any](old, next S) bool { return !equality.Semantic.DeepEqual(old, next) }

// result is what a Reconcile returns: the error alone when there is one, for
// the work queue then retries with backoff and ignores any requeue time.
// A status write that met a concurrent edit, and nothing else, is a
// requeue (errStaleStatus).
func result(res reconcile.Result, err error) (reconcile.Result, error) {
	if err != nil && onlyStale(err) {
		return reconcile.Result{RequeueAfter: staleRetry}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	return res, nil
}

// statusMemory holds the status the operator last wrote of each ring until
// the cache shows it. A reconcile started by the watch events of the
// operator's own writes often reads the ring from a cache that has not yet
// seen the status just written: it would plan from the status before (an
// epoch behind, a request not yet echoed), compute the written status
// again with new transition times, and have its apply refused for the
// stale resourceVersion. Starting from the written status instead, it
// finds nothing to write. Only the operator writes a ring's status, so a
// cached status other than the one written is one the cache has not caught
// up with. An entry lives from a write until the cache shows it (the
// cache's update event ends it, forgetShown), or the ring is gone: what it
// holds grows with the rings in flight, not with all of them.
type statusMemory[S any] struct {
	mu      sync.Mutex
	written map[types.NamespacedName]writtenStatus[S]
}

type writtenStatus[S any] struct {
	uid    types.UID
	status S
}

// base is the status a reconcile of obj starts from: the one last written,
// while the cache's (cached) differs from it; else the cache's.
func (m *statusMemory[S]) base(obj client.Object, cached S) S {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := client.ObjectKeyFromObject(obj)
	w, ok := m.written[key]
	switch {
	case !ok:
		return cached
	case w.shown(obj, cached):
		delete(m.written, key)
		return cached
	}
	return w.status
}

// shown reports whether the cache's copy of obj, with status cached, ends
// the entry: it shows the status written, or is another ring of the name.
func (w writtenStatus[S]) shown(obj client.Object, cached S) bool {
	return w.uid != obj.GetUID() || !statusChanged(w.status, cached)
}

// wrote records a status written of obj, as the API server stores it:
// through JSON, which keeps times to the second. A status it cannot
// record so is forgotten.
func (m *statusMemory[S]) wrote(obj client.Object, status S) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := client.ObjectKeyFromObject(obj)
	var stored S
	b, err := json.Marshal(status)
	if err == nil {
		err = json.Unmarshal(b, &stored)
	}
	if err != nil {
		delete(m.written, key)
		return
	}
	if m.written == nil {
		m.written = map[types.NamespacedName]writtenStatus[S]{}
	}
	m.written[key] = writtenStatus[S]{uid: obj.GetUID(), status: stored}
}

// shown drops obj's entry once the cache shows the status written
// (cached), or shows another ring of the name.
func (m *statusMemory[S]) shown(obj client.Object, cached S) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := client.ObjectKeyFromObject(obj)
	if w, ok := m.written[key]; ok && w.shown(obj, cached) {
		delete(m.written, key)
	}
}

// forgetShown is the event handler, on the ring kind's informer, that
// ends an entry as soon as the cache shows its status. Without it the
// entry would wait for the ring's next reconcile, which for a settled
// ring is its next rotation, hours away: at 10,000 rings, 14 MB of
// statuses the cache already holds. It enqueues nothing.
func (m *statusMemory[S]) forgetShown(statusOf func(client.Object) (S, bool)) handler.EventHandler {
	return handler.Funcs{UpdateFunc: func(_ context.Context, e event.UpdateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if status, ok := statusOf(e.ObjectNew); ok {
			m.shown(e.ObjectNew, status)
		}
	}}
}

// forget drops a ring that is gone.
func (m *statusMemory[S]) forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.written, key)
}

// applyRememberedStatus is applyRingStatus from the status a reconcile
// started from (statusMemory.base), recording what it wrote.
func applyRememberedStatus[S any, O client.Object](ctx context.Context, c client.Client, reader client.Reader, m *statusMemory[S], obj O, base, next S, statusOf func(O) S) error {
	if !statusChanged(base, next) {
		return nil
	}
	err := applyRingStatus(ctx, c, reader, obj, base, next, statusOf)
	if err == nil {
		m.wrote(obj, next)
	}
	return err
}
