package apply

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ringmaster-io/ringmaster/internal/textlimit"
)

// notes records the notes of the events it is given, formatted.
type notes []string

func (n *notes) Eventf(_, _ runtime.Object, _, _, _, note string, args ...any) {
	*n = append(*n, fmt.Sprintf(note, args...))
}

func TestRecorderCutsNotesToTheAPIsLimit(t *testing.T) {
	var names []string
	for i := 0; len(strings.Join(names, ", ")) < 10*1024; i++ {
		names = append(names, fmt.Sprintf("shop/wéb-%04d-7d9f8c6b5-x2x4z (node nœud-%d: no answer)", i, i%7))
	}
	list := strings.Join(names, ", ")
	got := &notes{}
	rec := Recorder(got)
	rec.Eventf(&corev1.Pod{}, nil, corev1.EventTypeWarning, "ConfirmationOverdue", "Confirm", "Not holding it: %s", list)
	rec.Eventf(&corev1.Pod{}, nil, corev1.EventTypeNormal, "Rotated", "Publish", "Published epoch %d (%s)", 3, "web-e3")
	rec.Eventf(&corev1.Pod{}, nil, corev1.EventTypeWarning, "Revoked", "Revoke", "%s", strings.Repeat("🔑", 1000))

	if len(*got) != 3 {
		t.Fatalf("%d events recorded, want 3", len(*got))
	}
	long := (*got)[0]
	if len(long) > textlimit.NoteLimit || len(long) < textlimit.NoteLimit-64 {
		t.Errorf("a note of %d bytes was cut to %d, want just under %d", len("Not holding it: ")+len(list), len(long), textlimit.NoteLimit)
	}
	if !utf8.ValidString(long) || !strings.HasPrefix(long, "Not holding it: shop/wéb-0000") {
		t.Errorf("the note kept is not the start of the note, whole runes: %q", long[:64])
	}
	want := fmt.Sprintf(" [... %d bytes cut]", len("Not holding it: ")+len(list)-strings.Index(long, " [... "))
	if !strings.HasSuffix(long, want) {
		t.Errorf("the note ends %q, want the marker %q", long[len(long)-40:], want)
	}
	if (*got)[1] != "Published epoch 3 (web-e3)" {
		t.Errorf("a short note was changed: %q", (*got)[1])
	}
	if keys := (*got)[2]; len(keys) > textlimit.NoteLimit || !utf8.ValidString(keys) || strings.Count(keys, "🔑")*4 != strings.Index(keys, " [...") {
		t.Errorf("a note of four-byte runes was cut mid-rune: %d bytes, valid %v", len(keys), utf8.ValidString(keys))
	}
	if _, twice := Recorder(rec).(boundedRecorder); !twice || Recorder(rec) != rec {
		t.Error("a bounded recorder is wrapped again")
	}
}
