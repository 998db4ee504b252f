package certpolicy

import (
	"fmt"
	"strings"
	"time"
)

// RenewalPatience is how long Enforce waits for cert-manager to act on a
// renewal before asking again.
const RenewalPatience = time.Hour

// Renewals is Enforce's memory of the re-issuances it asked for, by
// Certificate, and of what it reported it cannot mend, by policy and
// certificate. It decides when to ask (again) and when to say so. It is used
// by one worker and is not safe for concurrent use.
type Renewals struct {
	asked    map[ID]renewal
	reported map[string]map[ID]string
}

// renewal is a re-issuance Enforce asked for.
type renewal struct {
	revision int
	at       time.Time
	mends    []Rule
}

// Decide says whether to re-issue a Certificate that Plan says a renewal
// mends. It waits while cert-manager is issuing, or while a renewal asked
// for earlier is pending (for up to RenewalPatience); and it gives up,
// saying why, when the certificate a renewal brought breaks the rule again
// sooner than a fresh one could (Unmended).
func (r *Renewals) Decide(p Policy, f *Facts, remedy Remedy, now time.Time) (why string, renew bool) {
	if f.Issuing {
		return "", false
	}
	prev, ok := r.asked[f.ID]
	if !ok {
		return "", true
	}
	if f.Revision <= prev.revision {
		return "", now.Sub(prev.at) >= RenewalPatience
	}
	if !f.Current {
		return "", false // the Secret cache has not seen the new certificate yet
	}
	for _, rule := range prev.mends {
		if remedy.MendsRule(rule) && Unmended(p, f.Subject.CertManager, rule, prev.at, now) {
			return fmt.Sprintf("re-issued at revision %d on request at %s and still breaks %s: the issuer does not grant what the Certificate asks",
				f.Revision, stamp(prev.at), rule), false
		}
	}
	return "", true
}

// Asked records a renewal asked for at now, at the Certificate's revision.
func (r *Renewals) Asked(id ID, revision int, mends []Rule, now time.Time) {
	if r.asked == nil {
		r.asked = map[ID]renewal{}
	}
	r.asked[id] = renewal{revision: revision, at: now, mends: mends}
}

// Forget drops what is remembered of a certificate that is gone.
func (r *Renewals) Forget(id ID) { delete(r.asked, id) }

// ForgetPolicy drops what was reported for a policy that is gone.
func (r *Renewals) ForgetPolicy(name string) { delete(r.reported, name) }

// Report returns the note to report about what a policy cannot mend of a
// certificate, and whether it is new: a note is reported once, until it
// changes. An empty note (nothing unmendable) is never reported.
func (r *Renewals) Report(policy string, id ID, cannot []Violation) (note string, report bool) {
	parts := make([]string, len(cannot))
	for i, c := range cannot {
		parts[i] = fmt.Sprintf("%s: %s", c.Rule, c.Message)
	}
	note = strings.Join(parts, "; ")
	if r.reported == nil {
		r.reported = map[string]map[ID]string{}
	}
	seen := r.reported[policy]
	if seen == nil {
		seen = map[ID]string{}
		r.reported[policy] = seen
	}
	if old, ok := seen[id]; ok && old == note {
		return note, false
	}
	seen[id] = note
	return note, note != ""
}

// Resolved forgets the reports of a policy about certificates that no
// longer break a rule, so that a relapse is reported again.
func (r *Renewals) Resolved(policy string, stillViolating func(ID) bool) {
	for id := range r.reported[policy] {
		if !stillViolating(id) {
			delete(r.reported[policy], id)
		}
	}
}
