// Package redact holds the few helpers the types that carry key material
// (internal/keyring's and internal/echring's) use to show themselves in
// text without it: every fmt verb gives a secret as Redacted, and a key
// as its id. It imports only the standard library.
package redact

import (
	"fmt"
	"io"
	"strconv"
	"time"
)

// Redacted stands for a secret in text.
const Redacted = "[redacted]"

// As writes s for any verb: quoted for %q, as it is otherwise.
func As(f fmt.State, verb rune, s string) {
	if verb == 'q' {
		s = strconv.Quote(s)
	}
	_, _ = io.WriteString(f, s)
}

// Format writes short for %v, %s and every other verb, verbose for %+v,
// and gostring for %#v.
func Format(f fmt.State, verb rune, short string, verbose, gostring func() string) {
	switch {
	case verb == 'v' && f.Flag('#'):
		_, _ = io.WriteString(f, gostring())
	case verb == 'v' && f.Flag('+'):
		_, _ = io.WriteString(f, verbose())
	default:
		As(f, verb, short)
	}
}

// Stamp writes t for text, as RFC 3339 with its fraction.
func Stamp(t time.Time) string { return t.Format(time.RFC3339Nano) }
