package audit

import (
	"fmt"
	"strings"
	"time"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/certpolicy"
)

// ringPods is what a ring's pods hold of its staged key, in the kubelet's
// words for a pod certificate where they fit: fresh (the pod holds the
// key the ring stages), pending (it does not yet, and the key is not due),
// overdue for refresh (it does not, and the key is due). The counts are
// those the operator last read (status.confirmation); nil when the ring
// asks its pods nothing.
func ringPods(c *v1alpha1.ConfirmationStatus, now time.Time) map[certpolicy.PodState]int32 {
	if c == nil || c.Pods == 0 {
		return nil
	}
	out := map[certpolicy.PodState]int32{}
	if c.Holding > 0 {
		out[certpolicy.PodFresh] = c.Holding
	}
	if behind := c.Pods - c.Holding; behind > 0 {
		state := certpolicy.PodPending
		if c.Due != nil && now.After(c.Due.Time) {
			state = certpolicy.PodOverdueForRefresh
		}
		out[state] = behind
	}
	return out
}

// describePods says ringPods in one clause, those that hold the key
// first: "pods 3 fresh, 1 overdue for refresh".
func describePods(states map[certpolicy.PodState]int32) string {
	var parts []string
	for _, s := range []certpolicy.PodState{certpolicy.PodFresh, certpolicy.PodPending, certpolicy.PodOverdueForRefresh} {
		if n := states[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, s))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "pods " + strings.Join(parts, ", ")
}
