package keyring

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"github.com/ringmaster-io/ringmaster/internal/redact"
)

// The types that hold secrets (Secret, Key, Ring, Plan, Record, History)
// show them in no text: every fmt verb (String, GoString and Format),
// log/slog (LogValue), logr (MarshalLog) and encoding/json (MarshalJSON)
// give a secret as [redacted] and a key as its id. Only Encode writes key
// bytes, through a wire type of its own.

// String returns "[redacted]".
func (Secret) String() string { return redact.Redacted }

// GoString returns "[redacted]".
func (Secret) GoString() string { return redact.Redacted }

// Format writes "[redacted]" for every verb.
func (Secret) Format(f fmt.State, verb rune) { redact.As(f, verb, redact.Redacted) }

// LogValue implements slog.LogValuer: "[redacted]".
func (Secret) LogValue() slog.Value { return slog.StringValue(redact.Redacted) }

// MarshalLog implements logr.Marshaler: "[redacted]".
func (Secret) MarshalLog() any { return redact.Redacted }

// MarshalJSON writes "[redacted]": ticketkeys.json is written by Encode.
func (Secret) MarshalJSON() ([]byte, error) { return json.Marshal(redact.Redacted) }

// id is the key's id for text: "[invalid id]" when it is not an id, for
// a Key built by hand might hold anything there.
func (k Key) id() string {
	switch {
	case validKeyID(k.ID):
		return k.ID
	case k.ID == "":
		return "[no id]"
	default:
		return "[invalid id]"
	}
}

// String returns the key's id.
func (k Key) String() string { return k.id() }

func (k Key) verbose() string {
	return fmt.Sprintf("{ID:%s ActiveFrom:%s RetireAt:%s ExpiresAt:%s Secret:%s}",
		k.id(), redact.Stamp(k.ActiveFrom), redact.Stamp(k.RetireAt), redact.Stamp(k.ExpiresAt), redact.Redacted)
}

// GoString shows the key's id and times, and its secret as [redacted].
func (k Key) GoString() string { return "keyring.Key" + k.verbose() }

// Format writes the key's id; %+v and %#v add its times. The secret shows
// as [redacted].
func (k Key) Format(f fmt.State, verb rune) { redact.Format(f, verb, k.id(), k.verbose, k.GoString) }

// LogValue implements slog.LogValuer: the key's id.
func (k Key) LogValue() slog.Value { return slog.StringValue(k.id()) }

// MarshalLog implements logr.Marshaler: the key's id.
func (k Key) MarshalLog() any { return k.id() }

// MarshalJSON writes the key's id as a JSON string.
func (k Key) MarshalJSON() ([]byte, error) { return json.Marshal(k.id()) }

func (r Ring) name() string {
	switch {
	case ValidRingName(r.Name):
		return r.Name
	case r.Name == "":
		return "[no name]"
	default:
		return "[invalid name]"
	}
}

func (r Ring) ids() []string {
	ids := make([]string, len(r.Keys))
	for i, k := range r.Keys {
		ids[i] = k.id()
	}
	return ids
}

// String returns the ring's name, epoch and key ids.
func (r Ring) String() string {
	return fmt.Sprintf("ring %s epoch %d keys [%s]", r.name(), r.Epoch, strings.Join(r.ids(), " "))
}

func (r Ring) verbose() string {
	keys := make([]string, len(r.Keys))
	for i, k := range r.Keys {
		keys[i] = k.verbose()
	}
	return fmt.Sprintf("{Name:%s Epoch:%d IssuedAt:%s Keys:[%s] Due:%s}",
		r.name(), r.Epoch, redact.Stamp(r.IssuedAt), strings.Join(keys, " "), redact.Stamp(r.Due))
}

// GoString shows the ring's name, epoch, times and keys, their secrets as
// [redacted].
func (r Ring) GoString() string { return "keyring.Ring" + r.verbose() }

// Format writes String; %+v and %#v add the times.
func (r Ring) Format(f fmt.State, verb rune) {
	redact.Format(f, verb, r.String(), r.verbose, r.GoString)
}

// LogValue implements slog.LogValuer: the ring's name, epoch and key ids.
func (r Ring) LogValue() slog.Value {
	return slog.GroupValue(slog.String("name", r.name()), slog.Int64("epoch", r.Epoch), slog.Any("keyIDs", r.ids()))
}

// MarshalLog implements logr.Marshaler: the ring's name, epoch and key ids.
func (r Ring) MarshalLog() any {
	return map[string]any{"name": r.name(), "epoch": r.Epoch, "keyIDs": r.ids()}
}

// MarshalJSON writes the ring's name, epoch and key ids.
func (r Ring) MarshalJSON() ([]byte, error) { return json.Marshal(r.MarshalLog()) }

// String shows the plan, its ring as Ring.String does.
func (p Plan) String() string {
	return fmt.Sprintf("{Ring:%s Mint:%d Changed:%t Expired:%v RequeueAt:%s RotateAt:%s Revoked:%v Promoted:%t Awaiting:%t}",
		p.Ring, p.Mint, p.Changed, p.Expired, redact.Stamp(p.RequeueAt), redact.Stamp(p.RotateAt), p.Revoked, p.Promoted, p.Awaiting)
}

// GoString is String.
func (p Plan) GoString() string { return "keyring.Plan" + p.String() }

// Format writes String for every verb.
func (p Plan) Format(f fmt.State, verb rune) {
	redact.Format(f, verb, p.String(), p.String, p.GoString)
}

// LogValue implements slog.LogValuer: String.
func (p Plan) LogValue() slog.Value { return slog.StringValue(p.String()) }

// MarshalLog implements logr.Marshaler: String.
func (p Plan) MarshalLog() any { return p.String() }

// MarshalJSON writes String as a JSON string.
func (p Plan) MarshalJSON() ([]byte, error) { return json.Marshal(p.String()) }

// String shows the record, its ring as Ring.String does.
func (r Record) String() string {
	return fmt.Sprintf("{Epoch:%d Ring:%s Err:%v RotateRequest:%q RevokeRequest:%q}", r.Epoch, r.Ring, r.Err, r.RotateRequest, r.RevokeRequest)
}

// GoString is String.
func (r Record) GoString() string { return "keyring.Record" + r.String() }

// Format writes String for every verb.
func (r Record) Format(f fmt.State, verb rune) {
	redact.Format(f, verb, r.String(), r.String, r.GoString)
}

// LogValue implements slog.LogValuer: String.
func (r Record) LogValue() slog.Value { return slog.StringValue(r.String()) }

// MarshalLog implements logr.Marshaler: String.
func (r Record) MarshalLog() any { return r.String() }

// MarshalJSON writes String as a JSON string.
func (r Record) MarshalJSON() ([]byte, error) { return json.Marshal(r.String()) }

// String shows how many epochs the history holds and its current ring.
func (h History) String() string {
	return fmt.Sprintf("history of %d epochs, current %s", len(h.records), h.Current())
}

// GoString is String.
func (h History) GoString() string { return "keyring.History{" + h.String() + "}" }

// Format writes String for every verb.
func (h History) Format(f fmt.State, verb rune) {
	redact.Format(f, verb, h.String(), h.String, h.GoString)
}

// LogValue implements slog.LogValuer: String.
func (h History) LogValue() slog.Value { return slog.StringValue(h.String()) }

// MarshalLog implements logr.Marshaler: String.
func (h History) MarshalLog() any { return h.String() }

// MarshalJSON writes String as a JSON string.
func (h History) MarshalJSON() ([]byte, error) { return json.Marshal(h.String()) }
