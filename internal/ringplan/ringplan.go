// Package ringplan is the engine every kind of ring is planned on: the
// vocabulary one pass of a ring, of any kind, speaks to its controller.
//
// A pass reads what a ring is and has, decides, mints, finishes and
// writes; then it reports. What a kind decides is its own, in a package
// of its own (ringplan/ticket for ticket key rings of both scopes,
// ringplan/ech for the rings of Encrypted Client Hello configs), each a
// pure step from what the controller read to what it must write. What
// every kind reports is here, once:
//   - Problem, what keeps a ring from going on, for its Ready condition;
//   - Report, the pass's outcome: the status to write once, when to look
//     again, the events to emit, and what its metrics count;
//   - Requeue, the arbiter of when to look again;
//   - Conditions, which set each condition with the pass's generation and
//     date a transition by the pass's own clock, and Warnings, the events
//     a condition turning bad calls for, from one table per kind;
//   - the requests a ring's annotations may carry (Request, RequestedBy).
//
// It is pure: values in, values out.
package ringplan

import (
	"time"
)

// Problem is what kept a pass from going on, with the reason to report and
// a message saying what to do.
type Problem struct {
	Reason  string
	Message string
}

// Event is an event a pass calls for: its type (Warning or Normal), its
// reason and action, and its note, which never holds key bytes.
type Event struct {
	Warning bool
	Reason  string
	Action  string
	Note    string
	// Condition is the condition whose transition calls for the event;
	// "" for an event of what a pass wrote.
	Condition string
	// Regarding names the Secret the event is related to (the snapshot a
	// pass wrote), in the ring's home namespace; "" for none.
	Regarding string
}

// Report is what one pass of a ring reports once its writes are done:
// the status to write (once, and only when it changed), when to look
// again, the events to emit, and what the ring's metrics count.
type Report[S any] struct {
	Status  S
	Requeue time.Duration
	Events  []Event
	Counts  Counts
}

// Counts is what a pass adds to the ring metrics, and what its gauges show.
type Counts struct {
	// Rotated says the pass published a new epoch as planned; Failed
	// counts the rotations that failed (a mint, a shared entry's write, a
	// snapshot's write).
	Rotated bool
	Failed  int
	// Unconfirmed says a key or config went live without every pod of the
	// fleet holding it (at its ceiling, or its timeout under Promote).
	Unconfirmed bool
	// Gauge is what the ring's gauges show after the pass; nil when no key
	// encrypts, or the pass halted.
	Gauge *Gauge
	// MintRetry says the pass looks again soon for a key source that
	// failed, rather than back off: expired keys must still go on time.
	MintRetry bool
}

// Gauge is what a ring's gauges show after a pass.
type Gauge struct {
	Epoch      int64
	ActiveFrom time.Time
	// OverdueSince is since when a rotation has been due while no key
	// could be minted; UnconfirmedSince since when its staged key has
	// waited for its fleet past the timeout. Zero when not.
	OverdueSince, UnconfirmedSince time.Time
}
