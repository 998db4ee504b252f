package shape

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/ringplan"
)

// What the caches keep of a ring, of any kind, beside its identity:
//   - its finalizers, ringmaster's first, at most MaxFinalizers (a ring
//     being deleted says which hold it; an ECHKeyRing's own finalizer is
//     read);
//   - of its annotations, only the rotate-now and revoke requests, each
//     only when it could be one (at most ringplan.MaxRequestLength
//     characters: a longer value is kept as NotKept, which a reconcile
//     refuses as it would the value);
//   - of its managed fields, for each request, the entry that set it last
//     (who asked, ringstatus.RequestedBy), owning that annotation alone;
//   - its spec, whose size the API bounds but for its label selectors,
//     each kept up to MaxSelectorBytes (a longer one selects nothing, and
//     the ring reports it);
//   - its status, which only the operator writes.
//
// Its labels are kept up to MaxRingLabelBytes, for a FleetRequest's
// ringSelector (a ring with more keeps none, and is marked: such a
// selector cannot judge it, and the request says so). Its other
// annotations and managed fields, and its owner references, are not
// read, and not kept; a digest of its annotations is
// (AnnotationsDigest), so that annotating a ring still starts its
// reconcile.

// MaxRingLabelBytes bounds a ring's labels, keys and values together,
// that its cache keeps.
const MaxRingLabelBytes = 1 << 10

// NotKept is what a cache keeps of a request annotation too long to be one.
const NotKept = "not kept: over 64 characters"

// requestAnnotations are the annotations a ring's reconcile reads.
var requestAnnotations = []string{v1alpha1.RotateRequestedAtAnnotation, v1alpha1.RevokeRequestedAtAnnotation}

// Spec fields a ring's shape may cut (Cut names them).
const (
	CutPodSelector             = "spec.confirmation.podSelector"
	CutVoterNamespaceSelector  = "spec.confirmation.voterNamespaceSelector"
	CutRingNamespaceSelector   = "spec.namespaceSelector"
	CutSharedNamespaceSelector = "spec.vault.sharedRings.namespaceSelector"
	CutPolicyLabelSelector     = "spec.selector.labelSelector"
	CutPolicyNamespaceSelector = "spec.selector.namespaceSelector"
	CutFleetNamespaceSelector  = "spec.namespaceSelector"
	CutFleetRingSelector       = "spec.ringSelector"
)

// TicketKeyRing is the shape of TicketKeyRings.
func TicketKeyRing(obj any) (any, error) {
	r, ok := obj.(*v1alpha1.TicketKeyRing)
	if !ok {
		return obj, tombstone(obj, "*v1alpha1.TicketKeyRing")
	}
	out := &v1alpha1.TicketKeyRing{TypeMeta: r.TypeMeta, Spec: r.Spec, Status: r.Status}
	out.ObjectMeta = ticketRing(&r.ObjectMeta, &out.Spec, &out.Status, nil)
	return out, nil
}

// ClusterTicketKeyRing is the shape of ClusterTicketKeyRings.
func ClusterTicketKeyRing(obj any) (any, error) {
	r, ok := obj.(*v1alpha1.ClusterTicketKeyRing)
	if !ok {
		return obj, tombstone(obj, "*v1alpha1.ClusterTicketKeyRing")
	}
	out := &v1alpha1.ClusterTicketKeyRing{TypeMeta: r.TypeMeta, Spec: r.Spec, Status: r.Status}
	out.ObjectMeta = ticketRing(&r.ObjectMeta, &out.Spec.TicketKeyRingSpec, &out.Status, func(c *cuts) {
		out.Spec.NamespaceSelector = selectorValue(r.Spec.NamespaceSelector, CutRingNamespaceSelector, c)
	})
	return out, nil
}

// ticketRing keeps, of a ticket ring of either kind, its metadata
// (ringMeta) and its spec's confirmation selectors, and interns its
// status; more cuts what else its kind's spec holds. What was cut is
// marked on the metadata returned.
func ticketRing(m *metav1.ObjectMeta, spec *v1alpha1.TicketKeyRingSpec, status *v1alpha1.TicketKeyRingStatus, more func(*cuts)) metav1.ObjectMeta {
	c := carried(m)
	out := ringMeta(m, &c)
	spec.Confirmation = confirmation(spec.Confirmation, &c)
	if more != nil {
		more(&c)
	}
	internStatus(status)
	c.mark(&out)
	return out
}

// ECHKeyRing is the shape of ECHKeyRings.
func ECHKeyRing(obj any) (any, error) {
	r, ok := obj.(*v1alpha1.ECHKeyRing)
	if !ok {
		return obj, tombstone(obj, "*v1alpha1.ECHKeyRing")
	}
	c := carried(r)
	out := &v1alpha1.ECHKeyRing{TypeMeta: r.TypeMeta, ObjectMeta: ringMeta(&r.ObjectMeta, &c), Spec: r.Spec, Status: r.Status}
	conf := r.Spec.Confirmation
	conf.PodSelector = selectorValue(conf.PodSelector, CutPodSelector, &c)
	conf.VoterNamespaceSelector = selector(conf.VoterNamespaceSelector, CutVoterNamespaceSelector, &c)
	out.Spec.Confirmation = conf
	for i := range out.Status.Conditions {
		internCondition(&out.Status.Conditions[i])
	}
	c.mark(&out.ObjectMeta)
	return out, nil
}

// confirmation is a ring's spec.confirmation as kept.
func confirmation(conf *v1alpha1.Confirmation, c *cuts) *v1alpha1.Confirmation {
	if conf == nil {
		return nil
	}
	kept := *conf
	kept.PodSelector = selectorValue(conf.PodSelector, CutPodSelector, c)
	kept.VoterNamespaceSelector = selector(conf.VoterNamespaceSelector, CutVoterNamespaceSelector, c)
	return &kept
}

// ringMeta is what a ring's shape keeps of its metadata.
func ringMeta(m *metav1.ObjectMeta, c *cuts) metav1.ObjectMeta {
	out := identity(m)
	// A FleetRequest's ringSelector reads them.
	out.Labels = labelsUpTo(m.Labels, MaxRingLabelBytes, c)
	for k, v := range out.Labels {
		out.Labels[in(k)] = in(v)
	}
	out.Finalizers = finalizers(m.Finalizers, c, v1alpha1.ECHDNSFinalizer)
	for _, a := range requestAnnotations {
		v, ok := m.Annotations[a]
		if !ok {
			continue
		}
		if len(v) > ringplan.MaxRequestLength {
			v = NotKept
		}
		if out.Annotations == nil {
			out.Annotations = map[string]string{}
		}
		out.Annotations[in(a)] = in(v)
	}
	out.ManagedFields = requesters(m.ManagedFields)
	digestAnnotations(m, &out)
	return out
}

// requesters keeps, of a ring's managed fields, for each request
// annotation, the entry ringstatus.RequestedBy would name, owning that
// annotation alone: at most one entry per request, whatever the ring
// carries. The rest, the status's entry above all (every key and
// condition the operator applied), is the largest part of a ring's
// metadata, and nothing reads it.
func requesters(fields []metav1.ManagedFieldsEntry) []metav1.ManagedFieldsEntry {
	var kept []metav1.ManagedFieldsEntry
	for _, a := range requestAnnotations {
		key := []byte(`"f:` + a + `"`)
		best := -1
		var at time.Time
		for i, f := range fields {
			if f.FieldsV1 == nil || !bytes.Contains(f.FieldsV1.GetRawBytes(), key) {
				continue
			}
			if t := f.Time; best < 0 || (t != nil && t.After(at)) {
				best = i
				if t != nil {
					at = t.Time
				}
			}
		}
		if best < 0 {
			continue
		}
		f := fields[best]
		kept = append(kept, metav1.ManagedFieldsEntry{Manager: in(f.Manager), Operation: f.Operation, APIVersion: in(f.APIVersion), Time: f.Time,
			FieldsType: in(f.FieldsType), Subresource: in(f.Subresource),
			FieldsV1: metav1.NewFieldsV1(fmt.Sprintf(`{"f:metadata":{"f:annotations":{%q:{}}}}`, "f:"+a))})
	}
	return kept
}

// internStatus makes the strings of a ticket ring's status one copy each:
// the conditions' types, reasons and messages, which most rings share, and
// the key ids and states, each of which appears twice in a status.
func internStatus(st *v1alpha1.TicketKeyRingStatus) {
	for i := range st.Conditions {
		internCondition(&st.Conditions[i])
	}
	for i := range st.Keys {
		k := &st.Keys[i]
		k.ID, k.State = in(k.ID), v1alpha1.KeyState(in(string(k.State)))
	}
	if st.ActiveKey != nil {
		st.ActiveKey.ID = in(st.ActiveKey.ID)
	}
	st.LastRotateRequestedAt, st.LastRevokeRequestedAt = in(st.LastRotateRequestedAt), in(st.LastRevokeRequestedAt)
	if f := st.FleetRequest; f != nil {
		// Every ring a FleetRequest rotated records the same request.
		f.Name, f.UID, f.Action = in(f.Name), in(f.UID), v1alpha1.FleetAction(in(string(f.Action)))
	}
}

func internCondition(c *metav1.Condition) {
	c.Type, c.Status, c.Reason, c.Message = in(c.Type), metav1.ConditionStatus(in(string(c.Status))), in(c.Reason), in(c.Message)
}

// SpecCut is the problem a ring (or a cluster object) whose shape cut a
// field of its spec reports: the fields, and what to do; "" when none was
// cut.
func SpecCut(o metav1.Object) string {
	var fields []string
	for _, what := range Cut(o) {
		if strings.HasPrefix(what, "spec.") {
			fields = append(fields, what)
		}
	}
	if len(fields) == 0 {
		return ""
	}
	return SelectorCut(strings.Join(fields, " and "))
}

// uidOf interns an owner UID, which a ring's Secrets share.
func uidOf(u types.UID) types.UID { return types.UID(in(string(u))) }
