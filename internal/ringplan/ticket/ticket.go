// Package ringplan holds a ring's decisions, for either kind of ring: what
// one reconcile must write, from what it read. It is pure: it takes values
// and the time, and returns values; the controller does the I/O and keeps
// the order (read, Decide, mint, Finish, write the shared entry, Wrote,
// publish, deliver, destroy).
package ticket

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/ringplan"
	"github.com/ringmaster-io/ringmaster/internal/sharedring"
	"github.com/ringmaster-io/ringmaster/internal/textlimit"
)

// ConfirmPoll is how often a ring whose due staged key waits for its fleet
// asks the pods again.
const ConfirmPoll = 5 * time.Second

// LostRaceRetry is how soon a ring whose write to its shared entry lost
// the race looks again, to adopt the winner's version.
const LostRaceRetry = 50 * time.Millisecond

// Read is what a reconcile read of one ring, once its history and policy
// are known to be sound.
type Read struct {
	Now     time.Time
	Policy  keyring.Policy
	History keyring.History
	// Current is the ring the newest snapshot holds.
	Current keyring.Ring
	// Last is the ring's status as read.
	Last v1alpha1.TicketKeyRingStatus
	// Rotate and Revoke are the ring's rotate-now and revoke requests (its
	// annotations); RevokedBy is the field manager that set the revoke.
	Rotate, Revoke, RevokedBy string
	// Fleet is the FleetRequest the ring carries out next (fleet.Next),
	// as the ring records it; nil for none.
	Fleet *v1alpha1.FleetRequestRecord
	// Confirmed says every selected, ready pod holds the staged key.
	Confirmed bool
	// Shared is the ring's shared entry; nil for a ring that is not shared.
	Shared *Shared

	// Halted, when set, stops the reconcile before it plans (an unreadable
	// newest snapshot, an invalid spec): nothing is written, Ready says why.
	Halted *ringplan.Problem
	// Blocked, when set, says why the ring mints nothing this time though
	// its record is sound (a selector of its spec the cache did not keep):
	// it fails closed, destroying only what expired, and Ready says why.
	Blocked *ringplan.Problem
	// Ring is what the status reports of the ring's spec and targets.
	Ring Ring
	// Shown is what the ring's voters last said of its staged key (under
	// spec.confirmation), and OverdueSince since when it has waited past
	// its timeout (zero when it has not).
	Shown        *v1alpha1.ConfirmationStatus
	OverdueSince time.Time
	// Refused says which request annotations were refused, unread.
	Refused []string
	// Deleting says the ring is being deleted, held by Finalizers: it
	// fails closed (Decide) until it goes.
	Deleting   bool
	Finalizers []string
}

// Ring is what the status reports of a ring's spec and where it delivers.
type Ring struct {
	Owner      distribute.Owner
	Generation int64
	// Targets counts the namespaces it delivers to.
	Targets      int
	Formats      []v1alpha1.KeyFormat
	RetainedKeys int32
	// Confirm says the ring has spec.confirmation.
	Confirm bool
}

// Shared is a shared ring's entry as one reconcile read it.
type Shared struct {
	// Entry is the newest version read; nil when the entry does not exist.
	Entry *sharedring.Record
	// Base is the ring to plan from (sharedring.Base), when Blocked is nil.
	Base keyring.Ring
	// Policy is the ring's own, which the entry must record.
	Policy sharedring.Policy
	// LocalVersion is the entry's version this cluster serves.
	LocalVersion int64
	// Blocked, when set, says why the ring cannot use its entry this time
	// (Vault unread, a rolled-back entry, a spec a shared ring cannot
	// serve): the ring fails closed.
	Blocked *ringplan.Problem
}

func (s *Shared) handled(request string) bool { return s != nil && s.Entry.Handled(request) }
func (s *Shared) revoked(request string) bool { return s != nil && s.Entry.Revoked(request) }

// carriedOut says a version of the entry carried out the FleetRequest:
// this cluster wrote it and stopped before its snapshot recorded the
// request. The ring then serves that version rather than rotate again.
func (s *Shared) carriedOut(f *v1alpha1.FleetRequestRecord) bool {
	if s == nil || f == nil {
		return false
	}
	v := distribute.FleetRequestValue(f.Action, f.UID)
	if f.Action == v1alpha1.FleetRevoke {
		return s.revoked(v)
	}
	return s.handled(v)
}

// remember is the entry's record carrying out the ring's FleetRequest
// too, when the pass carries one out.
func (s *Shared) remember(rec sharedring.Record, fleet string, f *v1alpha1.FleetRequestRecord) sharedring.Record {
	switch {
	case fleet == "":
		return rec
	case f.Action == v1alpha1.FleetRevoke:
		return rec.Remember("", fleet)
	}
	return rec.Remember(fleet, "")
}

func (s *Shared) localVersion() int64 {
	if s == nil {
		return 0
	}
	return s.LocalVersion
}

// Decision is the plan Decide makes, before any key is minted.
type Decision struct {
	// Plan is the next ring, whose first Plan.Mint keys need their secrets.
	Plan keyring.Plan
	// FailClosed says the ring mints nothing this time: Source says why.
	FailClosed bool
	Source     *ringplan.Problem
	// RotateNow and Revoke say which request of the ring's annotations the
	// plan carries out; Fleet that it carries out in.Fleet.
	RotateNow, Revoke, Fleet bool
	// Unconfirmed describes a held staged key the plan activates
	// unconfirmed.
	Unconfirmed *Unconfirmed
	// Current is the ring the plan starts from, as read: what serves if
	// the mint fails.
	Current keyring.Ring
}

// Decide plans the ring's next epoch from what was read. A ring being
// deleted, and a shared ring that cannot use its entry, fail closed: they
// mint nothing, carry out no request, write no shared entry, and only
// destroy what expired. A halted ring plans nothing.
func Decide(in Read) Decision {
	if in.Halted != nil {
		return Decision{Plan: keyring.Plan{Ring: in.Current}, FailClosed: true, Current: in.Current}
	}
	if in.Deleting {
		// A finalizer may hold the ring for as long as its writer likes (an
		// orphan delete waits for the garbage collector): no key of it
		// may outlive its expiresAt meanwhile, and nothing new is
		// published by a ring its author asked to go.
		return Decision{Plan: keyring.Plan{}.WithoutMint(in.Now, in.Current), FailClosed: true, Source: deleting(in), Current: in.Current}
	}
	if in.Blocked != nil {
		return Decision{Plan: keyring.Plan{}.WithoutMint(in.Now, in.Current), FailClosed: true, Source: in.Blocked, Current: in.Current}
	}
	if in.Shared != nil && in.Shared.Blocked != nil {
		return Decision{Plan: keyring.Plan{}.WithoutMint(in.Now, in.Current), FailClosed: true, Source: in.Shared.Blocked, Current: in.Current}
	}
	rotate := in.History.CarryOut(in.Rotate, in.Last.LastRotateRequestedAt) && !in.Shared.handled(in.Rotate)
	revoke := in.History.CarryOutRevoke(in.Revoke, in.Last.LastRevokeRequestedAt) && !in.Shared.revoked(in.Revoke)
	fleet := in.fleetDue()
	// A shared ring's entry may have carried it out already: it is then
	// recorded on the epoch that serves the entry, not carried out again.
	fleetNow := fleet && !in.Shared.carriedOut(in.Fleet)
	inputs := keyring.Inputs{
		// A FleetRequest is one more source of the same requests, with
		// exactly their meaning.
		RotateNow:   rotate || (fleetNow && in.Fleet.Action == v1alpha1.FleetRotate),
		Revoke:      revoke || (fleetNow && in.Fleet.Action == v1alpha1.FleetRevoke),
		StagedSince: in.History.StagedSince,
		Confirmed:   in.Confirmed,
	}
	base := in.Current
	if in.Shared != nil {
		base = in.Shared.Base
	}
	plan := keyring.Next(in.Now, in.Policy, base, inputs)
	return Decision{Plan: plan, RotateNow: rotate, Revoke: revoke, Fleet: fleet,
		Unconfirmed: unconfirmed(in, plan), Current: in.Current}
}

// fleetDue says the ring's FleetRequest is to be carried out now: no
// epoch on record carried it out (the status may lag the record: an
// operator restarted between the snapshot and the status).
func (in Read) fleetDue() bool {
	if in.Fleet == nil {
		return false
	}
	_, _, done := in.History.Fleet(in.Fleet.UID)
	return !done
}

// fleetOnRecord is the ring's FleetRequest as an epoch on record carried
// it out, for a status that lags the record; nil when none did.
func (in Read) fleetOnRecord() *v1alpha1.FleetRequestRecord {
	if in.Fleet == nil {
		return nil
	}
	epoch, at, ok := in.History.Fleet(in.Fleet.UID)
	if !ok {
		return nil
	}
	rec := *in.Fleet
	rec.Epoch, rec.ServedAt = epoch, &metav1.Time{Time: at}
	return &rec
}

// unconfirmed describes the held staged key the plan found activated by
// the clock unconfirmed, with what its voters last said of it; nil if none.
func unconfirmed(in Read, plan keyring.Plan) *Unconfirmed {
	c := in.Policy.Confirm
	if plan.Unconfirmed == "" || c == nil {
		return nil
	}
	k, _ := in.Current.Key(plan.Unconfirmed)
	u := &Unconfirmed{Key: k.ID, ActiveFrom: k.ActiveFrom, Due: in.Current.Due,
		Promote: c.Promote, Timeout: c.Timeout, Ceiling: c.Ceiling()}
	if r := in.Last.Confirmation; r != nil && r.StagedKey == k.ID {
		u.Report = r
	}
	return u
}

// Minted is what minting the plan's keys gave.
type Minted struct {
	// Ring is the plan's ring with its new keys' secrets.
	Ring keyring.Ring
	// Err is why minting failed; Problem is what the status shows of it.
	Err     error
	Problem *ringplan.Problem
}

// Result is what the reconcile must write, once its keys are minted.
type Result struct {
	in   Read
	Plan keyring.Plan
	// Next is the ring to publish when Publish is set.
	Next     keyring.Ring
	Requests distribute.Requests
	Publish  bool
	// Source, when set, says why nothing new could be minted.
	Source *ringplan.Problem
	// RotateRequest and RevokeRequest are the requests to echo in status;
	// Revocation records a revoke carried out now.
	RotateRequest, RevokeRequest string
	Revocation                   *v1alpha1.Revocation
	// Fleet is the FleetRequest to record in status, carried out now (its
	// epoch then set by Report) or by an epoch on record; FleetRevocation
	// says Revocation is that request's, which gets no event of the
	// ring's own (the FleetRequest has its one event).
	Fleet           *v1alpha1.FleetRequestRecord
	FleetRevocation bool
	Unconfirmed     *Unconfirmed
	// MintFailed says a mint failed, and RotationFailed that a rotation
	// failed for any reason (a mint, a shared entry's write).
	MintFailed, RotationFailed bool
	// Sync, when set, is what the shared ring does with its entry before
	// it publishes; Wrote folds in the write when Sync.Write is set.
	Sync *Sync
	// Adopt says the ring publishes the version it read, another
	// cluster's.
	Adopt bool
	// LostRace says the write to the shared entry lost the race; SyncFailed
	// that it failed otherwise (the ring then fails closed).
	LostRace, SyncFailed bool
	// SharedStatus is the ring's status.shared after the reconcile; nil for
	// a ring that is not shared.
	SharedStatus *v1alpha1.SharedRingStatus
}

// Sync is a shared ring's write to its entry.
type Sync struct {
	// Write says to write Record as the entry's version CAS+1.
	Write  bool
	CAS    int64
	Record sharedring.Record
}

// Finish folds the mint's outcome into the decision. A failed mint falls
// back on a plan that only destroys what expired, so that forward secrecy
// never waits for the source. A request is echoed once carried out, now,
// by an epoch on record, or by another cluster in the shared entry.
func Finish(in Read, d Decision, m Minted) Result {
	r := Result{in: in, Plan: d.Plan, Next: m.Ring, Source: d.Source}
	if in.Halted != nil {
		r.Next = in.Current
		return r
	}
	if d.FailClosed {
		r.Next = d.Plan.Ring
		r.Requests.Shared = in.Shared.localVersion()
		r.Publish = r.Plan.Changed
		if in.Deleting {
			// Its entry is not read (nothing of it is used): the status
			// keeps what it last said of it.
			r.SharedStatus = in.Last.Shared
		}
		return r
	}
	r.Unconfirmed = d.Unconfirmed
	switch {
	case m.Err != nil:
		r.MintFailed, r.RotationFailed, r.Source = true, true, m.Problem
		r.Plan = d.Plan.WithoutMint(in.Now, in.Current)
		r.Next = r.Plan.Ring
	case d.Revoke:
		r.Requests.Revoke = in.Revoke
		r.Revocation = &v1alpha1.Revocation{RequestedAt: in.Revoke, Keys: d.Plan.Revoked, RequestedBy: in.RevokedBy}
	case d.RotateNow:
		r.Requests.Rotate = in.Rotate
	}
	switch {
	case m.Err != nil:
	case d.Fleet:
		r.Requests.Fleet = distribute.FleetRequestValue(in.Fleet.Action, in.Fleet.UID)
		rec := *in.Fleet
		r.Fleet = &rec
		if in.Fleet.Action == v1alpha1.FleetRevoke && r.Revocation == nil && !in.Shared.carriedOut(in.Fleet) {
			r.Revocation = &v1alpha1.Revocation{RequestedAt: in.Fleet.CreatedAt.UTC().Format(time.RFC3339), Keys: d.Plan.Revoked,
				RequestedBy: "FleetRequest " + in.Fleet.Name}
			r.FleetRevocation = true
		}
	default:
		r.Fleet = in.fleetOnRecord()
	}
	if r.Requests.Rotate == "" && in.Shared.handled(in.Rotate) {
		r.Requests.Rotate = in.Rotate
	}
	if r.Requests.Revoke == "" && in.Shared.revoked(in.Revoke) {
		r.Requests.Revoke = in.Revoke
	}
	// The status read may lag the record, and must not bring back an
	// older request.
	if r.Requests.Rotate != "" || in.History.Handled(in.Rotate) {
		r.RotateRequest = in.Rotate
	}
	if r.Requests.Revoke != "" || in.History.Revoked(in.Revoke) {
		r.RevokeRequest = in.Revoke
	}
	if in.Shared == nil || m.Err != nil {
		r.Requests.Shared = in.Shared.localVersion()
		r.Publish = r.Plan.Changed
		return r
	}
	return r.sync(in)
}

// sync brings a shared ring in line with its entry: it writes Next as the
// entry's next version when the plan is a real rotation
// (sharedring.Decide), or serves the entry's ring, publishing it when it
// differs from the current one.
func (r Result) sync(in Read) Result {
	sh := in.Shared
	r.Requests.Shared = sh.LocalVersion
	if sh.Entry != nil {
		r.Requests.Shared = sh.Entry.Version
	}
	change := sharedring.Change{Minted: r.Plan.Mint, Dropped: len(r.Plan.Expired),
		Request: (r.Requests.Rotate != "" && !sh.Entry.Handled(r.Requests.Rotate)) || (r.Requests.Revoke != "" && !sh.Entry.Revoked(r.Requests.Revoke)) ||
			(r.Requests.Fleet != "" && !sh.carriedOut(in.Fleet))}
	write, serve := sharedring.Decide(r.Next, change, sh.Entry)
	if !write {
		r.Next, r.Sync = serve, &Sync{}
		r.Publish = !sharedring.Same(serve, in.Current)
		r.Adopt = r.Publish
		return r
	}
	s := &Sync{Write: true, Record: sh.remember(sh.Entry.Next(r.Next, sh.Policy, r.Requests.Rotate, r.Requests.Revoke), r.Requests.Fleet, in.Fleet)}
	if sh.Entry != nil {
		s.CAS = sh.Entry.Version
	}
	r.Sync = s
	return r
}

// Written is the outcome of the write to the shared entry.
type Written struct {
	// Version is the version written.
	Version int64
	// Err is why the write failed; LostRace says another cluster wrote
	// first; Problem is what the status shows of Err.
	Err      error
	LostRace bool
	Problem  *ringplan.Problem
}

// Wrote folds in the write of the shared entry. A write that loses the race
// publishes nothing: the next pass adopts the winner's version. One that
// fails otherwise fails closed: the plan falls back on destroying expired
// keys. Either way a request the plan carried out is carried out again, or
// found carried out, next time.
func Wrote(in Read, r Result, w Written) Result {
	if w.Err == nil {
		r.Publish, r.Requests.Shared = true, w.Version
		return r
	}
	r.Publish = false
	r.RotateRequest, r.RevokeRequest, r.Revocation = "", "", nil
	r.Fleet, r.FleetRevocation, r.Requests.Fleet = nil, false, ""
	if w.LostRace {
		r.LostRace = true
		return r
	}
	r.SyncFailed, r.RotationFailed, r.Source = true, true, w.Problem
	r.Plan = r.Plan.WithoutMint(in.Now, in.Current)
	r.Next, r.Requests.Shared = r.Plan.Ring, in.Shared.LocalVersion
	r.Publish = r.Plan.Changed
	return r
}

// Serving is the ring this cluster serves after the reconcile, when it
// publishes nothing: the current ring for a shared ring (its plan was made
// from the entry), the plan's ring otherwise.
func (r Result) Serving(in Read) keyring.Ring {
	if in.Shared != nil {
		return in.Current
	}
	return r.Next
}

// report puts in the status's outcome what the result says of the ring's
// key source, its requests and its held staged key.
func (r Result) report(out Pass) Pass {
	out.Source, out.Unconfirmed, out.Revocation = r.Source, r.Unconfirmed, r.Revocation
	out.RotateRequest, out.RevokeRequest = r.RotateRequest, r.RevokeRequest
	out.Fleet = r.Fleet
	return out
}

// Requeue is when the ring must be looked at again: when its plan says,
// and sooner for a failed target, a staged key awaiting its fleet, or a
// shared ring (its entry is read every sharedring.SyncPeriod, at once
// after a lost race).
func Requeue(now time.Time, policy keyring.Policy, plan keyring.Plan, shared bool, failedTargets int, lostRace bool) time.Duration {
	after := ringplan.From(now)
	after.By(plan.RequeueAt)
	if failedTargets > 0 {
		after.Within(ringplan.ConflictRetry)
	}
	if plan.Awaiting {
		after.Within(ConfirmPoll)
	}
	if shared {
		after.Within(sharedring.SyncPeriod(policy.ActivationDelay))
	}
	if lostRace {
		after.Exactly(LostRaceRetry)
	}
	return after.After()
}

// Overdue is since when the ring's staged key has waited past its
// confirmation timeout, by the answers shown; zero when it has not, or is
// confirmed.
func Overdue(now time.Time, cur keyring.Ring, timeout time.Duration, confirmed bool, shown *v1alpha1.ConfirmationStatus) time.Time {
	if confirmed || shown == nil || len(cur.Keys) < 2 || shown.StagedKey != cur.Keys[0].ID {
		return time.Time{}
	}
	if late := cur.Due.Add(timeout); !now.Before(late) {
		return late
	}
	return time.Time{}
}

// Adopted is the shared status of a ring that publishes the version rec,
// another cluster's, now: with how long the version took to arrive.
func Adopted(st v1alpha1.SharedRingStatus, rec sharedring.Record, now time.Time) (v1alpha1.SharedRingStatus, time.Duration) {
	delay := max(now.Sub(rec.Created), 0)
	st.Version, st.VersionTime = rec.Version, &metav1.Time{Time: rec.Created.Truncate(time.Second)}
	st.PropagationDelay, st.Writer = &metav1.Duration{Duration: delay.Round(time.Millisecond)}, "Adopted"
	return st, delay
}

// WroteStatus is the shared status of a ring that wrote version rec itself.
func WroteStatus(st v1alpha1.SharedRingStatus, rec sharedring.Record) v1alpha1.SharedRingStatus {
	st.Version, st.VersionTime = rec.Version, &metav1.Time{Time: rec.Created.Truncate(time.Second)}
	st.PropagationDelay, st.Writer = &metav1.Duration{}, "Local"
	return st
}

// SharedStatus is a shared ring's status.shared after a reconcile. The version
// served is the one read (entry, when usable). One the status does not
// show yet was adopted by a pass whose status write failed: when it arrived
// is known only if this operator adopted it, as remembered.
func SharedStatus(st v1alpha1.SharedRingStatus, entry *sharedring.Record, usable bool, remembered *v1alpha1.SharedRingStatus) v1alpha1.SharedRingStatus {
	if !usable || entry == nil || entry.Deleted || st.Version == entry.Version {
		return st
	}
	st.Version, st.VersionTime = entry.Version, &metav1.Time{Time: entry.Created.Truncate(time.Second)}
	st.Writer, st.PropagationDelay = "Adopted", nil
	if remembered != nil && remembered.Version == st.Version {
		st.PropagationDelay = remembered.PropagationDelay
	}
	return st
}

// Replan plans the ring again from later, the time its mint returned, when
// that is a second or more after in.Now, and fills the new plan with the
// secrets just minted. Whatever a reconcile spends before it publishes (a
// Vault call up to the key source's timeout, a new leader's first reads)
// would otherwise come off the time a new key is staged: a key due
// ActivationDelay from in.Now would reach pods for less. Planned from
// later, it is staged ActivationDelay from about when it is published.
//
// The plan stays as it was when re-planning would change what is minted
// (a key expiring in between), when the mint failed or minted nothing, and
// for a shared ring, whose entry in Vault records the plan's times.
func Replan(in Read, d Decision, m Minted, later time.Time) (Read, Decision, Minted) {
	if in.Shared != nil || m.Err != nil || d.FailClosed || d.Plan.Mint == 0 ||
		len(m.Ring.Keys) < d.Plan.Mint || later.Sub(in.Now) < time.Second {
		return in, d, m
	}
	again := in
	again.Now = later
	d2 := Decide(again)
	if d2.FailClosed || d2.Plan.Mint != d.Plan.Mint || d2.RotateNow != d.RotateNow || d2.Revoke != d.Revoke || d2.Fleet != d.Fleet {
		return in, d, m
	}
	secrets := make([]keyring.Secret, d.Plan.Mint)
	for i := range secrets {
		secrets[i] = m.Ring.Keys[i].Secret
	}
	next, err := d2.Plan.Fill(secrets)
	if err != nil {
		return in, d, m
	}
	return again, d2, Minted{Ring: next}
}

// deleting is what the status of a ring being deleted says: what it still
// does, until when it holds keys, and the finalizers that hold it (a
// bounded list: any writer of the ring may add one).
func deleting(in Read) *ringplan.Problem {
	msg := "The ring is being deleted: it stages no new key and carries out no rotate-now or revoke, and destroys each key at its expiresAt"
	if last := lastExpiry(in.Current, in.Now); !last.IsZero() {
		msg += fmt.Sprintf(" (its last key expires at %s)", last.UTC().Format(time.RFC3339))
	} else {
		msg += " (it holds no key now)"
	}
	if len(in.Finalizers) > 0 {
		msg += fmt.Sprintf(". It goes once these finalizers are removed: %s", textlimit.List(in.Finalizers, textlimit.MaxListed, ", ", 0))
	}
	return &ringplan.Problem{Reason: v1alpha1.ReasonRingDeleting, Message: msg}
}

// lastExpiry is the latest expiresAt of r's keys still live at now; zero
// when none is.
func lastExpiry(r keyring.Ring, now time.Time) time.Time {
	var last time.Time
	for _, k := range r.Keys {
		if k.ExpiresAt.After(now) && k.ExpiresAt.After(last) {
			last = k.ExpiresAt
		}
	}
	return last
}
