package controller

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/confirm"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/dnspub"
	"github.com/ringmaster-io/ringmaster/internal/echring"
	"github.com/ringmaster-io/ringmaster/internal/mint"
)

// +kubebuilder:rbac:groups=ringmaster.io,resources=echkeyrings,verbs=get;list;watch
// +kubebuilder:rbac:groups=ringmaster.io,resources=echkeyrings/status,verbs=patch
// +kubebuilder:rbac:groups=ringmaster.io,resources=echkeyrings/finalizers,verbs=update
// +kubebuilder:rbac:groups=ringmaster.io,resources=clusterdnszones,verbs=get;list;watch

// ECH timings of the reconcile.
const (
	// echDNSRetry is how soon a ring whose DNS does not answer the configs
	// just written asks again.
	echDNSRetry = 5 * time.Second
	// echConfirmRetry is how soon a ring waiting for its fleet looks
	// again; the prober enqueues it sooner when the answers change.
	echConfirmRetry = 30 * time.Second
	// echDNSTimeout bounds one pass's DNS exchanges.
	echDNSTimeout = 10 * time.Second
)

// ECHKeyRingReconciler stages, publishes, retires and destroys the ECH
// configs of ECHKeyRings, in each ring's own namespace and in the DNS zone
// a cluster administrator allowed it.
type ECHKeyRingReconciler struct {
	client.Client
	// APIReader reads around the cache: the snapshots, which must be
	// current, and the TSIG Secret, which the cache does not hold.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	Sources   *mint.Sources
	Prober    *confirm.Prober
	// Namespace is the operator's: where the zones' TSIG Secrets live.
	Namespace string
	// KeepInBackups: see Options.KeepSecretsInBackups.
	KeepInBackups bool
}

// SetupWithManager watches ECHKeyRings, their Secrets, the zones and key
// sources they name, and the prober's answers.
func (r *ECHKeyRingReconciler) SetupWithManager(mgr manager.Manager, workers int) error {
	specOrAnnotations := builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))
	return builder.ControllerManagedBy(mgr).Named("echkeyring").WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		For(&v1alpha1.ECHKeyRing{}, specOrAnnotations).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(ringsOfSecret(v1alpha1.KindECHKeyRing))).
		Watches(&v1alpha1.ClusterDNSZone{}, handler.EnqueueRequestsFromMapFunc(r.allRings)).
		Watches(&v1alpha1.ClusterKeySource{}, handler.EnqueueRequestsFromMapFunc(r.allRings)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.ringsIn), builder.WithPredicates(labelsChanged())).
		WatchesRawSource(r.Prober.Source(v1alpha1.KindECHKeyRing)).
		Complete(r)
}

// allRings maps a zone or key source to every ECHKeyRing: there are few.
func (r *ECHKeyRingReconciler) allRings(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &v1alpha1.ECHKeyRingList{}
	if err := r.List(ctx, list); err != nil {
		return nil // a cache read: it fails only when shutting down
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, x := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: x.Namespace, Name: x.Name}})
	}
	return out
}

// ringsIn maps a namespace whose labels changed to its ECHKeyRings: whether
// their zone and key source allow them may have changed.
func (r *ECHKeyRingReconciler) ringsIn(ctx context.Context, ns client.Object) []reconcile.Request {
	list := &v1alpha1.ECHKeyRingList{}
	if err := r.List(ctx, list, client.InNamespace(ns.GetName())); err != nil {
		return nil // a cache read: it fails only when shutting down
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, x := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: x.Namespace, Name: x.Name}})
	}
	return out
}

// Reconcile moves the ring's configs along their lifecycle and writes its
// status once.
func (r *ECHKeyRingReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ekr := &v1alpha1.ECHKeyRing{}
	if err := r.Get(ctx, req.NamespacedName, ekr); err != nil {
		if apierrors.IsNotFound(err) {
			r.Prober.Forget(confirm.Key{Kind: v1alpha1.KindECHKeyRing, NamespacedName: req.NamespacedName})
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !ekr.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil // its Secrets go with it, by owner reference
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("echKeyRing", klog.KObj(ekr)))
	status, res, err := r.reconcile(ctx, ekr)
	r.warn(ekr, status)
	return result(res, errors.Join(err, applyStatus(ctx, r.Client, ekr, ekr.Status, status)))
}

// echPass is what one reconcile found and decided, for the status.
type echPass struct {
	now     time.Time
	ring    echring.Ring
	plan    echring.Plan
	dns     echring.DNS
	want    []echring.Config
	problem *problem
	seen    *v1alpha1.ConfirmationStatus
	overdue bool
	policy  echring.Policy
}

// problem is a reason and message for Ready False.
type problem struct{ reason, message string }

func (r *ECHKeyRingReconciler) reconcile(ctx context.Context, ekr *v1alpha1.ECHKeyRing) (v1alpha1.ECHKeyRingStatus, reconcile.Result, error) {
	now := r.Clock.Now()
	owner := distribute.ECHOwnerOf(ekr)
	owner.KeepInBackups = r.KeepInBackups
	pass := echPass{now: now, policy: echPolicy(ekr.Spec)}
	halt := func(p problem, err error) (v1alpha1.ECHKeyRingStatus, reconcile.Result, error) {
		pass.problem = &p
		return r.status(ekr, pass), reconcile.Result{}, err
	}

	// A spec that describes no config, or a zone the ring may not use,
	// stops minting and DNS, and nothing else: expired configs are still
	// destroyed on time.
	params := echParams(ekr.Spec)
	var blocked *problem
	if err := params.Validate(); err != nil {
		blocked = &problem{v1alpha1.ReasonECHConfigInvalid, fmt.Sprintf("The spec describes no ECHConfig Go serves: %v", err)}
	}
	if err := pass.policy.Validate(); err != nil {
		return halt(problem{v1alpha1.ReasonInvalidSpec, fmt.Sprintf("Invalid spec: %v", err)}, nil)
	}
	snaps, err := r.snapshots(ctx, owner)
	if err != nil {
		return halt(problem{v1alpha1.ReasonPublishFailed, err.Error()}, err)
	}
	cur := echring.Ring{Ring: owner.RingName()}
	if len(snaps) > 0 {
		if cur, err = distribute.ECHRecord(snaps[0]); err != nil {
			return halt(problem{v1alpha1.ReasonInvalidSnapshot, fmt.Sprintf("%v; delete that Secret to fall back to the previous epoch", err)}, nil)
		}
	}
	pass.ring = cur
	target, p, targetErr := r.dnsTarget(ctx, ekr)
	if p == nil && targetErr != nil {
		p = &problem{v1alpha1.ReasonDNSUnavailable, fmt.Sprintf("Reading the ring's ClusterDNSZone failed: %v", targetErr)}
	}

	confirmed := r.confirm(ekr, owner, pass.policy, now, cur, &pass)
	pass.want = echring.Want(now, pass.policy, cur, confirmed)
	if p == nil {
		pass.dns = r.syncDNS(ctx, target, pass.want)
	} else {
		blocked = cmp.Or(blocked, p) // DNS not asked: nothing is published
	}
	pass.plan = echring.Next(echring.Input{Now: now, Policy: pass.policy, Ring: cur, Confirmed: confirmed, DNS: pass.dns})

	var mintErr error
	var c echring.Config
	if pass.plan.Mint != nil && blocked != nil {
		pass.plan.Mint = nil // a refused ring stages nothing
		pass.plan.Changed = pass.plan.Published != nil || len(pass.plan.Destroyed) > 0
	}
	if pass.plan.Mint != nil {
		c, err = r.mintConfig(ctx, ekr, *pass.plan.Mint, params)
		if err != nil {
			mintErr = err
			pass.problem = &problem{mint.ReportedReason(err), fmt.Sprintf("Minting a config failed: %s. Nothing new was staged and the current configs keep serving", forTenant(ekr, err))}
			pass.plan.Mint = nil
			pass.plan.Changed = pass.plan.Published != nil || len(pass.plan.Destroyed) > 0
		}
	}
	next, err := pass.plan.Stage(now, c)
	if err != nil {
		return halt(problem{v1alpha1.ReasonECHConfigInvalid, err.Error()}, nil)
	}
	newest := firstOf(snaps)
	if pass.plan.Changed {
		snap, p, err := r.writeSnapshot(ctx, owner, next)
		if p != nil {
			return halt(*p, errors.Join(err, mintError(mintErr)))
		}
		r.announce(ekr, snap, pass.plan, next)
		if pass.plan.Published != nil && pass.plan.Unconfirmed {
			r.Recorder.Eventf(ekr, snap, corev1.EventTypeWarning, v1alpha1.ReasonPublishedUnconfirmed, "Publish", "%s", unconfirmedMessage(*pass.plan.Published, pass.seen))
		}
		newest, pass.ring = snap, next
	}
	var errs []error
	if newest != nil {
		conflict, err := r.project(ctx, owner, distribute.Projection(owner, newest, ekr.Namespace))
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("write projection: %w", err))
			pass.problem = &problem{v1alpha1.ReasonPublishFailed, fmt.Sprintf("Writing Secret %s/%s failed: %v", ekr.Namespace, owner.SecretName, err)}
		case conflict:
			pass.problem = &problem{v1alpha1.ReasonSecretConflict, fmt.Sprintf("Secret %s/%s exists and is not this ring's; it was left untouched: rename spec.distribution.secretName or remove it", ekr.Namespace, owner.SecretName)}
		}
	}
	if blocked != nil && pass.problem == nil {
		pass.problem = blocked
	}
	errs = append(errs, r.destroyStale(ctx, pass.ring, snaps), mintError(mintErr), targetErr)
	if pass.dns.Err != nil && !dnspub.Refused(pass.dns.Err) {
		errs = append(errs, fmt.Errorf("DNS: %w", pass.dns.Err))
	}
	return r.status(ekr, pass), reconcile.Result{RequeueAfter: echRequeue(now, pass)}, errors.Join(errs...)
}

func firstOf(snaps []*corev1.Secret) *corev1.Secret {
	if len(snaps) == 0 {
		return nil
	}
	return snaps[0]
}

// echPolicy is the lifecycle's reading of the spec.
func echPolicy(s v1alpha1.ECHKeyRingSpec) echring.Policy {
	return echring.Policy{RotationInterval: s.RotationInterval.Duration, DeliveryDelay: s.DeliveryDelay.Duration,
		TTL: time.Duration(s.DNS.TTL) * time.Second, RetirementMargin: s.RetirementMargin.Duration, MaxDelay: echCeiling(s.Confirmation)}
}

// echCeiling is how long past its due time a staged config waits for its
// fleet before it is published unconfirmed: maxDelay, or timeout without.
func echCeiling(c v1alpha1.Confirmation) time.Duration {
	if c.MaxDelay != nil {
		return c.MaxDelay.Duration
	}
	return c.Timeout.Duration
}

// echParams is what each new ECHConfig of the ring says.
func echParams(s v1alpha1.ECHKeyRingSpec) echring.Params {
	p := echring.Params{PublicName: s.PublicName, KEM: s.KEM.ID(), MaxNameLength: uint8(min(max(s.MaxNameLength, 0), 255))}
	for _, cs := range s.CipherSuites {
		p.Suites = append(p.Suites, echring.Suite{KDF: cs.KDF.ID(), AEAD: cs.AEAD.ID()})
	}
	return p
}

// confirm asks the prober about the staged config, and records in pass what
// the pods said and whether the config is overdue.
func (r *ECHKeyRingReconciler) confirm(ekr *v1alpha1.ECHKeyRing, owner distribute.Owner, policy echring.Policy, now time.Time, cur echring.Ring, pass *echPass) bool {
	key := confirm.Key{Kind: v1alpha1.KindECHKeyRing, NamespacedName: types.NamespacedName{Namespace: ekr.Namespace, Name: ekr.Name}}
	staged, ok := cur.Staged()
	if !ok {
		r.Prober.Forget(key)
		return false
	}
	due := echring.ReadyAt(policy, cur)
	id := strconv.Itoa(int(staged.ID))
	seen, asked := r.Prober.Want(confirm.Want{Key: key, Ring: owner.RingName(), StagedKey: id, Due: due,
		Namespaces: []string{ekr.Namespace}, SecretName: owner.SecretName, Confirmation: ekr.Spec.Confirmation})
	confirmed := asked && seen.Confirms(now)
	if asked {
		pass.seen = &v1alpha1.ConfirmationStatus{StagedKey: id, Due: &metav1.Time{Time: due}, Pods: int32(seen.Pods), Holding: int32(seen.Holding),
			Missing: seen.Missing, CheckedAt: metav1.NewTime(seen.At.Truncate(time.Second))}
	} else if s := ekr.Status.Confirmation; s != nil && s.StagedKey == id {
		pass.seen = s
	}
	pass.overdue = !confirmed && now.After(due.Add(min(ekr.Spec.Confirmation.Timeout.Duration, policy.MaxDelay)))
	return confirmed
}

// syncDNS has the zone's servers answer want: it asks them, writes want
// through the primary when they do not (not in verify-only zones), and
// asks again.
func (r *ECHKeyRingReconciler) syncDNS(ctx context.Context, t dnspub.Target, want []echring.Config) echring.DNS {
	ctx, cancel := context.WithTimeout(ctx, echDNSTimeout)
	defer cancel()
	var list []byte
	if len(want) > 0 {
		list = echring.ConfigList(want)
	}
	res, err := dnspub.Verify(ctx, t, list)
	if res.Matched() {
		return echring.DNS{Checked: true, Holds: true}
	}
	if t.Primary == "" {
		// Verify-only: another system publishes; the ring waits for it.
		return echring.DNS{Checked: true, Err: verifyOnly(err)}
	}
	if err := dnspub.Publish(ctx, t, list); err != nil {
		return echring.DNS{Checked: true, Err: err}
	}
	res, err = dnspub.Verify(ctx, t, list)
	if res.Matched() {
		return echring.DNS{Checked: true, Holds: true}
	}
	if anyAnswered(res) {
		return echring.DNS{Checked: true} // written; the servers catch up
	}
	return echring.DNS{Checked: true, Err: err}
}

// verifyOnly is the error of a verify-only zone whose servers answer
// something else: none when they answered at all (another system is to
// publish), the error when none could be asked.
func verifyOnly(err error) error {
	var e *dnspub.Error
	if errors.As(err, &e) {
		return err
	}
	return nil
}

func anyAnswered(res dnspub.Result) bool {
	for _, s := range res.Servers {
		var e *dnspub.Error
		if s.Match || !errors.As(s.Err, &e) {
			return true
		}
	}
	return false
}

// mintConfig makes the config of the given id from a seed of the ring's
// key source.
func (r *ECHKeyRingReconciler) mintConfig(ctx context.Context, ekr *v1alpha1.ECHKeyRing, id uint8, p echring.Params) (echring.Config, error) {
	var cks *v1alpha1.ClusterKeySource
	if ref := ekr.Spec.SourceRef; ref != nil {
		cks = &v1alpha1.ClusterKeySource{}
		if err := r.Get(ctx, types.NamespacedName{Name: ref.Name}, cks); err != nil {
			if apierrors.IsNotFound(err) {
				return echring.Config{}, mint.NotFound(ref.Name)
			}
			return echring.Config{}, err
		}
		ns := &corev1.Namespace{}
		if err := r.Get(ctx, types.NamespacedName{Name: ekr.Namespace}, ns); err != nil {
			return echring.Config{}, err
		}
		if err := mint.Allowed(cks, ekr.Namespace, ns.Labels); err != nil {
			return echring.Config{}, err
		}
	}
	src, err := r.Sources.For(ctx, cks)
	if err != nil {
		return echring.Config{}, err
	}
	mctx, cancel := r.Sources.WithTimeout(ctx)
	defer cancel()
	seeds, err := src.Mint(mctx, 1)
	if err != nil {
		return echring.Config{}, err
	}
	defer clear(seeds[0][:])
	return echring.NewConfig(id, seeds[0][:], p)
}

// forTenant is what the ring's status shows of a mint error.
func forTenant(ekr *v1alpha1.ECHKeyRing, err error) string {
	if ekr.Spec.SourceRef == nil {
		return err.Error()
	}
	return mint.ForTenant(err, ekr.Spec.SourceRef.Name)
}

// snapshots lists the ring's snapshot Secrets, newest epoch first, around
// the cache.
func (r *ECHKeyRingReconciler) snapshots(ctx context.Context, owner distribute.Owner) ([]*corev1.Secret, error) {
	return listSnapshots(ctx, r.APIReader, owner)
}

// writeSnapshot creates the epoch's immutable snapshot Secret.
func (r *ECHKeyRingReconciler) writeSnapshot(ctx context.Context, owner distribute.Owner, next echring.Ring) (*corev1.Secret, *problem, error) {
	snap, err := distribute.ECHSnapshot(owner, next)
	if err != nil {
		return nil, &problem{v1alpha1.ReasonPublishFailed, err.Error()}, err
	}
	if err := r.Create(ctx, snap); err != nil {
		key := snap.Namespace + "/" + snap.Name
		if !apierrors.IsAlreadyExists(err) {
			return nil, &problem{v1alpha1.ReasonPublishFailed, fmt.Sprintf("Writing snapshot %s failed: %v", key, err)}, fmt.Errorf("write snapshot %s: %w", key, err)
		}
		have := &corev1.Secret{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(snap), have); err != nil {
			return nil, &problem{v1alpha1.ReasonPublishFailed, fmt.Sprintf("Reading snapshot %s failed: %v", key, err)}, err
		}
		if owner.Owns(have) || owner.Predecessor(have) {
			if owner.Predecessor(have) {
				if err := r.Delete(ctx, have, client.Preconditions{UID: &have.UID}); client.IgnoreNotFound(err) != nil {
					return nil, &problem{v1alpha1.ReasonPublishFailed, fmt.Sprintf("Removing snapshot %s of a deleted ring of this name failed: %v", key, err)}, err
				}
			}
			return nil, &problem{v1alpha1.ReasonPublishFailed, fmt.Sprintf("Snapshot %s exists already; retrying", key)}, fmt.Errorf("snapshot %s exists already", key)
		}
		return nil, &problem{v1alpha1.ReasonSecretConflict, fmt.Sprintf("Secret %s exists and is not this ring's; it was left untouched: remove it", key)}, nil
	}
	log.FromContext(ctx).Info("Published ECH epoch", "epoch", next.Epoch, "snapshot", snap.Name, "configs", next.String())
	return snap, nil, nil
}

// project brings the projection Secret in line with want, as ticket rings
// do.
func (r *ECHKeyRingReconciler) project(ctx context.Context, owner distribute.Owner, want *corev1.Secret) (bool, error) {
	rs := &rings{Client: r.Client, APIReader: r.APIReader}
	return rs.project(ctx, owner, want)
}

// destroyStale deletes every older snapshot holding a config the ring no
// longer holds: the keys of destroyed configs must be gone, not only
// unused.
func (r *ECHKeyRingReconciler) destroyStale(ctx context.Context, cur echring.Ring, snaps []*corev1.Secret) error {
	live := map[string]bool{}
	for _, c := range cur.Configs {
		live[string(c.Config)] = true
	}
	var errs []error
	for _, s := range snaps {
		if distribute.SnapshotEpoch(s) >= cur.Epoch {
			continue
		}
		old, err := distribute.ECHRecord(s)
		stale := err != nil || slices.ContainsFunc(old.Configs, func(c echring.Config) bool { return !live[string(c.Config)] })
		if !stale {
			continue
		}
		if err := r.Delete(ctx, s, client.Preconditions{UID: &s.UID}); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("delete snapshot %s: %w", s.Name, err))
			continue
		}
		log.FromContext(ctx).Info("Deleted snapshot holding destroyed ECH configs", "snapshot", s.Name)
	}
	return errors.Join(errs...)
}

// announce records the epoch's changes as events.
func (r *ECHKeyRingReconciler) announce(ekr *v1alpha1.ECHKeyRing, snap *corev1.Secret, pl echring.Plan, next echring.Ring) {
	var parts []string
	if pl.Published != nil {
		parts = append(parts, fmt.Sprintf("config %d published to DNS", *pl.Published))
	}
	for _, id := range pl.Retired {
		parts = append(parts, fmt.Sprintf("config %d retired", id))
	}
	for _, id := range pl.Destroyed {
		parts = append(parts, fmt.Sprintf("config %d destroyed", id))
	}
	if pl.Mint != nil {
		parts = append(parts, fmt.Sprintf("config %d staged", *pl.Mint))
	}
	r.Recorder.Eventf(ekr, snap, corev1.EventTypeNormal, "Rotated", "Publish", "Epoch %d (%s): %s", next.Epoch, snap.Name, strings.Join(parts, ", "))
}

// warn emits the Warning event of a Ready or ConfirmationOverdue
// condition that turned bad.
func (r *ECHKeyRingReconciler) warn(ekr *v1alpha1.ECHKeyRing, next v1alpha1.ECHKeyRingStatus) {
	for _, typ := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionConfirmationOverdue} {
		bad := metav1.ConditionFalse
		if typ == v1alpha1.ConditionConfirmationOverdue {
			bad = metav1.ConditionTrue
		}
		was, is := meta.FindStatusCondition(ekr.Status.Conditions, typ), meta.FindStatusCondition(next.Conditions, typ)
		if is == nil || is.Status != bad || (was != nil && was.Status == is.Status && was.Reason == is.Reason) {
			continue
		}
		if is.Reason == v1alpha1.ReasonAwaitingDNS {
			continue // the first config on its way: no fault
		}
		r.Recorder.Eventf(ekr, nil, corev1.EventTypeWarning, is.Reason, "Reconcile", "%s", is.Message)
	}
}

// echRequeue is when the ring next needs a pass: what the plan has to do
// by the clock, and at least once per TTL (a minute at least) to check
// that DNS still answers what it should, and mend it when not.
func echRequeue(now time.Time, pass echPass) time.Duration {
	after := min(pass.policy.RotationInterval, max(pass.policy.TTL, time.Minute))
	if !pass.plan.Next.IsZero() {
		after = min(after, max(pass.plan.Next.Sub(now), time.Second))
	}
	switch pass.plan.Held {
	case echring.HoldDNS:
		after = min(after, echDNSRetry)
	case echring.HoldConfirmation:
		after = min(after, echConfirmRetry)
	}
	if pass.plan.Changed {
		after = min(after, time.Second) // look again at what was written
	}
	return after
}

// status is the ring's status after the pass.
func (r *ECHKeyRingReconciler) status(ekr *v1alpha1.ECHKeyRing, pass echPass) v1alpha1.ECHKeyRingStatus {
	st := *ekr.Status.DeepCopy()
	gen := ekr.Generation
	ring := pass.ring
	if ring.Epoch > 0 {
		st.Epoch = ring.Epoch
		st.Snapshot = distribute.ECHOwnerOf(ekr).SnapshotName(ring.Epoch)
	}
	st.Configs, st.PublishedConfig, st.NextRotation = nil, nil, nil
	for _, c := range ring.Configs {
		cs := v1alpha1.ECHConfigStatus{ID: int32(c.ID), State: v1alpha1.ECHConfigState(c.State), CreatedAt: metav1.NewTime(c.CreatedAt),
			PublishedAt: timeOrNil(c.PublishedAt), RetiredAt: timeOrNil(c.RetiredAt), ExpiresAt: timeOrNil(c.ExpiresAt)}
		st.Configs = append(st.Configs, cs)
		if c.State == echring.Published && st.PublishedConfig == nil {
			id := int32(c.ID)
			st.PublishedConfig = &id
		}
	}
	if at := echring.ReadyAt(pass.policy, ring); !at.IsZero() {
		st.NextRotation = &metav1.Time{Time: at}
	} else if at := echring.MintAt(pass.policy, ring); !at.IsZero() {
		st.NextRotation = &metav1.Time{Time: at.Add(pass.policy.DeliveryDelay)}
	}
	if pass.problem == nil {
		st.ECHConfigList = ""
		if len(pass.want) > 0 {
			st.ECHConfigList = base64.StdEncoding.EncodeToString(echring.ConfigList(pass.want))
		}
	}
	if pass.dns.Holds && pass.problem == nil && pass.plan.Held != echring.HoldDNS {
		st.DNSVerifiedAt = &metav1.Time{Time: pass.now}
	}
	if _, ok := ring.Staged(); ok {
		st.Confirmation = pass.seen
	} else {
		st.Confirmation = nil
	}

	ready := metav1.Condition{Type: v1alpha1.ConditionReady, ObservedGeneration: gen}
	_, staged := ring.Staged()
	switch {
	case pass.problem != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, pass.problem.reason, pass.problem.message
	case pass.dns.Err != nil:
		ready.Status, ready.Reason = metav1.ConditionFalse, v1alpha1.ReasonDNSUnavailable
		ready.Message = fmt.Sprintf("DNS does not take or answer the ring's configs: %v. Nothing new is published and no config is destroyed before its time", pass.dns.Err)
	case st.PublishedConfig == nil:
		ready.Status, ready.Reason = metav1.ConditionFalse, v1alpha1.ReasonAwaitingDNS
		ready.Message = "No config is published yet: the first is " + heldFor(pass.plan.Held, staged)
	default:
		ready.Status, ready.Reason = metav1.ConditionTrue, v1alpha1.ReasonPublished
		ready.Message = fmt.Sprintf("Config %d is published and DNS answers it; epoch %d is delivered", *st.PublishedConfig, ring.Epoch)
		if staged {
			ready.Message += "; the next config is " + heldFor(pass.plan.Held, staged)
		}
	}
	meta.SetStatusCondition(&st.Conditions, ready)

	overdue := metav1.Condition{Type: v1alpha1.ConditionConfirmationOverdue, ObservedGeneration: gen,
		Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonOnSchedule, Message: "No staged config waits for its fleet past spec.confirmation.timeout"}
	prev := meta.FindStatusCondition(ekr.Status.Conditions, overdue.Type)
	switch {
	case pass.plan.Published != nil && pass.plan.Unconfirmed:
		overdue.Reason, overdue.Message = v1alpha1.ReasonPublishedUnconfirmed, unconfirmedMessage(*pass.plan.Published, pass.seen)
	case pass.overdue && pass.problem == nil:
		overdue.Status, overdue.Reason = metav1.ConditionTrue, v1alpha1.ReasonAwaitingPods
		overdue.Message = fmt.Sprintf("The staged config is held back past spec.confirmation.timeout; the published config keeps serving, and the staged one is published unconfirmed at its ceiling, %s, once DNS answers it.",
			echring.CeilingAt(pass.policy, ring).UTC().Format(time.RFC3339)) + missingPods(pass.seen)
	case prev != nil && prev.Reason == v1alpha1.ReasonPublishedUnconfirmed && !pass.overdue && pass.plan.Published == nil:
		// Until the next config is published or overdue, the condition
		// says how the published one got there.
		overdue.Reason, overdue.Message = prev.Reason, prev.Message
	}
	if pass.problem == nil || meta.FindStatusCondition(st.Conditions, overdue.Type) == nil {
		meta.SetStatusCondition(&st.Conditions, overdue)
	}
	return st
}

func heldFor(h echring.Hold, staged bool) string {
	switch {
	case !staged:
		return "to be staged"
	case h == echring.HoldDelivery:
		return "staged, and waits out spec.deliveryDelay"
	case h == echring.HoldConfirmation:
		return "staged, and waits for every selected pod to hold it"
	case h == echring.HoldDNS:
		return "staged and confirmed, and waits for DNS to answer it"
	}
	return "staged"
}

// unconfirmedMessage says that config id was published at its ceiling,
// naming the pods that lacked it when last asked.
func unconfirmedMessage(id uint8, s *v1alpha1.ConfirmationStatus) string {
	return fmt.Sprintf("Config %d was published to DNS at its ceiling (spec.confirmation.maxDelay, or timeout) without every pod reporting it: a pod without it rejects ECH under it with its retry configs, and the client succeeds on retry.", id) + missingPods(s)
}

func missingPods(s *v1alpha1.ConfirmationStatus) string {
	if s == nil {
		return " The pods were not asked yet."
	}
	var names []string
	for _, m := range s.Missing {
		names = append(names, fmt.Sprintf("%s (%s)", m.Name, m.Reason))
	}
	return fmt.Sprintf(" %d of %d pods hold it; missing: %s", s.Holding, s.Pods, strings.Join(names, ", "))
}

func timeOrNil(t time.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	return &metav1.Time{Time: t}
}
