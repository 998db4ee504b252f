package certpolicy

import (
	"fmt"
	"slices"
	"time"
)

// Renewable are the rules that re-issuing a certificate can mend, and so the
// only ones Enforce acts on.
var Renewable = []Rule{MaxValidity, MinRemainingValidity, MaxKeyAge}

// Remedy is what enforcement can do about a verdict.
type Remedy struct {
	// Renew: re-issuing the certificate mends the rules in Mends.
	Renew bool
	Mends []Rule
	// Cannot lists the renewable rules broken that re-issuing would not
	// mend, each with the reason.
	Cannot []Violation
}

// Decide decides what re-issuing s would mend of its verdict v under p. Only a
// cert-manager Certificate can be re-issued; a Certificate that keeps its
// key (rotationPolicy Never) cannot get a younger key, and one whose
// requested duration breaks maxValidity or minRemainingValidity would come
// back breaking it again.
func Decide(p Policy, s Subject, v Verdict) Remedy {
	var r Remedy
	for _, rule := range Renewable {
		if !v.Violates(rule) {
			continue
		}
		why := cannotMend(p, s, rule)
		if why == "" {
			r.Mends = append(r.Mends, rule)
			continue
		}
		r.Cannot = append(r.Cannot, Violation{Rule: rule, Message: why})
	}
	r.Renew = len(r.Mends) > 0
	return r
}

func cannotMend(p Policy, s Subject, rule Rule) string {
	cm := s.CertManager
	if s.Pod != nil {
		return "a pod certificate is renewed by its kubelet, never by the operator; Enforce refuses at admission the pods whose podCertificate volumes break allowedSignerNames, maxExpirationSeconds or keyAlgorithms"
	}
	if cm == nil {
		return "no cert-manager Certificate manages this Secret; it is reported, never changed"
	}
	switch rule {
	case MaxKeyAge:
		if !cm.RotatesKey() {
			return "privateKey.rotationPolicy is Never: re-issuing keeps the same key"
		}
	case MaxValidity:
		if d := cm.duration(); d > p.MaxValidity {
			return fmt.Sprintf("spec.duration %s exceeds maxValidity %s: re-issuing would too", human(d), human(p.MaxValidity))
		}
	case MinRemainingValidity:
		if d := cm.duration(); d <= p.MinRemainingValidity {
			return fmt.Sprintf("spec.duration %s is not longer than minRemainingValidity %s", human(d), human(p.MinRemainingValidity))
		}
	}
	return ""
}

// MendsRule reports whether the remedy mends rule.
func (r Remedy) MendsRule(rule Rule) bool { return slices.Contains(r.Mends, rule) }

// Unmended reports whether a certificate re-issued on a request made at
// asked, found breaking rule at now, shows that the renewal did not mend it,
// rather than that it broke again in the course of time: a certificate
// issued after asked breaks maxKeyAge no sooner than maxKeyAge later,
// minRemainingValidity no sooner than its duration less
// minRemainingValidity, and maxValidity never.
func Unmended(p Policy, cm *CertManager, rule Rule, asked, now time.Time) bool {
	elapsed := now.Sub(asked)
	switch rule {
	case MaxKeyAge:
		return elapsed < p.MaxKeyAge
	case MinRemainingValidity:
		return elapsed < cm.duration()-p.MinRemainingValidity
	}
	return true
}
