package watch

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

// A bulk's routine work (the reconciles its own Secret writes start) waits
// behind a ring created, edited or annotated after it, and a ring whose
// routine work is queued goes first once it is annotated.
func TestRoutineWorkGoesLast(t *testing.T) {
	ctx := context.Background()
	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	secrets := AtPriority(Scheduled, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetLabels()[v1alpha1.RingLabel]}}}
	}))
	rings := &handler.EnqueueRequestForObject{}
	snapshot := func(ring string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "bulk", Name: ring + "-e1", ResourceVersion: "1",
			Labels: map[string]string{v1alpha1.RingLabel: ring}}}
	}
	ring := func(ns, name, rv string) *v1alpha1.TicketKeyRing {
		return &v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv}}
	}

	secrets.Create(ctx, event.CreateEvent{Object: snapshot("a")}, q)
	secrets.Update(ctx, event.UpdateEvent{ObjectOld: snapshot("b"), ObjectNew: snapshot("b")}, q)
	rings.Create(ctx, event.CreateEvent{Object: ring("new", "c", "1")}, q)
	rings.Update(ctx, event.UpdateEvent{ObjectOld: ring("bulk", "b", "1"), ObjectNew: ring("bulk", "b", "2")}, q)
	if n := q.Len(); n != 3 {
		t.Fatalf("%d requests queued, want 3", n)
	}
	want := []struct {
		name     string
		priority int
	}{{"c", 0}, {"b", 0}, {"a", handler.LowPriority}}
	for _, w := range want {
		req, p, _ := q.GetWithPriority()
		if req.Name != w.name || p != w.priority {
			t.Errorf("got %s at priority %d, want %s at %d", req.Name, p, w.name, w.priority)
		}
		q.Done(req)
	}
}
