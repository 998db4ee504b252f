package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/written"
)

// The status memory's entry of a ring ends when the cache's update event
// shows the status written, or another ring of the name; a cache still
// behind keeps it, and other kinds' events are ignored.
func TestStatusMemoryForgetShown(t *testing.T) {
	want := v1alpha1.TicketKeyRingStatus{Epoch: 2, Snapshot: "web-e2"}
	ring := func(uid types.UID, status v1alpha1.TicketKeyRingStatus) *v1alpha1.TicketKeyRing {
		return &v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: uid}, Status: status}
	}
	for _, tc := range []struct {
		name   string
		cached *v1alpha1.TicketKeyRing
		kept   bool
	}{
		{name: "the cache shows the status written", cached: ring("u1", want), kept: false},
		{name: "the cache is an epoch behind", cached: ring("u1", v1alpha1.TicketKeyRingStatus{Epoch: 1, Snapshot: "web-e1"}), kept: true},
		{name: "another ring of the name", cached: ring("u2", v1alpha1.TicketKeyRingStatus{}), kept: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m written.Statuses[v1alpha1.TicketKeyRingStatus]
			m.Wrote(ring("u1", want), want)
			h := forgetShown(&m, ringStatus)
			h.Update(t.Context(), event.UpdateEvent{ObjectOld: ring("u1", v1alpha1.TicketKeyRingStatus{}), ObjectNew: tc.cached}, nil)
			// A ring whose cache shows nothing yet: it starts from the
			// status written while the entry is kept.
			got := m.Base(ring("u1", v1alpha1.TicketKeyRingStatus{}), v1alpha1.TicketKeyRingStatus{})
			if kept := got.Epoch == want.Epoch; kept != tc.kept {
				t.Fatalf("entry kept: %v, want %v", kept, tc.kept)
			}
		})
	}
	t.Run("another kind's event", func(t *testing.T) {
		var m written.Statuses[v1alpha1.TicketKeyRingStatus]
		m.Wrote(ring("u1", want), want)
		forgetShown(&m, ringStatus).Update(t.Context(), event.UpdateEvent{ObjectNew: &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "u1"}}}, nil)
		if m.Base(ring("u1", v1alpha1.TicketKeyRingStatus{}), v1alpha1.TicketKeyRingStatus{}).Epoch != want.Epoch {
			t.Fatal("an ECHKeyRing's event ended a ticket ring's entry")
		}
	})
}
