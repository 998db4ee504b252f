package audit_test

import (
	"maps"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/audit"
	"github.com/ringmaster-io/ringmaster/internal/certpolicy"
)

// TestRingPods: a ring's pods are counted in the kubelet's words for pod
// certificates, from what the operator last read of them, for ticket and
// ECH rings alike.
func TestRingPods(t *testing.T) {
	due := at(40 * minute)
	for _, tc := range []struct {
		name   string
		conf   *v1alpha1.ConfirmationStatus
		later  time.Duration
		want   map[certpolicy.PodState]int32
		detail string // the row's detail contains it; "" for no pods clause
	}{
		{name: "a ring that asks its pods nothing"},
		{name: "no ready pod selected", conf: &v1alpha1.ConfirmationStatus{StagedKey: "cccccccc", Due: &due}},
		{
			name: "every pod holds the staged key", conf: &v1alpha1.ConfirmationStatus{StagedKey: "cccccccc", Due: &due, Pods: 3, Holding: 3},
			want: map[certpolicy.PodState]int32{certpolicy.PodFresh: 3}, detail: "pods 3 fresh",
		},
		{
			name: "one pod behind, the key not yet due", conf: &v1alpha1.ConfirmationStatus{StagedKey: "cccccccc", Due: &due, Pods: 3, Holding: 2},
			want: map[certpolicy.PodState]int32{certpolicy.PodFresh: 2, certpolicy.PodPending: 1}, detail: "pods 2 fresh, 1 pending",
		},
		{
			name: "one pod behind a due key", later: 50 * minute, conf: &v1alpha1.ConfirmationStatus{StagedKey: "cccccccc", Due: &due, Pods: 3, Holding: 2},
			want: map[certpolicy.PodState]int32{certpolicy.PodFresh: 2, certpolicy.PodOverdueForRefresh: 1}, detail: "pods 2 fresh, 1 overdue for refresh",
		},
		{
			name: "no pod holds it, no due time known", conf: &v1alpha1.ConfirmationStatus{StagedKey: "cccccccc", Pods: 2},
			want: map[certpolicy.PodState]int32{certpolicy.PodPending: 2}, detail: "pods 2 pending",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := healthy()
			r.Status.Confirmation = tc.conf
			echRing := &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Generation: 1}}
			echRing.Status.Confirmation = tc.conf
			for kind, row := range map[string]audit.Row{"ticket": r.Row(now.Add(tc.later)), "ech": audit.ECHRow(echRing, now.Add(tc.later))} {
				if !maps.Equal(row.Pods, tc.want) {
					t.Errorf("%s ring: pods %v, want %v", kind, row.Pods, tc.want)
				}
				if got := strings.Contains(row.Detail, "pods "); got != (tc.detail != "") || !strings.Contains(row.Detail, tc.detail) {
					t.Errorf("%s ring: detail %q, want it to say %q", kind, row.Detail, tc.detail)
				}
			}
		})
	}
}
