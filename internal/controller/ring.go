package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/confirm"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/mint"
	"github.com/ringmaster-io/ringmaster/internal/ringplan"
	"github.com/ringmaster-io/ringmaster/internal/ringstatus"
)

// Rings share one reconcile, whatever their kind: they differ only in where
// their snapshots live and which namespaces they deliver to.
//
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=ringmaster.io,resources=clusterkeysources,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=list

// rings reconciles TicketKeyRings and ClusterTicketKeyRings.
type rings struct {
	client.Client
	// APIReader reads around the cache: the snapshots, which must be
	// current, and a foreign Secret in the way.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	Sources   *mint.Sources
	// Prober asks pods what they hold (spec.confirmation).
	Prober *confirm.Prober
	gauges *ringGauges
	sweeps sweeper
	// adoptions: see sharing.adoptions.
	adoptions sync.Map
	// keepInBackups: see Options.KeepSecretsInBackups.
	keepInBackups bool
}

// ring is one ring of either kind, as the shared reconcile sees it.
type ring struct {
	obj    client.Object
	owner  distribute.Owner
	spec   v1alpha1.TicketKeyRingSpec
	status v1alpha1.TicketKeyRingStatus
	// namespace is a TicketKeyRing's, whose labels a key source's
	// namespaceSelector must match; empty for a cluster ring.
	namespace string
	// targets are the namespaces the ring delivers to.
	targets []string
	// voters are the namespaces whose pods vote under spec.confirmation:
	// a TicketKeyRing's own, those of a cluster ring's targets that its
	// voterNamespaceSelector matches.
	voters []string
}

// reconcile does one pass over a ring: read, decide (ringplan.Decide),
// mint (planning again from when the mint returned, ringplan.Replan),
// finish (ringplan.Finish), write the shared entry, publish, deliver
// to each target, destroy what expired, and return the status to write.
// Problems the user must fix set Ready False and return no error; problems
// a retry fixes return the error so that backoff applies. Expired keys are
// destroyed whatever else failed.
func (r *rings) reconcile(ctx context.Context, in ring) (v1alpha1.TicketKeyRingStatus, reconcile.Result, error) {
	now := r.Clock.Now()
	in.owner.KeepInBackups = r.keepInBackups
	out := ringstatus.Outcome{Now: now, Generation: in.obj.GetGeneration(), Targets: len(in.targets),
		Formats: in.spec.Distribution.Formats, RetainedKeys: in.spec.RetainedKeys, Confirm: in.spec.Confirmation != nil}
	snaps, err := r.snapshots(ctx, in.owner)
	if err != nil {
		return in.status, reconcile.Result{}, err
	}
	history, policy, halted := readRecord(in, snaps)
	if halted != nil {
		out.Halted = halted
		return r.finish(ctx, in, out), reconcile.Result{}, nil
	}
	out.Current = history.Current()
	out.Current.Name = in.owner.RingName()
	newest := newestSnapshot(snaps)
	src := r.keySource(ctx, in)
	sh := r.share(ctx, in, src, policy, out.Current, newest, now)
	rd := r.read(in, now, policy, history, out.Current, sh)
	rd.Confirmed, out.Confirmation, out.Overdue = r.confirm(in, policy, now, out.Current)

	dec := ringplan.Decide(rd)
	minted := r.mint(ctx, in, src, sh, dec)
	rd, dec, minted = ringplan.Replan(rd, dec, minted, r.Clock.Now())
	now, out.Now = rd.Now, rd.Now
	res := r.syncShared(ctx, in, rd, sh, ringplan.Finish(rd, dec, minted))
	if res.RotationFailed {
		rotationsTotal.WithLabelValues("failure").Inc()
	}
	out = res.Report(out)
	next := res.Serving(rd)
	if res.Publish {
		next = res.Next
		next.Epoch = max(keyring.NextEpoch(out.Current, in.status.Epoch), res.Requests.Shared)
		snap, problem, err := r.publish(ctx, in, next, res.Plan, res.Requests)
		if problem != nil {
			// Nothing new is published, but older snapshots holding keys
			// the current ring already dropped still go.
			rotationsTotal.WithLabelValues("failure").Inc()
			out.Publish, out.Ring, out.Snapshot, out.RotateRequest, out.RevokeRequest, out.Revocation = problem, out.Current, in.status.Snapshot, "", "", nil
			destroyErr := r.destroy(ctx, history.Stale(out.Current), snaps)
			out.Shared = sh.report()
			return r.finish(ctx, in, out), reconcile.Result{RequeueAfter: ringplan.ConflictRetry}, errors.Join(mintError(minted.Err), err, destroyErr)
		}
		if !res.MintFailed {
			rotationsTotal.WithLabelValues("success").Inc()
		}
		if out.Revocation != nil {
			r.revoked(in, snap, next, out.Revocation)
		}
		newest = snap
	}
	out.Ring, out.Snapshot = next, in.owner.SnapshotName(next.Epoch)
	out.Shared = sh.report()

	var targetErr error
	out.Failed, targetErr = r.distribute(ctx, in, newest)
	destroyErr := r.destroy(ctx, history.Stale(next), snaps)
	requeue := reconcile.Result{RequeueAfter: ringplan.Requeue(now, policy, res.Plan, sh != nil, len(out.Failed), res.LostRace)}
	return r.finish(ctx, in, out), requeue, errors.Join(mintError(minted.Err), targetErr, destroyErr, r.sweep(ctx, sh))
}

// read gathers what the reconcile read of the ring for ringplan.Decide;
// the caller adds what its pods confirm.
func (r *rings) read(in ring, now time.Time, policy keyring.Policy, history keyring.History, cur keyring.Ring, sh *sharing) ringplan.Read {
	ann := in.obj.GetAnnotations()
	return ringplan.Read{Now: now, Policy: policy, History: history, Current: cur, Last: in.status,
		Rotate: ann[v1alpha1.RotateRequestedAtAnnotation], Revoke: ann[v1alpha1.RevokeRequestedAtAnnotation],
		RevokedBy: ringstatus.RequestedBy(in.obj.GetManagedFields(), v1alpha1.RevokeRequestedAtAnnotation),
		Shared:    sh.plain(in)}
}

// readRecord reads the ring's history from its snapshots and its policy from
// its spec, or says why the reconcile must halt.
func readRecord(in ring, snaps []*corev1.Secret) (keyring.History, keyring.Policy, *ringstatus.Problem) {
	history, err := keyring.NewHistory(records(snaps))
	if err != nil {
		return history, keyring.Policy{}, &ringstatus.Problem{Reason: v1alpha1.ReasonInvalidSnapshot,
			Message: fmt.Sprintf("%v; delete that Secret to fall back to the previous epoch", err)}
	}
	policy := keyring.Policy{RotationInterval: in.spec.RotationInterval.Duration, RetainedKeys: int(in.spec.RetainedKeys), ActivationDelay: in.spec.ActivationDelay.Duration}
	if c := in.spec.Confirmation; c != nil {
		policy.Confirm = &keyring.Confirm{Timeout: c.Timeout.Duration, Promote: c.OnTimeout == v1alpha1.ConfirmationPromote}
		if c.MaxDelay != nil {
			policy.Confirm.MaxDelay = c.MaxDelay.Duration
		}
	}
	if err := policy.Validate(); err != nil {
		return history, policy, &ringstatus.Problem{Reason: v1alpha1.ReasonInvalidSpec, Message: fmt.Sprintf("Invalid spec: %v", err)}
	}
	return history, policy, nil
}

// revoked records and announces an emergency revoke carried out by epoch
// next, published as snap.
func (r *rings) revoked(in ring, snap *corev1.Secret, next keyring.Ring, rev *v1alpha1.Revocation) {
	rev.Epoch = next.Epoch
	r.Recorder.Eventf(in.obj, snap, corev1.EventTypeWarning, v1alpha1.ReasonRevoked, "Revoke",
		"Revoked keys %s, requested with field manager %s at %s: epoch %d encrypts with fresh key %s; tickets issued before no longer resume",
		strings.Join(rev.Keys, " "), cmp.Or(rev.RequestedBy, "unknown"), rev.RequestedAt, next.Epoch, next.Keys[1].ID)
}

// confirm reads what the ring's pods last said of its held staged key,
// under spec.confirmation. It says whether every selected, ready pod holds
// it, by answers recent enough, the answers to show, and since when the key
// is overdue (ringplan.Overdue). The prober asks the pods, off this path: a
// reconcile never waits for a pod.
func (r *rings) confirm(in ring, policy keyring.Policy, now time.Time, cur keyring.Ring) (bool, *v1alpha1.ConfirmationStatus, time.Time) {
	c := in.spec.Confirmation
	key := confirm.Key{Kind: in.owner.Kind, NamespacedName: ringKey(in)}
	if c == nil || cur.Due.IsZero() || len(cur.Keys) < 2 || !now.Before(cur.Keys[0].ActiveFrom) {
		r.Prober.Forget(key)
		return false, nil, time.Time{}
	}
	seen, ok := r.Prober.Want(confirm.Want{Key: key, Ring: cur.Name, StagedKey: cur.Keys[0].ID, Due: cur.Due,
		Namespaces: in.voters, SecretName: in.owner.SecretName, Confirmation: *c})
	confirmed := ok && seen.Confirms(now)
	// Not asked yet (a new key, a restart): the status keeps the last
	// answers, about the key they name.
	shown := in.status.Confirmation
	if ok {
		shown = &v1alpha1.ConfirmationStatus{
			StagedKey: cur.Keys[0].ID, Due: &metav1.Time{Time: cur.Due}, Pods: int32(seen.Pods), Holding: int32(seen.Holding),
			Missing: seen.Missing, CheckedAt: metav1.NewTime(seen.At.Truncate(time.Second)),
		}
	}
	return confirmed, shown, ringplan.Overdue(now, cur, policy.Confirm.Timeout, confirmed, shown)
}

// finish builds the status, emits the Warning event a transition calls for,
// and exports the ring's gauges.
func (r *rings) finish(ctx context.Context, in ring, out ringstatus.Outcome) v1alpha1.TicketKeyRingStatus {
	status := ringstatus.Build(in.status, out)
	if reason, msg, ok := ringstatus.Warning(in.status.Conditions, status.Conditions); ok {
		r.Recorder.Eventf(in.obj, nil, corev1.EventTypeWarning, reason, "Reconcile", "%s", msg)
		log.FromContext(ctx).Info("Ring not ready", "reason", reason, "message", msg)
	}
	if msg, ok := ringstatus.ConfirmationWarning(in.status.Conditions, status.Conditions); ok {
		r.Recorder.Eventf(in.obj, nil, corev1.EventTypeWarning, v1alpha1.ConditionConfirmationOverdue, "Confirm", "%s", msg)
	}
	if msg, ok := ringstatus.UnconfirmedWarning(in.status.Conditions, status.Conditions); ok {
		r.Recorder.Eventf(in.obj, nil, corev1.EventTypeWarning, v1alpha1.ReasonActivatedUnconfirmed, "Activate", "%s", msg)
		unconfirmedActivationsTotal.WithLabelValues(in.owner.Namespace, in.owner.Name).Inc()
		log.FromContext(ctx).Info("Staged key activated unconfirmed", "message", msg)
	}
	if reason, msg, ok := ringstatus.RetentionWarning(in.status.Conditions, status.Conditions); ok {
		r.Recorder.Eventf(in.obj, nil, corev1.EventTypeWarning, reason, "Reconcile", "%s", msg)
	}
	if active, ok := out.Ring.Active(out.Now); ok && out.Halted == nil {
		since, _ := ringstatus.OverdueSince(out)
		r.gauges.set(ringKey(in), out.Ring.Epoch, active.ActiveFrom, since, out.Overdue)
	}
	return status
}

// sourceError is what the ring's status shows of a key source's error: all
// of it for a cluster ring, which a cluster administrator writes; for a
// TicketKeyRing, only its reason and the key source's name
// (mint.ForTenant).
func (in ring) sourceError(err error) string {
	if in.namespace == "" || in.spec.SourceRef == nil {
		return err.Error()
	}
	return mint.ForTenant(err, in.spec.SourceRef.Name)
}

// mintError is the error a failed mint returns to the work queue, so that
// backoff applies; none when a retry cannot help (mint.Retryable).
func mintError(err error) error {
	if !mint.Retryable(err) {
		return nil
	}
	return fmt.Errorf("mint keys: %w", err)
}

// keySource is a ring's key source as one reconcile found it: a nil cks
// mints from crypto/rand; err says why the ring may not use it.
type keySource struct {
	cks *v1alpha1.ClusterKeySource
	err error
	// nsLabels are a TicketKeyRing's namespace's labels, which the key
	// source's selectors match.
	nsLabels labels.Set
}

// keySource reads the ClusterKeySource the ring names, if any, and checks
// that the ring may use it.
func (r *rings) keySource(ctx context.Context, in ring) keySource {
	ref := in.spec.SourceRef
	if ref == nil {
		return keySource{}
	}
	cks := &v1alpha1.ClusterKeySource{}
	if err := r.Get(ctx, types.NamespacedName{Name: ref.Name}, cks); err != nil {
		if apierrors.IsNotFound(err) {
			return keySource{err: mint.NotFound(ref.Name)}
		}
		return keySource{err: err}
	}
	var nsLabels labels.Set
	if in.namespace != "" {
		ns := &corev1.Namespace{}
		if err := r.Get(ctx, types.NamespacedName{Name: in.namespace}, ns); err != nil {
			return keySource{err: err}
		}
		nsLabels = ns.Labels
	}
	if err := mint.Allowed(cks, in.namespace, nsLabels); err != nil {
		return keySource{err: err}
	}
	return keySource{cks: cks, nsLabels: nsLabels}
}

// mint gives the plan's new keys their secrets, all or none, from the
// ring's key source: a shared ring's under the key source's budget for
// shared rings. A ring that fails closed mints nothing.
func (r *rings) mint(ctx context.Context, in ring, src keySource, sh *sharing, d ringplan.Decision) ringplan.Minted {
	if d.FailClosed {
		return ringplan.Minted{Ring: d.Plan.Ring}
	}
	next, err := r.fill(ctx, src, sh, d.Plan)
	if err == nil {
		return ringplan.Minted{Ring: next}
	}
	if in.namespace != "" {
		log.FromContext(ctx).Info("Mint failed", "keySource", in.spec.SourceRef.Name, "reason", mint.ReportedReason(err), "error", err.Error())
	}
	return ringplan.Minted{Err: err, Problem: &ringstatus.Problem{Reason: mint.ReportedReason(err),
		Message: fmt.Sprintf("Minting %d key(s) failed: %s. Nothing new was published and the current keys keep serving", d.Plan.Mint, in.sourceError(err))}}
}

// fill mints the plan's keys from the ring's key source.
func (r *rings) fill(ctx context.Context, src keySource, sh *sharing, plan keyring.Plan) (keyring.Ring, error) {
	if plan.Mint == 0 {
		return plan.Ring, nil
	}
	if src.err != nil {
		return keyring.Ring{}, src.err
	}
	if sh != nil && sh.store != nil {
		return sh.store.Fill(ctx, plan)
	}
	source, err := r.Sources.For(ctx, src.cks)
	if err != nil {
		return keyring.Ring{}, err
	}
	return r.Sources.Fill(ctx, source, plan)
}

// publish creates the epoch's immutable snapshot Secret. It returns a
// problem to report, and no snapshot, when the snapshot cannot be written.
func (r *rings) publish(ctx context.Context, in ring, next keyring.Ring, plan keyring.Plan, req distribute.Requests) (*corev1.Secret, *ringstatus.Problem, error) {
	snap, err := distribute.Snapshot(in.owner, next, req)
	if err != nil {
		return nil, &ringstatus.Problem{Reason: v1alpha1.ReasonPublishFailed, Message: err.Error()}, err
	}
	if err := r.Create(ctx, snap); err != nil {
		key := snap.Namespace + "/" + snap.Name
		if !apierrors.IsAlreadyExists(err) {
			return nil, &ringstatus.Problem{Reason: v1alpha1.ReasonPublishFailed, Message: fmt.Sprintf("Writing snapshot %s failed: %v", key, err)},
				fmt.Errorf("write snapshot %s: %w", key, err)
		}
		have := &corev1.Secret{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(snap), have); err != nil {
			return nil, &ringstatus.Problem{Reason: v1alpha1.ReasonPublishFailed, Message: fmt.Sprintf("Reading snapshot %s failed: %v", key, err)}, err
		}
		if in.owner.Predecessor(have) {
			// Left by a deleted ring of this name: remove it, as the
			// garbage collector would, and plan again.
			if err := r.Delete(ctx, have, client.Preconditions{UID: &have.UID}); client.IgnoreNotFound(err) != nil {
				return nil, &ringstatus.Problem{Reason: v1alpha1.ReasonPublishFailed, Message: fmt.Sprintf("Removing snapshot %s of a deleted ring of this name failed: %v", key, err)}, err
			}
			return nil, &ringstatus.Problem{Reason: v1alpha1.ReasonPublishFailed, Message: fmt.Sprintf("Snapshot %s was left by a deleted ring of this name; removed it, retrying", key)},
				fmt.Errorf("snapshot %s was left by a deleted ring of this name", key)
		}
		if in.owner.Owns(have) {
			// Ours, written since the snapshots were listed: plan again.
			return nil, &ringstatus.Problem{Reason: v1alpha1.ReasonPublishFailed, Message: fmt.Sprintf("Snapshot %s exists already; retrying", key)},
				fmt.Errorf("snapshot %s exists already", key)
		}
		return nil, &ringstatus.Problem{Reason: v1alpha1.ReasonSecretConflict,
			Message: fmt.Sprintf("Secret %s exists and is not this ring's; it was left untouched: remove it", key)}, nil
	}
	desc := ringstatus.Describe(next, plan, r.Clock.Now())
	log.FromContext(ctx).Info("Published ticket key epoch", "epoch", next.Epoch, "snapshot", snap.Name, "keys", desc)
	r.Recorder.Eventf(in.obj, snap, corev1.EventTypeNormal, "Rotated", "Publish", "Published epoch %d (%s): %s", next.Epoch, snap.Name, desc)
	return snap, nil, nil
}

// distribute writes the newest snapshot's data into every target's
// projection Secret, each target on its own: one that fails is reported and
// the others still receive it. Then it removes the ring's projections that
// no target wants any more. It returns the targets that failed, and an
// error when a retry may help.
func (r *rings) distribute(ctx context.Context, in ring, snap *corev1.Secret) ([]v1alpha1.TargetFailure, error) {
	var (
		failed []v1alpha1.TargetFailure
		errs   []error
	)
	for _, ns := range in.targets {
		if snap == nil {
			break
		}
		want := distribute.Projection(in.owner, snap, ns)
		conflict, err := r.project(ctx, in.owner, want)
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

	copies := &corev1.SecretList{}
	if err := r.List(ctx, copies, client.MatchingLabels(in.owner.ProjectionLabels())); err != nil {
		return failed, errors.Join(append(errs, fmt.Errorf("list projections: %w", err))...)
	}
	for i := range copies.Items {
		c := &copies.Items[i]
		if !in.owner.Owns(c) || (slices.Contains(in.targets, c.Namespace) && c.Name == in.owner.SecretName) {
			continue
		}
		if err := r.Delete(ctx, c, client.Preconditions{UID: &c.UID}); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("delete projection %s/%s: %w", c.Namespace, c.Name, err))
			continue
		}
		log.FromContext(ctx).Info("Deleted projection no longer targeted", "secret", klog.KObj(c))
	}
	return failed, errors.Join(errs...)
}

// project brings one projection Secret in line with want. It reports a
// conflict, and writes nothing, when the Secret exists and is not the
// ring's.
func (r *rings) project(ctx context.Context, owner distribute.Owner, want *corev1.Secret) (conflict bool, err error) {
	have, err := r.existing(ctx, r.Client, want)
	if err != nil {
		return false, err
	}
	action, edited := distribute.Decide(owner, have, want)
	if action == distribute.Create {
		if err = r.Create(ctx, want); !apierrors.IsAlreadyExists(err) {
			return false, err
		}
		// Absent from the cache yet there: a Secret of another type, which
		// the cache does not hold, or one the cache has not seen yet.
		if have, err = r.existing(ctx, r.APIReader, want); err != nil {
			return false, err
		}
		action, edited = distribute.Decide(owner, have, want)
	}
	switch action {
	case distribute.Conflict:
		return true, nil
	case distribute.Recreate:
		// The type is immutable: delete it; the next pass creates it.
		return false, r.Delete(ctx, have, client.Preconditions{UID: &have.UID})
	case distribute.Update:
		if err := r.Update(ctx, distribute.Updated(have, want)); err != nil {
			return false, err
		}
		if edited {
			log.FromContext(ctx).Info("Restored projection edited by hand", "secret", klog.KObj(want), "epoch", want.Annotations[v1alpha1.EpochAnnotation])
		}
	}
	return false, nil
}

// existing reads the Secret named like want, or nil when there is none.
func (r *rings) existing(ctx context.Context, reader client.Reader, want *corev1.Secret) (*corev1.Secret, error) {
	have := &corev1.Secret{}
	if err := reader.Get(ctx, client.ObjectKeyFromObject(want), have); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return have, nil
}

// destroy deletes the snapshots of the given epochs: they hold a key that
// expired. Forward secrecy needs the bytes gone, not only unused.
func (r *rings) destroy(ctx context.Context, epochs []int64, snaps []*corev1.Secret) error {
	var errs []error
	for _, s := range snaps {
		if !slices.Contains(epochs, distribute.SnapshotEpoch(s)) {
			continue
		}
		if err := r.Delete(ctx, s, client.Preconditions{UID: &s.UID}); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("delete snapshot %s: %w", s.Name, err))
			continue
		}
		log.FromContext(ctx).Info("Deleted snapshot holding expired keys", "snapshot", s.Name)
	}
	return errors.Join(errs...)
}

// snapshots lists the ring's snapshot Secrets, newest epoch first. It reads
// around the cache: the record must be current, or a reconcile that follows
// a publish too closely would plan from the epoch before it.
func (r *rings) snapshots(ctx context.Context, owner distribute.Owner) ([]*corev1.Secret, error) {
	return listSnapshots(ctx, r.APIReader, owner)
}

// listSnapshots lists owner's snapshot Secrets through reader, newest epoch
// first, leaving out those being deleted and those owner does not control.
func listSnapshots(ctx context.Context, reader client.Reader, owner distribute.Owner) ([]*corev1.Secret, error) {
	list := &corev1.SecretList{}
	if err := reader.List(ctx, list, client.InNamespace(owner.Home), client.MatchingLabels(owner.SnapshotLabels())); err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	var out []*corev1.Secret
	for i := range list.Items {
		if s := &list.Items[i]; owner.Owns(s) && s.DeletionTimestamp.IsZero() {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *corev1.Secret) int {
		return cmp.Compare(distribute.SnapshotEpoch(b), distribute.SnapshotEpoch(a))
	})
	return out, nil
}

// records decodes each snapshot once per reconcile.
func records(snaps []*corev1.Secret) []keyring.Record {
	out := make([]keyring.Record, len(snaps))
	for i, s := range snaps {
		out[i] = distribute.Record(s)
	}
	return out
}

func newestSnapshot(snaps []*corev1.Secret) *corev1.Secret {
	if len(snaps) == 0 {
		return nil
	}
	return snaps[0]
}

func ringKey(in ring) types.NamespacedName {
	return types.NamespacedName{Namespace: in.owner.Namespace, Name: in.owner.Name}
}
