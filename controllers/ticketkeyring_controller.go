// Package controllers holds one thin controller per ringmaster kind. The
// domain decisions live in internal/keyring; controllers read, call it, and
// write what it decided.
package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/mint"
)

// +kubebuilder:rbac:groups=ringmaster.io,resources=ticketkeyrings,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=ringmaster.io,resources=ticketkeyrings/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ringmaster.io,resources=ticketkeyrings/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get
// +kubebuilder:rbac:groups="",resources=serviceaccounts/token,verbs=create

// conflictRetry is how often a ring blocked by a foreign Secret looks again:
// the cache holds only ringmaster's Secrets, so the foreign one's removal
// raises no event.
const conflictRetry = time.Minute

// TicketKeyRingReconciler rotates and delivers the keys of TicketKeyRings.
type TicketKeyRingReconciler struct {
	client.Client
	// APIReader reads around the cache, which holds only ringmaster's own
	// Secrets: it tells a foreign Secret in the way from one of ours.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Clock drives rotation; tests inject a fake one.
	Clock clock.PassiveClock
	// Source returns the key source of a ring. Nil mints from crypto/rand.
	Source func(context.Context, *v1alpha1.TicketKeyRing) (mint.Source, error)
	// ForgetSource, if set, drops what Source keeps for a deleted ring (a
	// Vault client and its token).
	ForgetSource func(types.NamespacedName)

	gauges *ringGauges
}

// SetupWithManager registers the controller and its metrics.
func (r *TicketKeyRingReconciler) SetupWithManager(mgr manager.Manager, registry prometheus.Registerer) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Source == nil {
		r.Source = func(context.Context, *v1alpha1.TicketKeyRing) (mint.Source, error) { return mint.Random{}, nil }
	}
	r.gauges = newRingGauges(r.Clock)
	for _, c := range []prometheus.Collector{rotationsTotal, r.gauges} {
		if err := registry.Register(c); err != nil && !errors.As(err, &prometheus.AlreadyRegisteredError{}) {
			return err
		}
	}
	return builder.ControllerManagedBy(mgr).
		For(&v1alpha1.TicketKeyRing{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(ringOfSecret)).
		Named("ticketkeyring").
		Complete(r)
}

// ringOfSecret maps a snapshot or projection Secret, in any namespace, to its
// ring, so that a Secret deleted or edited by hand is restored.
func ringOfSecret(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[v1alpha1.RingLabel]
	if name == "" {
		return nil
	}
	ns := cmp.Or(o.GetLabels()[v1alpha1.RingNamespaceLabel], o.GetNamespace())
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
}

// Reconcile publishes the ring's next epoch when one is due and keeps every
// projection in step with the newest snapshot.
func (r *TicketKeyRingReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ring := &v1alpha1.TicketKeyRing{}
	if err := r.Get(ctx, req.NamespacedName, ring); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("ring", klog.KObj(ring)))
	if !ring.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, r.finalize(ctx, ring)
	}
	status, res, err := r.reconcile(ctx, ring)
	return res, errors.Join(err, r.writeStatus(ctx, ring, status))
}

// reconcile does one pass and returns the status to write. Problems the user
// must fix set Ready=False and return no error; problems a retry fixes
// return the error so that backoff applies.
func (r *TicketKeyRingReconciler) reconcile(ctx context.Context, ring *v1alpha1.TicketKeyRing) (v1alpha1.TicketKeyRingStatus, reconcile.Result, error) {
	status := *ring.Status.DeepCopy()
	now := r.Clock.Now()

	if err := r.syncFinalizer(ctx, ring); err != nil {
		return status, reconcile.Result{}, err
	}

	snaps, err := r.snapshots(ctx, ring)
	if err != nil {
		return status, reconcile.Result{}, err
	}
	current, stagedSince, err := readHistory(snaps)
	if err != nil {
		r.setReady(ring, &status, metav1.ConditionFalse, v1alpha1.ReasonInvalidSnapshot,
			fmt.Sprintf("%v; delete that Secret to fall back to the previous epoch", err))
		return status, reconcile.Result{}, nil
	}
	current.Name = ring.Namespace + "/" + ring.Name
	policy := policyOf(ring.Spec)
	if err := policy.Validate(); err != nil {
		r.setReady(ring, &status, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec, fmt.Sprintf("Invalid spec: %v", err))
		return status, reconcile.Result{}, nil
	}

	rotate := ring.Annotations[v1alpha1.RotateRequestedAtAnnotation]
	rotateNow := rotate != "" && rotate != status.LastRotateRequestedAt && !handled(snaps, rotate)
	plan := keyring.Next(now, policy, current, rotateNow, stagedSince)

	// Mint first: when it fails, fall back on a plan that only destroys
	// what has expired, so that forward secrecy never waits for the source.
	next, mintErr := r.mint(ctx, ring, plan)
	if mintErr != nil {
		rotationsTotal.WithLabelValues("failure").Inc()
		r.setReady(ring, &status, metav1.ConditionFalse, cmp.Or(mint.Reason(mintErr), v1alpha1.ReasonMintFailed),
			fmt.Sprintf("Minting %d key(s) failed: %v. Nothing new was published and the current keys keep serving; retrying with backoff", plan.Mint, mintErr))
		plan = plan.WithoutMint(now, current)
		next = plan.Ring
	}
	overdueSince := r.setOverdue(ring, &status, current, now, mintErr != nil)

	newest := newestSnapshot(snaps)
	if plan.Changed {
		next.Epoch = max(current.Epoch, status.Epoch) + 1
		snap, err := r.publish(ctx, ring, &status, next, plan)
		if err != nil || snap == nil {
			rotationsTotal.WithLabelValues("failure").Inc()
			return status, reconcile.Result{RequeueAfter: conflictRetry}, errors.Join(mintErr, err)
		}
		if mintErr == nil {
			rotationsTotal.WithLabelValues("success").Inc()
		}
		newest = snap
	}
	if rotateNow && mintErr == nil {
		status.LastRotateRequestedAt = rotate
	}

	conflicts, err := r.distribute(ctx, ring, newest)
	if err != nil {
		return status, reconcile.Result{}, err
	}
	if err := r.deleteStaleSnapshots(ctx, snaps, next); err != nil {
		return status, reconcile.Result{}, err
	}

	fillStatus(&status, next, distribute.SnapshotName(ring.Name, next.Epoch), now)
	if active, ok := next.Active(now); ok {
		r.gauges.set(types.NamespacedName{Namespace: ring.Namespace, Name: ring.Name}, next.Epoch, active.ActiveFrom, overdueSince)
	}
	switch {
	case mintErr != nil:
		return status, reconcile.Result{}, fmt.Errorf("mint keys: %w", mintErr)
	case len(conflicts) > 0:
		r.setReady(ring, &status, metav1.ConditionFalse, v1alpha1.ReasonSecretConflict,
			fmt.Sprintf("Secrets %s exist and are not managed by this ring; they were left untouched: rename spec.distribution.secretName or remove them", strings.Join(conflicts, ", ")))
		return status, reconcile.Result{RequeueAfter: min(conflictRetry, requeueAfter(now, plan.RequeueAt))}, nil
	}
	r.setReady(ring, &status, metav1.ConditionTrue, v1alpha1.ReasonPublished,
		fmt.Sprintf("Epoch %d is published to %d namespace(s)", next.Epoch, 1+len(ring.Spec.Distribution.Namespaces)))
	return status, reconcile.Result{RequeueAfter: requeueAfter(now, plan.RequeueAt)}, nil
}

// mint gives the plan's new keys their secrets, all or none.
func (r *TicketKeyRingReconciler) mint(ctx context.Context, ring *v1alpha1.TicketKeyRing, plan keyring.Plan) (keyring.Ring, error) {
	if plan.Mint == 0 {
		return plan.Ring, nil
	}
	src, err := r.Source(ctx, ring)
	if err != nil {
		return keyring.Ring{}, err
	}
	secrets, err := src.Mint(ctx, plan.Mint)
	if err != nil {
		return keyring.Ring{}, err
	}
	next, err := plan.Fill(secrets)
	if err != nil && ring.Spec.Source.Vault != nil {
		return keyring.Ring{}, &mint.Error{Reason: v1alpha1.ReasonVaultBadResponse, Err: err}
	}
	return next, err
}

// setOverdue reports a rotation that is due but cannot be minted: the
// newest key has activated, and no successor is staged behind it. It returns
// since when the rotation is due, or zero.
func (r *TicketKeyRingReconciler) setOverdue(ring *v1alpha1.TicketKeyRing, status *v1alpha1.TicketKeyRingStatus, current keyring.Ring, now time.Time, failed bool) (since time.Time) {
	c := metav1.Condition{Type: v1alpha1.ConditionRotationOverdue, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonOnSchedule,
		Message: "No rotation is overdue", ObservedGeneration: ring.Generation}
	if failed && len(current.Keys) > 0 && !now.Before(current.Keys[0].ActiveFrom) {
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonMintFailed
		c.Message = fmt.Sprintf("A new key has been due since %s; key %s keeps encrypting meanwhile and expired keys are still destroyed on time",
			current.Keys[0].ActiveFrom.UTC().Format(time.RFC3339), current.Keys[0].ID)
		since = current.Keys[0].ActiveFrom
	}
	meta.SetStatusCondition(&status.Conditions, c)
	return since
}

// publish creates the epoch's snapshot Secret. It returns a nil snapshot
// and no error when the user must act (a foreign Secret holds its name).
func (r *TicketKeyRingReconciler) publish(ctx context.Context, ring *v1alpha1.TicketKeyRing, status *v1alpha1.TicketKeyRingStatus, next keyring.Ring, plan keyring.Plan) (*corev1.Secret, error) {
	snap, err := distribute.Snapshot(ring, next)
	if err != nil {
		return nil, err
	}
	if !plan.RotateAt.IsZero() {
		// The record of the request travels with the epoch it caused, so that
		// a reconcile reading a ring whose status lags never handles it twice.
		snap.Annotations = map[string]string{v1alpha1.RotateRequestedAtAnnotation: ring.Annotations[v1alpha1.RotateRequestedAtAnnotation]}
	}
	if err := r.Create(ctx, snap); err != nil {
		if apierrors.IsAlreadyExists(err) {
			if foreign, ferr := r.foreign(ctx, ring, snap); ferr != nil || !foreign {
				// Ours: the cache has not seen it yet. Retry from the record.
				return nil, cmp.Or(ferr, fmt.Errorf("snapshot %s exists already; retrying", snap.Name))
			}
			r.setReady(ring, status, metav1.ConditionFalse, v1alpha1.ReasonSecretConflict,
				fmt.Sprintf("Secret %s/%s exists and is not managed by this ring; it was left untouched", snap.Namespace, snap.Name))
			return nil, nil
		}
		r.setReady(ring, status, metav1.ConditionFalse, v1alpha1.ReasonPublishFailed, fmt.Sprintf("Writing snapshot %s failed: %v", snap.Name, err))
		return nil, fmt.Errorf("write snapshot %s: %w", snap.Name, err)
	}

	desc := describe(next, plan, r.Clock.Now())
	log.FromContext(ctx).Info("Published ticket key epoch", "epoch", next.Epoch, "snapshot", snap.Name, "keys", desc)
	r.Recorder.Eventf(ring, snap, corev1.EventTypeNormal, "Rotated", "Publish", "Published epoch %d (%s): %s", next.Epoch, snap.Name, desc)
	return snap, nil
}

// distribute writes the newest snapshot's data into the projection Secret of
// every target namespace and removes copies from namespaces no longer
// targeted. It returns the Secrets it must not touch.
func (r *TicketKeyRingReconciler) distribute(ctx context.Context, ring *v1alpha1.TicketKeyRing, snap *corev1.Secret) (conflicts []string, err error) {
	targets := append([]string{ring.Namespace}, ring.Spec.Distribution.Namespaces...)
	for _, ns := range targets {
		if snap == nil {
			break
		}
		want := distribute.Projection(ring, snap, ns)
		conflict, err := r.project(ctx, ring, want)
		if err != nil {
			return nil, fmt.Errorf("write projection %s/%s: %w", want.Namespace, want.Name, err)
		}
		if conflict {
			conflicts = append(conflicts, want.Namespace+"/"+want.Name)
		}
	}

	copies := &corev1.SecretList{}
	if err := r.List(ctx, copies, client.MatchingLabels(distribute.ProjectionLabels(ring))); err != nil {
		return nil, fmt.Errorf("list projections: %w", err)
	}
	for i := range copies.Items {
		c := &copies.Items[i]
		if slices.Contains(targets, c.Namespace) && c.Name == ring.ProjectionSecretName() {
			continue
		}
		if err := r.Delete(ctx, c); client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("delete projection %s/%s: %w", c.Namespace, c.Name, err)
		}
		log.FromContext(ctx).Info("Deleted projection no longer targeted", "secret", klog.KObj(c))
	}
	return conflicts, nil
}

// project creates or updates one projection Secret. It reports a conflict,
// and writes nothing, when the Secret exists and is not this ring's.
func (r *TicketKeyRingReconciler) project(ctx context.Context, ring *v1alpha1.TicketKeyRing, want *corev1.Secret) (conflict bool, err error) {
	have := &corev1.Secret{}
	err = r.Get(ctx, client.ObjectKeyFromObject(want), have)
	if apierrors.IsNotFound(err) {
		err = r.Create(ctx, want)
		if !apierrors.IsAlreadyExists(err) {
			return false, err
		}
		// Not in our cache yet exists: a foreign Secret, or ours with its
		// labels edited away.
		if err = r.APIReader.Get(ctx, client.ObjectKeyFromObject(want), have); err != nil {
			return false, err
		}
	} else if err != nil {
		return false, err
	}
	if !ownsProjection(ring, have) {
		return true, nil
	}
	if distribute.InSync(have, want) {
		return false, nil
	}
	if have.Type != want.Type {
		return false, r.Delete(ctx, have) // the type is immutable: recreate it next pass
	}
	// Same epoch yet out of sync: someone edited it. A new epoch is routine.
	edited := have.Annotations[v1alpha1.EpochAnnotation] == want.Annotations[v1alpha1.EpochAnnotation]
	have.Labels, have.Data = want.Labels, want.Data
	have.Annotations = labels.Merge(have.Annotations, want.Annotations)
	if err := r.Update(ctx, have); err != nil {
		return false, err
	}
	if edited {
		log.FromContext(ctx).Info("Restored projection edited by hand", "secret", klog.KObj(have), "epoch", want.Annotations[v1alpha1.EpochAnnotation])
	}
	return false, nil
}

// ownsProjection: in the ring's namespace, ownership is the controller
// reference; elsewhere, where references cannot point, it is the labels.
func ownsProjection(ring *v1alpha1.TicketKeyRing, s *corev1.Secret) bool {
	if s.Namespace == ring.Namespace {
		return metav1.IsControlledBy(s, ring)
	}
	l := s.Labels
	return l[v1alpha1.RingLabel] == ring.Name && l[v1alpha1.RingNamespaceLabel] == ring.Namespace &&
		l[v1alpha1.ComponentLabel] == v1alpha1.ComponentProjection
}

// foreign reports whether the Secret named like s, which exists, is not
// controlled by ring.
func (r *TicketKeyRingReconciler) foreign(ctx context.Context, ring *v1alpha1.TicketKeyRing, s *corev1.Secret) (bool, error) {
	have := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s), have); err != nil {
		return false, err
	}
	return !metav1.IsControlledBy(have, ring), nil
}

// snapshots lists and decodes the ring's snapshot Secrets, newest epoch
// first.
func (r *TicketKeyRingReconciler) snapshots(ctx context.Context, ring *v1alpha1.TicketKeyRing) ([]snapshot, error) {
	// Read around the cache: the record must be current, or a reconcile that
	// follows a publish too closely would plan from the epoch before it.
	list := &corev1.SecretList{}
	if err := r.APIReader.List(ctx, list, client.InNamespace(ring.Namespace), client.MatchingLabels{
		v1alpha1.RingLabel: ring.Name, v1alpha1.ComponentLabel: v1alpha1.ComponentSnapshot,
	}); err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	var snaps []snapshot
	for i := range list.Items {
		if s := &list.Items[i]; metav1.IsControlledBy(s, ring) && s.DeletionTimestamp.IsZero() {
			r, err := distribute.ReadSnapshot(s)
			snaps = append(snaps, snapshot{secret: s, ring: r, err: err})
		}
	}
	slices.SortFunc(snaps, func(a, b snapshot) int {
		return cmp.Compare(distribute.SnapshotEpoch(b.secret), distribute.SnapshotEpoch(a.secret))
	})
	return snaps, nil
}

// snapshot is one snapshot Secret and the ring it holds, decoded once per
// reconcile.
type snapshot struct {
	secret *corev1.Secret
	ring   keyring.Ring
	err    error // the Secret cannot be read
}

// handled reports whether a snapshot records the rotate-now request.
func handled(snaps []snapshot, request string) bool {
	return slices.ContainsFunc(snaps, func(s snapshot) bool {
		return s.secret.Annotations[v1alpha1.RotateRequestedAtAnnotation] == request
	})
}

// readHistory returns the newest snapshot's ring, the ring's current state,
// and learns from all of them when each key was first published: the start
// of its time as a staged key.
func readHistory(snaps []snapshot) (keyring.Ring, func(string) (time.Time, bool), error) {
	first := map[string]time.Time{}
	stagedSince := func(id string) (time.Time, bool) { t, ok := first[id]; return t, ok }
	if len(snaps) == 0 {
		return keyring.Ring{}, stagedSince, nil
	}
	if snaps[0].err != nil {
		return keyring.Ring{}, nil, snaps[0].err
	}
	for _, s := range snaps {
		if s.err != nil {
			continue // an older record unreadable: it only loses history
		}
		for _, k := range s.ring.Keys {
			if t, ok := first[k.ID]; !ok || s.ring.IssuedAt.Before(t) {
				first[k.ID] = s.ring.IssuedAt
			}
		}
	}
	return snaps[0].ring, stagedSince, nil
}

// deleteStaleSnapshots destroys every older snapshot that holds a key the
// newest ring no longer has, which is to say an expired key: forward secrecy
// needs the bytes gone, not only unused. Unreadable old snapshots go too.
func (r *TicketKeyRingReconciler) deleteStaleSnapshots(ctx context.Context, snaps []snapshot, newest keyring.Ring) error {
	for _, s := range snaps {
		if distribute.SnapshotEpoch(s.secret) >= newest.Epoch {
			continue
		}
		stale := s.err != nil || slices.ContainsFunc(s.ring.Keys, func(k keyring.Key) bool {
			_, ok := newest.Key(k.ID)
			return !ok
		})
		if !stale {
			continue
		}
		if err := r.Delete(ctx, s.secret, client.Preconditions{UID: &s.secret.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete snapshot %s: %w", s.secret.Name, err)
		}
		log.FromContext(ctx).Info("Deleted snapshot holding expired keys", "snapshot", s.secret.Name)
	}
	return nil
}

// syncFinalizer holds the cleanup finalizer exactly while copies may exist
// outside the ring's namespace, the only state owner references cannot
// clean up.
func (r *TicketKeyRingReconciler) syncFinalizer(ctx context.Context, ring *v1alpha1.TicketKeyRing) error {
	want := len(ring.Spec.Distribution.Namespaces) > 0
	if want == controllerutil.ContainsFinalizer(ring, v1alpha1.CleanupFinalizer) {
		return nil
	}
	if !want {
		foreign, err := r.foreignCopies(ctx, ring)
		if err != nil || len(foreign) > 0 {
			return err // removed after distribute prunes them
		}
	}
	patch := client.MergeFrom(ring.DeepCopy())
	if want {
		controllerutil.AddFinalizer(ring, v1alpha1.CleanupFinalizer)
	} else {
		controllerutil.RemoveFinalizer(ring, v1alpha1.CleanupFinalizer)
	}
	return r.Patch(ctx, ring, patch)
}

// finalize removes the projection copies in other namespaces, then lets the
// ring go. Everything in its own namespace is garbage collected.
func (r *TicketKeyRingReconciler) finalize(ctx context.Context, ring *v1alpha1.TicketKeyRing) error {
	r.forget(types.NamespacedName{Namespace: ring.Namespace, Name: ring.Name})
	if !controllerutil.ContainsFinalizer(ring, v1alpha1.CleanupFinalizer) {
		return nil
	}
	foreign, err := r.foreignCopies(ctx, ring)
	if err != nil {
		return err
	}
	for _, c := range foreign {
		if err := r.Delete(ctx, c); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete projection %s/%s: %w", c.Namespace, c.Name, err)
		}
	}
	patch := client.MergeFrom(ring.DeepCopy())
	controllerutil.RemoveFinalizer(ring, v1alpha1.CleanupFinalizer)
	return r.Patch(ctx, ring, patch)
}

func (r *TicketKeyRingReconciler) foreignCopies(ctx context.Context, ring *v1alpha1.TicketKeyRing) ([]*corev1.Secret, error) {
	list := &corev1.SecretList{}
	if err := r.List(ctx, list, client.MatchingLabels(distribute.ProjectionLabels(ring))); err != nil {
		return nil, fmt.Errorf("list projections: %w", err)
	}
	var out []*corev1.Secret
	for i := range list.Items {
		if list.Items[i].Namespace != ring.Namespace {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

// forget drops what the reconciler keeps in memory for a deleted ring.
func (r *TicketKeyRingReconciler) forget(ring types.NamespacedName) {
	r.gauges.forget(ring)
	if r.ForgetSource != nil {
		r.ForgetSource(ring)
	}
}

// setReady sets the Ready condition and emits a Warning event when it turns
// False for a new reason: events mark transitions, not every retry.
func (r *TicketKeyRingReconciler) setReady(ring *v1alpha1.TicketKeyRing, status *v1alpha1.TicketKeyRingStatus, s metav1.ConditionStatus, reason, msg string) {
	old := meta.FindStatusCondition(status.Conditions, v1alpha1.ConditionReady)
	if s == metav1.ConditionFalse && (old == nil || old.Status != s || old.Reason != reason) {
		r.Recorder.Eventf(ring, nil, corev1.EventTypeWarning, reason, "Reconcile", "%s", msg)
	}
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionReady, Status: s, Reason: reason, Message: msg, ObservedGeneration: ring.Generation,
	})
}

// writeStatus writes status once, and only when it changed.
func (r *TicketKeyRingReconciler) writeStatus(ctx context.Context, ring *v1alpha1.TicketKeyRing, status v1alpha1.TicketKeyRingStatus) error {
	if equality.Semantic.DeepEqual(ring.Status, status) {
		return nil
	}
	patch := client.MergeFrom(ring.DeepCopy())
	ring.Status = status
	if err := r.Status().Patch(ctx, ring, patch); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("write status: %w", err))
	}
	return nil
}

// fillStatus describes ring at now. It holds ids and times, never key bytes.
func fillStatus(status *v1alpha1.TicketKeyRingStatus, ring keyring.Ring, snapshot string, now time.Time) {
	if ring.Epoch == 0 {
		return
	}
	status.Epoch = ring.Epoch
	status.Snapshot = snapshot
	status.Keys = make([]v1alpha1.KeyStatus, 0, len(ring.Keys))
	status.ActiveKey, status.NextRotation = nil, nil
	active, _ := ring.Active(now)
	for _, k := range ring.Keys {
		state := ring.StateOf(k, now)
		if state == keyring.Expired {
			continue
		}
		status.Keys = append(status.Keys, v1alpha1.KeyStatus{
			ID: k.ID, State: v1alpha1.KeyState(state),
			ActiveFrom: metav1.NewTime(k.ActiveFrom), RetireAt: metav1.NewTime(k.RetireAt), ExpiresAt: metav1.NewTime(k.ExpiresAt),
		})
		if state == keyring.Staged && (status.NextRotation == nil || k.ActiveFrom.Before(status.NextRotation.Time)) {
			status.NextRotation = &metav1.Time{Time: k.ActiveFrom}
		}
	}
	if active.ID != "" {
		status.ActiveKey = &v1alpha1.ActiveKey{ID: active.ID, ActiveFrom: metav1.NewTime(active.ActiveFrom)}
	}
}

// describe summarises an epoch for logs and events: ids and states only.
func describe(ring keyring.Ring, plan keyring.Plan, now time.Time) string {
	var parts []string
	for _, k := range ring.TicketKeys(now) {
		parts = append(parts, fmt.Sprintf("%s %s", k.ID, ring.StateOf(k, now)))
	}
	for _, k := range ring.Keys {
		if !plan.RotateAt.IsZero() && k.ActiveFrom.Equal(plan.RotateAt) {
			parts = append(parts, fmt.Sprintf("rotate-now: %s activates %s", k.ID, plan.RotateAt.UTC().Format(time.RFC3339)))
		}
	}
	if len(plan.Expired) > 0 {
		parts = append(parts, "destroyed "+strings.Join(plan.Expired, " "))
	}
	return strings.Join(parts, ", ")
}

func newestSnapshot(snaps []snapshot) *corev1.Secret {
	if len(snaps) == 0 {
		return nil
	}
	return snaps[0].secret
}

func policyOf(spec v1alpha1.TicketKeyRingSpec) keyring.Policy {
	return keyring.Policy{
		RotationInterval: spec.RotationInterval.Duration,
		RetainedKeys:     int(spec.RetainedKeys),
		ActivationDelay:  spec.ActivationDelay.Duration,
	}
}

// requeueAfter waits until at, plus a second so that the whole-second times
// of the plan have surely passed, plus up to 1% jitter so that many rings
// created together do not rotate in one burst.
func requeueAfter(now, at time.Time) time.Duration {
	if at.IsZero() {
		return 0
	}
	d := max(at.Sub(now), 0) + time.Second
	return d + time.Duration(rand.Int64N(int64(d)/100+1))
}
