package keyring

import "strings"

// The bounds of a ring that the API can produce. The operator keeps every
// ring within them and the agent refuses a ring beyond them, so that a
// forged or corrupt file cannot make every handshake expensive: crypto/tls
// tries each key's HMAC over a presented ticket in turn.
//
// Ring.Validate, and so Encode and Decode, checks the name. Encode checks
// MaxKeys too: Next never holds more than RetainedKeys retired keys,
// whatever the rotate-now requests, and the operator must never publish a
// ring an agent would refuse. Decode leaves the count to the reader, so that
// the agent can tell a ring too large from a malformed one.
const (
	// MaxRetainedKeys is the largest spec.retainedKeys the API accepts.
	MaxRetainedKeys = 16
	// MaxKeys is the most keys a published ring holds: the retained
	// decrypt-only keys, the active key and the staged key.
	MaxKeys = MaxRetainedKeys + 2

	// maxNameLength bounds the namespace and the object name alike: a
	// namespace is a DNS-1123 label, and the operator uses a ring's name
	// as a label value.
	maxNameLength = 63
)

// ValidRingName reports whether name is a ring name the API can produce:
// "<namespace>/<name>" for a TicketKeyRing, or "<name>" alone for a
// ClusterTicketKeyRing. The namespace is a DNS-1123 label; the name is at
// most 63 characters of lowercase alphanumerics, '-' and '.', shaped as a
// DNS-1123 subdomain (as Kubernetes object names are).
func ValidRingName(name string) bool {
	ns, obj, namespaced := strings.Cut(name, "/")
	if !namespaced {
		return isSubdomain(name)
	}
	return isLabel(ns) && isSubdomain(obj)
}

// isLabel reports whether s is a DNS-1123 label: 1 to 63 lowercase
// alphanumerics or '-', starting and ending with an alphanumeric.
func isLabel(s string) bool {
	if len(s) == 0 || len(s) > maxNameLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

// isSubdomain reports whether s is at most 63 characters of DNS-1123 labels
// joined by dots.
func isSubdomain(s string) bool {
	if len(s) == 0 || len(s) > maxNameLength {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if !isLabel(label) {
			return false
		}
	}
	return true
}
