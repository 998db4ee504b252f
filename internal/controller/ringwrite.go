package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/nudge"
	"github.com/ringmaster-io/ringmaster/internal/ringplan"
	"github.com/ringmaster-io/ringmaster/internal/written"
)

// ringSecrets writes the Secrets of a ring of any kind: the immutable
// snapshot of each epoch, the projection Secrets pods mount, and the
// destruction of snapshots holding keys that expired. Both ring
// reconciles call it; what goes into the Secrets is decided before.
type ringSecrets struct {
	client.Client
	// APIReader reads around the cache: the snapshots, when the cache
	// cannot be shown current, and a foreign Secret in the way.
	APIReader client.Reader
	// Nudger, when set, is told of every projection written with a new
	// epoch, so that the pods mounting it are re-mounted at once
	// (internal/nudge). Nothing waits for it.
	Nudger nudger
	// known is what the operator knows of each ring's snapshots, for
	// telling a current cache from a stale one.
	known written.Snapshots
}

// nudger is what ringSecrets needs of a *nudge.Nudger.
type nudger interface{ Nudge(nudge.Delivery) }

// snapshots lists owner's snapshot Secrets, newest epoch first, leaving out
// those being deleted and those owner does not control. The record must be
// current, or a reconcile that follows a publish too closely would plan
// from the epoch before it: it comes from the cache only when the cache
// holds exactly the snapshots the operator last listed from the API server
// or wrote itself since, each at the resourceVersion it knows (less those
// it deleted); otherwise from the API server. The first ring of a kind to
// be read in a namespace lists the snapshots of all its rings there
// (written.Snapshots.sweep), so that a bulk of new rings costs one list per
// namespace rather than one per ring.
func (w *ringSecrets) snapshots(ctx context.Context, owner distribute.Owner) ([]*corev1.Secret, error) {
	if !w.known.IsSwept(owner) {
		all := &corev1.SecretList{}
		if err := w.APIReader.List(ctx, all, client.InNamespace(owner.Home), client.MatchingLabelsSelector{Selector: owner.HomeSnapshots()}); err != nil {
			return nil, fmt.Errorf("list the snapshots of namespace %s: %w", owner.Home, err)
		}
		snapshotReadsTotal.WithLabelValues("sweep").Inc()
		w.known.Sweep(owner, all.Items)
	}
	cached := &corev1.SecretList{}
	if err := w.List(ctx, cached, client.InNamespace(owner.Home), client.MatchingLabels(owner.SnapshotLabels())); err == nil {
		if out, ok := w.known.Current(owner, ownedSnapshots(owner, cached)); ok {
			snapshotReadsTotal.WithLabelValues("cache").Inc()
			return out, nil
		}
	}
	list := &corev1.SecretList{}
	if err := w.APIReader.List(ctx, list, client.InNamespace(owner.Home), client.MatchingLabels(owner.SnapshotLabels())); err != nil {
		w.known.Forget(owner)
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	snapshotReadsTotal.WithLabelValues("api").Inc()
	out := ownedSnapshots(owner, list)
	w.known.Listed(owner, out)
	return out, nil
}

// ownedSnapshots are the snapshots of list that owner controls and that
// are not being deleted, newest epoch first.
func ownedSnapshots(owner distribute.Owner, list *corev1.SecretList) []*corev1.Secret {
	var out []*corev1.Secret
	for i := range list.Items {
		if s := &list.Items[i]; owner.Owns(s) && s.DeletionTimestamp.IsZero() {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *corev1.Secret) int {
		return cmp.Compare(distribute.SnapshotEpoch(b), distribute.SnapshotEpoch(a))
	})
	return out
}

// publish creates an epoch's immutable snapshot Secret. A problem says why
// it was not written, for the ring's status; the error, when a retry may
// help. A Secret of the name left by a deleted ring of the same name is
// removed, as the garbage collector would, and the write retried later.
func (w *ringSecrets) publish(ctx context.Context, owner distribute.Owner, snap *corev1.Secret) (*ringplan.Problem, error) {
	key := snap.Namespace + "/" + snap.Name
	err := w.Create(ctx, snap)
	if err == nil {
		w.known.Wrote(owner, snap)
		return nil, nil
	}
	w.known.Forget(owner)
	if !apierrors.IsAlreadyExists(err) {
		return &ringplan.Problem{Reason: v1alpha1.ReasonPublishFailed, Message: fmt.Sprintf("Writing snapshot %s failed: %v", key, err)},
			fmt.Errorf("write snapshot %s: %w", key, err)
	}
	have := &corev1.Secret{}
	if err := w.APIReader.Get(ctx, client.ObjectKeyFromObject(snap), have); err != nil {
		return &ringplan.Problem{Reason: v1alpha1.ReasonPublishFailed, Message: fmt.Sprintf("Reading snapshot %s failed: %v", key, err)}, err
	}
	switch {
	case owner.Predecessor(have):
		if err := w.Delete(ctx, have, client.Preconditions{UID: &have.UID}); client.IgnoreNotFound(err) != nil {
			return &ringplan.Problem{Reason: v1alpha1.ReasonPublishFailed, Message: fmt.Sprintf("Removing snapshot %s of a deleted ring of this name failed: %v", key, err)}, err
		}
		return &ringplan.Problem{Reason: v1alpha1.ReasonPublishFailed, Message: fmt.Sprintf("Snapshot %s was left by a deleted ring of this name; removed it, retrying", key)},
			fmt.Errorf("snapshot %s was left by a deleted ring of this name", key)
	case owner.Owns(have):
		// Ours, written since the snapshots were listed: plan again.
		return &ringplan.Problem{Reason: v1alpha1.ReasonPublishFailed, Message: fmt.Sprintf("Snapshot %s exists already; retrying", key)},
			fmt.Errorf("snapshot %s exists already", key)
	}
	return &ringplan.Problem{Reason: v1alpha1.ReasonSecretConflict,
		Message: fmt.Sprintf("Secret %s exists and is not this ring's; it was left untouched: remove it", key)}, nil
}

// deliver writes the snapshot's data into the projection Secret of every
// target namespace, each on its own: one that fails is reported and the
// others still receive it. Then it removes the ring's projections that no
// target wants any more. It returns the targets that failed, and an error
// when a retry may help.
func (w *ringSecrets) deliver(ctx context.Context, owner distribute.Owner, snap *corev1.Secret, targets []string) ([]v1alpha1.TargetFailure, error) {
	var (
		failed []v1alpha1.TargetFailure
		errs   []error
	)
	for _, ns := range targets {
		if snap == nil {
			break
		}
		want := distribute.Projection(owner, snap, ns)
		written, conflict, err := w.project(ctx, owner, want)
		if written {
			w.nudge(snap, want)
		}
		switch {
		case err != nil:
			failed = append(failed, v1alpha1.TargetFailure{Namespace: ns, Reason: v1alpha1.ReasonPublishFailed,
				Message: fmt.Sprintf("Writing Secret %s/%s failed: %v", ns, want.Name, err)})
			errs = append(errs, fmt.Errorf("write projection %s/%s: %w", ns, want.Name, err))
		case conflict:
			failed = append(failed, v1alpha1.TargetFailure{Namespace: ns, Reason: v1alpha1.ReasonSecretConflict,
				Message: fmt.Sprintf("Secret %s/%s exists and is not this ring's; it was left untouched: rename spec.distribution.secretName or remove it", ns, want.Name)})
		}
	}
	// A TicketKeyRing's projections live in its own namespace: a list there
	// reads that namespace's Secrets from the cache, not every ring's, which
	// made each reconcile's cost grow with the rings of the cluster.
	opts := []client.ListOption{client.MatchingLabels(owner.ProjectionLabels())}
	if owner.Namespace != "" {
		opts = append(opts, client.InNamespace(owner.Namespace))
	}
	copies := &corev1.SecretList{}
	if err := w.List(ctx, copies, opts...); err != nil {
		return failed, errors.Join(append(errs, fmt.Errorf("list projections: %w", err))...)
	}
	for i := range copies.Items {
		c := &copies.Items[i]
		if !owner.Owns(c) || c.Type != distribute.SecretType || (slices.Contains(targets, c.Namespace) && c.Name == owner.SecretName) {
			continue
		}
		if err := w.Delete(ctx, c, client.Preconditions{UID: &c.UID}); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("delete projection %s/%s: %w", c.Namespace, c.Name, err))
			continue
		}
		log.FromContext(ctx).Info("Deleted projection no longer targeted", "secret", klog.KObj(c))
	}
	return failed, errors.Join(errs...)
}

// projectedIn are the namespaces where owner's projection is now, as the
// cache holds them.
func (w *ringSecrets) projectedIn(ctx context.Context, owner distribute.Owner) ([]string, error) {
	copies := &corev1.SecretList{}
	if err := w.List(ctx, copies, client.MatchingLabels(owner.ProjectionLabels())); err != nil {
		return nil, fmt.Errorf("list projections: %w", err)
	}
	var out []string
	for i := range copies.Items {
		if c := &copies.Items[i]; owner.Owns(c) && c.Name == owner.SecretName && c.DeletionTimestamp.IsZero() {
			out = append(out, c.Namespace)
		}
	}
	return out, nil
}

// project brings one projection Secret in line with want. It reports
// whether it wrote a new epoch there (created the Secret, or updated one
// carrying another epoch), and a conflict, writing nothing, when the Secret
// exists and is not the ring's.
func (w *ringSecrets) project(ctx context.Context, owner distribute.Owner, want *corev1.Secret) (written, conflict bool, err error) {
	have, err := w.existing(ctx, w.Client, want)
	if err != nil {
		return false, false, err
	}
	action, edited := distribute.Decide(owner, have, want)
	if action == distribute.Create {
		if err = w.Create(ctx, want); !apierrors.IsAlreadyExists(err) {
			return err == nil, false, err
		}
		// Absent from the cache yet there: a Secret of another type, which
		// the cache does not hold, or one the cache has not seen yet.
		if have, err = w.existing(ctx, w.APIReader, want); err != nil {
			return false, false, err
		}
		action, edited = distribute.Decide(owner, have, want)
	}
	switch action {
	case distribute.Conflict:
		return false, true, nil
	case distribute.Recreate:
		// A predecessor's: delete it; the next pass creates it.
		return false, false, w.Delete(ctx, have, client.Preconditions{UID: &have.UID})
	case distribute.Update:
		if err := w.Update(ctx, distribute.Updated(have, want)); err != nil {
			return false, false, err
		}
		if edited {
			log.FromContext(ctx).Info("Restored projection edited by hand", "secret", klog.KObj(want), "epoch", want.Annotations[v1alpha1.EpochAnnotation])
		}
		return !edited, false, nil
	}
	return false, false, nil
}

// nudge hands a projection just written to the Nudger. A revoke's epoch,
// whose snapshot records the request, is urgent: its pods go first.
func (w *ringSecrets) nudge(snap, projection *corev1.Secret) {
	if w.Nudger == nil {
		return
	}
	w.Nudger.Nudge(nudge.Delivery{Namespace: projection.Namespace, Secret: projection.Name,
		Epoch: projection.Annotations[v1alpha1.EpochAnnotation], Urgent: urgent(snap)})
}

// urgent says a snapshot's epoch carries out a revoke, of the ring's own
// or of a FleetRequest.
func urgent(snap *corev1.Secret) bool {
	_, fleetRevoke := distribute.FleetRequestOf(snap)
	return snap.Annotations[v1alpha1.RevokeRequestedAtAnnotation] != "" || fleetRevoke
}

// existing reads the Secret named like want, or nil when there is none.
func (w *ringSecrets) existing(ctx context.Context, reader client.Reader, want *corev1.Secret) (*corev1.Secret, error) {
	have := &corev1.Secret{}
	if err := reader.Get(ctx, client.ObjectKeyFromObject(want), have); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return have, nil
}

// destroy deletes the snapshots stale says hold a key that expired.
// Forward secrecy needs the bytes gone, not only unused.
func (w *ringSecrets) destroy(ctx context.Context, owner distribute.Owner, snaps []*corev1.Secret, stale func(*corev1.Secret) bool) error {
	var errs []error
	for _, s := range snaps {
		if !stale(s) {
			continue
		}
		if err := w.Delete(ctx, s, client.Preconditions{UID: &s.UID}); client.IgnoreNotFound(err) != nil {
			w.known.Forget(owner)
			errs = append(errs, fmt.Errorf("delete snapshot %s: %w", s.Name, err))
			continue
		}
		w.known.Deleted(owner, s)
		log.FromContext(ctx).Info("Deleted snapshot holding expired keys", "snapshot", s.Name)
	}
	return errors.Join(errs...)
}
