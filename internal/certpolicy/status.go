package certpolicy

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/textlimit"
)

// Status is a policy's status made from its aggregate. certificatesJudged
// says whether cert-manager Certificates are judged (their API was served
// when the operator started).
func Status(prev v1alpha1.CertificatePolicyStatus, generation int64, a Aggregate, certificatesJudged bool) v1alpha1.CertificatePolicyStatus {
	s := *prev.DeepCopy()
	s.Evaluated, s.Compliant, s.Violating = a.Evaluated, a.Evaluated-a.Violating, a.Violating
	s.OldestKey, s.SoonestExpiry = a.OldestKey, a.SoonestExpiry
	s.Violations, s.ViolationsOmitted = a.Violations, a.Omitted
	s.PodCertificates = nil
	if a.PodStates != nil {
		s.PodCertificates = &v1alpha1.PodCertificateStates{
			Pending: a.PodStates[PodPending], Fresh: a.PodStates[PodFresh], OverdueForRefresh: a.PodStates[PodOverdueForRefresh],
			Expired: a.PodStates[PodExpired], Failed: a.PodStates[PodFailed], Denied: a.PodStates[PodDenied],
		}
	}

	msg := fmt.Sprintf("Evaluated %d certificate(s)", a.Evaluated)
	if !certificatesJudged {
		msg += "; cert-manager Certificates are not judged: the cert-manager.io/v1 API was not served when the operator started"
	}
	setCondition(&s, generation, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonEvaluated, msg)
	if a.Violating == 0 {
		setCondition(&s, generation, v1alpha1.ConditionCompliant, metav1.ConditionTrue, v1alpha1.ReasonNoViolations,
			fmt.Sprintf("All %d selected certificate(s) obey the rules", a.Evaluated))
	} else {
		setCondition(&s, generation, v1alpha1.ConditionCompliant, metav1.ConditionFalse, v1alpha1.ReasonViolationsFound,
			fmt.Sprintf("%d of %d selected certificate(s) break a rule: %s", a.Violating, a.Evaluated, a.ByRuleSummary()))
	}
	return s
}

// Invalid is the status of a policy whose spec cannot be compiled.
func Invalid(prev v1alpha1.CertificatePolicyStatus, generation int64, err error) v1alpha1.CertificatePolicyStatus {
	s := *prev.DeepCopy()
	setCondition(&s, generation, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec, fmt.Sprintf("Invalid spec: %v", err))
	return s
}

// setCondition sets a condition, its message within what the API takes (a
// compile error may quote the spec).
func setCondition(s *v1alpha1.CertificatePolicyStatus, generation int64, typ string, st metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: typ, Status: st, Reason: reason, Message: textlimit.Cut(msg, textlimit.MessageLimit), ObservedGeneration: generation})
}

// Event is an event a change of a policy's conditions calls for.
type Event struct {
	Warning bool
	Reason  string
	Message string
}

// Transitions are the events the change from prev to next calls for, on
// transitions only: a Warning when a condition turns False (or stays False
// for a new reason), a Normal event when Compliant comes back True.
func Transitions(prev, next []metav1.Condition) []Event {
	var out []Event
	for _, typ := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionCompliant} {
		n := meta.FindStatusCondition(next, typ)
		if n == nil {
			continue
		}
		p := meta.FindStatusCondition(prev, typ)
		if p != nil && p.Status == n.Status && p.Reason == n.Reason {
			continue
		}
		switch {
		case n.Status == metav1.ConditionFalse:
			out = append(out, Event{Warning: true, Reason: n.Reason, Message: n.Message})
		case p != nil && typ == v1alpha1.ConditionCompliant:
			out = append(out, Event{Reason: n.Reason, Message: n.Message})
		}
	}
	return out
}
