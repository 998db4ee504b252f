package ringplan

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/internal/textlimit"
)

// Conditions sets the conditions of the status one pass builds, each with
// the pass's generation.
type Conditions struct {
	list       *[]metav1.Condition
	generation int64
}

// On sets the conditions of list for a pass over generation.
func On(list *[]metav1.Condition, generation int64) Conditions {
	return Conditions{list: list, generation: generation}
}

// Set sets condition typ.
func (c Conditions) Set(typ string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(c.list, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message, ObservedGeneration: c.generation})
}

// Keep sets cond as it is, but for the pass's generation.
func (c Conditions) Keep(cond metav1.Condition) {
	cond.ObservedGeneration = c.generation
	meta.SetStatusCondition(c.list, cond)
}

// Remove removes condition typ.
func (c Conditions) Remove(typ string) { meta.RemoveStatusCondition(c.list, typ) }

// Settle ends every kind's status: it dates each condition of next that
// turned to its status since prev by the pass's clock now, to the second
// as the API server keeps it (rather than by the wall clock
// meta.SetStatusCondition reads: how long a ring has failed is then
// measured on one clock, and a test's fake clock dates it), and cuts each
// message to what the API takes (textlimit.MessageLimit), so that no
// status write is refused for what a message quotes.
func Settle(prev, next []metav1.Condition, now time.Time) {
	for i := range next {
		if p := meta.FindStatusCondition(prev, next[i].Type); !now.IsZero() && (p == nil || p.Status != next[i].Status) {
			next[i].LastTransitionTime = metav1.NewTime(now.Truncate(time.Second))
		}
		next[i].Message = textlimit.Cut(next[i].Message, textlimit.MessageLimit)
	}
}

// Warn says when a condition calls for a Warning event. A kind lists its
// own in one table, which Warnings reads.
type Warn struct {
	Type string
	// Bad says the condition is in a state that calls for a warning.
	Bad func(c *metav1.Condition) bool
	// Same says that a condition, already bad before, calls for no new
	// event as it is now; nil: when its status and reason are unchanged.
	Same func(was, is *metav1.Condition) bool
	// Reason is the event's reason; "" for the condition's own.
	Reason string
	// Action is the event's action.
	Action string
}

// Is is a Warn's Bad for a condition of status st.
func Is(st metav1.ConditionStatus) func(*metav1.Condition) bool {
	return func(c *metav1.Condition) bool { return c.Status == st }
}

// SameMessage is a Warn's Same for a condition that warns again whenever
// its message changes.
func SameMessage(was, is *metav1.Condition) bool {
	return was.Status == is.Status && was.Message == is.Message
}

// Warnings are the Warning events the change of conditions from prev to
// next calls for, by table: events mark transitions, not every retry.
func Warnings(prev, next []metav1.Condition, table []Warn) []Event {
	var out []Event
	for _, w := range table {
		is := meta.FindStatusCondition(next, w.Type)
		if is == nil || !w.Bad(is) {
			continue
		}
		same := w.Same
		if same == nil {
			same = func(was, is *metav1.Condition) bool { return was.Status == is.Status && was.Reason == is.Reason }
		}
		if was := meta.FindStatusCondition(prev, w.Type); was != nil && same(was, is) {
			continue
		}
		reason := w.Reason
		if reason == "" {
			reason = is.Reason
		}
		out = append(out, Event{Warning: true, Reason: reason, Action: w.Action, Note: is.Message, Condition: w.Type})
	}
	return out
}

// Find is condition typ as the status holds it so far; nil when it has
// none.
func (c Conditions) Find(typ string) *metav1.Condition { return meta.FindStatusCondition(*c.list, typ) }
