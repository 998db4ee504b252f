package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	"github.com/ringmaster-io/ringmaster/internal/controller/watch"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
)

// orphansDeletedTotal counts the Secrets of ringmaster's that no live ring
// controlled and that the orphan controller destroyed. Labels: component
// ("snapshot" or "projection"), reason ("expired": the expiresAt of a key
// it held passed, or it held no key a reader accepts; "superseded": a
// ring of its name took its place).
var orphansDeletedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "ringmaster_orphaned_secrets_deleted_total",
	Help: "Snapshot and projection Secrets that no live ring controlled (an orphan delete, a ring removed while the operator was down), destroyed when a key they held expired or when a ring of their name took their place.",
}, []string{"component", "reason"})

// OrphanReconciler destroys the Secrets of ringmaster's that no live ring
// controls (distribute.OrphanOf): what `kubectl delete --cascade=orphan`
// leaves once the garbage collector has stripped the owner references, and
// what a ring removed while the operator was down leaves to the garbage
// collector. A ring being deleted still controls its Secrets until it
// goes: it prunes them itself. Each goes no later than the expiresAt of
// the first key it holds to expire (a live ring would rewrite or delete it
// then), and at once when a ring of its kind and name lives again (which
// takes its place: see distribute.Owner.Predecessor). Only the operator
// may write such Secrets where the admission guard is installed, so they
// are its to remove.
//
// It reads them from the manager's cache, which keeps only their metadata
// once no ring controls them (CacheOptions); their expiry comes from
// v1alpha1.ExpiresAtAnnotation, read with a metadata-only GET, and, for a
// Secret written before that annotation existed, from its ring file, read
// once through the API reader and dropped.
type OrphanReconciler struct {
	client.Client
	// APIReader reads around the cache: the ring (which may be newer than
	// the cache), the Secret's annotations and, as a last resort, its data.
	APIReader client.Reader
	Clock     clock.PassiveClock
	// Namespace is the operator's: where cluster rings' snapshots live.
	Namespace string
}

// SetupWithManager watches ringmaster's Secrets (the manager's cache holds
// only those of its type) and the rings of every kind: a ring created, of
// which deletion starts, or deleted re-judges the Secrets that name it.
func (r *OrphanReconciler) SetupWithManager(mgr manager.Manager, registry prometheus.Registerer) error {
	if err := registry.Register(orphansDeletedTotal); err != nil && !errors.As(err, &prometheus.AlreadyRegisteredError{}) {
		return err
	}
	createdOrDeleted := builder.WithPredicates(predicate.Funcs{
		UpdateFunc:  watch.DeletionChanged().Update,
		GenericFunc: func(event.GenericEvent) bool { return false },
	})
	return builder.ControllerManagedBy(mgr).Named("orphans").
		For(&corev1.Secret{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			_, _, ok := distribute.RingOf(o)
			return ok
		}))).
		Watches(&v1alpha1.TicketKeyRing{}, handler.EnqueueRequestsFromMapFunc(r.secretsOf(v1alpha1.KindTicketKeyRing)), createdOrDeleted).
		Watches(&v1alpha1.ClusterTicketKeyRing{}, handler.EnqueueRequestsFromMapFunc(r.secretsOf(v1alpha1.KindClusterTicketKeyRing)), createdOrDeleted).
		Watches(&v1alpha1.ECHKeyRing{}, handler.EnqueueRequestsFromMapFunc(r.secretsOf(v1alpha1.KindECHKeyRing)), createdOrDeleted).
		Complete(r)
}

// secretsOf maps a ring created or deleted to the Secrets labelled as a
// ring's of its kind and name, from the cache.
func (r *OrphanReconciler) secretsOf(kind string) handler.MapFunc {
	return func(ctx context.Context, ring client.Object) []reconcile.Request {
		label := map[string]string{
			v1alpha1.KindTicketKeyRing: v1alpha1.RingLabel, v1alpha1.KindClusterTicketKeyRing: v1alpha1.ClusterRingLabel, v1alpha1.KindECHKeyRing: v1alpha1.ECHRingLabel,
		}[kind]
		opts := []client.ListOption{client.MatchingLabels{label: ring.GetName()}}
		if ring.GetNamespace() != "" {
			opts = append(opts, client.InNamespace(ring.GetNamespace()))
		}
		list := &corev1.SecretList{}
		if err := r.List(ctx, list, opts...); err != nil {
			return nil // a cache read: it fails only when shutting down
		}
		out := make([]reconcile.Request, 0, len(list.Items))
		for _, s := range list.Items {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&s)})
		}
		return out
	}
}

// Reconcile judges one Secret, and destroys it when its time has come.
func (r *OrphanReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	s := &corev1.Secret{}
	if err := r.Get(ctx, req.NamespacedName, s); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	orphan, ok, err := r.judge(ctx, s)
	if err != nil || !ok {
		return reconcile.Result{}, err
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("secret", klog.KObj(s), "ring", orphan.Ring.String(), "kind", orphan.Kind))
	now := r.Clock.Now()
	expiry, err := r.expiry(ctx, s, orphan)
	if err != nil {
		return reconcile.Result{}, err
	}
	if deadline := orphan.Deadline(expiry, now); deadline.After(now) {
		return reconcile.Result{RequeueAfter: deadline.Sub(now)}, nil
	}
	return reconcile.Result{}, r.destroy(ctx, s, orphan, expiry)
}

// judge says whether s is an orphan: a Secret of ringmaster's that no
// live ring controls (distribute.OrphanOf). The cache's ring is read
// first; then, for a Secret that looks orphaned, the API server's, so
// that a ring the cache has not seen yet keeps its Secrets.
func (r *OrphanReconciler) judge(ctx context.Context, s *corev1.Secret) (distribute.Orphan, bool, error) {
	if !s.DeletionTimestamp.IsZero() {
		return distribute.Orphan{}, false, nil
	}
	claim, ok := distribute.ClaimOf(s, r.Namespace)
	if !ok {
		return distribute.Orphan{}, false, nil // not ringmaster's: never touched
	}
	live, err := r.liveRing(ctx, false, claim)
	if err != nil {
		return distribute.Orphan{}, false, err
	}
	if _, ok := distribute.OrphanOf(s, r.Namespace, live); !ok {
		return distribute.Orphan{}, false, nil
	}
	if live, err = r.liveRing(ctx, true, claim); err != nil {
		return distribute.Orphan{}, false, err
	}
	orphan, ok := distribute.OrphanOf(s, r.Namespace, live)
	return orphan, ok, nil
}

// destroy deletes an orphan whose time has come, by the UID read: a
// Secret deleted and created again meanwhile is judged again, never
// deleted by mistake.
func (r *OrphanReconciler) destroy(ctx context.Context, s *corev1.Secret, orphan distribute.Orphan, expiry time.Time) error {
	if err := r.Delete(ctx, s, client.Preconditions{UID: &s.UID}); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return fmt.Errorf("delete orphaned Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	reason := "expired"
	if orphan.Superseded {
		reason = "superseded"
	}
	orphansDeletedTotal.WithLabelValues(orphan.Component, reason).Inc()
	log.FromContext(ctx).Info("Deleted a Secret no live ring controls", "component", orphan.Component, "reason", reason, "expiresAt", expiry)
	return nil
}

// expiry is when the first key s holds expires: from its annotation, read
// with its metadata alone, or from its ring file when it has none. Zero
// means it holds no key a reader accepts. A ring created again takes the
// Secret's place whatever its keys, so nothing is read for it.
func (r *OrphanReconciler) expiry(ctx context.Context, s *corev1.Secret, o distribute.Orphan) (time.Time, error) {
	if o.Superseded {
		return time.Time{}, nil
	}
	if t, ok := distribute.AnnotatedExpiry(s); ok {
		return t, nil // kept whole in the cache: a deleted ring's Secret, or one in the operator's namespace
	}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s), meta); err != nil {
		return time.Time{}, client.IgnoreNotFound(err)
	}
	if meta.UID != s.UID {
		return time.Time{}, fmt.Errorf("secret %s/%s was replaced while it was judged", s.Namespace, s.Name)
	}
	if t, ok := distribute.AnnotatedExpiry(meta); ok {
		return t, nil
	}
	// Written before the annotation: its keys say when.
	whole := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s), whole); err != nil {
		return time.Time{}, client.IgnoreNotFound(err)
	}
	t, err := distribute.DataExpiry(whole)
	clear(whole.Data)
	if err != nil {
		log.FromContext(ctx).Info("An orphaned Secret holds no ring a reader accepts; deleting it", "error", err.Error())
		return time.Time{}, nil
	}
	return t, nil
}

// liveRing is the ring a claim names, read from the cache, or from the API
// server when fresh; its UID is empty when there is none.
func (r *OrphanReconciler) liveRing(ctx context.Context, fresh bool, c distribute.Claim) (distribute.Live, error) {
	var ring client.Object
	switch c.Kind {
	case v1alpha1.KindTicketKeyRing:
		ring = &v1alpha1.TicketKeyRing{}
	case v1alpha1.KindClusterTicketKeyRing:
		ring = &v1alpha1.ClusterTicketKeyRing{}
	case v1alpha1.KindECHKeyRing:
		ring = &v1alpha1.ECHKeyRing{}
	default:
		return distribute.Live{}, fmt.Errorf("unknown ring kind %q", c.Kind)
	}
	var reader client.Reader = r.Client
	if fresh {
		// Metadata alone: a ring's spec and status are not needed here.
		meta := &metav1.PartialObjectMetadata{}
		meta.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(c.Kind))
		ring, reader = meta, r.APIReader
	}
	if err := reader.Get(ctx, c.Ring, ring); err != nil {
		if apierrors.IsNotFound(err) {
			return distribute.Live{}, nil
		}
		return distribute.Live{}, fmt.Errorf("read %s %s: %w", c.Kind, c.Ring, err)
	}
	return distribute.Live{UID: ring.GetUID(), Deleting: !ring.GetDeletionTimestamp().IsZero()}, nil
}
