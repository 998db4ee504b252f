package apply

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ringmaster-io/ringmaster/internal/ringplan"
	"github.com/ringmaster-io/ringmaster/internal/textlimit"
)

// boundedRecorder is the one recorder every event of the operator goes
// through: it cuts a note past the events.k8s.io API's 1 KiB limit
// (textlimit.Cut), which the API server would refuse, losing the event.
// The messages listing names bound themselves first (textlimit.List);
// this holds whatever a message says.
type boundedRecorder struct{ events.EventRecorder }

// Recorder wraps rec so that every note fits the API.
func Recorder(rec events.EventRecorder) events.EventRecorder {
	if b, ok := rec.(boundedRecorder); ok {
		return b
	}
	return boundedRecorder{rec}
}

// Eventf records the event, its note cut to textlimit.NoteLimit bytes.
func (b boundedRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	b.EventRecorder.Eventf(regarding, related, eventtype, reason, action, "%s", textlimit.Cut(fmt.Sprintf(note, args...), textlimit.NoteLimit))
}

// Emit records the events a pass of a ring reports, regarding obj, each
// related to the Secret it names in home (the snapshot a pass wrote), and
// logs each Warning: a ring's events are told the same way whatever its
// kind.
func Emit(ctx context.Context, rec events.EventRecorder, obj runtime.Object, home string, evs []ringplan.Event) {
	for _, e := range evs {
		var related runtime.Object
		if e.Regarding != "" {
			related = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: e.Regarding}}
		}
		typ := corev1.EventTypeNormal
		if e.Warning {
			typ = corev1.EventTypeWarning
			log.FromContext(ctx).Info("Warned", "reason", e.Reason, "condition", e.Condition, "message", e.Note)
		}
		rec.Eventf(obj, related, typ, e.Reason, e.Action, "%s", e.Note)
	}
}
