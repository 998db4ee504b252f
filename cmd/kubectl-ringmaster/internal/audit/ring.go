package audit

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/ringplan/ticket"
)

// Ring is a TicketKeyRing or a ClusterTicketKeyRing, as read.
type Ring struct {
	Kind       string
	Namespace  string
	Name       string
	Generation int64
	Spec       v1alpha1.TicketKeyRingSpec
	Status     v1alpha1.TicketKeyRingStatus
}

// FromTicketKeyRing is a TicketKeyRing as a Ring.
func FromTicketKeyRing(r *v1alpha1.TicketKeyRing) Ring {
	return Ring{Kind: KindTicketKeyRing, Namespace: r.Namespace, Name: r.Name, Generation: r.Generation, Spec: r.Spec, Status: r.Status}
}

// FromClusterTicketKeyRing is a ClusterTicketKeyRing as a Ring.
func FromClusterTicketKeyRing(r *v1alpha1.ClusterTicketKeyRing) Ring {
	return Ring{Kind: KindClusterTicketKeyRing, Name: r.Name, Generation: r.Generation, Spec: r.Spec.TicketKeyRingSpec, Status: r.Status}
}

// Keys is the ring its status describes: key ids and times, no key bytes.
// Reading it at an instant with internal/keyring gives each key's state as
// a pod holding the ring sees it then, whether or not the operator has
// written status since.
func (r Ring) Keys() keyring.Ring {
	kr := keyring.Ring{Epoch: r.Status.Epoch}
	for _, k := range r.Status.Keys {
		kr.Keys = append(kr.Keys, keyring.Key{ID: k.ID, ActiveFrom: k.ActiveFrom.Time, RetireAt: k.RetireAt.Time, ExpiresAt: k.ExpiresAt.Time})
	}
	return kr
}

// Row is the ring's audit at now.
func (r Ring) Row(now time.Time) Row {
	row := Row{Kind: r.Kind, Namespace: r.Namespace, Name: r.Name, MaxKeyAge: durationPtr(r.Spec.RotationInterval.Duration)}
	kr := r.Keys()
	ready := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ConditionReady)
	row.Problems = r.overdue(kr, now)
	if len(kr.Keys) == 0 {
		row.Detail = "no key published"
		if r.Status.Epoch > 0 {
			row.Detail = fmt.Sprintf("epoch %d, no key", r.Status.Epoch)
			row.Problems = append(row.Problems, problem("the ring holds no key: every key expired and no new one could be minted, so its servers resume no session", Overdue))
		}
		row.Problems = append(row.Problems, r.readiness(ready)...)
		if len(row.Problems) == 0 {
			row.Problems = append(row.Problems, problem("no key is published yet", NotReady))
		}
		return row
	}

	detail := []string{fmt.Sprintf("epoch %d", r.Status.Epoch), fmt.Sprintf("%d key(s)", len(kr.Keys))}
	if active, ok := kr.Active(now); ok {
		age := now.Sub(active.ActiveFrom)
		row.KeyID, row.KeySince, row.KeyAge = active.ID, timePtr(active.ActiveFrom), durationPtr(age)
		if interval := r.Spec.RotationInterval.Duration; age > interval {
			row.Problems = append(row.Problems, problem(fmt.Sprintf("active key %s is %s old, over its rotationInterval %s",
				active.ID, duration.HumanDuration(age), duration.HumanDuration(interval)), KeyAge))
		}
	}
	oldest := kr.Keys[len(kr.Keys)-1]
	row.Expires = timePtr(oldest.ExpiresAt)
	detail = append(detail, "oldest "+oldest.ID)
	if r.Kind == KindClusterTicketKeyRing {
		detail = append(detail, fmt.Sprintf("%d target(s)", r.Status.Targets))
	}
	if row.Pods = ringPods(r.Status.Confirmation, now); row.Pods != nil {
		detail = append(detail, describePods(row.Pods))
	}
	row.Detail = strings.Join(detail, ", ")

	for _, k := range kr.Keys {
		if now.Sub(k.ExpiresAt) > Grace {
			row.Problems = append(row.Problems, problem(fmt.Sprintf("key %s expired at %s and the ring's status still lists it: its destruction is overdue (is the operator running?)",
				k.ID, stamp(k.ExpiresAt)), Overdue))
		}
	}
	if n := len(r.Status.FailedTargets); n > 0 {
		parts := make([]string, n)
		for i, f := range r.Status.FailedTargets {
			parts[i] = fmt.Sprintf("%s (%s: %s)", f.Namespace, f.Reason, f.Message)
		}
		msg := fmt.Sprintf("epoch %d did not reach %s", r.Status.Epoch, strings.Join(parts, "; "))
		if n == ticket.MaxFailedTargets && ready != nil && ready.Status == metav1.ConditionFalse {
			msg += "; status lists no more: " + ready.Message // it counts them all
		}
		row.Problems = append(row.Problems, problem(msg, FailedTargets))
	}
	row.Problems = append(row.Problems, r.readiness(ready)...)
	return row
}

// overdue are the problems of a rotation overdue: as the RotationOverdue
// condition says (no key could be minted), as the ConfirmationOverdue
// condition says (the fleet has not confirmed a due key), or as the clock
// says when the operator has not written status since a rotation fell due.
func (r Ring) overdue(kr keyring.Ring, now time.Time) []Problem {
	var out []Problem
	if c := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ConditionRotationOverdue); c != nil && c.Status == metav1.ConditionTrue {
		out = append(out, problem(fmt.Sprintf("rotation overdue (%s): %s", c.Reason, c.Message), Overdue))
	} else if since, ok := keyring.Overdue(kr, now); ok && len(kr.Keys) > 0 && now.Sub(since) > Grace {
		// A ring without keys is reported as such (see Row).
		out = append(out, problem(fmt.Sprintf("no key is staged behind key %s, active since %s: a new key has been due for %s and the operator has not written the ring's status since (is it running?)",
			kr.Keys[0].ID, stamp(since), duration.HumanDuration(now.Sub(since))), Overdue))
	}
	if c := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ConditionConfirmationOverdue); c != nil && c.Status == metav1.ConditionTrue {
		out = append(out, problem(fmt.Sprintf("confirmation overdue (%s): %s", c.Reason, c.Message), Overdue))
	}
	return out
}

// readiness is the problem the Ready condition shows, beyond failed targets
// (reported from status.failedTargets).
func (r Ring) readiness(ready *metav1.Condition) []Problem {
	switch {
	case ready == nil:
		return []Problem{problem("the operator has not reported on the ring yet (is it running?)", NotReady)}
	case ready.Status == metav1.ConditionTrue && ready.ObservedGeneration < r.Generation:
		return []Problem{problem(fmt.Sprintf("the operator has not yet published generation %d (status is of generation %d)", r.Generation, ready.ObservedGeneration), NotReady)}
	case ready.Status == metav1.ConditionTrue:
		return nil
	case len(r.Status.FailedTargets) > 0 && (ready.Reason == v1alpha1.ReasonDistributionFailed || ready.Reason == v1alpha1.ReasonSecretConflict):
		return nil
	}
	return []Problem{problem(fmt.Sprintf("Ready is %s (%s): %s", ready.Status, ready.Reason, ready.Message), NotReady)}
}
