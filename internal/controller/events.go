package controller

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"

	"github.com/ringmaster-io/ringmaster/internal/textlimit"
)

// boundedRecorder is the one recorder every event of the operator goes
// through: it cuts a note past the events.k8s.io API's 1 KiB limit
// (textlimit.Cut), which the API server would refuse, losing the event.
// The messages listing names bound themselves first (textlimit.List);
// this holds whatever a message says.
type boundedRecorder struct{ events.EventRecorder }

// newRecorder wraps rec so that every note fits the API.
func newRecorder(rec events.EventRecorder) events.EventRecorder {
	if b, ok := rec.(boundedRecorder); ok {
		return b
	}
	return boundedRecorder{rec}
}

// Eventf records the event, its note cut to textlimit.NoteLimit bytes.
func (b boundedRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	b.EventRecorder.Eventf(regarding, related, eventtype, reason, action, "%s", textlimit.Cut(fmt.Sprintf(note, args...), textlimit.NoteLimit))
}
