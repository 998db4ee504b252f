package textlimit_test

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ringmaster-io/ringmaster/internal/textlimit"
)

func TestCut(t *testing.T) {
	names := make([]string, 0, 200)
	for i := range 200 {
		names = append(names, fmt.Sprintf("shop/web-%04d-7d9f8c6b5-x2x4z", i))
	}
	tenKiB := strings.Repeat(strings.Join(names, ", "), 2)[:10*1024]
	tests := []struct {
		name, in string
		limit    int
	}{
		{"10 KiB of pod names", tenKiB, textlimit.NoteLimit},
		{"multi-byte runes across the boundary", strings.Repeat("é", 600) + strings.Repeat("日本", 400), textlimit.NoteLimit},
		{"four-byte runes", strings.Repeat("🔑", 1000), textlimit.NoteLimit},
		{"invalid UTF-8", strings.Repeat("a\xff", 1000), textlimit.NoteLimit},
		{"a limit below the marker", strings.Repeat("日", 100), 5},
		{"a condition message", strings.Repeat("x", 100*1024), textlimit.MessageLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := textlimit.Cut(tt.in, tt.limit)
			if len(got) > tt.limit {
				t.Errorf("%d bytes, over the limit of %d", len(got), tt.limit)
			}
			if !utf8.ValidString(got) {
				t.Errorf("invalid UTF-8: %q", got)
			}
			valid := strings.ToValidUTF8(tt.in, "\uFFFD")
			if tt.limit < 30 {
				if !strings.HasPrefix(valid, got) {
					t.Errorf("%q is no prefix of the input", got)
				}
				return
			}
			kept, cut, ok := strings.Cut(got, " [... ")
			if !ok {
				t.Fatalf("no marker in %q", got)
			}
			if !strings.HasPrefix(valid, kept) {
				t.Errorf("the text kept is no prefix of the input")
			}
			if want := fmt.Sprintf("%d bytes cut]", len(valid)-len(kept)); cut != want {
				t.Errorf("marker %q, want %q", cut, want)
			}
			if len(got) < tt.limit-4-len(" [... 99999 bytes cut]") {
				t.Errorf("cut to %d bytes, far under the limit of %d", len(got), tt.limit)
			}
		})
	}
	if short := "Published epoch 3 (web-e3)"; textlimit.Cut(short, textlimit.NoteLimit) != short {
		t.Errorf("a short note was changed")
	}
}

func TestList(t *testing.T) {
	long := func(i int) string { return fmt.Sprintf("shop/%s-%d", strings.Repeat("p", 240), i) }
	var many []string
	for i := range 1000 {
		many = append(many, long(i))
	}
	tests := []struct {
		name  string
		items []string
		more  int
		want  string
	}{
		{"none", nil, 0, ""},
		{"a few", []string{"a", "b"}, 0, "a, b"},
		{"more than shown", []string{"a", "b", "c", "d", "e", "f", "g"}, 0, "a, b, c, d, e and 2 more"},
		{"more than given", []string{"a"}, 3, "a and 3 more"},
		{"none given, some counted", nil, 4, "4 unnamed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := textlimit.List(tt.items, textlimit.MaxListed, ", ", tt.more); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	got := textlimit.List(many, textlimit.MaxListed, "; ", 0)
	if !strings.HasSuffix(got, " and 995 more") || len(got) > textlimit.MaxListed*(textlimit.MaxItem+2)+20 {
		t.Errorf("1,000 long names: %d bytes ending %q", len(got), got[max(0, len(got)-20):])
	}
	huge := []string{strings.Repeat("n", 10*1024)}
	if got := textlimit.List(huge, textlimit.MaxListed, ", ", 0); len(got) > textlimit.MaxItem {
		t.Errorf("one 10 KiB item kept %d bytes", len(got))
	}
}
