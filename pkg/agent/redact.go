package agent

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
)

// The types of this package that hold key bytes or a private key show
// neither in text: a ticket key shows as its id, its secret as [redacted]
// (see Secret), a snapshot and a certificate as what Status says of them,
// the Agent as its directory. That holds in every fmt verb (String,
// GoString, Format), in log/slog (LogValue), logr (MarshalLog) and
// encoding/json (MarshalJSON).

// formatAs writes s for any verb, quoted for %q.
func formatAs(f fmt.State, verb rune, s string) {
	if verb == 'q' {
		s = strconv.Quote(s)
	}
	_, _ = io.WriteString(f, s)
}

// String returns the key's id.
func (k TicketKey) String() string { return k.ID }

// GoString shows the key's id, state and times; its secret as [redacted].
func (k TicketKey) GoString() string {
	return fmt.Sprintf("agent.TicketKey{ID:%q State:%q ActiveFrom:%s ExpiresAt:%s Secret:%v}", k.ID, k.State, k.ActiveFrom, k.ExpiresAt, k.Secret)
}

// Format writes the key's id; %+v and %#v give GoString.
func (k TicketKey) Format(f fmt.State, verb rune) {
	if verb == 'v' && (f.Flag('#') || f.Flag('+')) {
		_, _ = io.WriteString(f, k.GoString())
		return
	}
	formatAs(f, verb, k.ID)
}

// LogValue implements slog.LogValuer: the key's id.
func (k TicketKey) LogValue() slog.Value { return slog.StringValue(k.ID) }

// MarshalLog implements logr.Marshaler: the key's id.
func (k TicketKey) MarshalLog() any { return k.ID }

// MarshalJSON writes the key's id as a JSON string.
func (k TicketKey) MarshalJSON() ([]byte, error) { return json.Marshal(k.ID) }

func (s *snapshot) String() string {
	if s == nil {
		return "<nil>"
	}
	ids := make([]string, len(s.keys))
	for i, k := range s.keys {
		ids[i] = k.id
	}
	text := "snapshot without a ring"
	if s.hasRing {
		text = fmt.Sprintf("snapshot of ring %s epoch %d keys [%s]", s.ring, s.epoch, strings.Join(ids, " "))
	}
	if s.cert != nil {
		text += ", " + s.cert.String()
	}
	return text
}

func (s *snapshot) GoString() string                 { return s.String() }
func (s *snapshot) Format(f fmt.State, verb rune)    { formatAs(f, verb, s.String()) }
func (s *snapshot) LogValue() slog.Value             { return slog.StringValue(s.String()) }
func (s *snapshot) MarshalLog() any                  { return s.String() }
func (s *snapshot) MarshalJSON() ([]byte, error)     { return json.Marshal(s.String()) }
func (c *certificate) GoString() string              { return c.String() }
func (c *certificate) Format(f fmt.State, verb rune) { formatAs(f, verb, c.String()) }
func (c *certificate) LogValue() slog.Value          { return slog.StringValue(c.String()) }
func (c *certificate) MarshalLog() any               { return c.String() }
func (c *certificate) MarshalJSON() ([]byte, error)  { return json.Marshal(c.String()) }

func (c *certificate) String() string {
	if c == nil {
		return "<nil>"
	}
	if c.tls.Leaf == nil {
		return "certificate"
	}
	return "certificate serial " + c.tls.Leaf.SerialNumber.String()
}

// String names the agent by its directory.
func (a *Agent) String() string { return "agent of " + a.dir }

// GoString is String.
func (a *Agent) GoString() string { return a.String() }

// Format writes String for every verb.
func (a *Agent) Format(f fmt.State, verb rune) { formatAs(f, verb, a.String()) }

// LogValue implements slog.LogValuer: String.
func (a *Agent) LogValue() slog.Value { return slog.StringValue(a.String()) }

// MarshalLog implements logr.Marshaler: String.
func (a *Agent) MarshalLog() any { return a.String() }
