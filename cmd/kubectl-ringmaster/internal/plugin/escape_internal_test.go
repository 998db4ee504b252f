package plugin

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/audit"
)

// hostileText holds what a tenant's annotation, a pod's report or an event
// could carry to an administrator's terminal: an OSC title and a clear
// screen (ESC), BEL, a carriage return, an 8-bit CSI, a bidirectional
// override, and a newline followed by a forged summary line.
const hostileText = "2026-11-30T21:54:24Z\x1b]0;owned\x07\x1b[2J\r\u009b31m\u202e\n  Active key:      forged"

// TestEscape: esc leaves ordinary text alone and writes every control
// character as an escape, on one line.
func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"Epoch 3 is published to 1 namespace(s)": "Epoch 3 is published to 1 namespace(s)",
		"clé: 日本":                                "clé: 日本",
		"\x1b[31mred":                            "^[[31mred",
		"a\rb":                                   `a\rb`,
		"a\nb\tc\x07":                            `a\nb\tc\a`,
		"\u009b2J":                               `\u009b2J`,
		"\u202egnp.exe":                          `\u202egnp.exe`,
	} {
		if got := esc(in); got != want {
			t.Errorf("esc(%q) = %q, want %q", in, got, want)
		}
	}
	if got := escLines("line\x1b[2J\nnext"); got != "line^[[2J\nnext" {
		t.Errorf("escLines kept %q", got)
	}
}

// TestStatusEscapesClusterText: status prints every free-text field from
// the cluster (annotations, names, messages, reasons, events, the revoke's
// field manager) escaped: no control character reaches the terminal, and
// none forges a line.
func TestStatusEscapesClusterText(t *testing.T) {
	now := time.Date(2026, 11, 30, 22, 0, 0, 0, time.UTC)
	ago := metav1.NewTime(now.Add(-time.Minute))
	h := hostileText
	st := RingStatus{
		Kind: audit.KindTicketKeyRing, Namespace: "shop", Name: "web" + h, Time: metav1.NewTime(now),
		Spec: v1alpha1.TicketKeyRingSpec{
			RotationInterval: metav1.Duration{Duration: time.Hour},
			SourceRef:        &v1alpha1.KeySourceReference{Name: "vault" + h},
			Confirmation:     &v1alpha1.Confirmation{Port: intstr.FromString("status" + h)},
		},
		Status: v1alpha1.TicketKeyRingStatus{
			Epoch: 3, Snapshot: "web-e3" + h, LastRotateRequestedAt: "x",
			Conditions:    []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Published" + h, Message: "published" + h, LastTransitionTime: ago}},
			FailedTargets: []v1alpha1.TargetFailure{{Namespace: "legacy" + h, Reason: "SecretConflict", Message: "conflict" + h}},
			Revocations:   []v1alpha1.Revocation{{RequestedAt: h, RequestedBy: "kubectl" + h, Epoch: 3, Keys: []string{"a4c16209" + h}}},
			Shared:        &v1alpha1.SharedRingStatus{Path: "secret/x" + h, Version: 2},
			Confirmation: &v1alpha1.ConfirmationStatus{StagedKey: "f6c4bdf9" + h, Pods: 1, CheckedAt: ago,
				Missing: []v1alpha1.PodReport{{Namespace: "shop", Name: "search-0" + h, Node: "node-a" + h, Reason: "cannot be asked" + h}}},
		},
		RotateRequestedAt: h,
		RevokeRequestedAt: h,
		Keys:              []KeyState{{ID: "339be8ae" + h, State: "active", ActiveFrom: ago}},
		Projections:       []RingSecret{{Namespace: "shop", Name: "web-ticket-keys" + h, Epoch: "3" + h, Created: ago}},
		Events:            []Event{{Type: "Warning", Reason: "Revoked" + h, Message: "revoked" + h, Last: ago}},
		SecretsListed:     true, EventsListed: true,
		Problems: []audit.Problem{{Message: "problem" + h}},
	}
	var b bytes.Buffer
	if err := printStatus(&b, st); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, bad := range []string{"\x1b", "\x07", "\r", "\u009b", "\u202e"} {
		if strings.Contains(out, bad) {
			t.Errorf("status prints %q raw:\n%s", bad, out)
		}
	}
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, "  Active key:      forged") {
			t.Errorf("a field forged a line of status: %q", line)
		}
	}
	// Every field planted shows, escaped: 24 fields, the active key's id
	// twice (in the summary and in the table).
	if n, want := strings.Count(out, `^[]0;owned\a^[[2J\r\u009b31m\u202e\n  Active key:      forged`), 25; n != want {
		t.Errorf("%d escaped fields shown, want %d:\n%s", n, want, out)
	}
	if !strings.Contains(out, "FIELD MANAGER") {
		t.Errorf("the revocations do not call the attribution a field manager:\n%s", out)
	}
}
