package ringplan

import (
	"bytes"
	"strconv"
	"strings"
	"time"
	"unicode"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// RequestedBy is the field manager that set an annotation last, from an
// object's managed fields: who asked, as far as the API server was told.
func RequestedBy(fields []metav1.ManagedFieldsEntry, annotation string) string {
	key := []byte(`"f:` + annotation + `"`)
	var by string
	var at time.Time
	for _, f := range fields {
		if f.FieldsV1 == nil || !bytes.Contains(f.FieldsV1.GetRawBytes(), key) {
			continue
		}
		if t := f.Time; by == "" || (t != nil && t.After(at)) {
			by = f.Manager
			if t != nil {
				at = t.Time
			}
		}
	}
	return by
}
