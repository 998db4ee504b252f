package ringstatus

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

// KeySource is a ClusterKeySource's status after a check at now that failed
// with checkErr (nil: it logged in and its token answered), whose reason is
// reason. changed reports a transition of Ready, which deserves an event
// (a Warning when it turns False).
func KeySource(prev v1alpha1.ClusterKeySourceStatus, generation int64, address string, reason string, checkErr error, now time.Time) (s v1alpha1.ClusterKeySourceStatus, changed bool) {
	s = *prev.DeepCopy()
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonLoggedIn,
		Message: fmt.Sprintf("Logged in to %s; the token answers", address), ObservedGeneration: generation}
	if checkErr != nil {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, reason, checkErr.Error()
	}
	old := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionReady)
	changed = old == nil || old.Status != ready.Status || old.Reason != ready.Reason
	meta.SetStatusCondition(&s.Conditions, ready)
	s.LastCheckTime = &metav1.Time{Time: now.Truncate(time.Second)}
	return s, changed
}
