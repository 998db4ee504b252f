package audit_test

import (
	"cmp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/audit"
)

// healthyECH is an ECH ring of interval 1h: config 3 staged, 2 published
// 20m ago, 1 retired until 10m from now.
func healthyECH() *v1alpha1.ECHKeyRing {
	t := func(d time.Duration) *metav1.Time { x := at(d); return &x }
	return &v1alpha1.ECHKeyRing{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Generation: 1},
		Spec:       v1alpha1.ECHKeyRingSpec{RotationInterval: metav1.Duration{Duration: hour}, DeliveryDelay: metav1.Duration{Duration: 5 * minute}},
		Status: v1alpha1.ECHKeyRingStatus{
			Epoch: 9,
			Configs: []v1alpha1.ECHConfigStatus{
				{ID: 3, State: "staged", CreatedAt: at(-1 * minute)},
				{ID: 2, State: "published", CreatedAt: at(-30 * minute), PublishedAt: t(-20 * minute)},
				{ID: 1, State: "retired", CreatedAt: at(-90 * minute), PublishedAt: t(-80 * minute), RetiredAt: t(-20 * minute), ExpiresAt: t(10 * minute)},
			},
			DNSVerifiedAt: t(-time.Minute),
			Conditions: []metav1.Condition{
				cond(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonPublished, "Config 2 is published", 1),
				cond(v1alpha1.ConditionConfirmationOverdue, metav1.ConditionFalse, v1alpha1.ReasonOnSchedule, "", 1),
			},
		},
	}
}

func TestECHRows(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.ECHKeyRing)
		later  time.Duration
		want   []audit.Category
		says   string
		// expires is the soonest expiresAt the row shows; 0: 10m.
		expires time.Duration
	}{
		{name: "healthy", mutate: func(*v1alpha1.ECHKeyRing) {}},
		{name: "a retired config past its expiry", later: 12 * minute, want: []audit.Category{audit.Overdue}, says: "config 1 expired"},
		{name: "a published config past its expiry", mutate: func(r *v1alpha1.ECHKeyRing) {
			x := at(-2 * minute)
			r.Status.Configs[1].ExpiresAt = &x
		}, want: []audit.Category{audit.Overdue}, says: "config 2 expired", expires: -2 * minute},
		{name: "the published config past its interval", later: 50 * minute, want: []audit.Category{audit.KeyAge, audit.Overdue}, says: "published config 2 is"},
		{name: "publication held back by the fleet", mutate: func(r *v1alpha1.ECHKeyRing) {
			r.Status.Conditions[1] = cond(v1alpha1.ConditionConfirmationOverdue, metav1.ConditionTrue, v1alpha1.ReasonAwaitingPods, "web-7 lacks it", 1)
		}, want: []audit.Category{audit.Overdue}, says: "web-7 lacks it"},
		{name: "DNS down", mutate: func(r *v1alpha1.ECHKeyRing) {
			r.Status.Conditions[0] = cond(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonDNSUnavailable, "knot refused", 1)
		}, want: []audit.Category{audit.NotReady}, says: "DNSUnavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := healthyECH()
			if tc.mutate != nil {
				tc.mutate(r)
			}
			row := audit.ECHRow(r, now.Add(tc.later))
			var got []audit.Category
			var msgs []string
			for _, p := range row.Problems {
				got = append(got, p.Categories...)
				msgs = append(msgs, p.Message)
			}
			slices.Sort(got)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("categories %v, want %v: %v", got, want, msgs)
			}
			if tc.says != "" && !strings.Contains(strings.Join(msgs, "; "), tc.says) {
				t.Errorf("problems %q do not say %q", msgs, tc.says)
			}
			expires := cmp.Or(tc.expires, 10*minute)
			if row.KeyID != "config 2" || !row.Expires.Equal(&metav1.Time{Time: now.Add(expires)}) {
				t.Errorf("row shows key %q, expires %v", row.KeyID, row.Expires)
			}
		})
	}
	rep := audit.Build(audit.Input{Now: now, ECHRings: []v1alpha1.ECHKeyRing{*healthyECH()}})
	if len(rep.Rows) != 1 || rep.Rows[0].Ref() != "ECHKeyRing shop/web" || !strings.Contains(rep.Rows[0].Detail, "configs 3 staged, 2 published, 1 retired") {
		t.Errorf("report rows %+v", rep.Rows)
	}
}
