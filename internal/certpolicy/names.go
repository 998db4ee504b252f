package certpolicy

import (
	"strings"
)

// MatchDNSName reports whether the DNS name a certificate carries matches
// pattern. Both compare case-insensitively, without a trailing dot.
//
// In a pattern, a "*" matches any run of characters within one label and a
// label "**" matches one or more whole labels: "*.example.com" matches
// "www.example.com" but neither "example.com" nor "a.b.example.com";
// "**.example.com" matches the last two as well; "web-*.example.com"
// matches "web-1.example.com".
//
// A name with a wildcard label ("*.example.com" in a wildcard certificate)
// stands for every name it covers, so it matches only a pattern whose label
// there is "*" or "**": a certificate for "*.example.com" is allowed by
// "*.example.com" but not by "www.example.com" nor by "w*.example.com".
func MatchDNSName(pattern, name string) bool {
	p := strings.Split(normalize(pattern), ".")
	n := strings.Split(normalize(name), ".")
	return matchLabels(p, n)
}

func normalize(s string) string {
	return strings.ToLower(strings.TrimSuffix(s, "."))
}

func matchLabels(p, n []string) bool {
	for len(p) > 0 {
		if p[0] == "**" {
			// One or more labels, then the rest of the pattern.
			for i := 1; i <= len(n); i++ {
				if matchLabels(p[1:], n[i:]) {
					return true
				}
			}
			return false
		}
		if len(n) == 0 || !matchLabel(p[0], n[0]) {
			return false
		}
		p, n = p[1:], n[1:]
	}
	return len(n) == 0
}

// matchLabel matches one label against a pattern label. A name label that is
// itself a wildcard needs a pattern label that allows any label.
func matchLabel(p, n string) bool {
	if n == "" {
		return false
	}
	if strings.Contains(n, "*") {
		return p == "*"
	}
	return glob(p, n)
}

// glob matches s against p, in which "*" matches any run of characters.
func glob(p, s string) bool {
	star, next := -1, 0 // the last star seen in p, and where s resumes after it
	i, j := 0, 0
	for j < len(s) {
		switch {
		case i < len(p) && p[i] == '*':
			star, next = i, j
			i++
		case i < len(p) && p[i] == s[j]:
			i++
			j++
		case star >= 0:
			next++
			i, j = star+1, next
		default:
			return false
		}
	}
	for i < len(p) && p[i] == '*' {
		i++
	}
	return i == len(p)
}

// MatchGlob reports whether s matches pattern, in which "*" matches any run
// of characters; an empty pattern matches anything. Issuer references match
// this way.
func MatchGlob(pattern, s string) bool {
	return pattern == "" || glob(pattern, s)
}

// CoversDNSName reports whether a certificate whose DNS SAN is san is valid
// for name, as a client verifying the name decides (RFC 6125, and Go's
// crypto/x509): equal names, or a SAN whose leftmost label is exactly "*"
// standing for one whole label of name. Both compare case-insensitively,
// without a trailing dot.
func CoversDNSName(san, name string) bool {
	san, name = normalize(san), normalize(name)
	if name == "" {
		return false
	}
	if san == name {
		return true
	}
	rest, ok := strings.CutPrefix(san, "*.")
	if !ok || rest == "" || strings.Contains(rest, "*") {
		return false
	}
	label, parent, ok := strings.Cut(name, ".")
	return ok && label != "" && parent == rest
}

// DeniesDNSName reports whether a deny pattern (written as for
// MatchDNSName) refuses the DNS name a certificate carries: the name
// matches it, or, for a name with wildcard labels, some name it covers
// would. So "*.example.com" is denied by "admin.example.com" and by
// "a*.example.com", as a client would accept it for those names.
func DeniesDNSName(pattern, name string) bool {
	p := strings.Split(normalize(pattern), ".")
	n := strings.Split(normalize(name), ".")
	return overlapLabels(p, n)
}

// overlapLabels is matchLabels, where a wildcard label of the name stands
// for any one label, so it meets any pattern label.
func overlapLabels(p, n []string) bool {
	for len(p) > 0 {
		if p[0] == "**" {
			for i := 1; i <= len(n); i++ {
				if overlapLabels(p[1:], n[i:]) {
					return true
				}
			}
			return false
		}
		if len(n) == 0 || n[0] == "" {
			return false
		}
		if !strings.Contains(n[0], "*") && !glob(p[0], n[0]) {
			return false
		}
		p, n = p[1:], n[1:]
	}
	return len(n) == 0
}

func deniedNames(patterns, names []string) []string {
	var bad []string
	for _, n := range names {
		for _, p := range patterns {
			if DeniesDNSName(p, n) {
				bad = append(bad, n)
				break
			}
		}
	}
	return bad
}
