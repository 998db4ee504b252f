package ringplan

import (
	"time"

	"github.com/ringmaster-io/ringmaster/internal/schedule"
)

// Timings every kind of ring shares.
const (
	// ConflictRetry is how often a ring blocked by a foreign Secret looks
	// again, or retries a target that failed: the cache holds only
	// ringmaster's Secrets, so the foreign one's removal raises no event.
	ConflictRetry = time.Minute
	// WrittenRetry is how soon a ring looks again at what its pass wrote
	// (a new epoch, or a write that failed).
	WrittenRetry = time.Second
)

// Requeue is the arbiter of when a ring is looked at again: the soonest
// of what its plan and its waits ask, counted from the pass's clock. Each
// wait names its own bound (Within, At, By); none at all means no look
// but the one a watch event starts.
type Requeue struct {
	now   time.Time
	after time.Duration // 0: no bound yet
}

// From starts an arbiter on a pass at now.
func From(now time.Time) *Requeue { return &Requeue{now: now} }

// Within has the ring looked at again d from now at the latest; d of 0 or
// less asks nothing.
func (r *Requeue) Within(d time.Duration) {
	if d > 0 && (r.after == 0 || d < r.after) {
		r.after = d
	}
}

// At has the ring looked at again at t, or a second from now when t is
// sooner: a wait that falls due while the pass ran is met by the next.
// The zero time asks nothing.
func (r *Requeue) At(t time.Time) {
	if !t.IsZero() {
		r.Within(max(t.Sub(r.now), time.Second))
	}
}

// By has the ring looked at again once t has surely passed: a second
// past it, the whole-second times of rings and certificates, with up to
// 1% jitter so that many rings due together do not come due in one burst
// (schedule.After).
func (r *Requeue) By(t time.Time) { r.Within(schedule.After(r.now, t)) }

// Exactly replaces every bound with d: a wait that must come first
// whatever else is due (a write that lost a race to another cluster).
func (r *Requeue) Exactly(d time.Duration) { r.after = d }

// After is how long from the pass's clock the ring waits; 0 for no look
// but the next watch event's.
func (r *Requeue) After() time.Duration { return r.after }
