// Package textlimit keeps the text the operator hands the API server
// within the API's limits, however much it lists: the events.k8s.io API
// refuses an event whose note passes 1 KiB (and the event is lost), and a
// condition whose message passes 32 KiB (and the whole status write with
// it). Messages that name pods, namespaces or finalizers list a bounded
// number of them and count the rest (List); whatever still runs over is
// cut, at a UTF-8 boundary and marked (Cut). It is pure.
package textlimit

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

const (
	// NoteLimit is the most bytes an events.k8s.io Event's note may hold.
	NoteLimit = 1024
	// MessageLimit is the most bytes a metav1.Condition's message may hold.
	MessageLimit = 32768
	// MaxListed is how many names a message lists before it counts the
	// rest: enough to act on, few enough that a note naming them with
	// their namespaces, nodes and reasons stays near NoteLimit.
	MaxListed = 5
	// MaxItem is the most bytes one listed item keeps.
	MaxItem = 256
)

// Cut returns s when it holds at most limit bytes. Otherwise it returns
// the longest prefix of s ending at a UTF-8 boundary followed by a marker
// saying how many bytes were cut, the whole within limit bytes: never half
// a rune. Invalid UTF-8 in s is replaced first, since the API server would
// replace it anyway and count the replacement's bytes.
func Cut(s string, limit int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= limit {
		return s
	}
	// The marker is at most as long as it is with every byte of s cut.
	room := limit - len(marker(len(s)))
	if room < 0 {
		return prefix(s, limit)
	}
	kept := prefix(s, room)
	return kept + marker(len(s)-len(kept))
}

func marker(cut int) string { return fmt.Sprintf(" [... %d bytes cut]", cut) }

// prefix is the longest prefix of s, valid UTF-8, of at most n bytes.
func prefix(s string, n int) string {
	if n >= len(s) {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// List joins the first max items with sep, each cut to MaxItem bytes, and
// counts the others ("and 3 more"): a message naming pods or namespaces
// stays bounded however many there are. more counts items beyond those
// given (a list the caller already bounded).
func List(items []string, max int, sep string, more int) string {
	shown := items[:min(len(items), max)]
	parts := make([]string, len(shown), len(shown)+1)
	for i, it := range shown {
		parts[i] = Cut(it, MaxItem)
	}
	if rest := len(items) - len(shown) + more; rest > 0 {
		if len(parts) == 0 {
			return fmt.Sprintf("%d unnamed", rest)
		}
		return strings.Join(parts, sep) + fmt.Sprintf(" and %d more", rest)
	}
	return strings.Join(parts, sep)
}
