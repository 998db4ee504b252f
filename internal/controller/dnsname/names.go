package dnsname

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/controller/watch"
	"github.com/ringmaster-io/ringmaster/internal/dnspub"
	"github.com/ringmaster-io/ringmaster/internal/dnswork"
	"github.com/ringmaster-io/ringmaster/internal/dnszone"
	"github.com/ringmaster-io/ringmaster/internal/shape"
)

// The records of DNS names' owners are Leases in the operator's namespace:
// read from the cache (list, watch), created when a name takes its first
// owner, patched (with the resourceVersion read) when it changes hands or
// state, deleted (with the UID and resourceVersion read) when nobody
// claims it any more.
//
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=ringmaster-system,resources=leases,verbs=list;watch;create;patch;delete

// Indexes of the cache, for the few objects a change concerns.
const (
	// NameIndex indexes ECHKeyRings by their canonical spec.dns.name:
	// the claimants of a name are one lookup.
	NameIndex = "spec.dns.name.canonical"
	// RecordOwnerIndex indexes the records of DNS names by the UID of the
	// ring that owns them, and RecordZoneIndex by the ClusterDNSZone that
	// admitted it.
	RecordOwnerIndex = "dnsRecord.ownerUID"
	RecordZoneIndex  = "dnsRecord.zone"
)

// Timings of the DNS name controller.
const (
	// dnsRemovalRetry is how soon a name whose owner's value waits to
	// leave DNS is looked at again; the DNS worker enqueues it sooner
	// when its answer changes. It also keeps the worker's job wanted.
	dnsRemovalRetry = 5 * time.Second
	// recordRaceRetry is how soon a name whose record changed under the
	// pass (another writer, or a cache behind the API server) is decided
	// again; the record's watch event enqueues it sooner.
	recordRaceRetry = time.Second
)

// errRecordChanged says the record changed since it was read: the create
// found one (AlreadyExists), or the patch or delete a newer version. The
// pass is not lost: the name is decided again from what the record holds
// now, so two writers can never both win.
var errRecordChanged = errors.New("the DNS name's record changed since it was read")

// Reconciler decides who owns each DNS name that ECHKeyRings claim
// or own, one name at a time (its request's Name is the canonical DNS
// name; its namespace is empty), so that one name's trouble never holds up
// another's: a name has one owner across the cluster whatever
// ClusterDNSZones allow it, recorded in one Lease per name
// (dnszone.Record) that the API server makes unique. The decision is
// dnszone.Decide's; the controller reads the record, the rings that name
// the name (each judged against its own zone) and the owner, asks the DNS
// worker to remove a releasing owner's value, and writes the record.
type Reconciler struct {
	client.Client
	// APIReader reads the TSIG Secret of the zone removing a releasing
	// owner's value (no cache, no watch).
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// DNS removes the values of releasing owners, off the reconcile path.
	DNS *dnswork.Worker
	// Namespace is the operator's: where the records and the TSIG
	// Secrets live.
	Namespace string
	// Watched are the namespaces the cache watches (--watch-namespaces);
	// empty means every one.
	Watched Namespaces

	// reported holds, by name, the record last reported as one the pass
	// cannot act on (its owner unwatched, or the record malformed), so that
	// it is reported once, not at every pass.
	reported sync.Map
}

// Namespaces are the namespaces whose namespaced objects the
// operator's cache holds; empty means every one.
type Namespaces []string

// has reports whether the cache holds ns's objects.
func (w Namespaces) Has(ns string) bool { return len(w) == 0 || slices.Contains(w, ns) }

// SetupWithManager registers the controller: it watches the ECHKeyRings
// (their names, and the names whose records they hold), the records, the
// zones and namespaces that decide which rings are admitted, and the DNS
// worker's answers.
func (r *Reconciler) SetupWithManager(mgr manager.Manager, workers int) error {
	return builder.ControllerManagedBy(mgr).Named("dnsname").WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Watches(&v1alpha1.ECHKeyRing{}, handler.EnqueueRequestsFromMapFunc(r.namesOfRing), builder.WithPredicates(claimChanged())).
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(nameOfRecord)).
		Watches(&v1alpha1.ClusterDNSZone{}, handler.EnqueueRequestsFromMapFunc(r.namesOfZone), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.namesIn), builder.WithPredicates(watch.LabelsChanged())).
		WatchesRawSource(r.DNS.Source(dnswork.KindDNSName)).
		Complete(r)
}

// claimChanged passes the changes of a ring that may change what it
// claims or holds: its spec, its deletion, its annotations (a request to
// look again) and the value it last saw DNS answer.
func claimChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*v1alpha1.ECHKeyRing)
		n, ok2 := e.ObjectNew.(*v1alpha1.ECHKeyRing)
		if !ok1 || !ok2 {
			return true
		}
		return o.Generation != n.Generation || o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero() ||
			!maps.Equal(o.Annotations, n.Annotations) || !equality.Semantic.DeepEqual(o.Status.DNSRecord, n.Status.DNSRecord)
	}}
}

// nameRequest is the request of one DNS name.
func nameRequest(name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Name: dnszone.Canonical(name)}}
}

// namesOfRing maps a ring to the name it claims and the names whose
// records it holds (it may have been renamed).
func (r *Reconciler) namesOfRing(ctx context.Context, o client.Object) []reconcile.Request {
	x, ok := o.(*v1alpha1.ECHKeyRing)
	if !ok {
		return nil
	}
	out := []reconcile.Request{nameRequest(x.Spec.DNS.Name)}
	return append(out, r.recordRequests(ctx, client.MatchingFields{RecordOwnerIndex: string(x.UID)})...)
}

// nameOfRecord maps a record to its name.
func nameOfRecord(_ context.Context, o client.Object) []reconcile.Request {
	if name := o.GetAnnotations()[v1alpha1.DNSNameAnnotation]; name != "" && name == dnszone.Canonical(name) {
		return []reconcile.Request{nameRequest(name)}
	}
	return nil
}

// namesOfZone maps a zone to the names of the rings that name it, the
// names owned through it, and the names its status listed before names
// had records of their own.
func (r *Reconciler) namesOfZone(ctx context.Context, o client.Object) []reconcile.Request {
	list := &v1alpha1.ECHKeyRingList{}
	if err := r.List(ctx, list, client.MatchingFields{ZoneRefIndex: o.GetName()}); err != nil {
		return nil // a cache read: it fails only when shutting down
	}
	var out []reconcile.Request
	for _, x := range list.Items {
		out = append(out, nameRequest(x.Spec.DNS.Name))
	}
	if z, ok := o.(*v1alpha1.ClusterDNSZone); ok && z.Status.NameCounts == nil {
		for _, e := range z.Status.Names {
			out = append(out, nameRequest(e.Name))
		}
	}
	return append(out, r.recordRequests(ctx, client.MatchingFields{RecordZoneIndex: o.GetName()})...)
}

// namesIn maps a namespace whose labels changed to the names of its rings:
// whether their zones admit them may have changed.
func (r *Reconciler) namesIn(ctx context.Context, ns client.Object) []reconcile.Request {
	list := &v1alpha1.ECHKeyRingList{}
	if err := r.List(ctx, list, client.InNamespace(ns.GetName())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, x := range list.Items {
		out = append(out, nameRequest(x.Spec.DNS.Name))
	}
	return out
}

func (r *Reconciler) recordRequests(ctx context.Context, match client.MatchingFields) []reconcile.Request {
	leases := &coordinationv1.LeaseList{}
	if err := r.List(ctx, leases, client.InNamespace(r.Namespace), match); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range leases.Items {
		out = append(out, nameOfRecord(ctx, &leases.Items[i])...)
	}
	return out
}

// Reconcile decides the owner of one DNS name and writes its record.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	name := req.Name
	if req.Namespace != "" || name == "" || name != dnszone.Canonical(name) {
		return reconcile.Result{}, nil
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("dnsName", name))
	res, err := r.reconcile(ctx, name)
	if errors.Is(err, errRecordChanged) {
		log.FromContext(ctx).V(1).Info("The DNS name's record changed under the pass; deciding again")
		return reconcile.Result{RequeueAfter: recordRaceRetry}, nil
	}
	return res, err
}

func (r *Reconciler) reconcile(ctx context.Context, name string) (reconcile.Result, error) {
	lease, rec, err := ReadRecord(ctx, r.Client, r.Namespace, name)
	switch {
	case err != nil && lease == nil:
		return reconcile.Result{}, err
	case err != nil:
		r.reportOnce(ctx, name, lease.ResourceVersion, func(zones []*v1alpha1.ClusterDNSZone) {
			log.FromContext(ctx).Error(err, "The DNS name's record cannot be read; it is left as it is, and the name waits", "lease", klog.KObj(lease))
			for _, z := range zones {
				r.Recorder.Eventf(z, nil, corev1.EventTypeWarning, v1alpha1.ReasonDNSNameRecordConflict, "Record",
					"Name %s: its record, Lease %s/%s, is not this name's or cannot be read (%v); it is left as it is, and the name waits until an administrator deletes it", name, lease.Namespace, lease.Name, err)
			}
		})
		return reconcile.Result{}, nil
	case rec == nil:
		if done, err := r.migrate(ctx, name); done || err != nil {
			return reconcile.Result{}, err
		}
	}
	cr := newClaimReader(r.Client)
	rings, err := r.claimants(ctx, cr, name, rec)
	if errors.Is(err, errUnwatched) {
		r.reportOnce(ctx, name, rec.Ring.UID, func([]*v1alpha1.ClusterDNSZone) {
			log.FromContext(ctx).Info("The DNS name's owner is in a namespace the operator does not watch: its record is left as it is, and the name waits",
				"ring", klog.KRef(rec.Ring.Namespace, rec.Ring.Name), "dnsZone", klog.KRef("", rec.Zone))
			if z, _ := cr.zone(ctx, rec.Zone); z != nil {
				r.Recorder.Eventf(z, nil, corev1.EventTypeWarning, v1alpha1.ReasonDNSNameOwnerNotWatched, "Decide",
					"Name %s is owned by ECHKeyRing %s/%s, in a namespace the operator does not watch (--watch-namespaces): its record is left as it is and the name waits; watch that namespace again, or delete Lease %s/%s to free the name",
					name, rec.Ring.Namespace, rec.Ring.Name, r.Namespace, dnszone.LeaseName(name))
			}
		})
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	r.reported.Delete(name)
	in := dnszone.NameRead{Now: r.Clock.Now(), Name: name, Record: rec, Rings: rings}
	var zone *v1alpha1.ClusterDNSZone
	if rec != nil {
		if zone, err = cr.zone(ctx, rec.Zone); err != nil {
			return reconcile.Result{}, err
		}
		in.ZoneGone = zone == nil
	}
	job, err := r.removalJob(ctx, in, zone)
	if err != nil {
		return reconcile.Result{}, err
	}
	if job != nil {
		if res, ok := r.DNS.Want(*job); ok && res.Holds {
			in.Removal = dnszone.Removal{Gone: true, At: res.At}
		}
	}
	d := dnszone.Decide(in)
	if job == nil || d.Remove == nil {
		r.DNS.Forget(dnsNameKey(name))
	}
	if err := r.write(ctx, lease, rec, d.Record); err != nil {
		return reconcile.Result{}, err
	}
	r.announce(ctx, cr, name, d)
	var res reconcile.Result
	if d.Remove != nil {
		res.RequeueAfter = dnsRemovalRetry
	}
	if !d.Next.IsZero() {
		after := max(d.Next.Sub(in.Now), time.Second)
		if res.RequeueAfter == 0 || after < res.RequeueAfter {
			res.RequeueAfter = after
		}
	}
	return res, nil
}

// readDNSRecord reads the record of name from the cache: nil when it has
// none. An error with a Lease says the Lease is not name's well-formed
// record (another name's, or edited by hand).
func ReadRecord(ctx context.Context, c client.Reader, namespace, name string) (*coordinationv1.Lease, *dnszone.Record, error) {
	l := &coordinationv1.Lease{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: dnszone.LeaseName(name)}, l); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("read the record of DNS name %s: %w", name, err)
	}
	rec, err := dnszone.RecordOf(l, name)
	if err != nil {
		return l, nil, err
	}
	return l, &rec, nil
}

// migrate records name's owner from the zones' statuses of before names
// had records of their own, if one lists it, before any other ring can
// take the name. It reports whether it wrote the record: the pass then
// starts again from it.
func (r *Reconciler) migrate(ctx context.Context, name string) (bool, error) {
	zones := &v1alpha1.ClusterDNSZoneList{}
	if err := r.List(ctx, zones); err != nil {
		return false, err
	}
	rec, ok := dnszone.LegacyRecords(zones.Items)[name]
	if !ok {
		return false, nil
	}
	return true, createLegacyRecord(ctx, r.Client, r.Namespace, rec)
}

// createLegacyRecord creates the record of a name its zone's status listed
// before names had records of their own; one that exists already stays.
func createLegacyRecord(ctx context.Context, c client.Client, namespace string, rec dnszone.Record) error {
	if err := c.Create(ctx, dnszone.NewLease(namespace, rec)); client.IgnoreAlreadyExists(err) != nil {
		return fmt.Errorf("record the owner of DNS name %s: %w", rec.Name, err)
	}
	log.FromContext(ctx).Info("Recorded the owner of a DNS name from its zone's status", "dnsName", rec.Name,
		"ring", klog.KRef(rec.Ring.Namespace, rec.Ring.Name), "dnsZone", klog.KRef("", rec.Zone), "state", rec.State)
	return nil
}

// errUnwatched says the record's owner is in a namespace the cache does
// not watch: nothing can be known of it, so nothing is decided.
var errUnwatched = errors.New("the owner's namespace is not watched")

// claimants reads the rings that name name, and the record's owner
// wherever it is, as dnszone.Decide sees them.
func (r *Reconciler) claimants(ctx context.Context, cr *claimReader, name string, rec *dnszone.Record) ([]dnszone.Claimant, error) {
	list := &v1alpha1.ECHKeyRingList{}
	if err := r.List(ctx, list, client.MatchingFields{NameIndex: name}); err != nil {
		return nil, fmt.Errorf("list the ECHKeyRings naming %s: %w", name, err)
	}
	rings := list.Items
	if rec != nil && !slices.ContainsFunc(rings, func(x v1alpha1.ECHKeyRing) bool { return string(x.UID) == rec.Ring.UID }) {
		if !r.Watched.Has(rec.Ring.Namespace) {
			return nil, errUnwatched
		}
		x := v1alpha1.ECHKeyRing{}
		err := r.Get(ctx, types.NamespacedName{Namespace: rec.Ring.Namespace, Name: rec.Ring.Name}, &x)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("read the owner of DNS name %s: %w", name, err)
		case string(x.UID) == rec.Ring.UID:
			rings = append(rings, x)
		}
	}
	out := make([]dnszone.Claimant, 0, len(rings))
	for i := range rings {
		c, err := cr.claimant(ctx, name, &rings[i])
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// removalJob is the DNS worker's job removing the releasing owner's value
// from the name's record, through the zone that admitted it, when the
// decision may want it: nil when it cannot (the record not Releasing, nor
// about to be, its release time known, or the owner wrote nothing).
func (r *Reconciler) removalJob(ctx context.Context, in dnszone.NameRead, z *v1alpha1.ClusterDNSZone) (*dnswork.Job, error) {
	rec := in.Record
	if rec == nil || z == nil || !rec.ReleaseAt.IsZero() {
		return nil, nil
	}
	i := slices.IndexFunc(in.Rings, func(c dnszone.Claimant) bool { return c.Ref.UID == rec.Ring.UID })
	if i < 0 || len(in.Rings[i].Wrote) == 0 {
		return nil, nil
	}
	owner := in.Rings[i]
	if rec.State == v1alpha1.DNSNameOwned && owner.Claims && owner.Zone == rec.Zone {
		return nil, nil // it keeps the name
	}
	_, _, key, err := zoneTSIG(ctx, r.APIReader, r.Namespace, z)
	if err != nil {
		return nil, err
	}
	return &dnswork.Job{Key: dnsNameKey(in.Name), Zone: z.Name, Mode: dnswork.Remove, List: owner.Wrote, Target: dnszone.Target(z, in.Name, 0, key)}, nil
}

// dnsNameKey is the DNS worker's key of a name's removal job.
func dnsNameKey(name string) dnswork.Key {
	return dnswork.Key{Kind: dnswork.KindDNSName, NamespacedName: types.NamespacedName{Name: name}}
}

// write makes the record say next (nil: no owner), from lease and rec as
// read: a create, a patch of the version read, or a delete of that
// version. errRecordChanged says another writer, or a newer version, came
// first.
func (r *Reconciler) write(ctx context.Context, lease *coordinationv1.Lease, rec, next *dnszone.Record) error {
	var err error
	switch {
	case lease == nil && next == nil:
		return nil
	case lease == nil:
		err = r.Create(ctx, dnszone.NewLease(r.Namespace, *next))
	case next == nil:
		uid, version := lease.UID, lease.ResourceVersion
		err = r.Delete(ctx, lease, client.Preconditions{UID: &uid, ResourceVersion: &version})
		if apierrors.IsNotFound(err) {
			return nil
		}
	case rec != nil && dnszone.Same(*rec, *next):
		return nil
	default:
		base := lease.DeepCopy()
		dnszone.SetLease(lease, *next)
		err = r.Patch(ctx, lease, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	}
	switch {
	case apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		return errRecordChanged
	case err != nil:
		return fmt.Errorf("write the record of DNS name: %w", err)
	}
	return nil
}

// announce emits the events of a name changing hands, on the zones that
// admitted its owners.
func (r *Reconciler) announce(ctx context.Context, cr *claimReader, name string, d dnszone.NameDecision) {
	if rel := d.Released; rel != nil {
		log.FromContext(ctx).Info("DNS name released", "ring", klog.KRef(rel.Ring.Namespace, rel.Ring.Name), "dnsZone", klog.KRef("", rel.Zone))
		if z, _ := cr.zone(ctx, rel.Zone); z != nil {
			r.Recorder.Eventf(z, nil, corev1.EventTypeNormal, v1alpha1.ReasonDNSNameReleased, "Release", "Name %s was released by its owner, ECHKeyRing %s/%s", name, rel.Ring.Namespace, rel.Ring.Name)
		}
	}
	if d.Assigned {
		rec := d.Record
		log.FromContext(ctx).Info("DNS name assigned", "ring", klog.KRef(rec.Ring.Namespace, rec.Ring.Name), "dnsZone", klog.KRef("", rec.Zone))
		if z, _ := cr.zone(ctx, rec.Zone); z != nil {
			r.Recorder.Eventf(z, nil, corev1.EventTypeNormal, v1alpha1.ReasonDNSNameAssigned, "Assign", "Name %s is owned by ECHKeyRing %s/%s", name, rec.Ring.Namespace, rec.Ring.Name)
		}
	}
}

// reportOnce calls report with the zones of the name's claimants the first
// time the name's record is what version says (its resourceVersion, or
// its owner's UID), and never again for it.
func (r *Reconciler) reportOnce(ctx context.Context, name, version string, report func([]*v1alpha1.ClusterDNSZone)) {
	if last, ok := r.reported.Load(name); ok && last == version {
		return
	}
	r.reported.Store(name, version)
	list := &v1alpha1.ECHKeyRingList{}
	_ = r.List(ctx, list, client.MatchingFields{NameIndex: name})
	cr := newClaimReader(r.Client)
	var zones []*v1alpha1.ClusterDNSZone
	for _, x := range list.Items {
		if z, _ := cr.zone(ctx, x.Spec.DNS.ZoneRef.Name); z != nil && !slices.Contains(zones, z) {
			zones = append(zones, z)
		}
	}
	report(zones)
}

// claimReader reads rings as dnszone sees them, with the zones and
// namespaces it read kept for one reconcile.
type claimReader struct {
	c      client.Reader
	zones  map[string]*v1alpha1.ClusterDNSZone
	labels map[string]map[string]string
	// cut are the namespaces whose labels the cache did not keep.
	cut map[string]bool
}

func newClaimReader(c client.Reader) *claimReader {
	return &claimReader{c: c, zones: map[string]*v1alpha1.ClusterDNSZone{}, labels: map[string]map[string]string{}, cut: map[string]bool{}}
}

// zone is the ClusterDNSZone named name; nil when there is none.
func (cr *claimReader) zone(ctx context.Context, name string) (*v1alpha1.ClusterDNSZone, error) {
	if z, ok := cr.zones[name]; ok {
		return z, nil
	}
	z := &v1alpha1.ClusterDNSZone{}
	if err := cr.c.Get(ctx, types.NamespacedName{Name: name}, z); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("read ClusterDNSZone %s: %w", name, err)
		}
		z = nil
	}
	cr.zones[name] = z
	return z, nil
}

// claimant is x as the decision over name sees it, judged against its own
// zone.
func (cr *claimReader) claimant(ctx context.Context, name string, x *v1alpha1.ECHKeyRing) (dnszone.Claimant, error) {
	z, err := cr.zone(ctx, x.Spec.DNS.ZoneRef.Name)
	if err != nil {
		return dnszone.Claimant{}, err
	}
	l, ok := cr.labels[x.Namespace]
	if !ok {
		ns := &corev1.Namespace{}
		if err := cr.c.Get(ctx, types.NamespacedName{Name: x.Namespace}, ns); client.IgnoreNotFound(err) != nil {
			return dnszone.Claimant{}, fmt.Errorf("read namespace %s: %w", x.Namespace, err)
		}
		l = ns.Labels
		cr.labels[x.Namespace] = l
		if shape.WasCut(ns, shape.CutLabels) {
			cr.cut[x.Namespace] = true
		}
	}
	if cr.cut[x.Namespace] && z != nil && dnszone.Unjudged(z, x.Namespace, shape.MaxLabelBytes) != nil {
		z = nil // its zone cannot judge its namespace: it claims nothing
	}
	return dnszone.ClaimantOf(name, x, z, l), nil
}

// zoneTSIG is a zone's Ready reason and message, and its TSIG key; an
// error is one a retry may mend (the API server).
func zoneTSIG(ctx context.Context, reader client.Reader, namespace string, z *v1alpha1.ClusterDNSZone) (reason, message string, key *dnspub.TSIG, err error) {
	if z.Spec.Primary == "" {
		return v1alpha1.ReasonZoneReady, "verify-only: the operator checks the record and writes nothing", nil, nil
	}
	if z.Spec.TSIGSecretRef == nil {
		return v1alpha1.ReasonTSIGSecretInvalid, "spec.primary is set without spec.tsigSecretRef", nil, nil
	}
	name := namespace + "/" + z.Spec.TSIGSecretRef.Name
	sec := &corev1.Secret{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: z.Spec.TSIGSecretRef.Name}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return v1alpha1.ReasonTSIGSecretNotFound, fmt.Sprintf("Secret %s named by spec.tsigSecretRef does not exist", name), nil, nil
		}
		return "", "", nil, fmt.Errorf("read the TSIG Secret %s: %w", name, err)
	}
	key, err = dnszone.TSIG(sec.Data)
	if err != nil {
		return v1alpha1.ReasonTSIGSecretInvalid, fmt.Sprintf("Secret %s: %v", name, err), nil, nil
	}
	return v1alpha1.ReasonZoneReady, fmt.Sprintf("updates to %s are signed with %s", z.Spec.Primary, key), key, nil
}

// Index indexes ECHKeyRings by the zone they name and their
// canonical DNS name, and the records of DNS names' owners by their
// owner's UID and the zone that admitted it: every map from one to the
// others is a lookup.
func Index(ctx context.Context, mgr manager.Manager) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &v1alpha1.ECHKeyRing{}, ZoneRefIndex, func(o client.Object) []string {
		return []string{o.(*v1alpha1.ECHKeyRing).Spec.DNS.ZoneRef.Name}
	}); err != nil {
		return fmt.Errorf("index ECHKeyRings by zone: %w", err)
	}
	if err := idx.IndexField(ctx, &v1alpha1.ECHKeyRing{}, NameIndex, func(o client.Object) []string {
		return []string{dnszone.Canonical(o.(*v1alpha1.ECHKeyRing).Spec.DNS.Name)}
	}); err != nil {
		return fmt.Errorf("index ECHKeyRings by DNS name: %w", err)
	}
	for index, key := range map[string]func(client.Object) string{
		RecordOwnerIndex: func(o client.Object) string { return o.GetLabels()[v1alpha1.DNSOwnerUIDLabel] },
		RecordZoneIndex:  func(o client.Object) string { return o.GetAnnotations()[v1alpha1.DNSZoneAnnotation] },
	} {
		if err := idx.IndexField(ctx, &coordinationv1.Lease{}, index, func(o client.Object) []string {
			if v := key(o); v != "" {
				return []string{v}
			}
			return nil
		}); err != nil {
			return fmt.Errorf("index the records of DNS names (%s): %w", index, err)
		}
	}
	return nil
}
