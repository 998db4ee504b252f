package ticket

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/ringplan"
	"github.com/ringmaster-io/ringmaster/internal/textlimit"
)

// MaxFailedTargets bounds status.failedTargets; the Ready message counts
// them all.
const MaxFailedTargets = 20

// Pass is what one pass of a ring found and did: what its status is
// built from.
type Pass struct {
	Now        time.Time
	Generation int64

	// Halted, when set, stopped the reconcile before it planned (an
	// unreadable newest snapshot, an invalid spec): Ready turns False and
	// the rest of the status stands.
	Halted *ringplan.Problem

	// Ring is the newest ring: the one just published, or the current one.
	// Snapshot is the name of its snapshot Secret.
	Ring     keyring.Ring
	Snapshot string

	// Source, when set, says why no key could be minted: nothing new was
	// published but expired keys were still destroyed. Current is the ring
	// before this reconcile, to tell whether a rotation is overdue.
	Source  *ringplan.Problem
	Current keyring.Ring

	// Publish, when set, says why the new snapshot could not be written.
	Publish *ringplan.Problem

	// Targets counts the namespaces delivered to; Failed are those that did
	// not receive the newest epoch.
	Targets int
	Failed  []v1alpha1.TargetFailure

	// RotateRequest is the rotate-now request this reconcile carried out.
	RotateRequest string

	// RevokeRequest is the revoke request carried out (now or before, by an
	// epoch on record); Revocation records it when carried out now.
	RevokeRequest string
	Revocation    *v1alpha1.Revocation
	// Fleet is the FleetRequest carried out (now or before, by an epoch on
	// record), with the epoch that did.
	Fleet *v1alpha1.FleetRequestRecord

	// Confirmation is what the ring's pods report of its staged key, under
	// spec.confirmation (nil without it); Overdue, when set, says since
	// when the staged key has waited past its timeout.
	Confirmation *v1alpha1.ConfirmationStatus
	Overdue      time.Time
	// Confirm says the ring has spec.confirmation.
	Confirm bool
	// Unconfirmed, when set, is a held staged key that activated by the
	// clock without every voter confirming it.
	Unconfirmed *Unconfirmed
	// Formats and RetainedKeys are the ring's spec.distribution.formats and
	// spec.retainedKeys: RetentionLimited reports the formats whose server
	// keeps fewer decrypt-only keys than retained.
	Formats      []v1alpha1.KeyFormat
	RetainedKeys int32
	// Shared is what the ring saw of its shared entry in Vault; nil for a
	// ring that is not shared.
	Shared *v1alpha1.SharedRingStatus
	// Refused names the request annotations refused unread
	// (RequestRefused).
	Refused []string
}

// Unconfirmed is a held staged key that activated by the clock, past its
// ceiling (or, under Promote, its timeout), without every voter confirming
// it.
type Unconfirmed struct {
	// Key is its id; ActiveFrom when it activated; Due when it fell due.
	Key        string
	ActiveFrom time.Time
	Due        time.Time
	// Promote says it activated at the timeout (onTimeout Promote); else
	// at the ceiling, Ceiling past its due time.
	Promote bool
	Timeout time.Duration
	Ceiling time.Duration
	// Report is what the voters last said of the key; nil when the
	// operator had no report of it.
	Report *v1alpha1.ConfirmationStatus
}

// MaxRevocations bounds status.revocations.
const MaxRevocations = 10

// Build is the ring's status after a reconcile with outcome o, from its
// status before.
func Build(prev v1alpha1.TicketKeyRingStatus, o Pass) (out v1alpha1.TicketKeyRingStatus) {
	defer func() { ringplan.Settle(prev.Conditions, out.Conditions, o.Now) }()
	s := *prev.DeepCopy()
	s.LastRotateRequestedAt, s.LastRevokeRequestedAt = bounded(s.LastRotateRequestedAt), bounded(s.LastRevokeRequestedAt)
	s.Revocations = boundedRevocations(s.Revocations)
	conds := ringplan.On(&s.Conditions, o.Generation)
	ready := func(st metav1.ConditionStatus, reason, msg string) {
		conds.Set(v1alpha1.ConditionReady, st, reason, msg)
	}
	if o.Halted != nil {
		ready(metav1.ConditionFalse, o.Halted.Reason, o.Halted.Message)
		return s
	}

	fillKeys(&s, o.Ring, o.Snapshot, o.Now)
	if o.RotateRequest != "" {
		s.LastRotateRequestedAt = o.RotateRequest
	}
	if o.RevokeRequest != "" {
		s.LastRevokeRequestedAt = o.RevokeRequest
	}
	if o.Fleet != nil {
		s.FleetRequest = o.Fleet.DeepCopy()
	}
	if o.Revocation != nil {
		s.Revocations = append([]v1alpha1.Revocation{*o.Revocation}, s.Revocations...)[:min(len(s.Revocations)+1, MaxRevocations)]
	}
	s.Confirmation = o.Confirmation
	s.Shared = o.Shared
	confirmationOverdue(conds, o)
	s.Targets = int32(o.Targets)
	failed := slices.Clone(o.Failed)
	slices.SortFunc(failed, func(a, b v1alpha1.TargetFailure) int { return strings.Compare(a.Namespace, b.Namespace) })
	s.FailedTargets = nil
	if len(failed) > 0 {
		s.FailedTargets = failed[:min(len(failed), MaxFailedTargets)]
	}

	if since, ok := OverdueSince(o); ok {
		conds.Set(v1alpha1.ConditionRotationOverdue, metav1.ConditionTrue, o.Source.Reason, overdueMessage(since, o))
	} else {
		conds.Set(v1alpha1.ConditionRotationOverdue, metav1.ConditionFalse, v1alpha1.ReasonOnSchedule, "No rotation is overdue")
	}
	conds.Keep(retention(o))
	if len(o.Refused) > 0 {
		conds.Keep(RefusedCondition(o.Refused, o.Generation))
	} else {
		conds.Remove(v1alpha1.ConditionRequestRefused)
	}

	switch {
	case o.Source != nil:
		ready(metav1.ConditionFalse, o.Source.Reason, o.Source.Message)
	case o.Publish != nil:
		ready(metav1.ConditionFalse, o.Publish.Reason, o.Publish.Message)
	case len(failed) > 0:
		reason := v1alpha1.ReasonSecretConflict
		var parts []string
		for _, f := range failed {
			if f.Reason != v1alpha1.ReasonSecretConflict {
				reason = v1alpha1.ReasonDistributionFailed
			}
			parts = append(parts, f.Namespace)
		}
		msg := fmt.Sprintf("Epoch %d reached %d of %d namespace(s); not %s: see status.failedTargets",
			o.Ring.Epoch, o.Targets-len(failed), o.Targets, textlimit.List(parts, textlimit.MaxListed, ", ", 0))
		if len(failed) == 1 && failed[0].Reason == v1alpha1.ReasonSecretConflict {
			msg = failed[0].Message
		}
		ready(metav1.ConditionFalse, reason, msg)
	default:
		ready(metav1.ConditionTrue, v1alpha1.ReasonPublished, fmt.Sprintf("Epoch %d is published to %d namespace(s)", o.Ring.Epoch, o.Targets))
	}
	return s
}

// RefusedCondition is the RequestRefused condition of the request
// annotations refused: it names them, and never shows their values.
func RefusedCondition(annotations []string, generation int64) metav1.Condition {
	return metav1.Condition{Type: v1alpha1.ConditionRequestRefused, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonInvalidRequest, ObservedGeneration: generation,
		Message: fmt.Sprintf("Annotation %s holds no RFC 3339 time of at most 64 characters (the value is not shown): it is not carried out. Set it to the current time, e.g. $(date -u +%%Y-%%m-%%dT%%H:%%M:%%SZ)",
			strings.Join(annotations, " and "))}
}

// confirmationOverdue sets ConfirmationOverdue while the ring has
// spec.confirmation, and removes it otherwise. The record of a key that
// activated unconfirmed stays until the next staged key falls due.
func confirmationOverdue(conds ringplan.Conditions, o Pass) {
	prev := conds.Find(v1alpha1.ConditionConfirmationOverdue)
	switch {
	case o.Unconfirmed != nil:
		conds.Set(v1alpha1.ConditionConfirmationOverdue, metav1.ConditionFalse, v1alpha1.ReasonActivatedUnconfirmed, unconfirmedMessage(o.Unconfirmed))
		return
	case !o.Confirm && o.Confirmation == nil:
		conds.Remove(v1alpha1.ConditionConfirmationOverdue)
		return
	case prev != nil && prev.Reason == v1alpha1.ReasonActivatedUnconfirmed && o.Overdue.IsZero() &&
		(o.Confirmation == nil || o.Confirmation.Due == nil || o.Now.Before(o.Confirmation.Due.Time)):
		conds.Keep(*prev)
		return
	case o.Confirmation == nil:
		conds.Remove(v1alpha1.ConditionConfirmationOverdue)
		return
	}
	c := metav1.Condition{Type: v1alpha1.ConditionConfirmationOverdue, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonOnSchedule,
		Message: "No staged key waits past its timeout"}
	if !o.Overdue.IsZero() {
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonAwaitingPods
		c.Message = fmt.Sprintf("Key %s has waited for its fleet since %s; %d of %d pod(s) hold it; key %s keeps encrypting. Not holding it: %s",
			o.Confirmation.StagedKey, o.Overdue.UTC().Format(time.RFC3339), o.Confirmation.Holding, o.Confirmation.Pods,
			activeID(o.Ring, o.Now), lacking(o.Confirmation))
		if o.Confirmation.Note != "" {
			c.Message += ". Note: " + o.Confirmation.Note
		}
	}
	conds.Keep(c)
}

// unconfirmedMessage says which key activated unconfirmed, why, and which
// voters lacked it when last asked.
func unconfirmedMessage(u *Unconfirmed) string {
	when := fmt.Sprintf("its ceiling, maxDelay %s past its due time %s", u.Ceiling, u.Due.UTC().Format(time.RFC3339))
	if u.Promote {
		when = fmt.Sprintf("its timeout, %s past its due time %s (onTimeout Promote)", u.Timeout, u.Due.UTC().Format(time.RFC3339))
	}
	msg := fmt.Sprintf("Key %s activated by the clock at %s, %s, without every voter confirming it", u.Key, u.ActiveFrom.UTC().Format(time.RFC3339), when)
	r := u.Report
	if r == nil {
		return msg + "; the operator had no report of it from the fleet"
	}
	msg += fmt.Sprintf("; %d of %d voter(s) held it when last asked (%s)", r.Holding, r.Pods, r.CheckedAt.UTC().Format(time.RFC3339))
	if r.Pods > r.Holding {
		msg += ". Lacking it: " + lacking(r)
	}
	return msg
}

// lacking names the pods a report says lack the staged key, a bounded
// number of them (status.confirmation.missing names up to 20), and counts
// the others: a message naming them feeds a Warning event, whose note the
// API refuses past 1 KiB, and a fleet may have thousands of pods.
func lacking(r *v1alpha1.ConfirmationStatus) string {
	names := make([]string, len(r.Missing))
	for i, m := range r.Missing {
		names[i] = fmt.Sprintf("%s/%s (node %s: %s)", m.Namespace, m.Name, m.Node, m.Reason)
	}
	return textlimit.List(names, textlimit.MaxListed, "; ", max(int(r.Pods-r.Holding)-len(r.Missing), 0))
}

// overdueMessage says since when a key has been due and what encrypts
// meanwhile: the last active key, or nothing once every key has expired. It
// says the keys are destroyed only once the ring published holds none.
func overdueMessage(since time.Time, o Pass) string {
	due := since.UTC().Format(time.RFC3339)
	if k, ok := o.Ring.Active(o.Now); ok {
		return fmt.Sprintf("A new key has been due since %s; key %s keeps encrypting meanwhile and expired keys are still destroyed on time", due, k.ID)
	}
	if len(o.Ring.Keys) > 0 {
		return fmt.Sprintf("A new key has been due since %s; every key has expired, so no key encrypts and servers resume no session until one is minted; epoch %d still holds the expired keys until a new epoch is written", due, o.Ring.Epoch)
	}
	return fmt.Sprintf("A new key has been due since %s; every key has expired and been destroyed (epoch %d holds none), so no key encrypts and servers resume no session until one is minted", due, o.Ring.Epoch)
}

func activeID(r keyring.Ring, now time.Time) string {
	if k, ok := r.Active(now); ok {
		return k.ID
	}
	return "none"
}

// retention is the RetentionLimited condition of o's formats and
// retainedKeys.
func retention(o Pass) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionRetentionLimited, Status: metav1.ConditionFalse, ObservedGeneration: o.Generation,
		Reason: v1alpha1.ReasonFormatsKeepRetainedKeys, Message: fmt.Sprintf("Every format listed keeps the %d retained key(s)", o.RetainedKeys)}
	formats := make([]keyring.Format, len(o.Formats))
	for i, f := range o.Formats {
		formats[i] = keyring.Format(f)
	}
	short := keyring.Shortfalls(formats, int(o.RetainedKeys))
	if len(short) == 0 {
		return c
	}
	parts := make([]string, len(short))
	for i, f := range short {
		parts[i] = fmt.Sprintf("%s keeps %d decrypt-only key(s) of the %d retained", f.Format, f.Keeps, o.RetainedKeys)
	}
	c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonFormatKeepsFewerKeys
	c.Message = strings.Join(parts, "; ") + ": tickets under the older keys do not resume on that server. Lower spec.retainedKeys to keep them alike, or accept it"
	return c
}

// OverdueSince reports since when a rotation has been due while its key
// could not be minted.
func OverdueSince(o Pass) (time.Time, bool) {
	if o.Source == nil {
		return time.Time{}, false
	}
	return keyring.Overdue(o.Current, o.Now)
}

// fillKeys describes ring at now. It holds ids and times, never key bytes.
func fillKeys(s *v1alpha1.TicketKeyRingStatus, ring keyring.Ring, snapshot string, now time.Time) {
	if ring.Epoch == 0 {
		return
	}
	s.Epoch = ring.Epoch
	s.Snapshot = snapshot
	s.Keys = make([]v1alpha1.KeyStatus, 0, len(ring.Keys))
	s.ActiveKey, s.NextRotation = nil, nil
	for _, k := range ring.Keys {
		state := ring.StateOf(k, now)
		if state == keyring.Expired {
			continue
		}
		s.Keys = append(s.Keys, v1alpha1.KeyStatus{
			ID: k.ID, State: v1alpha1.KeyState(state),
			ActiveFrom: metav1.NewTime(k.ActiveFrom), RetireAt: metav1.NewTime(k.RetireAt), ExpiresAt: metav1.NewTime(k.ExpiresAt),
		})
		if state == keyring.Staged && (s.NextRotation == nil || k.ActiveFrom.Before(s.NextRotation.Time)) {
			s.NextRotation = &metav1.Time{Time: k.ActiveFrom}
		}
	}
	if active, ok := ring.Active(now); ok {
		s.ActiveKey = &v1alpha1.ActiveKey{ID: active.ID, ActiveFrom: metav1.NewTime(active.ActiveFrom)}
	}
}

// Describe summarises an epoch for logs and events: key ids and states,
// the key a rotate-now activates, and the keys destroyed. Never key bytes.
func Describe(ring keyring.Ring, plan keyring.Plan, now time.Time) string {
	var parts []string
	for _, k := range ring.TicketKeys(now) {
		parts = append(parts, fmt.Sprintf("%s %s", k.ID, ring.StateOf(k, now)))
	}
	for _, k := range ring.Keys {
		if !plan.RotateAt.IsZero() && k.ActiveFrom.Equal(plan.RotateAt) {
			parts = append(parts, fmt.Sprintf("rotate-now: %s activates %s", k.ID, plan.RotateAt.UTC().Format(time.RFC3339)))
		}
	}
	if len(plan.Expired) > 0 {
		parts = append(parts, "destroyed "+strings.Join(plan.Expired, " "))
	}
	return strings.Join(parts, ", ")
}

// bounded is a request value as an earlier status holds it: what
// ringplan.Request takes, else nothing. An operator before request values
// were bounded copied any tenant-written text into status; an upgrade
// drops it.
func bounded(value string) string {
	v, _ := ringplan.Request(value)
	return v
}

// boundedRevocations are revocations as an earlier status holds them,
// their request and requester bounded.
func boundedRevocations(rs []v1alpha1.Revocation) []v1alpha1.Revocation {
	for i := range rs {
		rs[i].RequestedAt, rs[i].RequestedBy = bounded(rs[i].RequestedAt), ringplan.Printable(rs[i].RequestedBy)
	}
	return rs
}
