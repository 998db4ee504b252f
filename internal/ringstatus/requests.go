package ringstatus

import (
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

// MaxRequestLength bounds the value of a rotate or revoke request: an RFC
// 3339 time with nanoseconds and an offset takes 35 characters.
const MaxRequestLength = 64

// Request reads a rotate or revoke request annotation: an RFC 3339 time of
// at most MaxRequestLength characters, and nothing else, is a request.
// Anything else is refused unread, so that no tenant-written text reaches
// the status, a snapshot or an event.
func Request(value string) (string, bool) {
	if value == "" {
		return "", true
	}
	if len(value) > MaxRequestLength {
		return "", false
	}
	if _, err := time.Parse(time.RFC3339Nano, value); err != nil {
		return "", false
	}
	return value, true
}

// Printable is a tenant-written name (a field manager's) as a status, an
// event or a terminal may show it: at most 128 characters, every control or
// non-printable character escaped as Go would quote it.
func Printable(s string) string {
	if len(s) > 128 {
		s = s[:128] + "..."
	}
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) || r == '\\' }) < 0 {
		return s
	}
	q := strconv.QuoteToGraphic(s)
	return q[1 : len(q)-1]
}

// bounded is a request value as an earlier status holds it: what Request
// takes, else nothing. An operator before request values were bounded
// copied any tenant-written text into status; an upgrade drops it.
func bounded(value string) string {
	v, _ := Request(value)
	return v
}

// boundedRevocations are revocations as an earlier status holds them,
// their request and requester bounded.
func boundedRevocations(rs []v1alpha1.Revocation) []v1alpha1.Revocation {
	for i := range rs {
		rs[i].RequestedAt, rs[i].RequestedBy = bounded(rs[i].RequestedAt), Printable(rs[i].RequestedBy)
	}
	return rs
}
