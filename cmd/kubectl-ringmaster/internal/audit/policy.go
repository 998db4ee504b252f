package audit

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

// policyRow summarises a CertificatePolicy from its status: what it
// evaluated, its oldest key and soonest expiry, its violations.
func policyRow(p *v1alpha1.CertificatePolicy, now time.Time, window time.Duration) Row {
	s := p.Status
	row := Row{Kind: KindCertificatePolicy, Name: p.Name}
	if m := p.Spec.Rules.MaxKeyAge; m != nil {
		row.MaxKeyAge = durationPtr(m.Duration)
	}
	detail := []string{fmt.Sprintf("%s, evaluated %d, violating %d", p.Spec.Action, s.Evaluated, s.Violating)}
	if o := s.OldestKey; o != nil {
		row.KeySince, row.KeyAge = timePtr(o.Since.Time), durationPtr(now.Sub(o.Since.Time))
		detail = append(detail, fmt.Sprintf("oldest key: %s %s/%s", o.Kind, o.Namespace, o.Name))
	}
	if e := s.SoonestExpiry; e != nil {
		row.Expires = timePtr(e.NotAfter.Time)
		detail = append(detail, fmt.Sprintf("soonest expiry: %s %s/%s", e.Kind, e.Namespace, e.Name))
		if left := e.NotAfter.Sub(now); left < window {
			when := "expires in " + duration.HumanDuration(left)
			if left < 0 {
				when = "expired " + duration.HumanDuration(-left) + " ago"
			}
			row.Problems = append(row.Problems, problem(fmt.Sprintf("%s %s/%s %s, at %s", e.Kind, e.Namespace, e.Name, when, stamp(e.NotAfter.Time)), ExpiredSoon))
		}
	}
	row.Detail = strings.Join(detail, "; ")

	ready := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionReady)
	switch {
	case ready == nil:
		row.Problems = append(row.Problems, problem("the operator has not evaluated the policy yet (is it running?)", NotReady))
	case ready.Status != metav1.ConditionTrue:
		row.Problems = append(row.Problems, problem(fmt.Sprintf("Ready is %s (%s): %s", ready.Status, ready.Reason, ready.Message), NotReady))
	case ready.ObservedGeneration < p.Generation:
		row.Problems = append(row.Problems, problem(fmt.Sprintf("the operator has not yet evaluated generation %d (status is of generation %d)", p.Generation, ready.ObservedGeneration), NotReady))
	}
	if s.Violating > 0 {
		msg := fmt.Sprintf("%d of %d selected certificate(s) break a rule", s.Violating, s.Evaluated)
		if c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionCompliant); c != nil && c.Status == metav1.ConditionFalse {
			msg = c.Message
		}
		row.Problems = append(row.Problems, problem(msg, Violations))
	}
	return row
}
