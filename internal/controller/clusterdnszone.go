package controller

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
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
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/dnspub"
	"github.com/ringmaster-io/ringmaster/internal/dnswork"
	"github.com/ringmaster-io/ringmaster/internal/dnszone"
	"github.com/ringmaster-io/ringmaster/internal/textlimit"
)

// +kubebuilder:rbac:groups=ringmaster.io,resources=clusterdnszones,verbs=get;list;watch
// +kubebuilder:rbac:groups=ringmaster.io,resources=clusterdnszones/status,verbs=patch

// A zone's TSIG Secret is read uncached (the cache holds ringmaster's own
// Secrets only), so it is checked again this often while it works, and
// this often while it does not, so that a fixed Secret shows Ready soon.
const (
	dnsZoneRecheck = 5 * time.Minute
	dnsZoneRetry   = time.Minute
)

// zoneRefIndex indexes ECHKeyRings by the ClusterDNSZone they name.
const zoneRefIndex = "spec.dns.zoneRef.name"

// ClusterDNSZoneReconciler reports in each ClusterDNSZone's Ready
// condition whether its TSIG Secret, in the operator's namespace, holds a
// well-formed key, and keeps the owner of each of its names
// (status.names): it gives a free name to the first ECHKeyRing claiming
// it, and releases a name whose owner lets it go once the value the owner
// wrote is out of DNS and the record's TTL plus the ring's margin passed.
type ClusterDNSZoneReconciler struct {
	client.Client
	// APIReader reads the TSIG Secret (no cache, no watch).
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// DNS removes the values of releasing owners, off the reconcile path.
	DNS *dnswork.Worker
	// Namespace is the operator's, where TSIG Secrets live.
	Namespace string
}

// SetupWithManager registers the controller: it watches the zones, the
// ECHKeyRings that name them or own their names, the namespaces whose
// labels decide which rings a zone admits, and the DNS worker's answers.
func (r *ClusterDNSZoneReconciler) SetupWithManager(mgr manager.Manager) error {
	return builder.ControllerManagedBy(mgr).Named("clusterdnszone").
		For(&v1alpha1.ClusterDNSZone{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.ECHKeyRing{}, handler.EnqueueRequestsFromMapFunc(r.zonesOf)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.allZones), builder.WithPredicates(labelsChanged())).
		WatchesRawSource(r.DNS.Source(v1alpha1.KindClusterDNSZone)).
		Complete(r)
}

// zonesOf maps an ECHKeyRing to the zone it names and the zones that
// record it as an owner.
func (r *ClusterDNSZoneReconciler) zonesOf(ctx context.Context, o client.Object) []reconcile.Request {
	ekr, ok := o.(*v1alpha1.ECHKeyRing)
	if !ok {
		return nil
	}
	out := []reconcile.Request{{NamespacedName: types.NamespacedName{Name: ekr.Spec.DNS.ZoneRef.Name}}}
	zones := &v1alpha1.ClusterDNSZoneList{}
	if err := r.List(ctx, zones); err != nil {
		return out // a cache read: it fails only when shutting down
	}
	for _, z := range zones.Items {
		if z.Name != ekr.Spec.DNS.ZoneRef.Name && slices.ContainsFunc(z.Status.Names, func(e v1alpha1.DNSNameOwner) bool { return e.Ring.UID == string(ekr.UID) }) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: z.Name}})
		}
	}
	return out
}

func (r *ClusterDNSZoneReconciler) allZones(ctx context.Context, _ client.Object) []reconcile.Request {
	zones := &v1alpha1.ClusterDNSZoneList{}
	if err := r.List(ctx, zones); err != nil {
		return nil
	}
	out := make([]reconcile.Request, len(zones.Items))
	for i, z := range zones.Items {
		out[i] = reconcile.Request{NamespacedName: types.NamespacedName{Name: z.Name}}
	}
	return out
}

// Reconcile checks one zone and decides the owner of each of its names.
func (r *ClusterDNSZoneReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	z := &v1alpha1.ClusterDNSZone{}
	if err := r.Get(ctx, req.NamespacedName, z); err != nil {
		if apierrors.IsNotFound(err) {
			r.DNS.Forget(dnswork.Key{Kind: v1alpha1.KindClusterDNSZone, NamespacedName: req.NamespacedName})
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("dnsZone", klog.KObj(z)))
	reason, message, key, err := r.check(ctx, z)
	if err != nil {
		return reconcile.Result{}, err
	}
	now := r.Clock.Now()
	claimants, err := r.claimants(ctx, z)
	if err != nil {
		return reconcile.Result{}, err
	}
	owners := dnszone.Assign(now, z.Status.Names, claimants, r.removals(z, claimants, key))
	r.remove(z, owners.Remove, key)
	status := *z.Status.DeepCopy()
	status.ObservedGeneration, status.Names = z.Generation, owners.Names
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: reason, Message: textlimit.Cut(message, textlimit.MessageLimit),
		ObservedGeneration: z.Generation, LastTransitionTime: metav1.NewTime(now)}
	res := reconcile.Result{RequeueAfter: dnsZoneRecheck}
	if reason != v1alpha1.ReasonZoneReady {
		ready.Status, res.RequeueAfter = metav1.ConditionFalse, dnsZoneRetry
	}
	if len(owners.Remove) > 0 {
		res.RequeueAfter = min(res.RequeueAfter, 5*time.Second)
	}
	if !owners.Next.IsZero() {
		res.RequeueAfter = min(res.RequeueAfter, max(owners.Next.Sub(now), time.Second))
	}
	r.announce(ctx, z, ready, owners)
	meta.SetStatusCondition(&status.Conditions, ready)
	return result(res, applyStatus(ctx, r.Client, z, z.Status, status))
}

// announce emits the events of the zone's changes: Ready changing, a name
// taking an owner, a name released.
func (r *ClusterDNSZoneReconciler) announce(ctx context.Context, z *v1alpha1.ClusterDNSZone, ready metav1.Condition, owners dnszone.Owners) {
	if old := meta.FindStatusCondition(z.Status.Conditions, v1alpha1.ConditionReady); old == nil || old.Status != ready.Status || old.Reason != ready.Reason || old.Message != ready.Message {
		typ := corev1.EventTypeNormal
		if ready.Status == metav1.ConditionFalse {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(z, nil, typ, ready.Reason, "Check", "%s", ready.Message)
		log.FromContext(ctx).Info("DNS zone checked", "ready", ready.Status, "reason", ready.Reason, "message", ready.Message)
	}
	for _, name := range owners.Released {
		r.Recorder.Eventf(z, nil, corev1.EventTypeNormal, v1alpha1.ReasonDNSNameReleased, "Release", "Name %s was released by its owner", name)
	}
	for _, name := range owners.Assigned {
		i := slices.IndexFunc(owners.Names, func(e v1alpha1.DNSNameOwner) bool { return e.Name == name })
		ring := owners.Names[i].Ring
		r.Recorder.Eventf(z, nil, corev1.EventTypeNormal, v1alpha1.ReasonDNSNameAssigned, "Assign", "Name %s is owned by ECHKeyRing %s/%s", name, ring.Namespace, ring.Name)
		log.FromContext(ctx).Info("DNS name assigned", "name", name, "ring", klog.KRef(ring.Namespace, ring.Name))
	}
}

// claimants reads the ECHKeyRings that name the zone or own one of its
// names, as dnszone.Assign sees them.
func (r *ClusterDNSZoneReconciler) claimants(ctx context.Context, z *v1alpha1.ClusterDNSZone) ([]dnszone.Claimant, error) {
	list := &v1alpha1.ECHKeyRingList{}
	if err := r.List(ctx, list, client.MatchingFields{zoneRefIndex: z.Name}); err != nil {
		return nil, fmt.Errorf("list the zone's ECHKeyRings: %w", err)
	}
	rings := list.Items
	for _, e := range z.Status.Names {
		if slices.ContainsFunc(rings, func(x v1alpha1.ECHKeyRing) bool { return string(x.UID) == e.Ring.UID }) {
			continue
		}
		x := v1alpha1.ECHKeyRing{}
		if err := r.Get(ctx, types.NamespacedName{Namespace: e.Ring.Namespace, Name: e.Ring.Name}, &x); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, err
		}
		rings = append(rings, x)
	}
	out := make([]dnszone.Claimant, 0, len(rings))
	for i := range rings {
		x := &rings[i]
		ns := &corev1.Namespace{}
		if err := r.Get(ctx, types.NamespacedName{Name: x.Namespace}, ns); client.IgnoreNotFound(err) != nil {
			return nil, err
		}
		out = append(out, claimant(z, x, ns.Labels))
	}
	return out, nil
}

// claimant is x as zone z sees it.
func claimant(z *v1alpha1.ClusterDNSZone, x *v1alpha1.ECHKeyRing, nsLabels map[string]string) dnszone.Claimant {
	c := dnszone.Claimant{Ref: v1alpha1.ECHKeyRingReference{Namespace: x.Namespace, Name: x.Name, UID: string(x.UID)}, Created: x.CreationTimestamp.Time,
		Window: time.Duration(x.Spec.DNS.TTL)*time.Second + x.Spec.RetirementMargin.Duration}
	d := x.Spec.DNS
	if x.DeletionTimestamp.IsZero() && d.ZoneRef.Name == z.Name && dnszone.Admit(z, nsLabels, d.Name, d.TTL) == nil {
		c.Claims = dnszone.Canonical(d.Name)
	}
	if rec := x.Status.DNSRecord; rec != nil && rec.Zone == z.Name {
		if b, err := base64.StdEncoding.DecodeString(rec.ECHConfigList); err == nil {
			c.Wrote, c.WroteName = b, rec.Name
		}
	}
	return c
}

// zoneKey is the DNS worker's key for the zone's own jobs.
func zoneKey(z *v1alpha1.ClusterDNSZone) dnswork.Key {
	return dnswork.Key{Kind: v1alpha1.KindClusterDNSZone, NamespacedName: types.NamespacedName{Name: z.Name}}
}

// removals is what the DNS worker last answered about the values of the
// zone's releasing owners being removed from their names.
func (r *ClusterDNSZoneReconciler) removals(z *v1alpha1.ClusterDNSZone, rings []dnszone.Claimant, key *dnspub.TSIG) map[string]dnszone.Removal {
	out := map[string]dnszone.Removal{}
	for _, e := range z.Status.Names {
		if e.State != v1alpha1.DNSNameReleasing || e.ReleaseAt != nil {
			continue
		}
		i := slices.IndexFunc(rings, func(c dnszone.Claimant) bool { return c.Ref.UID == e.Ring.UID })
		if i < 0 || rings[i].WroteName != e.Name || len(rings[i].Wrote) == 0 {
			continue
		}
		if res, ok := r.DNS.Want(removeJob(z, e.Name, rings[i].Wrote, key)); ok && res.Holds {
			out[e.Name] = dnszone.Removal{Gone: true, At: res.At}
		}
	}
	return out
}

// remove asks the DNS worker to remove each value from its name, and drops
// the zone's jobs of names with nothing left to remove.
func (r *ClusterDNSZoneReconciler) remove(z *v1alpha1.ClusterDNSZone, values map[string][]byte, key *dnspub.TSIG) {
	for _, e := range z.Status.Names {
		if _, ok := values[e.Name]; !ok {
			r.DNS.ForgetItem(zoneKey(z), e.Name)
		}
	}
	for name, v := range values {
		r.DNS.Want(removeJob(z, name, v, key))
	}
}

// removeJob is the job removing value, and nothing else, from name's
// record in z.
func removeJob(z *v1alpha1.ClusterDNSZone, name string, value []byte, key *dnspub.TSIG) dnswork.Job {
	return dnswork.Job{Key: zoneKey(z), Item: name, Zone: z.Name, Mode: dnswork.Remove, List: value, Target: dnszone.Target(z, name, 0, key)}
}

// check is the zone's Ready reason and message, and its TSIG key; an error
// is one a retry may mend (the API server).
func (r *ClusterDNSZoneReconciler) check(ctx context.Context, z *v1alpha1.ClusterDNSZone) (reason, message string, key *dnspub.TSIG, err error) {
	if z.Spec.Primary == "" {
		return v1alpha1.ReasonZoneReady, "verify-only: the operator checks the record and writes nothing", nil, nil
	}
	if z.Spec.TSIGSecretRef == nil {
		return v1alpha1.ReasonTSIGSecretInvalid, "spec.primary is set without spec.tsigSecretRef", nil, nil
	}
	name := r.Namespace + "/" + z.Spec.TSIGSecretRef.Name
	sec := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: z.Spec.TSIGSecretRef.Name}, sec); err != nil {
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
