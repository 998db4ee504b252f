package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/confirm"
	"github.com/ringmaster-io/ringmaster/internal/controller/apply"
	"github.com/ringmaster-io/ringmaster/internal/controller/watch"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/mint"
	"github.com/ringmaster-io/ringmaster/internal/ringplan"
	ticketplan "github.com/ringmaster-io/ringmaster/internal/ringplan/ticket"
	"github.com/ringmaster-io/ringmaster/internal/shape"
	"github.com/ringmaster-io/ringmaster/internal/written"
)

// Rings share one reconcile, whatever their kind: they differ only in where
// their snapshots live and which namespaces they deliver to.
//
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=ringmaster.io,resources=clusterkeysources,verbs=get;list;watch

// rings reconciles TicketKeyRings and ClusterTicketKeyRings.
type rings struct {
	client.Client
	secrets  *ringSecrets
	Recorder events.EventRecorder
	Clock    clock.PassiveClock
	Sources  *mint.Sources
	// Prober asks pods what they hold (spec.confirmation).
	Prober *confirm.Prober
	gauges *ringGauges
	// memory is what this operator remembers of shared entries.
	memory written.Shared
	// statuses are the statuses written that the cache may not show yet.
	statuses written.Statuses[v1alpha1.TicketKeyRingStatus]
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
	// unjudged are the namespaces a cluster ring could not judge
	// (ClusterTicketKeyRingReconciler.targets), reported with its targets
	// that failed.
	unjudged []v1alpha1.TargetFailure
	// voters are the namespaces whose pods vote under spec.confirmation:
	// a TicketKeyRing's own, those of a cluster ring's targets that its
	// voterNamespaceSelector matches.
	voters []string
}

// reconcile does one pass over a ring: read, decide (ticketplan.Decide),
// mint (planning again from when the mint returned, ticketplan.Replan),
// finish (ticketplan.Finish), write the shared entry, publish, deliver to
// each target, destroy what expired, and report (Result.Report): the
// status, when to look again, and the events. Problems the user must fix
// set Ready False and return no error; problems a retry fixes return the
// error so that backoff applies, but a key source that fails is tried
// again on the ring's own schedule, so that expired keys still go on time.
func (r *rings) reconcile(ctx context.Context, rg ring) (v1alpha1.TicketKeyRingStatus, reconcile.Result, error) {
	rg.owner.KeepInBackups = r.keepInBackups
	rd, src, sh, snaps, err := r.read(ctx, rg)
	if err != nil {
		return rg.status, reconcile.Result{}, err
	}
	dec := ticketplan.Decide(rd)
	minted := r.mint(ctx, rg, src, sh, dec)
	rd, dec, minted = ticketplan.Replan(rd, dec, minted, r.Clock.Now())
	res := r.syncShared(ctx, rg, rd, sh, ticketplan.Finish(rd, dec, minted))
	applied, writeErr := r.write(ctx, rg, res, snaps)
	out := res.Report(applied)
	r.announce(ctx, rg, out)
	var mintErr error
	if !out.Counts.MintRetry {
		mintErr = mintError(minted.Err)
	}
	return out.Status, reconcile.Result{RequeueAfter: out.Requeue, Priority: ptr.To(watch.Scheduled)}, errors.Join(mintErr, writeErr, r.sweep(ctx, sh))
}

// read gathers what ticketplan.Decide plans from: the ring's history and
// policy from its snapshots and spec, its requests, its key source and
// shared entry, and what its pods hold.
func (r *rings) read(ctx context.Context, rg ring) (ticketplan.Read, keySource, *sharing, []*corev1.Secret, error) {
	now := r.Clock.Now()
	rd := ticketplan.Read{Now: now, Last: rg.status, Ring: ticketplan.Ring{Owner: rg.owner, Generation: rg.obj.GetGeneration(), Targets: len(rg.targets),
		Formats: rg.spec.Distribution.Formats, RetainedKeys: rg.spec.RetainedKeys, Confirm: rg.spec.Confirmation != nil},
		Deleting: rg.owner.Deleting, Finalizers: rg.obj.GetFinalizers()}
	snaps, err := r.secrets.snapshots(ctx, rg.owner)
	if err != nil {
		return rd, keySource{}, nil, nil, err
	}
	rd.History, rd.Policy, rd.Halted = readRecord(rg, snaps)
	rd.Current = rd.History.Current()
	rd.Current.Name = rg.owner.RingName()
	if rd.Halted != nil {
		return rd, keySource{}, nil, snaps, nil
	}
	if msg := shape.SpecCut(rg.obj); msg != "" {
		rd.Blocked = &ringplan.Problem{Reason: v1alpha1.ReasonInvalidSpec, Message: msg}
		return rd, keySource{}, nil, snaps, nil
	}
	readRequests(&rd, rg.obj)
	if rd.Deleting {
		// It mints nothing and waits for no fleet: neither its key source
		// (Vault, its shared entry) nor its pods are asked.
		r.Prober.Forget(confirm.Key{Kind: rg.owner.Kind, NamespacedName: ringKey(rg)})
		return rd, keySource{}, nil, snaps, nil
	}
	rd.Fleet = r.fleetFor(ctx, rg)
	src := r.keySource(ctx, rg)
	var newest *corev1.Secret
	if len(snaps) > 0 {
		newest = snaps[0]
	}
	sh := r.share(ctx, rg, src, rd.Policy, rd.Current, newest, now)
	rd.Shared = sh.plain(rg)
	rd.Confirmed, rd.Shown, rd.OverdueSince = r.confirm(rg, rd.Policy, now, rd.Current)
	return rd, src, sh, snaps, nil
}

// readRequests reads the ring's rotate-now and revoke requests: only an
// RFC 3339 time of bounded length is one (ringplan.Request).
func readRequests(rd *ticketplan.Read, obj client.Object) {
	ann := obj.GetAnnotations()
	var ok bool
	if rd.Rotate, ok = ringplan.Request(ann[v1alpha1.RotateRequestedAtAnnotation]); !ok {
		rd.Refused = append(rd.Refused, v1alpha1.RotateRequestedAtAnnotation)
	}
	if rd.Revoke, ok = ringplan.Request(ann[v1alpha1.RevokeRequestedAtAnnotation]); !ok {
		rd.Refused = append(rd.Refused, v1alpha1.RevokeRequestedAtAnnotation)
	}
	if rd.Revoke != "" {
		rd.RevokedBy = ringplan.Printable(ringplan.RequestedBy(obj.GetManagedFields(), v1alpha1.RevokeRequestedAtAnnotation))
	}
}

// readRecord reads the ring's history from its snapshots and its policy from
// its spec, or says why the reconcile must halt.
func readRecord(rg ring, snaps []*corev1.Secret) (keyring.History, keyring.Policy, *ringplan.Problem) {
	records := make([]keyring.Record, len(snaps))
	for i, s := range snaps {
		records[i] = distribute.Record(s)
	}
	history, err := keyring.NewHistory(records)
	if err != nil {
		return history, keyring.Policy{}, &ringplan.Problem{Reason: v1alpha1.ReasonInvalidSnapshot,
			Message: fmt.Sprintf("%v; delete that Secret to fall back to the previous epoch", err)}
	}
	policy := keyring.Policy{RotationInterval: rg.spec.RotationInterval.Duration, RetainedKeys: int(rg.spec.RetainedKeys), ActivationDelay: rg.spec.ActivationDelay.Duration}
	if c := rg.spec.Confirmation; c != nil {
		policy.Confirm = &keyring.Confirm{Timeout: c.Timeout.Duration, Promote: c.OnTimeout == v1alpha1.ConfirmationPromote}
		if c.MaxDelay != nil {
			policy.Confirm.MaxDelay = c.MaxDelay.Duration
		}
	}
	if err := policy.Validate(); err != nil {
		return history, policy, &ringplan.Problem{Reason: v1alpha1.ReasonInvalidSpec, Message: fmt.Sprintf("Invalid spec: %v", err)}
	}
	return history, policy, nil
}

// confirm reads what the ring's pods last said of its held staged key,
// under spec.confirmation. It says whether every selected, ready pod holds
// it, by answers recent enough, the answers to show, and since when the key
// is overdue (ticketplan.Overdue). The prober asks the pods, off this path: a
// reconcile never waits for a pod.
func (r *rings) confirm(rg ring, policy keyring.Policy, now time.Time, cur keyring.Ring) (bool, *v1alpha1.ConfirmationStatus, time.Time) {
	c := rg.spec.Confirmation
	key := confirm.Key{Kind: rg.owner.Kind, NamespacedName: ringKey(rg)}
	if c == nil || cur.Due.IsZero() || len(cur.Keys) < 2 || !now.Before(cur.Keys[0].ActiveFrom) {
		r.Prober.Forget(key)
		return false, nil, time.Time{}
	}
	seen, ok := r.Prober.Want(confirm.Want{Key: key, Ring: cur.Name, StagedKey: cur.Keys[0].ID, Due: cur.Due,
		Namespaces: rg.voters, SecretName: rg.owner.SecretName, Confirmation: *c})
	confirmed := ok && seen.Confirms(now)
	// Not asked yet (a new key, a restart): the status keeps the last
	// answers, about the key they name.
	shown := rg.status.Confirmation
	if ok {
		shown = &v1alpha1.ConfirmationStatus{
			StagedKey: cur.Keys[0].ID, Due: &metav1.Time{Time: cur.Due}, Pods: int32(seen.Pods), Holding: int32(seen.Holding),
			Missing: seen.Missing, CheckedAt: metav1.NewTime(seen.At.Truncate(time.Second)), Note: seen.Note(),
		}
	}
	return confirmed, shown, ticketplan.Overdue(now, cur, policy.Confirm.Timeout, confirmed, shown)
}

// write carries out the result: it publishes the epoch's snapshot, delivers
// the newest snapshot to every target, and destroys the snapshots holding
// keys the ring no longer holds (those the current ring already dropped,
// when the publication fails).
func (r *rings) write(ctx context.Context, rg ring, res ticketplan.Result, snaps []*corev1.Secret) (ticketplan.Applied, error) {
	var applied ticketplan.Applied
	var newest *corev1.Secret
	if len(snaps) > 0 {
		newest = snaps[0]
	}
	history, _ := keyring.NewHistory(records(snaps))
	kept := res.Serving(res.Read())
	var errs []error
	if next, ok := res.Publication(); ok {
		snap, err := distribute.Snapshot(rg.owner, next, res.Requests)
		if err == nil {
			applied.Publish, err = r.secrets.publish(ctx, rg.owner, snap)
		} else {
			applied.Publish = &ringplan.Problem{Reason: v1alpha1.ReasonPublishFailed, Message: err.Error()}
		}
		errs = append(errs, err)
		if applied.Publish != nil {
			return applied, errors.Join(append(errs, r.secrets.destroy(ctx, rg.owner, snaps, staleTickets(history, res.Read().Current)))...)
		}
		log.FromContext(ctx).Info("Published ticket key epoch", "epoch", next.Epoch, "snapshot", snap.Name, "keys", ticketplan.Describe(next, res.Plan, r.Clock.Now()))
		newest, kept = snap, next
	}
	failed, err := r.secrets.deliver(ctx, rg.owner, newest, rg.targets)
	applied.Failed = append(failed, rg.unjudged...)
	errs = append(errs, err, r.secrets.destroy(ctx, rg.owner, snaps, staleTickets(history, kept)))
	return applied, errors.Join(errs...)
}

// staleTickets says which snapshots hold a key that next no longer holds.
func staleTickets(h keyring.History, next keyring.Ring) func(*corev1.Secret) bool {
	stale := h.Stale(next)
	return func(s *corev1.Secret) bool { return slices.Contains(stale, distribute.SnapshotEpoch(s)) }
}

// records decodes each snapshot once per reconcile.
func records(snaps []*corev1.Secret) []keyring.Record {
	out := make([]keyring.Record, len(snaps))
	for i, s := range snaps {
		out[i] = distribute.Record(s)
	}
	return out
}

// announce emits what the pass reports: its events, the rotation
// counter, a key activated unconfirmed, and the ring's gauges.
func (r *rings) announce(ctx context.Context, rg ring, rep ringplan.Report[v1alpha1.TicketKeyRingStatus]) {
	apply.Emit(ctx, r.Recorder, rg.obj, rg.owner.Home, rep.Events)
	if rep.Counts.Rotated {
		rotationsTotal.WithLabelValues("success").Inc()
	}
	if rep.Counts.Failed > 0 {
		rotationsTotal.WithLabelValues("failure").Add(float64(rep.Counts.Failed))
	}
	if rep.Counts.Unconfirmed {
		unconfirmedActivationsTotal.WithLabelValues(rg.owner.Namespace, rg.owner.Name).Inc()
	}
	if g := rep.Counts.Gauge; g != nil {
		r.gauges.set(ringKey(rg), g.Epoch, g.ActiveFrom, g.OverdueSince, g.UnconfirmedSince)
	}
}

// sourceError is what the ring's status shows of a key source's error: all
// of it for a cluster ring, which a cluster administrator writes; for a
// TicketKeyRing, only its reason and the key source's name
// (mint.ForTenant).
func (rg ring) sourceError(err error) string {
	if rg.namespace == "" || rg.spec.SourceRef == nil {
		return err.Error()
	}
	return mint.ForTenant(err, rg.spec.SourceRef.Name)
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
func (r *rings) keySource(ctx context.Context, rg ring) keySource {
	ref := rg.spec.SourceRef
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
	if rg.namespace != "" {
		ns := &corev1.Namespace{}
		if err := r.Get(ctx, types.NamespacedName{Name: rg.namespace}, ns); err != nil {
			return keySource{err: err}
		}
		if shape.WasCut(ns, shape.CutLabels) {
			return keySource{err: mint.LabelsNotKept(cks.Name, rg.namespace, shape.MaxLabelBytes)}
		}
		nsLabels = ns.Labels
	}
	if err := mint.Allowed(cks, rg.namespace, nsLabels); err != nil {
		return keySource{err: err}
	}
	return keySource{cks: cks, nsLabels: nsLabels}
}

// mint gives the plan's new keys their secrets, all or none, from the
// ring's key source: a shared ring's under the key source's budget for
// shared rings. A ring that fails closed mints nothing.
func (r *rings) mint(ctx context.Context, rg ring, src keySource, sh *sharing, d ticketplan.Decision) ticketplan.Minted {
	if d.FailClosed {
		return ticketplan.Minted{Ring: d.Plan.Ring}
	}
	next, err := r.fill(ctx, src, sh, d.Plan)
	if err == nil {
		return ticketplan.Minted{Ring: next}
	}
	if rg.namespace != "" {
		log.FromContext(ctx).Info("Mint failed", "keySource", rg.spec.SourceRef.Name, "reason", mint.ReportedReason(err), "error", err.Error())
	}
	return ticketplan.Minted{Err: err, Problem: ticketplan.MintProblem(r.Clock.Now(), d.Current, d.Plan.Mint, mint.ReportedReason(err), rg.sourceError(err))}
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

func ringKey(rg ring) types.NamespacedName {
	return types.NamespacedName{Namespace: rg.owner.Namespace, Name: rg.owner.Name}
}
