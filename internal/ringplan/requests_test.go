package ringplan_test

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/ringplan"
)

func TestRequest(t *testing.T) {
	for _, tc := range []struct {
		value string
		ok    bool
	}{
		{"", true},
		{"2026-12-02T10:00:00Z", true},
		{"2026-12-02T10:00:00.123456789+01:00", true},
		{"r1", false},
		{"2026-12-02 10:00:00", false},
		{"2026-12-02T10:00:00Z\x1b[2J", false},
		{strings.Repeat("2", 200*1024), false},
	} {
		got, ok := ringplan.Request(tc.value)
		if ok != tc.ok || (ok && got != tc.value) || (!ok && got != "") {
			t.Errorf("Request(%.30q) = %q, %v; want ok %v", tc.value, got, ok, tc.ok)
		}
	}
}

func TestPrintable(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"kubectl-annotate", "kubectl-annotate"},
		{"evil\x1b[31mred", `evil\x1b[31mred`},
		{"a\nb", `a\nb`},
		{strings.Repeat("m", 300), strings.Repeat("m", 128) + "..."},
	} {
		if got := ringplan.Printable(tc.in); got != tc.want {
			t.Errorf("Printable(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

var r0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func TestRequestedBy(t *testing.T) {
	entry := func(manager string, at time.Time, fields string) metav1.ManagedFieldsEntry {
		f := metav1.NewFieldsV1(fields)
		return metav1.ManagedFieldsEntry{Manager: manager, Time: &metav1.Time{Time: at}, FieldsV1: f}
	}
	fields := []metav1.ManagedFieldsEntry{
		entry("kubectl-create", r0, `{"f:spec":{}}`),
		entry("kubectl-annotate", r0.Add(time.Minute), `{"f:metadata":{"f:annotations":{"f:ringmaster.io/revoke-requested-at":{}}}}`),
		entry("ringmaster", r0.Add(2*time.Minute), `{"f:status":{}}`),
	}
	if got := ringplan.RequestedBy(fields, v1alpha1.RevokeRequestedAtAnnotation); got != "kubectl-annotate" {
		t.Errorf("RequestedBy = %q", got)
	}
	if got := ringplan.RequestedBy(fields, v1alpha1.RotateRequestedAtAnnotation); got != "" {
		t.Errorf("RequestedBy of an annotation nobody set = %q", got)
	}
}
