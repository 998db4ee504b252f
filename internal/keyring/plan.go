package keyring

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// MaxTicketLifetime is the longest a session ticket may be used (RFC 8446,
// section 4.6.1), and so the longest any key may stay decryptable after it
// stops encrypting, together with its own encrypting interval.
const MaxTicketLifetime = 7 * 24 * time.Hour

// Policy is the rotation schedule of a ring, from its spec.
type Policy struct {
	// RotationInterval is how long one key encrypts new tickets.
	RotationInterval time.Duration
	// RetainedKeys is how many retired keys stay decryptable.
	RetainedKeys int
	// ActivationDelay is the least time a new key is delivered before it
	// encrypts anything.
	ActivationDelay time.Duration
	// Confirm, when set, gates each staged key's activation on the fleet
	// confirming it holds the key, rather than on the clock alone.
	Confirm *Confirm
}

// Confirm is how a ring waits for its fleet before a staged key encrypts.
//
// A staged key falls due as it would without confirmation (one
// RotationInterval after its predecessor activated, or as soon as is safe
// on rotate-now), but it is published held: its ActiveFrom lies past its
// due time (Timeout under Promote, the ceiling MaxDelay under Wait), so
// that no replica activates it by its clock before then. Once it is due and
// the fleet confirms holding it, the next epoch activates it at once: every
// replica can already decrypt with it, so the replicas that take the
// activation late only encrypt with the previous key a little longer.
//
// The hold is a ceiling, never pushed further: whatever the fleet says, or
// if the operator stops, every replica activates the key by its own clock
// at its published ActiveFrom, no later than MaxDelay past its due time and
// RotationInterval + MaxDelay after the active key activated. So no key
// lives longer than Policy.MaxKeyLife.
type Confirm struct {
	// Timeout after the due time: past it, under Promote, the held key
	// activates by the clock, confirmed or not; under Wait, the ring reports
	// the key overdue.
	Timeout time.Duration
	// MaxDelay is the ceiling: the longest a held key waits past its due
	// time, under either policy. At least Timeout; zero means Timeout.
	MaxDelay time.Duration
	// Promote activates at Timeout; without it, the key waits for
	// confirmation up to MaxDelay, and the active key keeps encrypting
	// meanwhile.
	Promote bool
}

// Ceiling is the longest a held key waits past its due time: MaxDelay, or
// Timeout when MaxDelay is zero. Zero for a nil Confirm.
func (c *Confirm) Ceiling() time.Duration {
	if c == nil {
		return 0
	}
	if c.MaxDelay == 0 {
		return c.Timeout
	}
	return c.MaxDelay
}

// hold is how far past its due time a staged key is published.
func (c *Confirm) hold() time.Duration {
	if c.Promote {
		return min(c.Timeout, c.Ceiling())
	}
	return c.Ceiling()
}

// MaxKeyLife is the longest any key of the ring lives, from its ActiveFrom
// to its ExpiresAt: its own RotationInterval, RetainedKeys more intervals
// decrypt-only, and the longest a held successor can keep it encrypting
// (Confirm.Ceiling). Every ring Next plans keeps every key within it.
func (p Policy) MaxKeyLife() time.Duration {
	return time.Duration(p.RetainedKeys+1)*p.RotationInterval + p.Confirm.Ceiling()
}

// heldUntil is when a staged key due at due, behind an active key that
// activated at active, activates by the clock: its hold past due, and
// never later than the ceiling past the active key's own interval (so that
// a late due time eats into the hold rather than into the active key's
// bound), but never before due, which keeps its delivery time.
func (p Policy) heldUntil(due, active time.Time) time.Time {
	return latest(due, earliest(due.Add(p.Confirm.hold()), active.Add(p.RotationInterval+p.Confirm.Ceiling())))
}

// Inputs are the facts Next plans from, besides the ring and its policy.
type Inputs struct {
	// RotateNow asks for the staged key to be promoted as early as is safe.
	RotateNow bool
	// Revoke asks for every key to be destroyed at once, and a fresh key to
	// encrypt from now: for a suspected compromise. It supersedes RotateNow.
	Revoke bool
	// StagedSince reports when a key id was first published (see
	// History.StagedSince); nil knows none.
	StagedSince func(id string) (time.Time, bool)
	// Confirmed reports that every replica of the fleet holds the staged
	// key (Policy.Confirm).
	Confirmed bool
}

// Validate checks the policy against the same rules as the API's validation,
// for callers that do not go through the API server.
func (p Policy) Validate() error {
	switch {
	case p.RotationInterval < time.Minute:
		return fmt.Errorf("rotationInterval %s is under 1m", p.RotationInterval)
	case p.ActivationDelay < 0 || p.ActivationDelay >= p.RotationInterval:
		return fmt.Errorf("activationDelay %s must be at least 0 and under rotationInterval %s", p.ActivationDelay, p.RotationInterval)
	case p.RetainedKeys < 0 || p.RetainedKeys > MaxRetainedKeys:
		return fmt.Errorf("retainedKeys %d is outside 0-%d", p.RetainedKeys, MaxRetainedKeys)
	case time.Duration(p.RetainedKeys+1)*p.RotationInterval > MaxTicketLifetime:
		return fmt.Errorf("(retainedKeys+1) x rotationInterval exceeds %s", MaxTicketLifetime)
	}
	if c := p.Confirm; c != nil {
		switch {
		case c.Timeout < 0:
			return fmt.Errorf("confirmation timeout %s is negative", c.Timeout)
		case c.MaxDelay != 0 && c.MaxDelay < c.Timeout:
			return fmt.Errorf("confirmation maxDelay %s is under its timeout %s", c.MaxDelay, c.Timeout)
		case c.Ceiling() > p.RotationInterval:
			return fmt.Errorf("confirmation maxDelay %s exceeds rotationInterval %s", c.Ceiling(), p.RotationInterval)
		case p.MaxKeyLife() > MaxTicketLifetime:
			return fmt.Errorf("(retainedKeys+1) x rotationInterval + confirmation maxDelay exceeds %s", MaxTicketLifetime)
		}
	}
	return nil
}

// Plan is what Next decides for a ring at one instant.
type Plan struct {
	// Ring is the next ring. When Mint > 0 its first Mint keys have times but
	// no secret yet: Fill gives them one.
	Ring Ring
	// Mint is how many new keys the ring needs: 2 for a new ring (active and
	// staged), at most 1 afterwards, never a burst.
	Mint int
	// Changed says whether Ring differs from the current ring, so that a new
	// epoch must be published.
	Changed bool
	// Expired lists the ids of the keys Next dropped because they expired.
	Expired []string
	// RequeueAt is the next instant something is due: a staged key
	// activating (a new staged key is then minted) or a key expiring.
	RequeueAt time.Time
	// RotateAt is when a rotate-now request takes effect: the instant the
	// staged key is promoted (under confirmation, when it falls due). Zero
	// when no request was made.
	RotateAt time.Time
	// Revoked lists the ids of the keys a revoke destroyed.
	Revoked []string
	// Promoted says a held staged key activates in this epoch, confirmed.
	Promoted bool
	// Awaiting says the held staged key is due and waits for the fleet to
	// confirm it: the caller looks at the fleet again soon.
	Awaiting bool
	// Unconfirmed is the id of the held staged key that activated by the
	// clock unconfirmed: at its ceiling under Wait, at the timeout under
	// Promote (or at once when a lowered ceiling has already passed). Empty
	// otherwise.
	Unconfirmed string
}

// Next plans the ring after current at now under policy p. current may be
// the zero Ring for a ring that has no epoch yet.
//
// The steps, in order:
//  0. a revoke drops every key: the ring starts over as a new one.
//  1. rotate-now moves the staged key's ActiveFrom (under confirmation, its
//     due time) to the earliest safe instant: now, but no sooner than
//     ActivationDelay after the key was first published (StagedSince).
//     Without a staged key, one is minted to activate after
//     ActivationDelay.
//  2. under confirmation (see Confirm), a held staged key that is due and
//     confirmed activates now; one that waits keeps its ActiveFrom, its
//     ceiling, and activates by the clock when that comes (Unconfirmed).
//     A hold is never pushed further.
//  3. keys past ExpiresAt, or MaxKeyLife past their ActiveFrom, are
//     dropped.
//  4. when the newest key is active by now, one staged key is minted to
//     activate one RotationInterval after it, and never sooner than
//     ActivationDelay from now (under confirmation, it is held past that
//     instant, to its ceiling), unless that would keep the newest key past
//     MaxKeyLife: then at that bound. So an operator back from downtime
//     mints one key, not one per missed interval.
//  5. each key's RetireAt becomes the next key's ActiveFrom, and ExpiresAt
//     RetireAt + RetainedKeys × RotationInterval, but no later than
//     MaxKeyLife after its ActiveFrom.
//  6. keys past ExpiresAt are dropped again (the new times may expire
//     some), and so are the oldest retired keys beyond RetainedKeys, which
//     rotate-now requests can pile up.
//
// StagedSince reports when a key id was first published; when it does not
// know, the key is taken to have been published at current.IssuedAt, the
// latest it can have been.
//
// ActivationDelay counts as one second at least, so that a published ring
// always holds a staged key and keys activate strictly one after another.
//
// All times are whole seconds, as the snapshot and the API carry them.
func Next(now time.Time, p Policy, current Ring, in Inputs) Plan {
	n := newPlanner(now, p, current, in)
	n.revoke()      // step 0
	n.rotateNow()   // step 1
	n.hold()        // step 2
	n.dropExpired() // step 3
	n.stage()       // step 4
	n.retime()      // step 5
	n.dropExpired() // step 6
	n.dropRetired() // step 6
	return n.finish()
}

// planner is Next's state between its steps.
type planner struct {
	p       Policy
	current Ring
	in      Inputs
	// now is truncated to the second; soonest is the next whole second.
	now, soonest time.Time
	// lead is ActivationDelay, one second at least; life is MaxKeyLife.
	lead, life time.Duration
	keys       []Key
	due        time.Time
	plan       Plan
	// mintAt, when set, is when the key step 4 mints falls due.
	mintAt time.Time
}

func newPlanner(now time.Time, p Policy, current Ring, in Inputs) *planner {
	// Times are whole seconds, and a key minted now is published a moment
	// after now: bounds on how long a key is staged count from the next whole
	// second, and a recorded publication time (itself truncated) may hide up
	// to a second, so that no key is ever staged for less than lead.
	soonest := now.Truncate(time.Second)
	if soonest.Before(now) {
		soonest = soonest.Add(time.Second)
	}
	if in.StagedSince == nil {
		in.StagedSince = func(string) (time.Time, bool) { return time.Time{}, false }
	}
	// Even with ActivationDelay 0, a key is staged when published: the
	// requeue at its activation then mints its successor, and it never
	// shares its activeFrom with the key before it.
	return &planner{p: p, current: current, in: in, now: now.Truncate(time.Second), soonest: soonest,
		lead: max(p.ActivationDelay, time.Second), life: p.MaxKeyLife(),
		keys: slices.Clone(current.Keys), due: current.Due}
}

// revoke is step 0: a revoke drops every key, and a ring without keys
// starts over as a new one.
func (n *planner) revoke() {
	if n.in.Revoke {
		for _, k := range n.keys {
			n.plan.Revoked = append(n.plan.Revoked, k.ID)
		}
		n.plan.Expired = slices.Clone(n.plan.Revoked)
		n.keys, n.due = nil, time.Time{}
	}
	if len(n.keys) == 0 {
		n.startOver()
	}
}

// startOver plans a new ring: an active key and a staged one, both
// minted (under confirmation, the staged one held).
func (n *planner) startOver() {
	n.plan.Mint = 2
	n.keys = []Key{{ActiveFrom: n.now.Add(n.p.RotationInterval)}, {ActiveFrom: n.now}}
	if n.p.Confirm != nil {
		n.due = n.keys[0].ActiveFrom
		n.keys[0].ActiveFrom = n.p.heldUntil(n.due, n.now)
	}
}

// rotateNow is step 1.
func (n *planner) rotateNow() {
	if !n.in.RotateNow || n.in.Revoke || n.plan.Mint != 0 {
		return
	}
	staged := n.keys[0]
	if !n.now.Before(staged.ActiveFrom) {
		n.mintAt = n.soonest.Add(n.lead)
		n.plan.RotateAt = n.mintAt
		return
	}
	since, ok := n.in.StagedSince(staged.ID)
	if !ok {
		since = n.current.IssuedAt
	}
	safe := latest(n.now, since.Truncate(time.Second).Add(n.lead+time.Second))
	switch {
	case !n.due.IsZero():
		n.due = earliest(n.due, safe)
		n.plan.RotateAt = n.due
	case safe.Before(staged.ActiveFrom):
		n.keys[0].ActiveFrom = safe
		n.plan.RotateAt = safe
	default:
		n.plan.RotateAt = staged.ActiveFrom
	}
}

// hold is step 2.
func (n *planner) hold() {
	if n.plan.Mint != 0 {
		return
	}
	n.due = n.p.confirm(&n.plan, n.keys, n.due, n.now, n.lead, n.in.Confirmed)
	if held := n.current.Keys; n.p.Confirm != nil && !n.current.Due.IsZero() && len(held) > 1 && !n.plan.Promoted &&
		n.keys[0].ID == held[0].ID && !n.now.Before(n.keys[0].ActiveFrom) {
		n.plan.Unconfirmed = held[0].ID
	}
}

// dropExpired is steps 3 and 6: a key also expires at its bound,
// MaxKeyLife after it activated, whatever a ring published before that
// bound held says. After step 5, the new times can expire a key too: one
// that rotate-now retired at once under RetainedKeys 0, or any older key
// when RetainedKeys went down. Only the oldest keys can go, so the others'
// times stand.
func (n *planner) dropExpired() {
	n.keys = slices.DeleteFunc(n.keys, func(k Key) bool {
		if k.ID != "" && (!n.now.Before(k.ExpiresAt) || !n.now.Before(k.ActiveFrom.Add(n.life))) {
			n.plan.Expired = append(n.plan.Expired, k.ID)
			return true
		}
		return false
	})
}

// stage is step 4; a ring whose every key expired while nothing rotated
// starts over as a new one.
func (n *planner) stage() {
	if len(n.keys) == 0 {
		n.due = time.Time{}
		n.startOver()
		return
	}
	newest := n.keys[0]
	if n.plan.Mint != 0 || n.now.Before(newest.ActiveFrom) {
		return
	}
	if n.mintAt.IsZero() {
		n.mintAt = latest(newest.ActiveFrom.Add(n.p.RotationInterval), n.soonest.Add(n.lead))
	}
	// The newest key retires by its bound, even if that leaves its
	// successor staged for less than ActivationDelay (an operator back
	// late): forward secrecy before resumption. The bound is after now,
	// or step 3 dropped the key.
	n.mintAt = earliest(n.mintAt, newest.ActiveFrom.Add(n.life)).Truncate(time.Second)
	staged := Key{ActiveFrom: n.mintAt}
	n.due = time.Time{}
	if n.p.Confirm != nil {
		n.due = n.mintAt
		staged.ActiveFrom = n.p.heldUntil(n.mintAt, newest.ActiveFrom)
	}
	n.keys = append([]Key{staged}, n.keys...)
	n.plan.Mint = 1
}

// retime is step 5. No key outlives MaxKeyLife, not even one whose
// successor came late (an operator back from downtime staging it
// activationDelay from now): it stays decrypt-only for less. (Step 4 keeps
// the successor's ActiveFrom within the bound; RetireAt is capped too only
// for a ring published before the bound held.)
func (n *planner) retime() {
	retain := time.Duration(n.p.RetainedKeys) * n.p.RotationInterval
	keys := n.keys
	for i := range keys {
		if i == 0 {
			keys[i].RetireAt = keys[i].ActiveFrom.Add(n.p.RotationInterval)
		} else {
			keys[i].RetireAt = keys[i-1].ActiveFrom
		}
		keys[i].ExpiresAt = earliest(keys[i].RetireAt.Add(retain), keys[i].ActiveFrom.Add(n.life))
		keys[i].RetireAt = earliest(keys[i].RetireAt, keys[i].ExpiresAt)
	}
}

// dropRetired is the rest of step 6. RetainedKeys also bounds how many
// retired keys the ring holds: rotate-now retires a key before its
// interval is out, and a burst of requests would otherwise pile up keys
// that each stay retainedKeys intervals. So a ring never holds more than
// RetainedKeys+2 keys (the staged, the active and the retired ones), a
// bound readers can check. Keys are newest first: the oldest retired keys
// go.
func (n *planner) dropRetired() {
	retired := 0
	for i, k := range n.keys {
		if n.now.Before(k.RetireAt) {
			continue
		}
		if retired++; retired > n.p.RetainedKeys {
			for _, gone := range n.keys[i:] {
				n.plan.Expired = append(n.plan.Expired, gone.ID)
			}
			n.keys = n.keys[:i]
			return
		}
	}
}

// finish builds the plan's ring and says when to look again.
func (n *planner) finish() Plan {
	plan, now, keys, due, current := n.plan, n.now, n.keys, n.due, n.current
	plan.Ring = Ring{Name: current.Name, Epoch: current.Epoch, IssuedAt: current.IssuedAt, Keys: keys, Due: due}
	plan.Changed = plan.Mint > 0 || !sameKeys(current.Keys, keys) || !due.Equal(current.Due)
	if plan.Changed {
		plan.Ring.Epoch++
		plan.Ring.IssuedAt = now
	}
	plan.RequeueAt = requeueAt(now, keys)
	if due.After(now) && (plan.RequeueAt.IsZero() || due.Before(plan.RequeueAt)) {
		plan.RequeueAt = due
	}
	plan.Awaiting = !due.IsZero() && !now.Before(due) && len(keys) > 1 && now.Before(keys[0].ActiveFrom)
	return plan
}

// confirm applies step 2 of Next to the staged key keys[0] and returns its
// due time: it activates a held key that is due and confirmed, brings a
// held key's ActiveFrom back under its ceiling when the ceiling or the due
// time moved earlier (never later: a hold is never pushed further), holds a
// staged key that confirmation, newly turned on, finds unheld (when there
// is time to), and releases a held key when confirmation is turned off.
func (p Policy) confirm(plan *Plan, keys []Key, due, now time.Time, lead time.Duration, confirmed bool) time.Time {
	if len(keys) < 2 || !now.Before(keys[0].ActiveFrom) {
		return time.Time{} // no staged key: nothing is held
	}
	staged := &keys[0]
	switch {
	case p.Confirm == nil && !due.IsZero():
		staged.ActiveFrom = latest(due, now.Add(lead))
		return time.Time{}
	case p.Confirm == nil:
		return due
	case due.IsZero():
		if now.Add(lead).Before(staged.ActiveFrom) {
			due = staged.ActiveFrom
			staged.ActiveFrom = p.heldUntil(due, keys[1].ActiveFrom)
		}
		return due
	case !now.Before(due) && confirmed:
		// Activate now, strictly after the active key.
		staged.ActiveFrom = latest(now, keys[1].ActiveFrom.Add(time.Second))
		plan.Promoted = true
		return time.Time{}
	}
	// A lowered ceiling already past activates the key now, still strictly
	// after the active key.
	ceiling := latest(p.heldUntil(due, keys[1].ActiveFrom), latest(now, keys[1].ActiveFrom.Add(time.Second)))
	staged.ActiveFrom = earliest(staged.ActiveFrom, ceiling)
	return due
}

// requeueAt is the next activation or expiry after now. A staged key's
// activation is the moment its successor must be minted.
func requeueAt(now time.Time, keys []Key) time.Time {
	var next time.Time
	for _, k := range keys {
		for _, t := range []time.Time{k.ActiveFrom, k.ExpiresAt} {
			if t.After(now) && (next.IsZero() || t.Before(next)) {
				next = t
			}
		}
	}
	return next
}

// WithoutMint is the plan to fall back on when the keys p needs cannot be
// minted: current's keys as they are, less those expired at now. It changes
// the ring only when a key expired, so a source outage never delays the
// destruction of a key, even if only the active key remains. When every key
// has expired, the ring is published without keys: forward secrecy needs the
// bytes gone from every Secret, not only unused, and readers serve no key of
// such a ring (Go servers fall back on crypto/tls's own keys) until a key is
// minted again.
func (p Plan) WithoutMint(now time.Time, current Ring) Plan {
	now = now.Truncate(time.Second)
	var expired []string
	keys := slices.DeleteFunc(slices.Clone(current.Keys), func(k Key) bool {
		if now.Before(k.ExpiresAt) {
			return false
		}
		expired = append(expired, k.ID)
		return true
	})
	out := Plan{Ring: current, RequeueAt: requeueAt(now, current.Keys)}
	if len(expired) == 0 {
		return out
	}
	due := current.Due
	if len(keys) == 0 {
		due = time.Time{} // no staged key is held any more
	}
	out.Expired = expired
	out.Ring = Ring{Name: current.Name, Epoch: current.Epoch + 1, IssuedAt: now, Keys: keys, Due: due}
	out.Changed = true
	out.RequeueAt = requeueAt(now, keys)
	return out
}

// ErrBadSecret is returned by Fill for a minted secret the ring must refuse.
var ErrBadSecret = errors.New("bad minted secret")

// Fill gives the keys the plan minted their secrets, in order, and returns
// the completed ring. It refuses a wrong number of secrets, an all-zero
// secret, and a secret already in the ring (a broken or replaying source),
// so that nothing of a bad mint is ever published.
func (p Plan) Fill(secrets []Secret) (Ring, error) {
	if len(secrets) != p.Mint {
		return Ring{}, fmt.Errorf("%w: got %d secrets, want %d", ErrBadSecret, len(secrets), p.Mint)
	}
	r := p.Ring
	r.Keys = slices.Clone(r.Keys)
	for i, s := range secrets {
		if s == (Secret{}) {
			return Ring{}, fmt.Errorf("%w: secret %d is all zero", ErrBadSecret, i)
		}
		id := KeyID(s)
		for _, k := range r.Keys {
			if k.Secret == s || k.ID == id {
				return Ring{}, fmt.Errorf("%w: secret %d repeats key %s", ErrBadSecret, i, id)
			}
		}
		r.Keys[i].ID, r.Keys[i].Secret = id, s
	}
	return r, nil
}

func sameKeys(a, b []Key) bool {
	return slices.EqualFunc(a, b, func(x, y Key) bool {
		return x.ID == y.ID && x.ActiveFrom.Equal(y.ActiveFrom) && x.RetireAt.Equal(y.RetireAt) && x.ExpiresAt.Equal(y.ExpiresAt)
	})
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
