package ringstatus_test

import (
	"strings"
	"testing"

	"github.com/ringmaster-io/ringmaster/internal/ringstatus"
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
		got, ok := ringstatus.Request(tc.value)
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
		if got := ringstatus.Printable(tc.in); got != tc.want {
			t.Errorf("Printable(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
