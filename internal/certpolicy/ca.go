package certpolicy

import (
	"fmt"
	"slices"
	"time"
)

// What the operator keeps of the CA certificates of one subject (Chain):
// a trust bundle can carry hundreds, so it keeps those that expire first
// and the true count, and the rules that read them say when some were not
// kept.
const (
	// MaxCAs bounds the CA certificates kept of one subject.
	MaxCAs = 8
	// maxCANameLen cuts a CA's common name, which only names it in
	// messages.
	maxCANameLen = 64
)

// Chain is the CA certificates of a subject: the first MaxCAs to expire,
// without their names, and how many there were.
type Chain struct {
	Certs []Certificate `json:"certs,omitempty"`
	// Count is how many there were, when more than Certs; zero or
	// len(Certs) otherwise.
	Count int `json:"count,omitempty"`
}

// CAChain keeps what a policy reads of CA certificates: those that expire
// first, up to MaxCAs, with neither SAN nor more than 64 bytes of common
// name. Certificates that are not CAs are skipped.
func CAChain(certs []Certificate) Chain {
	var cas []Certificate
	for _, c := range certs {
		if !c.IsCA {
			continue
		}
		c.DNSNames, c.IPAddresses, c.DNSNameCount, c.IPAddressCount = nil, nil, 0, 0
		if len(c.CommonName) > maxCANameLen {
			c.CommonName = c.CommonName[:maxCANameLen]
		}
		cas = append(cas, c)
	}
	slices.SortStableFunc(cas, func(a, b Certificate) int { return a.NotAfter.Compare(b.NotAfter) })
	out := Chain{Count: len(cas)}
	if len(cas) > MaxCAs {
		cas = cas[:MaxCAs:MaxCAs]
	}
	out.Certs = cas
	return out
}

func (ch Chain) cut() int { return max(0, ch.Count-len(ch.Certs)) }

// SoonestExpiry is the CA that expires first, if any.
func (ch Chain) SoonestExpiry() (Certificate, bool) {
	if len(ch.Certs) == 0 {
		return Certificate{}, false
	}
	return slices.MinFunc(ch.Certs, func(a, b Certificate) int { return a.NotAfter.Compare(b.NotAfter) }), true
}

// name names a CA in a message: its common name and key id.
func caName(c Certificate) string {
	return fmt.Sprintf("CA %q (key %s)", c.CommonName, c.KeyID)
}

// judgeCAs applies the CA rules to the certificates of ch: a CA expired or
// not yet valid always violates (caValidity); p may be nil.
func (v *Verdict) judgeCAs(p *CAPolicy, ch Chain, now time.Time, recheckAt func(time.Time)) {
	if len(ch.Certs) == 0 {
		return
	}
	var pol CAPolicy
	if p != nil {
		pol = *p
	}
	var invalid, tooLong, tooShort, expiring, weak []string
	for _, c := range ch.Certs {
		switch {
		case now.Before(c.NotBefore):
			invalid = append(invalid, fmt.Sprintf("%s not valid until %s", caName(c), stamp(c.NotBefore)))
			recheckAt(c.NotBefore)
		case now.After(c.NotAfter):
			invalid = append(invalid, fmt.Sprintf("%s expired at %s", caName(c), stamp(c.NotAfter)))
		default:
			recheckAt(c.NotAfter.Add(time.Nanosecond))
		}
		validity := c.NotAfter.Sub(c.NotBefore)
		if pol.MaxValidity > 0 && validity > pol.MaxValidity {
			tooLong = append(tooLong, fmt.Sprintf("%s valid for %s", caName(c), human(validity)))
		}
		if pol.MinValidity > 0 && validity < pol.MinValidity {
			tooShort = append(tooShort, fmt.Sprintf("%s valid for %s", caName(c), human(validity)))
		}
		if pol.MinRemainingValidity > 0 && !now.Before(c.NotBefore) && !now.After(c.NotAfter) {
			deadline := c.NotAfter.Add(-pol.MinRemainingValidity)
			if !now.Before(deadline) {
				expiring = append(expiring, fmt.Sprintf("%s expires at %s", caName(c), stamp(c.NotAfter)))
			}
			recheckAt(deadline)
		}
		if msg, ok := allowedKey(pol.KeyAlgorithms, c); !ok {
			weak = append(weak, caName(c)+": "+msg)
		}
	}
	cut := ""
	if n := ch.cut(); n > 0 {
		cut = fmt.Sprintf("; %d of its %d CA certificates were not judged: the operator keeps the %d that expire first", n, ch.Count, MaxCAs)
	}
	report := func(r Rule, set bool, bad []string, suffix string) {
		switch {
		case len(bad) > 0:
			v.add(r, "%s%s%s", joinCut(bad), suffix, cut)
		case set && cut != "" && r != CAMinRemainingValidity && r != CAValidity:
			// The CAs not kept expire later: only rules of the whole
			// lifetime or the key cannot say they pass.
			v.add(r, "%s cannot be checked%s", r, cut)
		}
	}
	report(CAValidity, true, invalid, "")
	report(CAMaxValidity, pol.MaxValidity > 0, tooLong, fmt.Sprintf("; caRules.maxValidity is %s", human(pol.MaxValidity)))
	report(CAMinValidity, pol.MinValidity > 0, tooShort, fmt.Sprintf("; caRules.minValidity is %s", human(pol.MinValidity)))
	report(CAMinRemainingValidity, pol.MinRemainingValidity > 0, expiring, fmt.Sprintf(", within caRules.minRemainingValidity %s", human(pol.MinRemainingValidity)))
	report(CAKeyAlgorithms, len(pol.KeyAlgorithms) > 0, weak, "")
}

// joinCut joins up to three facts and counts the rest.
func joinCut(items []string) string {
	const show = 3
	out := ""
	for i, s := range items[:min(len(items), show)] {
		if i > 0 {
			out += "; "
		}
		out += s
	}
	if len(items) > show {
		out += fmt.Sprintf("; and %d more", len(items)-show)
	}
	return out
}
