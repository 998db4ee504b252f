package strictjson

import (
	"bytes"
	"fmt"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/redact"
)

// Time is a time in a ring file: written as time.Time writes itself, read
// as the raw JSON value, which Parse then reads as time.Time would, so that
// the codec can name the field of a bad time without quoting it.
type Time struct {
	t   time.Time
	raw []byte
}

// TimeOf is t in UTC, to be written.
func TimeOf(t time.Time) Time { return Time{t: t.UTC()} }

// IsZero says whether the time is absent: zero and not read from a file.
// It lets `omitzero` leave an unset time out.
func (s Time) IsZero() bool { return s.t.IsZero() && s.raw == nil }

// MarshalJSON writes the time as time.Time does.
func (s Time) MarshalJSON() ([]byte, error) { return s.t.MarshalJSON() }

// UnmarshalJSON keeps any value, null and containers included: Parse
// judges it, and Check has refused containers already.
func (s *Time) UnmarshalJSON(b []byte) error {
	s.raw = bytes.Clone(b)
	return nil
}

// Parse reads the time as time.Time's UnmarshalJSON does: RFC 3339 in a
// JSON string, null and absence meaning the zero time.
func (s Time) Parse() (time.Time, bool) {
	var t time.Time
	if s.raw == nil {
		return t, true
	}
	return t, t.UnmarshalJSON(s.raw) == nil
}

// Secret is key material in base64, as a ring file carries it. Only
// encoding/json sees its text: in every fmt verb it is [redacted].
type Secret string

// String returns "[redacted]".
func (Secret) String() string { return redact.Redacted }

// GoString returns "[redacted]".
func (Secret) GoString() string { return redact.Redacted }

// Format writes "[redacted]" for every verb.
func (Secret) Format(f fmt.State, verb rune) { redact.As(f, verb, redact.Redacted) }
