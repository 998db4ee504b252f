// Package apply is how every controller of the operator tells what it
// found: a status written once per reconcile by server-side apply, and
// only when it changed (Status); what a Reconcile returns of it (Result);
// and events that fit the API whatever they say (Recorder, Emit).
package apply

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// FieldOwner is the field manager of everything ringmaster writes by
// server-side apply: the status of every kind it reconciles.
const FieldOwner = "ringmaster"

// Status writes obj's status as next by server-side apply, owning the
// whole status, and only when next differs from old: one write per
// reconcile at most, none when nothing changed. Fields ringmaster no longer
// sets are removed, as an apply of the whole status removes them. The apply
// carries the resourceVersion the status was computed from: a reconcile
// that read a stale object fails with a conflict and runs again on a fresh
// one, rather than write back what another reconcile already changed.
func Status[S any](ctx context.Context, c client.Client, obj client.Object, old, next S) error {
	if !Changed(old, next) {
		return nil
	}
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil {
		return fmt.Errorf("write status: %w", err)
	}
	// The typed status marshalled as it is (no unstructured copy of it),
	// and the server's answer decoded into a scratch object of the kind,
	// not into obj: a status write is most of what a rotation allocates.
	body, err := json.Marshal(applied[S]{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind,
		Metadata: appliedMeta{Name: obj.GetName(), Namespace: obj.GetNamespace(), ResourceVersion: obj.GetResourceVersion()}, Status: next})
	if err != nil {
		return fmt.Errorf("write status: %w", err)
	}
	scratch, err := c.Scheme().New(gvk)
	if err != nil {
		return fmt.Errorf("write status: %w", err)
	}
	into, ok := scratch.(client.Object)
	if !ok {
		return fmt.Errorf("write status: %s is not an object", gvk)
	}
	into.SetName(obj.GetName())
	into.SetNamespace(obj.GetNamespace())
	if err := c.Status().Patch(ctx, into, client.RawPatch(types.ApplyPatchType, body), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		if apierrors.IsConflict(err) {
			// Someone edited the object since it was read: expected, and
			// no failure. The reconcile runs again on the fresh object.
			log.FromContext(ctx).V(1).Info("Status not written: the object changed since it was read; reconciling again", "resourceVersion", obj.GetResourceVersion())
			return ErrStale
		}
		return client.IgnoreNotFound(fmt.Errorf("write status: %w", err))
	}
	return nil
}

// applied is the body of a status apply: the object's identity, the
// resourceVersion the status was computed from, and the status.
type applied[S any] struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"`
	Metadata   appliedMeta `json:"metadata"`
	Status     S           `json:"status"`
}

type appliedMeta struct {
	Name            string `json:"name"`
	Namespace       string `json:"namespace,omitempty"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

// ErrStale is applyStatus's answer when the object changed since it
// was read. Result turns it into a requeue, not an error: a concurrent
// edit (a user's, another operator's during a leader handover) is part of
// normal operation, and the work queue would count and log it as a
// reconciler error.
var ErrStale = errors.New("status computed from a stale object")

// StaleRetry is how soon a reconcile whose status write met a concurrent
// edit runs again: the cache holds the edit by then, as a rule.
const StaleRetry = 100 * time.Millisecond

// onlyStale reports whether err is ErrStale and nothing else, alone
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
	return errors.Is(err, ErrStale)
}

// Changed reports whether a status must be written.
func Changed[S any](old, next S) bool { return !equality.Semantic.DeepEqual(old, next) }

// Result is what a Reconcile returns: the error alone when there is one, for
// the work queue then retries with backoff and ignores any requeue time.
// A status write that met a concurrent edit, and nothing else, is a
// requeue (ErrStale).
func Result(res reconcile.Result, err error) (reconcile.Result, error) {
	if err != nil && onlyStale(err) {
		return reconcile.Result{RequeueAfter: StaleRetry}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	return res, nil
}
