package fleet_test

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/fleet"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func request(name string, at time.Time, spec v1alpha1.FleetRequestSpec) *v1alpha1.FleetRequest {
	return &v1alpha1.FleetRequest{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(at), Generation: 1}, Spec: spec}
}

func TestSelects(t *testing.T) {
	web := fleet.Ring{Kind: v1alpha1.KindTicketKeyRing, Namespace: "shop", Name: "web", Created: t0.Add(-time.Hour),
		Labels: map[string]string{"tier": "edge"}, NamespaceLabels: map[string]string{"team": "a"}, KeySource: "vault-prod"}
	cluster := fleet.Ring{Kind: v1alpha1.KindClusterTicketKeyRing, Name: "shared", Created: t0.Add(-time.Hour)}
	sel := func(k, v string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
	}
	for _, tc := range []struct {
		name     string
		spec     v1alpha1.FleetRequestSpec
		ring     fleet.Ring
		want     bool
		unjudged string
	}{
		{name: "an empty selection selects every ring", ring: web, want: true},
		{name: "and cluster rings", ring: cluster, want: true},
		{name: "by kind", spec: v1alpha1.FleetRequestSpec{Kinds: []v1alpha1.RingKind{v1alpha1.KindClusterTicketKeyRing}}, ring: web},
		{name: "by key source", spec: v1alpha1.FleetRequestSpec{KeySource: "vault-prod"}, ring: web, want: true},
		{name: "another key source", spec: v1alpha1.FleetRequestSpec{KeySource: "vault-dev"}, ring: web},
		{name: "in-cluster rings have no key source", spec: v1alpha1.FleetRequestSpec{KeySource: "vault-prod"}, ring: cluster},
		{name: "by namespace labels", spec: v1alpha1.FleetRequestSpec{NamespaceSelector: sel("team", "a")}, ring: web, want: true},
		{name: "other namespace labels", spec: v1alpha1.FleetRequestSpec{NamespaceSelector: sel("team", "b")}, ring: web},
		{name: "a namespace selector selects no cluster ring", spec: v1alpha1.FleetRequestSpec{NamespaceSelector: &metav1.LabelSelector{}}, ring: cluster},
		{name: "by ring labels", spec: v1alpha1.FleetRequestSpec{RingSelector: sel("tier", "edge")}, ring: web, want: true},
		{name: "other ring labels", spec: v1alpha1.FleetRequestSpec{RingSelector: sel("tier", "core")}, ring: web},
		{name: "labels not kept are not judged", spec: v1alpha1.FleetRequestSpec{RingSelector: sel("tier", "edge")},
			ring: fleet.Ring{Kind: v1alpha1.KindTicketKeyRing, Namespace: "shop", Name: "big", LabelsCut: true}, unjudged: v1alpha1.ReasonRingLabelsNotKept},
		{name: "a ring created after the request is not selected", ring: fleet.Ring{Kind: v1alpha1.KindTicketKeyRing, Namespace: "shop", Name: "new", Created: t0.Add(time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, unjudged := fleet.Selects(request("r", t0, tc.spec), tc.ring)
			if ok != tc.want || unjudged != tc.unjudged {
				t.Errorf("Selects = %v %q, want %v %q", ok, unjudged, tc.want, tc.unjudged)
			}
		})
	}
}

// A ring carries out the requests that select it oldest first, each once.
func TestNext(t *testing.T) {
	ring := fleet.Ring{Kind: v1alpha1.KindTicketKeyRing, Namespace: "shop", Name: "web", Created: t0.Add(-time.Hour)}
	a := request("a", t0, v1alpha1.FleetRequestSpec{Action: v1alpha1.FleetRevoke})
	b := request("b", t0.Add(time.Minute), v1alpha1.FleetRequestSpec{Action: v1alpha1.FleetRotate})
	other := request("c", t0, v1alpha1.FleetRequestSpec{KeySource: "elsewhere"})
	reqs := []*v1alpha1.FleetRequest{b, other, a}
	if got := fleet.Next(reqs, ring, nil); got != a {
		t.Fatalf("first %v, want a", got.Name)
	}
	recA := fleet.Record(a)
	if got := fleet.Next(reqs, ring, &recA); got != b {
		t.Fatalf("after a: %v, want b", got)
	}
	recB := fleet.Record(b)
	if got := fleet.Next(reqs, ring, &recB); got != nil {
		t.Fatalf("after b: %v, want none (a is older than b)", got.Name)
	}
}

func TestProgress(t *testing.T) {
	req := request("r", t0, v1alpha1.FleetRequestSpec{Action: v1alpha1.FleetRotate})
	rec := fleet.Record(req)
	rec.Epoch, rec.ServedAt = 3, &metav1.Time{Time: t0.Add(time.Minute)}
	ring := func(name string) fleet.Ring {
		return fleet.Ring{Kind: v1alpha1.KindTicketKeyRing, Namespace: "shop", Name: name, Created: t0.Add(-time.Hour)}
	}
	served := v1alpha1.TicketKeyRingStatus{FleetRequest: &rec, Keys: []v1alpha1.KeyStatus{{ID: "k2"}, {ID: "k1"}}}
	failing := v1alpha1.TicketKeyRingStatus{Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonVaultUnavailable}}}
	confirming := *served.DeepCopy()
	confirming.Confirmation = &v1alpha1.ConfirmationStatus{StagedKey: "k2", Pods: 3, Holding: 2, CheckedAt: metav1.NewTime(t0.Add(2 * time.Minute))}
	rings := []fleet.RingState{
		{Ring: ring("a"), Status: served},
		{Ring: ring("b"), Status: failing},
		{Ring: ring("c"), Status: confirming, Confirms: true},
		{Ring: fleet.Ring{Kind: v1alpha1.KindTicketKeyRing, Namespace: "shop", Name: "late", Created: t0.Add(time.Hour)}},
	}
	// A ring whose labels were not kept cannot be judged by a selector that
	// reads them: counted apart, it holds nothing up.
	req.Spec.RingSelector = &metav1.LabelSelector{}
	for i := range rings[:3] {
		rings[i].Labels = map[string]string{}
	}
	rings = append(rings, fleet.RingState{Ring: fleet.Ring{Kind: v1alpha1.KindTicketKeyRing, Namespace: "shop", Name: "big", Created: t0.Add(-time.Hour), LabelsCut: true}})
	st := fleet.Progress(req, v1alpha1.FleetRequestStatus{}, rings, t0.Add(3*time.Minute))
	if st.Selected != 3 || st.Served != 2 || st.PodsTotal != 3 || st.PodsConfirmed != 2 || st.WaitingCount != 2 || fleet.Complete(st) {
		t.Fatalf("status %+v", st)
	}
	if st.Waiting[0].Name != "b" || st.Waiting[0].Reason != v1alpha1.ReasonVaultUnavailable || st.Waiting[1].Reason != v1alpha1.ReasonAwaitingPods {
		t.Errorf("waiting %+v", st.Waiting)
	}
	if st.StartedAt == nil || st.LastRingServedAt != nil {
		t.Errorf("startedAt %v lastRingServedAt %v", st.StartedAt, st.LastRingServedAt)
	}
	// b serves; c's pods all hold the key.
	rings[1].Status = served
	rings[2].Status.Confirmation.Holding = 3
	st = fleet.Progress(req, st, rings, t0.Add(4*time.Minute))
	if !fleet.Complete(st) || st.WaitingCount != 0 || st.Waiting != nil || st.Served != 3 || st.PodsConfirmed != 3 || st.NotJudged != 1 {
		t.Fatalf("status %+v", st)
	}
	if !st.LastRingServedAt.Time.Equal(t0.Add(time.Minute)) || !st.LastPodConfirmedAt.Time.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("last ring served %v, last pod %v", st.LastRingServedAt, st.LastPodConfirmedAt)
	}
	if c := st.Conditions[0]; c.ObservedGeneration != 1 || c.Reason != v1alpha1.ReasonCompleted {
		t.Errorf("condition %+v", c)
	}
}

// However many rings wait, status names the first MaxFleetWaiting by kind,
// namespace and name, and counts them all.
func TestProgressNamesTheFirstWaiting(t *testing.T) {
	req := request("r", t0, v1alpha1.FleetRequestSpec{Action: v1alpha1.FleetRotate})
	const n = 1000
	rings := make([]fleet.RingState, n)
	for i := range rings {
		// Listed in an order that is not theirs by name.
		j := (i * 389) % n
		rings[i] = fleet.RingState{Ring: fleet.Ring{Kind: v1alpha1.KindTicketKeyRing, Namespace: "shop", Name: fmt.Sprintf("ring-%04d", j), Created: t0.Add(-time.Hour)}}
	}
	st := fleet.Progress(req, v1alpha1.FleetRequestStatus{}, rings, t0.Add(time.Minute))
	if st.Selected != n || st.WaitingCount != n || len(st.Waiting) != v1alpha1.MaxFleetWaiting {
		t.Fatalf("selected %d, waiting %d, named %d: want %d, %d, %d", st.Selected, st.WaitingCount, len(st.Waiting), n, n, v1alpha1.MaxFleetWaiting)
	}
	for i, w := range st.Waiting {
		if want := fmt.Sprintf("ring-%04d", i); w.Name != want {
			t.Errorf("waiting[%d] = %s, want %s", i, w.Name, want)
		}
	}
}
