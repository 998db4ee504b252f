package mint

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/ringplan"
)

// LastMint is the outcome of the last mint from a key source: when it ended,
// and why it failed (nil: it succeeded) with the reason of that failure.
type LastMint struct {
	At     time.Time
	Reason string
	Err    error
}

// KeySourceStatus is a ClusterKeySource's status after a check at now that failed
// with checkErr (nil: it logged in and its token answered), whose reason is
// reason, and after the last mint from it, if any. changed reports a
// transition of Ready, which deserves an event (a Warning when it turns
// False).
func KeySourceStatus(prev v1alpha1.ClusterKeySourceStatus, generation int64, address string, reason string, checkErr error, last *LastMint, now time.Time) (s v1alpha1.ClusterKeySourceStatus, changed bool) {
	s = *prev.DeepCopy()
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonLoggedIn,
		Message: fmt.Sprintf("Logged in to %s; the token answers", address), ObservedGeneration: generation}
	if checkErr != nil {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, reason, checkErr.Error()
	}
	old := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionReady)
	changed = old == nil || old.Status != ready.Status || old.Reason != ready.Reason
	meta.SetStatusCondition(&s.Conditions, ready)
	if last != nil {
		minting := metav1.Condition{Type: v1alpha1.ConditionMinting, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonMinted,
			Message: fmt.Sprintf("The last mint, at %s, succeeded", last.At.UTC().Format(time.RFC3339)), ObservedGeneration: generation}
		if last.Err != nil {
			minting.Status, minting.Reason = metav1.ConditionFalse, last.Reason
			minting.Message = fmt.Sprintf("The last mint, at %s, failed: %v", last.At.UTC().Format(time.RFC3339), last.Err)
		}
		meta.SetStatusCondition(&s.Conditions, minting)
	}
	s.LastCheckTime = &metav1.Time{Time: now.Truncate(time.Second)}
	ringplan.Settle(prev.Conditions, s.Conditions, now) // Vault's errors are quoted whole
	return s, changed
}
