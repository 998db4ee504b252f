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

// KindECHKeyRing is the kind of an ECH key ring's row.
const KindECHKeyRing = v1alpha1.KindECHKeyRing

// ECHRow is an ECHKeyRing's audit at now: its published config's age
// against its rotationInterval, the soonest end of a retired config's
// retirement, and what is overdue or not ready. It shows config ids and
// times, never key bytes.
func ECHRow(r *v1alpha1.ECHKeyRing, now time.Time) Row {
	row := Row{Kind: KindECHKeyRing, Namespace: r.Namespace, Name: r.Name, MaxKeyAge: durationPtr(r.Spec.RotationInterval.Duration)}
	st := r.Status
	var states []string
	for _, c := range st.Configs {
		states = append(states, fmt.Sprintf("%d %s", c.ID, c.State))
		if c.State == "published" && c.PublishedAt != nil && row.KeyID == "" {
			age := now.Sub(c.PublishedAt.Time)
			row.KeyID, row.KeySince, row.KeyAge = fmt.Sprintf("config %d", c.ID), timePtr(c.PublishedAt.Time), durationPtr(age)
			if interval := r.Spec.RotationInterval.Duration; age > interval+r.Spec.DeliveryDelay.Duration+Grace {
				row.Problems = append(row.Problems, problem(fmt.Sprintf("published config %d is %s old, over its rotationInterval %s",
					c.ID, duration.HumanDuration(age), duration.HumanDuration(interval)), KeyAge))
			}
		}
		// Every config expires, whatever its state (an ECH config carries
		// expiresAt from the moment it is minted).
		if c.ExpiresAt != nil {
			if row.Expires == nil || c.ExpiresAt.Before(row.Expires) {
				row.Expires = timePtr(c.ExpiresAt.Time)
			}
			if now.Sub(c.ExpiresAt.Time) > Grace {
				row.Problems = append(row.Problems, problem(fmt.Sprintf("config %d expired at %s and the ring's status still lists it: its destruction is overdue (is the operator running?)",
					c.ID, stamp(c.ExpiresAt.Time)), Overdue))
			}
		}
	}
	detail := []string{fmt.Sprintf("epoch %d", st.Epoch)}
	if len(states) > 0 {
		detail = append(detail, "configs "+strings.Join(states, ", "))
	}
	if row.Pods = ringPods(st.Confirmation, now); row.Pods != nil {
		detail = append(detail, describePods(row.Pods))
	}
	if st.DNSVerifiedAt != nil {
		detail = append(detail, "DNS verified "+stamp(st.DNSVerifiedAt.Time))
	}
	row.Detail = strings.Join(detail, ", ")
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionConfirmationOverdue); c != nil && c.Status == metav1.ConditionTrue {
		row.Problems = append(row.Problems, problem(fmt.Sprintf("publication held back (%s): %s", c.Reason, c.Message), Overdue))
	}
	ready := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady)
	row.Problems = append(row.Problems, Ring{Generation: r.Generation}.readiness(ready)...)
	return row
}
