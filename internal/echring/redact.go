package echring

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"github.com/ringmaster-io/ringmaster/internal/redact"
)

// Config and Ring show no private key in any text: every fmt verb (String,
// GoString and Format), log/slog (LogValue), logr (MarshalLog) and
// encoding/json (MarshalJSON) give a config as its id and state and a
// private key as [redacted]. Only Encode writes key bytes, through a wire
// type of its own. (The ECHConfig is public, but is shown by its id too.)

// state is the config's state for text: "[invalid state]" when a Config
// built by hand holds something else.
func (c Config) state() string {
	if c.State.valid() {
		return string(c.State)
	}
	return "[invalid state]"
}

// String returns the config's id and state, as "12/staged".
func (c Config) String() string { return fmt.Sprintf("%d/%s", c.ID, c.state()) }

func (c Config) verbose() string {
	return fmt.Sprintf("{ID:%d State:%s Config:%d bytes PrivateKey:%s CreatedAt:%s PublishedAt:%s RetiredAt:%s ExpiresAt:%s}",
		c.ID, c.state(), len(c.Config), redact.Redacted, redact.Stamp(c.CreatedAt), redact.Stamp(c.PublishedAt), redact.Stamp(c.RetiredAt), redact.Stamp(c.ExpiresAt))
}

// GoString shows the config's id, state and times, its key as [redacted].
func (c Config) GoString() string { return "echring.Config" + c.verbose() }

// Format writes String; %+v and %#v add the times. The private key shows
// as [redacted].
func (c Config) Format(f fmt.State, verb rune) {
	redact.Format(f, verb, c.String(), c.verbose, c.GoString)
}

// LogValue implements slog.LogValuer: the config's id and state.
func (c Config) LogValue() slog.Value { return slog.StringValue(c.String()) }

// MarshalLog implements logr.Marshaler: the config's id and state.
func (c Config) MarshalLog() any { return c.String() }

// MarshalJSON writes the config's id and state as a JSON string.
func (c Config) MarshalJSON() ([]byte, error) { return json.Marshal(c.String()) }

func (r Ring) name() string {
	switch {
	case ValidRingName(r.Ring):
		return r.Ring
	case r.Ring == "":
		return "[no name]"
	default:
		return "[invalid name]"
	}
}

func (r Ring) ids() []string {
	ids := make([]string, len(r.Configs))
	for i, c := range r.Configs {
		ids[i] = c.String()
	}
	return ids
}

// String returns the ring's name, epoch and configs' ids and states.
func (r Ring) String() string {
	return fmt.Sprintf("ech ring %s epoch %d configs [%s]", r.name(), r.Epoch, strings.Join(r.ids(), " "))
}

func (r Ring) verbose() string {
	cs := make([]string, len(r.Configs))
	for i, c := range r.Configs {
		cs[i] = c.verbose()
	}
	return fmt.Sprintf("{Ring:%s Epoch:%d IssuedAt:%s Configs:[%s]}", r.name(), r.Epoch, redact.Stamp(r.IssuedAt), strings.Join(cs, " "))
}

// GoString shows the ring's name, epoch, times and configs, their keys as
// [redacted].
func (r Ring) GoString() string { return "echring.Ring" + r.verbose() }

// Format writes String; %+v and %#v add the times.
func (r Ring) Format(f fmt.State, verb rune) {
	redact.Format(f, verb, r.String(), r.verbose, r.GoString)
}

// LogValue implements slog.LogValuer: the ring's name, epoch and configs.
func (r Ring) LogValue() slog.Value {
	return slog.GroupValue(slog.String("name", r.name()), slog.Int64("epoch", r.Epoch), slog.Any("configs", r.ids()))
}

// MarshalLog implements logr.Marshaler: the ring's name, epoch and configs.
func (r Ring) MarshalLog() any {
	return map[string]any{"name": r.name(), "epoch": r.Epoch, "configs": r.ids()}
}

// MarshalJSON writes the ring's name, epoch and configs.
func (r Ring) MarshalJSON() ([]byte, error) { return json.Marshal(r.MarshalLog()) }
