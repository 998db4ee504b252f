package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	"github.com/ringmaster-io/ringmaster/internal/confirm"
	"github.com/ringmaster-io/ringmaster/internal/controller/apply"
	"github.com/ringmaster-io/ringmaster/internal/controller/dnsname"
	"github.com/ringmaster-io/ringmaster/internal/controller/watch"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/dnspub"
	"github.com/ringmaster-io/ringmaster/internal/dnswork"
	"github.com/ringmaster-io/ringmaster/internal/dnszone"
	"github.com/ringmaster-io/ringmaster/internal/echring"
	"github.com/ringmaster-io/ringmaster/internal/mint"
	"github.com/ringmaster-io/ringmaster/internal/ringplan"
	echplan "github.com/ringmaster-io/ringmaster/internal/ringplan/ech"
	"github.com/ringmaster-io/ringmaster/internal/shape"
	"github.com/ringmaster-io/ringmaster/internal/written"
)

// +kubebuilder:rbac:groups=ringmaster.io,resources=echkeyrings,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=ringmaster.io,resources=echkeyrings/status,verbs=patch
// +kubebuilder:rbac:groups=ringmaster.io,resources=echkeyrings/finalizers,verbs=update
// +kubebuilder:rbac:groups=ringmaster.io,resources=clusterdnszones,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=ringmaster-system,resources=leases,verbs=list;watch

// ECHKeyRingReconciler stages, publishes, retires and destroys the ECH
// configs of ECHKeyRings, in each ring's own namespace and in the DNS name
// its zone lets it own. The decisions are ringplan's (DecideECH,
// FinishECH); it reads, mints, and writes what they say.
type ECHKeyRingReconciler struct {
	client.Client
	// APIReader reads the TSIG Secret, which the cache does not hold.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	Sources   *mint.Sources
	Prober    *confirm.Prober
	// DNS writes and checks the rings' records, off the reconcile path.
	DNS *dnswork.Worker
	// Namespace is the operator's: where the zones' TSIG Secrets and the
	// DNS names' records live.
	Namespace string
	// Watched are the namespaces the cache watches (--watch-namespaces);
	// empty means every one.
	Watched dnsname.Namespaces
	// KeepInBackups: see Options.KeepSecretsInBackups.
	KeepInBackups bool
	secrets       *ringSecrets
	// statuses are the statuses written that the cache may not show yet
	// (written.Statuses: the one rule of every ring kind).
	statuses written.Statuses[v1alpha1.ECHKeyRingStatus]
}

// SetupWithManager watches ECHKeyRings, their Secrets, the zones and key
// sources they name, the records of the DNS names they claim or own, and
// the prober's and the DNS worker's answers.
func (r *ECHKeyRingReconciler) SetupWithManager(mgr manager.Manager, workers int) error {
	if r.secrets == nil {
		r.secrets = &ringSecrets{Client: r.Client, APIReader: r.APIReader}
	}
	changed := builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, watch.DeletionChanged()))
	return builder.ControllerManagedBy(mgr).Named("echkeyring").WithOptions(ringWork(workers)).
		For(&v1alpha1.ECHKeyRing{}, changed).
		Watches(&v1alpha1.ECHKeyRing{}, forgetShown(&r.statuses, echStatus)).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(ringsOfSecret(v1alpha1.KindECHKeyRing))).
		Watches(&v1alpha1.ClusterDNSZone{}, handler.EnqueueRequestsFromMapFunc(r.ringsOfZone), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(r.ringsOfRecord)).
		Watches(&v1alpha1.ClusterKeySource{}, handler.EnqueueRequestsFromMapFunc(r.allRings)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.ringsIn), builder.WithPredicates(watch.LabelsChanged())).
		WatchesRawSource(r.Prober.Source(v1alpha1.KindECHKeyRing)).
		WatchesRawSource(r.DNS.Source(v1alpha1.KindECHKeyRing)).
		Complete(r)
}

// ringsOfZone maps a zone to the rings that name it: whether it admits
// them, and how they publish, may have changed.
func (r *ECHKeyRingReconciler) ringsOfZone(ctx context.Context, o client.Object) []reconcile.Request {
	list := &v1alpha1.ECHKeyRingList{}
	if err := r.List(ctx, list, client.MatchingFields{dnsname.ZoneRefIndex: o.GetName()}); err != nil {
		return nil // a cache read: it fails only when shutting down
	}
	var out []reconcile.Request
	for _, x := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: x.Namespace, Name: x.Name}})
	}
	return out
}

// ringsOfRecord maps a DNS name's record to its owner, if the cache
// watches its namespace, and to the rings that name the name: where each
// stands with it may have changed. An update maps the record before and
// after, so the owner a name passed from is enqueued too.
func (r *ECHKeyRingReconciler) ringsOfRecord(ctx context.Context, o client.Object) []reconcile.Request {
	name := o.GetAnnotations()[v1alpha1.DNSNameAnnotation]
	if name == "" {
		return nil
	}
	var out []reconcile.Request
	if l, ok := o.(*coordinationv1.Lease); ok && l.Spec.HolderIdentity != nil {
		if ns, ring, ok := strings.Cut(*l.Spec.HolderIdentity, "/"); ok && ns != "" && ring != "" && r.Watched.Has(ns) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: ring}})
		}
	}
	list := &v1alpha1.ECHKeyRingList{}
	if err := r.List(ctx, list, client.MatchingFields{dnsname.NameIndex: name}); err != nil {
		return out
	}
	for _, x := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: x.Namespace, Name: x.Name}})
	}
	return out
}

// allRings maps a key source to every ECHKeyRing: there are few.
func (r *ECHKeyRingReconciler) allRings(ctx context.Context, _ client.Object) []reconcile.Request {
	return r.ringsIn(ctx, nil)
}

// ringsIn maps a namespace whose labels changed to its ECHKeyRings (every
// ring for nil): whether their zone and key source allow them may have
// changed.
func (r *ECHKeyRingReconciler) ringsIn(ctx context.Context, ns client.Object) []reconcile.Request {
	list := &v1alpha1.ECHKeyRingList{}
	var opts []client.ListOption
	if ns != nil {
		opts = append(opts, client.InNamespace(ns.GetName()))
	}
	if err := r.List(ctx, list, opts...); err != nil {
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
			r.forget(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("echKeyRing", klog.KObj(ekr)))
	base := r.statuses.Base(ekr, ekr.Status)
	status, res, err := r.reconcile(ctx, ekr, base)
	if status == nil {
		return apply.Result(res, err)
	}
	return apply.Result(res, errors.Join(err, applyRememberedStatus(ctx, r.Client, r.APIReader, &r.statuses, ekr, base, *status,
		func(x *v1alpha1.ECHKeyRing) v1alpha1.ECHKeyRingStatus { return x.Status })))
}

// reconcile does one pass over a ring, from status base: read, decide
// (echplan.Decide), ask DNS, mint, finish (echplan.Finish), write, and
// report (echplan.Result.Report). It returns the status to write; none
// when the pass wrote the ring itself (its finalizer) and must start
// again.
func (r *ECHKeyRingReconciler) reconcile(ctx context.Context, ekr *v1alpha1.ECHKeyRing, base v1alpha1.ECHKeyRingStatus) (*v1alpha1.ECHKeyRingStatus, reconcile.Result, error) {
	owner := distribute.ECHOwnerOf(ekr)
	owner.KeepInBackups = r.KeepInBackups
	rd, target, snaps, err := r.read(ctx, ekr, owner, base)
	if err != nil {
		return nil, reconcile.Result{}, err
	}
	if done, err := r.finalizer(ctx, ekr, rd.Zone.Claim); done || err != nil {
		return nil, reconcile.Result{RequeueAfter: apply.StaleRetry}, err
	}
	dec := echplan.Decide(rd)
	dns := r.askDNS(ekr, target, dec.DNS)
	res := echplan.Finish(rd, dec, dns, r.mint(ctx, ekr, rd, dec))
	written, err := r.write(ctx, ekr, owner, res, snaps)
	rep := res.Report(written)
	r.announce(ctx, ekr, rep)
	return &rep.Status, reconcile.Result{RequeueAfter: rep.Requeue}, errors.Join(err, mintError(res.MintErr))
}

// forget drops what the operator keeps of a ring gone: the prober's and
// the DNS worker's wants, its snapshots and statuses written.
func (r *ECHKeyRingReconciler) forget(key types.NamespacedName) {
	r.Prober.Forget(confirm.Key{Kind: v1alpha1.KindECHKeyRing, NamespacedName: key})
	r.DNS.Forget(dnswork.Key{Kind: v1alpha1.KindECHKeyRing, NamespacedName: key})
	r.secrets.known.ForgetRing(v1alpha1.KindECHKeyRing, key.Namespace, key.Name)
	r.statuses.Forget(key)
}

// read gathers what the pass decides from: the ring's spec and newest
// snapshot, its zone and the claim on its name, and what its pods hold. It
// returns where the ring's record is, and the snapshots, for the writes.
func (r *ECHKeyRingReconciler) read(ctx context.Context, ekr *v1alpha1.ECHKeyRing, owner distribute.Owner, base v1alpha1.ECHKeyRingStatus) (echplan.Read, dnspub.Target, []*corev1.Secret, error) {
	rd := echplan.Read{Now: r.Clock.Now(), Generation: ekr.Generation, Policy: echPolicy(ekr.Spec), Params: echParams(ekr.Spec),
		Last: base, Deleting: !ekr.DeletionTimestamp.IsZero(), Timeout: ekr.Spec.Confirmation.Timeout.Duration,
		Current: echring.Ring{Ring: owner.RingName()}}
	if msg := shape.SpecCut(ekr); msg != "" {
		rd.Blocked = &ringplan.Problem{Reason: v1alpha1.ReasonInvalidSpec, Message: msg}
	}
	snaps, err := r.secrets.snapshots(ctx, owner)
	if err != nil {
		return rd, dnspub.Target{}, nil, err
	}
	if len(snaps) > 0 {
		rd.Current, rd.SnapshotErr = distribute.ECHRecord(snaps[0])
		rd.Unconfirmed = distribute.ECHUnconfirmed(snaps[0])
	}
	var target dnspub.Target
	if rd.Zone, target, err = r.zone(ctx, ekr); err != nil {
		return rd, target, nil, err
	}
	rd.Confirmed, rd.Seen = r.confirm(ekr, owner, rd)
	return rd, target, snaps, nil
}

// finalizer adds the ring's finalizer once it owns its name, before it
// ever writes there, and removes it once the ring owns and holds no name:
// a deleted ring goes only after it let its name go. It reports whether
// it wrote the ring (the pass then starts again on the new object).
func (r *ECHKeyRingReconciler) finalizer(ctx context.Context, ekr *v1alpha1.ECHKeyRing, c dnszone.Claim) (bool, error) {
	has := controllerutil.ContainsFinalizer(ekr, v1alpha1.ECHDNSFinalizer)
	need := c.Owned || len(c.Holding) > 0
	// No finalizer is added to a ring being deleted (the API refuses it):
	// one without wrote nothing, since it writes only once it has one.
	if has == need || (!has && !ekr.DeletionTimestamp.IsZero()) {
		return false, nil
	}
	// The patch is made from the ring's metadata as the API server holds
	// it, not as the cache keeps it: the cache keeps only the first of a
	// ring's finalizers (shape.MaxFinalizers), and a merge patch writes
	// the whole list.
	fresh := &metav1.PartialObjectMetadata{}
	fresh.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(v1alpha1.KindECHKeyRing))
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(ekr), fresh); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if fresh.UID != ekr.UID {
		return true, nil // another ring of the name: the pass starts again
	}
	patch := client.MergeFromWithOptions(fresh.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if need {
		controllerutil.AddFinalizer(fresh, v1alpha1.ECHDNSFinalizer)
	} else {
		controllerutil.RemoveFinalizer(fresh, v1alpha1.ECHDNSFinalizer)
	}
	if err := r.Patch(ctx, fresh, patch); err != nil {
		if apierrors.IsConflict(err) {
			// The ring changed since it was read (its status, a record's
			// event racing the cache): the pass starts again on the new
			// object, as after a write.
			return true, nil
		}
		return false, client.IgnoreNotFound(err)
	}
	log.FromContext(ctx).V(1).Info("Updated the ring's DNS finalizer", "present", need)
	return true, nil
}

// zone reads the ClusterDNSZone the ring names, the records of its name
// and of the names it owns, its namespace and the zone's TSIG Secret, for
// echplan.ZoneOf to say whether and where the ring may publish.
func (r *ECHKeyRingReconciler) zone(ctx context.Context, ekr *v1alpha1.ECHKeyRing) (echplan.Zone, dnspub.Target, error) {
	in := echplan.ZoneRead{Ring: ekr}
	z := &v1alpha1.ClusterDNSZone{}
	if err := r.Get(ctx, types.NamespacedName{Name: ekr.Spec.DNS.ZoneRef.Name}, z); err == nil {
		in.Zone = z
	} else if !apierrors.IsNotFound(err) {
		return echplan.Zone{}, dnspub.Target{}, err
	}
	var err error
	if in.Records, err = r.records(ctx, ekr); err != nil {
		return echplan.Zone{}, dnspub.Target{}, err
	}
	ns := &corev1.Namespace{}
	if in.NamespaceErr = r.Get(ctx, types.NamespacedName{Name: ekr.Namespace}, ns); in.NamespaceErr == nil {
		in.NamespaceLabels, in.NamespaceCut = ns.Labels, shape.WasCut(ns, shape.CutLabels)
	}
	if z := in.Zone; z != nil && z.Spec.Primary != "" && z.Spec.TSIGSecretRef != nil {
		in.TSIG = &corev1.Secret{}
		if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: z.Spec.TSIGSecretRef.Name}, in.TSIG); err != nil {
			in.TSIG, in.TSIGErr = nil, err
		}
	}
	zone, target := echplan.ZoneOf(in)
	return zone, target, nil
}

// records reads the record of the ring's name, if it has one, and those
// of every name it owns: where it stands with each. A record that is not
// its name's (another name whose hash agrees, or edited by hand) is
// none: the DNS name controller reports it.
func (r *ECHKeyRingReconciler) records(ctx context.Context, ekr *v1alpha1.ECHKeyRing) ([]dnszone.Record, error) {
	var out []dnszone.Record
	name := dnszone.Canonical(ekr.Spec.DNS.Name)
	lease, rec, err := dnsname.ReadRecord(ctx, r.Client, r.Namespace, name)
	if err != nil && lease == nil {
		return nil, err
	}
	if rec != nil {
		out = append(out, *rec)
	}
	leases := &coordinationv1.LeaseList{}
	if err := r.List(ctx, leases, client.InNamespace(r.Namespace), client.MatchingFields{dnsname.RecordOwnerIndex: string(ekr.UID)}); err != nil {
		return nil, fmt.Errorf("list the records of the ring's names: %w", err)
	}
	for i := range leases.Items {
		l := &leases.Items[i]
		if rec, err := dnszone.RecordOf(l, l.Annotations[v1alpha1.DNSNameAnnotation]); err == nil && rec.Name != name {
			out = append(out, rec)
		}
	}
	return out, nil
}

// confirm asks the prober about the staged config, and says whether every
// selected pod holds it and what they said (or, not asked yet, what the
// status last said of the same config).
func (r *ECHKeyRingReconciler) confirm(ekr *v1alpha1.ECHKeyRing, owner distribute.Owner, rd echplan.Read) (bool, *v1alpha1.ConfirmationStatus) {
	key := confirm.Key{Kind: v1alpha1.KindECHKeyRing, NamespacedName: types.NamespacedName{Namespace: ekr.Namespace, Name: ekr.Name}}
	staged, ok := rd.Current.Staged()
	if !ok {
		r.Prober.Forget(key)
		return false, nil
	}
	due, id := echring.ReadyAt(rd.Policy, rd.Current), strconv.Itoa(int(staged.ID))
	seen, asked := r.Prober.Want(confirm.Want{Key: key, Ring: owner.RingName(), StagedKey: id, Due: due,
		Namespaces: []string{ekr.Namespace}, SecretName: owner.SecretName, Confirmation: ekr.Spec.Confirmation})
	if !asked {
		if s := rd.Last.Confirmation; s != nil && s.StagedKey == id {
			return false, s
		}
		return false, nil
	}
	return seen.Confirms(rd.Now), &v1alpha1.ConfirmationStatus{StagedKey: id, Due: &metav1.Time{Time: due}, Pods: int32(seen.Pods), Holding: int32(seen.Holding),
		Missing: seen.Missing, CheckedAt: metav1.NewTime(seen.At.Truncate(time.Second)), Note: seen.Note()}
}

// askDNS hands what the record must hold to the DNS worker, and returns its
// latest answer to exactly that.
func (r *ECHKeyRingReconciler) askDNS(ekr *v1alpha1.ECHKeyRing, t dnspub.Target, want echplan.DNS) echplan.DNSAnswer {
	key := dnswork.Key{Kind: v1alpha1.KindECHKeyRing, NamespacedName: types.NamespacedName{Namespace: ekr.Namespace, Name: ekr.Name}}
	mode := map[echplan.DNSOp]dnswork.Mode{echplan.DNSPublish: dnswork.Publish, echplan.DNSVerify: dnswork.Verify, echplan.DNSRemove: dnswork.Remove}
	m, ok := mode[want.Op]
	if !ok {
		r.DNS.Forget(key)
		return echplan.DNSAnswer{}
	}
	res, known := r.DNS.Want(dnswork.Job{Key: key, Zone: ekr.Spec.DNS.ZoneRef.Name, Target: t, Mode: m, List: want.List})
	a := echplan.DNSAnswer{Known: known, Holds: res.Holds, Err: res.Err, At: res.At}
	if res.Err != nil {
		a.Message = dnswork.ForTenant(res.Err)
	}
	return a
}

// mint makes the config the pass decided on from a seed of the ring's key
// source, and says when it returned.
func (r *ECHKeyRingReconciler) mint(ctx context.Context, ekr *v1alpha1.ECHKeyRing, rd echplan.Read, d echplan.Decision) echplan.Minted {
	if d.Mint == nil || d.Halted != nil {
		return echplan.Minted{}
	}
	c, err := r.mintConfig(ctx, ekr, *d.Mint, rd.Params)
	m := echplan.Minted{Config: c, Err: err, At: r.Clock.Now()}
	if err != nil {
		detail := err.Error()
		if ekr.Spec.SourceRef != nil {
			detail = mint.ForTenant(err, ekr.Spec.SourceRef.Name)
		}
		m.Problem = &ringplan.Problem{Reason: mint.ReportedReason(err),
			Message: fmt.Sprintf("Minting a config failed: %s. Nothing new was staged and the current configs keep serving", detail)}
	}
	return m
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
		if shape.WasCut(ns, shape.CutLabels) {
			return echring.Config{}, mint.LabelsNotKept(cks.Name, ekr.Namespace, shape.MaxLabelBytes)
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

// write publishes the pass's epoch, brings the projection in line with the
// newest snapshot, and destroys the snapshots holding a config the ring no
// longer holds.
func (r *ECHKeyRingReconciler) write(ctx context.Context, ekr *v1alpha1.ECHKeyRing, owner distribute.Owner, res echplan.Result, snaps []*corev1.Secret) (echplan.Written, error) {
	var w echplan.Written
	var newest *corev1.Secret
	if len(snaps) > 0 {
		newest, w.Snapshot = snaps[0], snaps[0].Name
	}
	ring, errs := res.Next, []error(nil)
	if res.Write {
		snap, err := distribute.ECHSnapshot(owner, res.Next, res.Recorded)
		if err == nil {
			w.Problem, err = r.secrets.publish(ctx, owner, snap)
		} else {
			w.Problem = &ringplan.Problem{Reason: v1alpha1.ReasonPublishFailed, Message: err.Error()}
		}
		if w.Problem == nil {
			log.FromContext(ctx).Info("Published ECH epoch", "epoch", res.Next.Epoch, "snapshot", snap.Name, "configs", res.Next.String())
			newest, w.Snapshot, w.Published = snap, snap.Name, true
		} else {
			ring = res.Plan.Ring
		}
		errs = append(errs, err)
	}
	if newest != nil && w.Problem == nil {
		failed, err := r.secrets.deliver(ctx, owner, newest, []string{ekr.Namespace})
		if len(failed) > 0 {
			w.Problem = &ringplan.Problem{Reason: failed[0].Reason, Message: failed[0].Message}
		}
		errs = append(errs, err)
	}
	errs = append(errs, r.secrets.destroy(ctx, owner, snaps, func(s *corev1.Secret) bool { return staleECH(s, ring) }))
	return w, errors.Join(errs...)
}

// staleECH says whether snapshot s, older than ring, holds a config ring
// no longer holds (by its key, whatever its bytes): its keys must be gone,
// not only unused.
func staleECH(s *corev1.Secret, ring echring.Ring) bool {
	if distribute.SnapshotEpoch(s) >= ring.Epoch {
		return false
	}
	old, err := distribute.ECHRecord(s)
	return err != nil || slices.ContainsFunc(old.Configs, func(c echring.Config) bool { return !ring.Holds(c) })
}

// announce emits what the pass reports: its events, and a config
// published unconfirmed (counted).
func (r *ECHKeyRingReconciler) announce(ctx context.Context, ekr *v1alpha1.ECHKeyRing, rep ringplan.Report[v1alpha1.ECHKeyRingStatus]) {
	apply.Emit(ctx, r.Recorder, ekr, ekr.Namespace, rep.Events)
	if rep.Counts.Unconfirmed {
		unconfirmedPublicationsTotal.WithLabelValues(ekr.Namespace, ekr.Name).Inc()
	}
}

// echPolicy is the lifecycle's reading of the spec.
func echPolicy(s v1alpha1.ECHKeyRingSpec) echring.Policy {
	return echring.Policy{RotationInterval: s.RotationInterval.Duration, DeliveryDelay: s.DeliveryDelay.Duration,
		TTL: time.Duration(s.DNS.TTL) * time.Second, RetirementMargin: s.RetirementMargin.Duration, MaxDelay: echCeiling(s.Confirmation),
		RetainedConfigs: int(s.RetainedConfigs)}
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

// echStatus is an ECHKeyRing's status.
func echStatus(obj client.Object) (v1alpha1.ECHKeyRingStatus, bool) {
	r, ok := obj.(*v1alpha1.ECHKeyRing)
	if !ok {
		return v1alpha1.ECHKeyRingStatus{}, false
	}
	return r.Status, true
}
