package ringplan

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/ringstatus"
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
	Publish *ringstatus.Problem
	// Failed are the targets that did not receive the newest epoch.
	Failed []v1alpha1.TargetFailure
}

// Outcome is what a reconcile reports once written: the status, when to
// look again, what the rotation counter counts, and the events to emit.
type Outcome struct {
	Status  v1alpha1.TicketKeyRingStatus
	Requeue time.Duration
	// Succeeded and Failed count for ringmaster_ticketkeyring_rotations_total.
	Succeeded bool
	Failed    int
	// Revocation is the revoke the reconcile carried out, to announce.
	Revocation *v1alpha1.Revocation
	// Published is the epoch published ("" for none), to announce.
	Published string
	// MintRetry says the reconcile looks again for a key source that
	// failed, rather than back off: expired keys must still go on time.
	MintRetry bool
	// Gauge is what the ring's gauges show; nil when no key encrypts or
	// the reconcile halted.
	Gauge *Gauge
}

// Gauge is what a ring's gauges show after a reconcile.
type Gauge struct {
	Epoch      int64
	ActiveFrom time.Time
	// OverdueSince is since when a rotation has been due while no key
	// could be minted; UnconfirmedSince since when its staged key has
	// waited for its fleet past the timeout. Zero when not.
	OverdueSince, UnconfirmedSince time.Time
}

// Read is what the reconcile read, as Finish was given it.
func (r Result) Read() Read { return r.in }

// Report is the ring's status after the reconcile and its writes, and the
// rest of its outcome. A publication that could not be written rolls the
// status back to the epoch the ring serves, and echoes no request.
func (r Result) Report(w Applied) Outcome {
	in := r.in
	out := ringstatus.Outcome{Now: in.Now, Generation: in.Ring.Generation, Targets: in.Ring.Targets, Formats: in.Ring.Formats,
		RetainedKeys: in.Ring.RetainedKeys, Confirm: in.Ring.Confirm, Current: in.Current, Confirmation: in.Shown,
		Overdue: in.OverdueSince, Shared: r.SharedStatus, Refused: in.Refused}
	if in.Halted != nil {
		out.Halted = in.Halted
		return Outcome{Status: ringstatus.Build(in.Last, out)}
	}
	out = r.report(out)
	var o Outcome
	if r.RotationFailed {
		o.Failed++
	}
	next := r.Serving(in)
	after := Requeue(in.Now, in.Policy, r.Plan, in.Shared != nil, len(w.Failed), r.LostRace)
	if pub, ok := r.Publication(); ok {
		if w.Publish != nil {
			// Nothing new is published, but older snapshots holding keys
			// the current ring already dropped still go.
			o.Failed++
			out.Publish, out.RotateRequest, out.RevokeRequest, out.Revocation = w.Publish, "", "", nil
			out.Ring, out.Snapshot = in.Current, in.Last.Snapshot
			out.Failed = w.Failed
			o.Status, o.Requeue = ringstatus.Build(in.Last, out), ConflictRetry
			return o
		}
		next, o.Succeeded, o.Published = pub, !r.MintFailed, in.Ring.Owner.SnapshotName(pub.Epoch)
		if out.Revocation != nil {
			out.Revocation.Epoch = pub.Epoch
			rev := *out.Revocation
			o.Revocation = &rev
		}
	}
	out.Ring, out.Snapshot, out.Failed = next, in.Ring.Owner.SnapshotName(next.Epoch), w.Failed
	o.Status = ringstatus.Build(in.Last, out)
	if active, ok := next.Active(in.Now); ok {
		since, _ := ringstatus.OverdueSince(out)
		o.Gauge = &Gauge{Epoch: next.Epoch, ActiveFrom: active.ActiveFrom, OverdueSince: since, UnconfirmedSince: in.OverdueSince}
	}
	if r.MintFailed {
		after, o.MintRetry = min(after, MintRetry(in.Now, failingSince(in.Last, o.Status))), true
	}
	o.Requeue = after
	return o
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
func MintProblem(now time.Time, current keyring.Ring, keys int, reason, detail string) *ringstatus.Problem {
	msg := fmt.Sprintf("Minting %d key(s) failed: %s. Nothing new was published", keys, detail)
	if k, ok := current.Active(now); ok {
		msg += fmt.Sprintf(", and key %s keeps encrypting; expired keys are still destroyed on time", k.ID)
	} else {
		msg += "; no key encrypts now, so servers resume no session until one is minted"
	}
	return &ringstatus.Problem{Reason: reason, Message: msg}
}
