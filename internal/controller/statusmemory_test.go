package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

// The status memory's entry of a ring ends when the cache's update event
// shows the status written, or another ring of the name; a cache still
// behind keeps it, and other kinds' events are ignored.
func TestStatusMemoryForgetShown(t *testing.T) {
	written := v1alpha1.TicketKeyRingStatus{Epoch: 2, Snapshot: "web-e2"}
	ring := func(uid types.UID, status v1alpha1.TicketKeyRingStatus) *v1alpha1.TicketKeyRing {
		return &v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: uid}, Status: status}
	}
	for _, tc := range []struct {
		name   string
		cached *v1alpha1.TicketKeyRing
		kept   bool
	}{
		{name: "the cache shows the status written", cached: ring("u1", written), kept: false},
		{name: "the cache is an epoch behind", cached: ring("u1", v1alpha1.TicketKeyRingStatus{Epoch: 1, Snapshot: "web-e1"}), kept: true},
		{name: "another ring of the name", cached: ring("u2", v1alpha1.TicketKeyRingStatus{}), kept: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m statusMemory[v1alpha1.TicketKeyRingStatus]
			m.wrote(ring("u1", written), written)
			h := m.forgetShown(ringStatus)
			h.Update(t.Context(), event.UpdateEvent{ObjectOld: ring("u1", v1alpha1.TicketKeyRingStatus{}), ObjectNew: tc.cached}, nil)
			_, kept := m.written[types.NamespacedName{Namespace: "shop", Name: "web"}]
			if kept != tc.kept {
				t.Fatalf("entry kept: %v, want %v", kept, tc.kept)
			}
			if got := m.base(ring("u1", v1alpha1.TicketKeyRingStatus{}), v1alpha1.TicketKeyRingStatus{}); kept && got.Epoch != written.Epoch {
				t.Fatalf("a reconcile starts from epoch %d, want the written %d", got.Epoch, written.Epoch)
			}
		})
	}
	t.Run("another kind's event", func(t *testing.T) {
		var m statusMemory[v1alpha1.TicketKeyRingStatus]
		m.wrote(ring("u1", written), written)
		m.forgetShown(ringStatus).Update(t.Context(), event.UpdateEvent{ObjectNew: &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "u1"}}}, nil)
		if len(m.written) != 1 {
			t.Fatal("an ECHKeyRing's event ended a ticket ring's entry")
		}
	})
}
