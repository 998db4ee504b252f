// Package fleet decides what a FleetRequest asks of a ring, and how far it
// got: which rings it selects (Selects), which request a ring carries out
// next (Next), and the request's status from its rings' own (Progress).
// The rings' reconciles and the FleetRequest's share these, so that both
// agree on every ring. It is pure: values in, values out.
package fleet

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

// Ring is what a FleetRequest's selection reads of a ring.
type Ring struct {
	Kind            v1alpha1.RingKind
	Namespace, Name string
	// Created is the ring's creation time: a ring created after a request
	// holds keys minted after it, and is not selected.
	Created time.Time
	// Labels are the ring's labels; LabelsCut says the operator could not
	// keep them (over its bound), so no ring selector can judge them.
	Labels    map[string]string
	LabelsCut bool
	// NamespaceLabels are the labels of a namespaced ring's namespace;
	// NamespaceCut says they were not kept.
	NamespaceLabels map[string]string
	NamespaceCut    bool
	// KeySource is the ClusterKeySource the ring mints from; "" for
	// in-cluster.
	KeySource string
}

// Selects reports whether req selects r, and, when it cannot tell (a
// selector that needs labels the operator did not keep), the reason it
// could not judge it: such a ring is not selected, and Progress counts it
// apart (status.notJudged). A request whose selector is invalid selects
// nothing (Invalid says so). To judge many rings, compile once (Compile).
func Selects(req *v1alpha1.FleetRequest, r Ring) (bool, string) {
	return Compile(req).Selects(r)
}

// Selection is a request's selection with its label selectors parsed,
// for judging every ring of a cluster against it.
type Selection struct {
	req                *v1alpha1.FleetRequest
	namespaces, labels labels.Selector
	invalid            bool
}

// Compile parses req's selectors once.
func Compile(req *v1alpha1.FleetRequest) Selection {
	sel := Selection{req: req}
	var err error
	if s := req.Spec.NamespaceSelector; s != nil {
		if sel.namespaces, err = metav1.LabelSelectorAsSelector(s); err != nil {
			sel.invalid = true
		}
	}
	if s := req.Spec.RingSelector; s != nil {
		if sel.labels, err = metav1.LabelSelectorAsSelector(s); err != nil {
			sel.invalid = true
		}
	}
	return sel
}

// Selects is Selects(req, r) for the compiled request.
func (sel Selection) Selects(r Ring) (bool, string) {
	s := sel.req.Spec
	switch {
	case sel.invalid, r.Created.After(sel.req.CreationTimestamp.Time):
		return false, ""
	case len(s.Kinds) > 0 && !slices.Contains(s.Kinds, r.Kind):
		return false, ""
	case s.KeySource != "" && s.KeySource != r.KeySource:
		return false, ""
	}
	if sel.namespaces != nil {
		switch {
		case r.Namespace == "":
			return false, ""
		case r.NamespaceCut:
			return false, v1alpha1.ReasonNamespaceLabelsNotKept
		case !sel.namespaces.Matches(labels.Set(r.NamespaceLabels)):
			return false, ""
		}
	}
	if sel.labels != nil {
		switch {
		case r.LabelsCut:
			return false, v1alpha1.ReasonRingLabelsNotKept
		case !sel.labels.Matches(labels.Set(r.Labels)):
			return false, ""
		}
	}
	return true, ""
}

// Invalid says why req's spec selects nothing: a selector that is not a
// valid label selector; "" when it is sound.
func Invalid(req *v1alpha1.FleetRequest) string {
	for _, s := range []struct {
		field string
		sel   *metav1.LabelSelector
	}{{"spec.namespaceSelector", req.Spec.NamespaceSelector}, {"spec.ringSelector", req.Spec.RingSelector}} {
		if s.sel == nil {
			continue
		}
		if _, err := metav1.LabelSelectorAsSelector(s.sel); err != nil {
			return s.field + " is invalid: " + err.Error()
		}
	}
	return ""
}

// Record is the record a ring keeps of req once it carried it out (its
// epoch and when are filled in by the pass that publishes it).
func Record(req *v1alpha1.FleetRequest) v1alpha1.FleetRequestRecord {
	return v1alpha1.FleetRequestRecord{Name: req.Name, UID: string(req.UID), CreatedAt: req.CreationTimestamp, Action: req.Spec.Action}
}

// order compares two requests by creation, then by name: the order in
// which a ring carries them out.
func order(aAt time.Time, aName string, bAt time.Time, bName string) int {
	if c := aAt.Compare(bAt); c != 0 {
		return c
	}
	return strings.Compare(aName, bName)
}

// Done reports whether a ring whose last request carried out is last has
// carried out req: it is req, or a later one (a ring carries requests out
// in order).
func Done(req *v1alpha1.FleetRequest, last *v1alpha1.FleetRequestRecord) bool {
	if last == nil {
		return false
	}
	return last.UID == string(req.UID) || order(last.CreatedAt.Time, last.Name, req.CreationTimestamp.Time, req.Name) > 0
}

// Next is the request a ring carries out next: the oldest of reqs that
// selects it, is not complete or being deleted, and that it has not
// carried out (Done); nil when none.
func Next(reqs []*v1alpha1.FleetRequest, r Ring, last *v1alpha1.FleetRequestRecord) *v1alpha1.FleetRequest {
	var next *v1alpha1.FleetRequest
	for _, req := range reqs {
		if !req.DeletionTimestamp.IsZero() || meta.IsStatusConditionTrue(req.Status.Conditions, v1alpha1.ConditionComplete) || Done(req, last) {
			continue
		}
		if ok, _ := Compile(req).Selects(r); !ok {
			continue
		}
		if next == nil || order(req.CreationTimestamp.Time, req.Name, next.CreationTimestamp.Time, next.Name) < 0 {
			next = req
		}
	}
	return next
}

// RingState is a ring as a FleetRequest's progress reads it: what
// selects it, and its status.
type RingState struct {
	Ring
	Status v1alpha1.TicketKeyRingStatus
	// Confirms says the ring has spec.confirmation: its pods report the
	// key they hold.
	Confirms bool
}

// Progress is req's status after a look at rings, from prev: what it
// selects, how many served it, how many of their pods hold it, and which
// still wait and why. Complete turns True once nothing waits.
func Progress(req *v1alpha1.FleetRequest, prev v1alpha1.FleetRequestStatus, rings []RingState, now time.Time) v1alpha1.FleetRequestStatus {
	out := *prev.DeepCopy()
	if out.StartedAt == nil {
		out.StartedAt = &metav1.Time{Time: now.Truncate(time.Second)}
	}
	out.Selected, out.Served, out.PodsTotal, out.PodsConfirmed, out.WaitingCount, out.NotJudged = 0, 0, 0, 0, 0, 0
	var waiting []v1alpha1.FleetWaiting
	var lastServed, lastPod time.Time
	byName := func(a, b v1alpha1.FleetWaiting) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	}
	wait := func(r Ring, reason string) {
		out.WaitingCount++
		waiting = append(waiting, v1alpha1.FleetWaiting{Kind: r.Kind, Namespace: r.Namespace, Name: r.Name, Reason: reason})
		if len(waiting) >= 4*v1alpha1.MaxFleetWaiting {
			// Only the first MaxFleetWaiting by name are shown: keep no
			// more than a few times that, whatever the rings waiting.
			slices.SortFunc(waiting, byName)
			waiting = waiting[:v1alpha1.MaxFleetWaiting]
		}
	}
	invalid := Invalid(req)
	sel := Compile(req)
	for _, rs := range rings {
		if invalid != "" {
			break
		}
		ok, unjudged := sel.Selects(rs.Ring)
		if unjudged != "" {
			// Never carried out (Next does not select it): it must not
			// hold the request up for ever.
			out.NotJudged++
			continue
		}
		if !ok {
			continue
		}
		out.Selected++
		rec := rs.Status.FleetRequest
		if !Done(req, rec) {
			reason := v1alpha1.ReasonPending
			if c := meta.FindStatusCondition(rs.Status.Conditions, v1alpha1.ConditionReady); c != nil && c.Status == metav1.ConditionFalse {
				reason = c.Reason
			}
			wait(rs.Ring, reason)
			continue
		}
		out.Served++
		served := rec.CreatedAt.Time
		if rec.ServedAt != nil {
			served = rec.ServedAt.Time
		}
		lastServed = later(lastServed, served)
		pods, holding, at, done := confirmed(rs, served)
		out.PodsTotal += pods
		out.PodsConfirmed += holding
		if !done {
			wait(rs.Ring, v1alpha1.ReasonAwaitingPods)
			continue
		}
		lastPod = later(lastPod, at)
	}
	slices.SortFunc(waiting, byName)
	out.Waiting = waiting[:min(len(waiting), v1alpha1.MaxFleetWaiting)]
	if len(out.Waiting) == 0 {
		out.Waiting = nil
	}
	cond := metav1.Condition{Type: v1alpha1.ConditionComplete, ObservedGeneration: req.Generation}
	switch {
	case invalid != "":
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec, invalid+"; it selects no ring: create a new FleetRequest"
		out.LastRingServedAt, out.LastPodConfirmedAt = nil, nil
	case out.WaitingCount > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ReasonInProgress
		cond.Message = progressMessage(req, out)
		if out.Served < out.Selected {
			out.LastRingServedAt = nil
		} else if out.LastRingServedAt == nil {
			out.LastRingServedAt = stamp(lastServed, now)
		}
		out.LastPodConfirmedAt = nil
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.ReasonCompleted
		cond.Message = progressMessage(req, out)
		if out.LastRingServedAt == nil {
			out.LastRingServedAt = stamp(lastServed, now)
		}
		if out.LastPodConfirmedAt == nil {
			out.LastPodConfirmedAt = stamp(later(lastPod, lastServed), now)
		}
	}
	meta.SetStatusCondition(&out.Conditions, cond)
	if c := meta.FindStatusCondition(out.Conditions, cond.Type); c != nil && c.LastTransitionTime.IsZero() {
		c.LastTransitionTime = metav1.NewTime(now.Truncate(time.Second))
	}
	return out
}

// Complete reports whether a FleetRequest's status says it is complete.
func Complete(st v1alpha1.FleetRequestStatus) bool {
	return meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionComplete)
}

// confirmed is what a served ring's pods say of its newest key: how many
// report, how many hold it, when last asked, and whether they all do. A
// ring that does not confirm, or holds no staged key to ask about (a
// revoke's fresh key encrypts at once), is done when served.
func confirmed(rs RingState, served time.Time) (pods, holding int32, at time.Time, done bool) {
	c := rs.Status.Confirmation
	if !rs.Confirms || c == nil || len(rs.Status.Keys) == 0 {
		return 0, 0, served, true
	}
	pods = c.Pods
	if c.StagedKey != rs.Status.Keys[0].ID || c.CheckedAt.Time.Before(served.Truncate(time.Second)) {
		return pods, 0, time.Time{}, false
	}
	return pods, c.Holding, c.CheckedAt.Time, c.Holding >= c.Pods
}

func progressMessage(req *v1alpha1.FleetRequest, st v1alpha1.FleetRequestStatus) string {
	var b strings.Builder
	b.WriteString(string(req.Spec.Action))
	b.WriteString(": ")
	b.WriteString(itoa(st.Served) + " of " + itoa(st.Selected) + " rings served")
	if st.PodsTotal > 0 {
		b.WriteString(", " + itoa(st.PodsConfirmed) + " of " + itoa(st.PodsTotal) + " pods confirmed")
	}
	if st.WaitingCount > 0 {
		b.WriteString(", " + itoa(st.WaitingCount) + " waiting")
	}
	if st.NotJudged > 0 {
		b.WriteString("; " + itoa(st.NotJudged) + " rings not judged, their labels or their namespace's over what the operator keeps: rotate or revoke them by their annotations")
	}
	return b.String()
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// stamp is t, or now when no ring said when (none selected).
func stamp(t, now time.Time) *metav1.Time {
	if t.IsZero() {
		t = now
	}
	return &metav1.Time{Time: t.Truncate(time.Second)}
}
