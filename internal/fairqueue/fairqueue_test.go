package fairqueue

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// add is one AddWithOpts: "ns/name" at a priority, ready now or after a
// delay.
type add struct {
	req      string
	priority int
	after    time.Duration
}

func request(s string) reconcile.Request {
	ns, name, _ := strings.Cut(s, "/")
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
}

func newQueue() *Queue {
	return NewQueue("test", workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]()).(*Queue)
}

// drain hands out n requests, as "ns/name@priority", marking each done.
func drain(q *Queue, n int) []string {
	var got []string
	for range n {
		item, p, _ := q.GetWithPriority()
		q.Done(item)
		got = append(got, fmt.Sprintf("%s@%d", item, p))
	}
	return got
}

func TestOrder(t *testing.T) {
	low := -100
	bulk := func(ns string, n, priority int) []add {
		var adds []add
		for i := range n {
			adds = append(adds, add{req: fmt.Sprintf("%s/r%d", ns, i), priority: priority})
		}
		return adds
	}
	for _, tc := range []struct {
		name string
		adds []add
		want []string
	}{{
		name: "two namespaces take turns",
		adds: append(bulk("a", 3, 0), bulk("b", 3, 0)...),
		want: []string{"a/r0@0", "b/r0@0", "a/r1@0", "b/r1@0", "a/r2@0", "b/r2@0"},
	}, {
		name: "a ring created behind a bulk goes second",
		adds: append(append(bulk("bulk", 4, 0), add{req: "probe/p"}), add{req: "bulk/r4"}),
		want: []string{"bulk/r0@0", "probe/p@0", "bulk/r1@0", "bulk/r2@0", "bulk/r3@0", "bulk/r4@0"},
	}, {
		name: "past the band's last place, namespaces still take turns: the requests behind move up as the first are handed out",
		adds: append(bulk("a", band+2, 0), bulk("b", band+2, 0)...),
		want: func() []string {
			var w []string
			for i := range band + 2 {
				w = append(w, fmt.Sprintf("a/r%d@0", i), fmt.Sprintf("b/r%d@0", i))
			}
			return w
		}(),
	}, {
		name: "rings created one at a time behind a bulk, that once waited together, never fall behind it",
		adds: append(bulk("bulk", 3*band, 0), bulk("probe", band+2, 0)...),
		want: func() []string {
			var w []string
			for i := range band + 2 {
				w = append(w, fmt.Sprintf("bulk/r%d@0", i), fmt.Sprintf("probe/r%d@0", i))
			}
			for i := band + 2; i < 3*band; i++ {
				w = append(w, fmt.Sprintf("bulk/r%d@0", i))
			}
			return w
		}(),
	}, {
		name: "a higher priority goes first whatever the ranks",
		adds: append(bulk("a", 3, low), add{req: "a/new"}, add{req: "b/new", priority: low}),
		want: []string{"a/new@0", "a/r0@-100", "b/new@-100", "a/r1@-100", "a/r2@-100"},
	}, {
		name: "a request added again at a higher priority moves up",
		adds: append(bulk("a", 2, low), add{req: "a/r1"}),
		want: []string{"a/r1@0", "a/r0@-100"},
	}, {
		name: "a request added again at its priority keeps its place, once",
		adds: append(bulk("a", 3, 0), add{req: "a/r0"}, add{req: "a/r0", priority: low}, add{req: "b/r0"}),
		want: []string{"a/r0@0", "b/r0@0", "a/r1@0", "a/r2@0"},
	}, {
		name: "a request added for later keeps its priority",
		adds: []add{{req: "a/later", priority: low, after: 5 * time.Millisecond}, {req: "b/now", priority: low}},
		want: []string{"b/now@-100", "a/later@-100"},
	}, {
		name: "cluster-scoped requests are one flow",
		adds: append(bulk("", 2, 0), add{req: "a/r0"}),
		want: []string{"/r0@0", "a/r0@0", "/r1@0"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			q := newQueue()
			defer q.ShutDown()
			for _, a := range tc.adds {
				q.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(a.priority), After: a.after}, request(a.req))
			}
			if got := drain(q, len(tc.want)); !slices.Equal(got, tc.want) {
				t.Errorf("handed out\n %v\nwant\n %v", got, tc.want)
			}
			if q.Len() != 0 {
				t.Errorf("%d requests left in the queue", q.Len())
			}
			if len(q.waiting) != 0 || len(q.flows) != 0 {
				t.Errorf("bookkeeping left once drained: %d waiting, %d flows", len(q.waiting), len(q.flows))
			}
		})
	}
}

// A request handed out and added again while it is being reconciled
// waits its turn, and the controller's requeue at the priority
// GetWithPriority returned lands in the same band.
func TestRequeueWhileProcessing(t *testing.T) {
	q := newQueue()
	defer q.ShutDown()
	q.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(-100)}, request("a/r0"), request("a/r1"))
	item, p, _ := q.GetWithPriority()
	if item != request("a/r0") || p != -100 {
		t.Fatalf("got %s@%d, want a/r0@-100", item, p)
	}
	q.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(p), RateLimited: true}, item)
	q.Add(request("b/r0"))
	q.Done(item)
	if got, want := drain(q, 3), []string{"b/r0@0", "a/r1@-100", "a/r0@-100"}; !slices.Equal(got, want) {
		t.Errorf("handed out %v, want %v", got, want)
	}
}

func TestPriorityOf(t *testing.T) {
	for _, p := range []int{-100, -1, 0, 1, 7} {
		for _, r := range []int{0, 1, band / 2, band - 1} {
			if got := priorityOf(p*band - r); got != p {
				t.Errorf("priorityOf(%d*band - %d) = %d", p, r, got)
			}
		}
	}
}
