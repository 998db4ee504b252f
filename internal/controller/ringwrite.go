package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/nudge"
	"github.com/ringmaster-io/ringmaster/internal/ringstatus"
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
	known snapshotMemory
}

// nudger is what ringSecrets needs of a *nudge.Nudger.
type nudger interface{ Nudge(nudge.Delivery) }

// snapshots lists owner's snapshot Secrets, newest epoch first, leaving out
// those being deleted and those owner does not control. The record must be
// current, or a reconcile that follows a publish too closely would plan
// from the epoch before it: it comes from the cache only when the cache
// holds exactly the snapshots the operator last listed from the API server
// or wrote itself since, each at the resourceVersion it knows (less those
// it deleted); otherwise from the API server.
func (w *ringSecrets) snapshots(ctx context.Context, owner distribute.Owner) ([]*corev1.Secret, error) {
	cached := &corev1.SecretList{}
	if err := w.List(ctx, cached, client.InNamespace(owner.Home), client.MatchingLabels(owner.SnapshotLabels())); err == nil {
		if out, ok := w.known.current(owner, ownedSnapshots(owner, cached)); ok {
			snapshotReadsTotal.WithLabelValues("cache").Inc()
			return out, nil
		}
	}
	list := &corev1.SecretList{}
	if err := w.APIReader.List(ctx, list, client.InNamespace(owner.Home), client.MatchingLabels(owner.SnapshotLabels())); err != nil {
		w.known.forget(owner)
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	snapshotReadsTotal.WithLabelValues("api").Inc()
	out := ownedSnapshots(owner, list)
	w.known.listed(owner, out)
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
func (w *ringSecrets) publish(ctx context.Context, owner distribute.Owner, snap *corev1.Secret) (*ringstatus.Problem, error) {
	key := snap.Namespace + "/" + snap.Name
	err := w.Create(ctx, snap)
	if err == nil {
		w.known.wrote(owner, snap)
		return nil, nil
	}
	w.known.forget(owner)
	if !apierrors.IsAlreadyExists(err) {
		return &ringstatus.Problem{Reason: v1alpha1.ReasonPublishFailed, Message: fmt.Sprintf("Writing snapshot %s failed: %v", key, err)},
			fmt.Errorf("write snapshot %s: %w", key, err)
	}
	have := &corev1.Secret{}
	if err := w.APIReader.Get(ctx, client.ObjectKeyFromObject(snap), have); err != nil {
		return &ringstatus.Problem{Reason: v1alpha1.ReasonPublishFailed, Message: fmt.Sprintf("Reading snapshot %s failed: %v", key, err)}, err
	}
	switch {
	case owner.Predecessor(have):
		if err := w.Delete(ctx, have, client.Preconditions{UID: &have.UID}); client.IgnoreNotFound(err) != nil {
			return &ringstatus.Problem{Reason: v1alpha1.ReasonPublishFailed, Message: fmt.Sprintf("Removing snapshot %s of a deleted ring of this name failed: %v", key, err)}, err
		}
		return &ringstatus.Problem{Reason: v1alpha1.ReasonPublishFailed, Message: fmt.Sprintf("Snapshot %s was left by a deleted ring of this name; removed it, retrying", key)},
			fmt.Errorf("snapshot %s was left by a deleted ring of this name", key)
	case owner.Owns(have):
		// Ours, written since the snapshots were listed: plan again.
		return &ringstatus.Problem{Reason: v1alpha1.ReasonPublishFailed, Message: fmt.Sprintf("Snapshot %s exists already; retrying", key)},
			fmt.Errorf("snapshot %s exists already", key)
	}
	return &ringstatus.Problem{Reason: v1alpha1.ReasonSecretConflict,
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
		Epoch: projection.Annotations[v1alpha1.EpochAnnotation], Urgent: snap.Annotations[v1alpha1.RevokeRequestedAtAnnotation] != ""})
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
			w.known.forget(owner)
			errs = append(errs, fmt.Errorf("delete snapshot %s: %w", s.Name, err))
			continue
		}
		w.known.deleted(owner, s)
		log.FromContext(ctx).Info("Deleted snapshot holding expired keys", "snapshot", s.Name)
	}
	return errors.Join(errs...)
}

// snapshotMemory is what the operator knows of each ring's snapshots, so
// that a reconcile may read them from the cache once the cache is shown
// current: the snapshots it last listed from the API server or created
// since, each by UID at the resourceVersion the API server returned, and
// those it deleted since, which the cache may still hold. It knows nothing
// of a ring until it has listed the ring's snapshots from the API server,
// and forgets a ring at any write whose outcome it cannot be sure of.
type snapshotMemory struct {
	mu    sync.Mutex
	rings map[ringID]*knownSnapshots
}

// ringID names a ring of any kind by where its snapshots live.
type ringID struct{ kind, home, name string }

func idOf(o distribute.Owner) ringID { return ringID{kind: o.Kind, home: o.Home, name: o.Name} }

type knownSnapshots struct {
	// ring is the ring's UID: a ring created again under its name is
	// another ring.
	ring types.UID
	have map[types.UID]string
	gone map[types.UID]struct{}
}

// current returns the snapshots of the cache, less those the operator
// deleted, when they are exactly those the operator knows, at the
// resourceVersions it knows; otherwise false, and the caller lists them from
// the API server.
func (m *snapshotMemory) current(o distribute.Owner, cached []*corev1.Secret) ([]*corev1.Secret, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := m.rings[idOf(o)]
	if k == nil || k.ring != o.UID {
		return nil, false
	}
	var out []*corev1.Secret
	inCache := make(map[types.UID]bool, len(cached))
	for _, s := range cached {
		inCache[s.UID] = true
		if _, ok := k.gone[s.UID]; ok {
			continue
		}
		if rv, ok := k.have[s.UID]; !ok || rv != s.ResourceVersion {
			return nil, false
		}
		out = append(out, s)
	}
	if len(out) != len(k.have) {
		return nil, false
	}
	for uid := range k.gone {
		if !inCache[uid] {
			delete(k.gone, uid) // the cache has seen the delete
		}
	}
	return out, true
}

// listed records the snapshots an API server list returned.
func (m *snapshotMemory) listed(o distribute.Owner, snaps []*corev1.Secret) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rings == nil {
		m.rings = map[ringID]*knownSnapshots{}
	}
	k := &knownSnapshots{ring: o.UID, have: make(map[types.UID]string, len(snaps)), gone: map[types.UID]struct{}{}}
	if old := m.rings[idOf(o)]; old != nil && old.ring == o.UID {
		k.gone = old.gone
	}
	for _, s := range snaps {
		k.have[s.UID] = s.ResourceVersion
		delete(k.gone, s.UID)
	}
	m.rings[idOf(o)] = k
}

// wrote records a snapshot the operator created, as the API server
// returned it.
func (m *snapshotMemory) wrote(o distribute.Owner, s *corev1.Secret) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if k := m.rings[idOf(o)]; k != nil && k.ring == o.UID && s.UID != "" && s.ResourceVersion != "" {
		k.have[s.UID] = s.ResourceVersion
		return
	}
	delete(m.rings, idOf(o))
}

// deleted records a snapshot the operator deleted (or found gone).
func (m *snapshotMemory) deleted(o distribute.Owner, s *corev1.Secret) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if k := m.rings[idOf(o)]; k != nil && k.ring == o.UID {
		delete(k.have, s.UID)
		k.gone[s.UID] = struct{}{}
	}
}

// forget drops what the operator knows of o's snapshots: the next read
// lists them from the API server.
func (m *snapshotMemory) forget(o distribute.Owner) {
	m.forgetRing(o.Kind, o.Home, o.Name)
}

// forgetRing drops a ring that is gone.
func (m *snapshotMemory) forgetRing(kind, home, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.rings, ringID{kind: kind, home: home, name: name})
}
