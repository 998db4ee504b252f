package ticket

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/ringplan"
)

// Publication is the ring the reconcile publishes, numbered, when it
// publishes one: the epoch after the newest on record and the newest the
// status reports, or the shared entry's version, whichever is later.
func (r Result) Publication() (keyring.Ring, bool) {
	if !r.Publish || r.in.Halted != nil {
		return keyring.Ring{}, false
	}
	next := r.Next
	next.Epoch = max(keyring.NextEpoch(r.in.Current, r.in.Last.Epoch), r.Requests.Shared)
	return next, true
}

// Announced reports whether the publication gets a Normal Rotated event:
// only one that carries out a rotate-now request now. A scheduled rotation
// and a new ring's first epoch are routine; the status, the rotation
// counter and the log record them, and an event for each would be one more
// write per rotation for every ring. A revoke has its Warning Revoked, and
// a failure its Warning.
func (r Result) Announced() bool {
	_, ok := r.Publication()
	return ok && r.Requests.Rotate != "" && !r.in.History.Handled(r.Requests.Rotate)
}

// Applied is how the reconcile's writes went.
type Applied struct {
	// Publish says why the publication's snapshot could not be written:
	// nothing new is published, and the ring reports the epoch it serves.
	Publish *ringplan.Problem
	// Failed are the targets that did not receive the newest epoch.
	Failed []v1alpha1.TargetFailure
}

// Read is what the reconcile read, as Finish was given it.
func (r Result) Read() Read { return r.in }

// Report is the ring's report after the pass and its writes: its status,
// when to look again, the events its writes and its conditions' changes
// call for, and what its metrics count. A publication that could not be
// written rolls the status back to the epoch the ring serves, and echoes
// no request.
func (r Result) Report(w Applied) ringplan.Report[v1alpha1.TicketKeyRingStatus] {
	in := r.in
	p := Pass{Now: in.Now, Generation: in.Ring.Generation, Targets: in.Ring.Targets, Formats: in.Ring.Formats,
		RetainedKeys: in.Ring.RetainedKeys, Confirm: in.Ring.Confirm, Current: in.Current, Confirmation: in.Shown,
		Overdue: in.OverdueSince, Shared: r.SharedStatus, Refused: in.Refused}
	var rep ringplan.Report[v1alpha1.TicketKeyRingStatus]
	if in.Halted != nil {
		p.Halted = in.Halted
		return r.settle(rep, p)
	}
	p = r.report(p)
	if r.RotationFailed {
		rep.Counts.Failed++
	}
	next := r.Serving(in)
	if pub, ok := r.Publication(); ok {
		if w.Publish != nil {
			// Nothing new is published, but older snapshots holding keys
			// the current ring already dropped still go.
			rep.Counts.Failed++
			p.Publish, p.RotateRequest, p.RevokeRequest, p.Revocation, p.Fleet = w.Publish, "", "", nil, nil
			p.Ring, p.Snapshot, p.Failed = in.Current, in.Last.Snapshot, w.Failed
			rep = r.settle(rep, p)
			rep.Requeue = ringplan.ConflictRetry
			return rep
		}
		next, rep.Counts.Rotated = pub, !r.MintFailed
		snapshot := in.Ring.Owner.SnapshotName(pub.Epoch)
		if r.Announced() {
			rep.Events = append(rep.Events, ringplan.Event{Reason: "Rotated", Action: "Publish", Regarding: snapshot,
				Note: fmt.Sprintf("Published epoch %d (%s): %s", pub.Epoch, snapshot, Describe(pub, r.Plan, in.Now))})
		}
		if p.Revocation != nil {
			p.Revocation.Epoch = pub.Epoch
		}
		if p.Fleet != nil && p.Fleet.Epoch == 0 {
			p.Fleet.Epoch, p.Fleet.ServedAt = pub.Epoch, &metav1.Time{Time: in.Now.Truncate(time.Second)}
		}
	} else if p.Fleet != nil && p.Fleet.Epoch == 0 && r.Requests.Fleet != "" && p.Fleet.Action == v1alpha1.FleetRotate {
		// A rotate-now whose staged key already activates as early as is
		// safe changes nothing: the epoch served carries it out. A revoke
		// is served only by the epoch that dropped the keys.
		p.Fleet.Epoch, p.Fleet.ServedAt = next.Epoch, &metav1.Time{Time: in.Now.Truncate(time.Second)}
	}
	p.Ring, p.Snapshot, p.Failed = next, in.Ring.Owner.SnapshotName(next.Epoch), w.Failed
	rep = r.settle(rep, p)
	if rev := p.Revocation; rev != nil && !r.FleetRevocation {
		rep.Events = append(rep.Events, revoked(*rev, in.Ring.Owner.SnapshotName(rev.Epoch), rep.Status))
	}
	if active, ok := next.Active(in.Now); ok {
		since, _ := OverdueSince(p)
		rep.Counts.Gauge = &ringplan.Gauge{Epoch: next.Epoch, ActiveFrom: active.ActiveFrom, OverdueSince: since, UnconfirmedSince: in.OverdueSince}
	}
	after := ringplan.From(in.Now)
	after.Within(Requeue(in.Now, in.Policy, r.Plan, in.Shared != nil, len(w.Failed), r.LostRace))
	if r.MintFailed {
		after.Within(MintRetry(in.Now, failingSince(in.Last, rep.Status)))
		rep.Counts.MintRetry = true
	}
	rep.Requeue = after.After()
	return rep
}

// settle builds the status of pass p into rep, with the Warning events
// its conditions' changes call for.
func (r Result) settle(rep ringplan.Report[v1alpha1.TicketKeyRingStatus], p Pass) ringplan.Report[v1alpha1.TicketKeyRingStatus] {
	rep.Status = Build(r.in.Last, p)
	for _, e := range Warnings(r.in.Last.Conditions, rep.Status.Conditions) {
		rep.Events = append(rep.Events, e)
		rep.Counts.Unconfirmed = rep.Counts.Unconfirmed || e.Reason == v1alpha1.ReasonActivatedUnconfirmed
	}
	return rep
}

// revoked is the Warning event of a revoke carried out by the epoch of
// snapshot: which keys it dropped, who asked, and the key that encrypts
// now.
func revoked(rev v1alpha1.Revocation, snapshot string, st v1alpha1.TicketKeyRingStatus) ringplan.Event {
	active := "none"
	if st.ActiveKey != nil {
		active = st.ActiveKey.ID
	}
	return ringplan.Event{Warning: true, Reason: v1alpha1.ReasonRevoked, Action: "Revoke", Regarding: snapshot,
		Note: fmt.Sprintf("Revoked keys %s, requested with field manager %s at %s: epoch %d encrypts with fresh key %s; tickets issued before no longer resume",
			strings.Join(rev.Keys, " "), cmp.Or(rev.RequestedBy, "unknown"), rev.RequestedAt, rev.Epoch, active)}
}

// warnings are the transitions of a ticket ring's conditions that call
// for a Warning event: Ready turning False (or False for a new reason), a
// staged key overdue for its fleet, a key activated unconfirmed (once per
// key), a format keeping fewer keys than retained, and a request refused
// (each again when its message changes).
var warnings = []ringplan.Warn{
	{Type: v1alpha1.ConditionReady, Bad: ringplan.Is(metav1.ConditionFalse), Action: "Reconcile"},
	{Type: v1alpha1.ConditionConfirmationOverdue, Bad: ringplan.Is(metav1.ConditionTrue), Reason: v1alpha1.ConditionConfirmationOverdue, Action: "Confirm",
		Same: func(was, is *metav1.Condition) bool { return was.Status == is.Status }},
	{Type: v1alpha1.ConditionConfirmationOverdue, Action: "Activate",
		Bad:  func(c *metav1.Condition) bool { return c.Reason == v1alpha1.ReasonActivatedUnconfirmed },
		Same: func(was, is *metav1.Condition) bool { return was.Reason == is.Reason && was.Message == is.Message }},
	{Type: v1alpha1.ConditionRetentionLimited, Bad: ringplan.Is(metav1.ConditionTrue), Same: ringplan.SameMessage, Action: "Reconcile"},
	{Type: v1alpha1.ConditionRequestRefused, Bad: ringplan.Is(metav1.ConditionTrue), Same: ringplan.SameMessage, Action: "Reconcile"},
}

// Warnings are the Warning events the change of a ticket ring's
// conditions from prev to next calls for.
func Warnings(prev, next []metav1.Condition) []ringplan.Event {
	return ringplan.Warnings(prev, next, warnings)
}

// failingSince is since when the ring's key source has been failing: since
// Ready turned False for the reason it has now, or now.
func failingSince(prev, next v1alpha1.TicketKeyRingStatus) time.Time {
	n := meta.FindStatusCondition(next.Conditions, v1alpha1.ConditionReady)
	p := meta.FindStatusCondition(prev.Conditions, v1alpha1.ConditionReady)
	if n == nil || p == nil || p.Status != n.Status || p.Reason != n.Reason {
		return time.Time{}
	}
	return p.LastTransitionTime.Time
}

// MintRetry is how soon a ring whose key source failed since since tries
// again: a quarter of the time it has failed, between 5 seconds and 5
// minutes, so that a source down for long is not hammered, and a brief
// outage is soon over. The ring still looks again whenever a key expires
// (Requeue), whatever the source does.
func MintRetry(now, since time.Time) time.Duration {
	if since.IsZero() || since.After(now) {
		return 5 * time.Second
	}
	return min(max(now.Sub(since)/4, 5*time.Second), 5*time.Minute)
}

// MintProblem is what the status says of a mint that failed: the cause as
// the ring may see it (detail), and whether a key still encrypts.
func MintProblem(now time.Time, current keyring.Ring, keys int, reason, detail string) *ringplan.Problem {
	msg := fmt.Sprintf("Minting %d key(s) failed: %s. Nothing new was published", keys, detail)
	if k, ok := current.Active(now); ok {
		msg += fmt.Sprintf(", and key %s keeps encrypting; expired keys are still destroyed on time", k.ID)
	} else {
		msg += "; no key encrypts now, so servers resume no session until one is minted"
	}
	return &ringplan.Problem{Reason: reason, Message: msg}
}
