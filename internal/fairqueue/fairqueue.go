// Package fairqueue is controller-runtime's priority work queue made fair
// between namespaces: within one priority, the queue hands out the first
// waiting request of every namespace before the second of any, and so on
// to the twelfth, so one tenant's thousand rings never make another
// tenant's one ring wait behind them. Priorities still come first: every
// request at priority 0 (a ring created, edited, rotated now or revoked)
// goes before any at a lower one (scheduled work), whatever its namespace.
//
// It does so with the queue's own ordering: a request added ready is given,
// inside its priority's band, a rank that is its place among the requests
// of its namespace waiting at that priority, and the queue serves higher
// values first. As a namespace's requests are handed out, those behind
// them move up a rank, so that namespaces take turns however long their
// queues; a namespace is still served at its share, one request in as
// many as there are busy namespaces.
// A request added for later (RequeueAfter, a retry after an error) is
// ranked first in its band: it is ordered by when it falls due.
package fairqueue

import (
	"container/list"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// band is the number of places inside one priority: a request of priority
// p and rank r waits at queue priority p*band - r. A namespace's requests
// beyond the band's last place share it, in the order they came: a
// namespace with fewer than band requests waiting never waits behind
// another's bulk. The band is narrow because controller-runtime labels its
// queue depth metric by priority, and collapses the label once a queue has
// seen more than 25 values: two priorities of 12 places keep it readable.
const band = 12

// Queue is a priority queue fair between namespaces. Its GetWithPriority
// returns the priority a request was added with, not its place in the
// band, so that a controller requeues it at the priority it had.
type Queue struct {
	priorityqueue.PriorityQueue[reconcile.Request]

	mu sync.Mutex
	// waiting holds every request added ready and not yet handed out, by
	// the priority it was added at, and its place in its flow; flows holds
	// each namespace's waiting requests at one priority, in the order they
	// came. Both are emptied as requests are handed out: their size is the
	// queue's.
	waiting map[reconcile.Request]waiter
	flows   map[flow]*list.List
}

// flow is one namespace's requests at one priority.
type flow struct {
	namespace string
	priority  int
}

type waiter struct {
	priority int
	place    *list.Element
}

// New wraps q, a new priority queue nothing has been added to yet.
func New(q priorityqueue.PriorityQueue[reconcile.Request]) *Queue {
	return &Queue{PriorityQueue: q, waiting: map[reconcile.Request]waiter{}, flows: map[flow]*list.List{}}
}

// NewQueue is New for controller.Options.NewQueue: controller-runtime's
// priority queue with the controller's rate limiter, made fair.
func NewQueue(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	return New(priorityqueue.New(name, func(o *priorityqueue.Opts[reconcile.Request]) { o.RateLimiter = rl }))
}

// Add adds item ready, at priority 0.
func (q *Queue) Add(item reconcile.Request) { q.AddWithOpts(priorityqueue.AddOpts{}, item) }

// AddAfter adds item at priority 0, ready after d.
func (q *Queue) AddAfter(item reconcile.Request, d time.Duration) {
	q.AddWithOpts(priorityqueue.AddOpts{After: d}, item)
}

// AddRateLimited adds item at priority 0 when the rate limiter allows.
func (q *Queue) AddRateLimited(item reconcile.Request) {
	q.AddWithOpts(priorityqueue.AddOpts{RateLimited: true}, item)
}

// AddWithOpts adds items as the priority queue does, each ranked within
// its priority behind the requests of its namespace already waiting there.
func (q *Queue) AddWithOpts(o priorityqueue.AddOpts, items ...reconcile.Request) {
	p := ptr.Deref(o.Priority, 0)
	if o.After > 0 || o.RateLimited {
		o.Priority = ptr.To(p * band)
		q.PriorityQueue.AddWithOpts(o, items...)
		return
	}
	for _, item := range items {
		o.Priority = ptr.To(p*band - q.rank(item, p))
		q.PriorityQueue.AddWithOpts(o, item)
	}
}

// rank records item as waiting ready at priority p and returns its place
// among its namespace's requests there. An item already waiting at p or
// higher keeps its place: the queue keeps the higher priority.
func (q *Queue) rank(item reconcile.Request, p int) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if had, ok := q.waiting[item]; ok {
		if had.priority >= p {
			return band - 1
		}
		q.leave(item, had)
	}
	f := flow{item.Namespace, p}
	l := q.flows[f]
	if l == nil {
		l = list.New()
		q.flows[f] = l
	}
	q.waiting[item] = waiter{priority: p, place: l.PushBack(item)}
	return min(l.Len()-1, band-1)
}

// leave forgets item, waiting as w, and moves each request of its flow
// that was ranked behind it up a rank: the queue places it again, higher.
// A request that the queue hands out meanwhile is placed anew and
// reconciled once more, which a reconcile takes as it takes any repeat.
// q.mu is held.
func (q *Queue) leave(item reconcile.Request, w waiter) {
	delete(q.waiting, item)
	f := flow{item.Namespace, w.priority}
	l := q.flows[f]
	place := 0
	for e := l.Front(); e != w.place && place < band; e = e.Next() {
		place++
	}
	next := w.place.Next()
	l.Remove(w.place)
	if l.Len() == 0 {
		delete(q.flows, f)
		return
	}
	for ; next != nil && place < band-1; next = next.Next() {
		q.PriorityQueue.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(w.priority*band - place)}, next.Value.(reconcile.Request))
		place++
	}
}

// GetWithPriority hands out the next request and the priority it was
// added with.
func (q *Queue) GetWithPriority() (reconcile.Request, int, bool) {
	item, placed, shutdown := q.PriorityQueue.GetWithPriority()
	q.mu.Lock()
	if w, ok := q.waiting[item]; ok {
		q.leave(item, w)
	}
	q.mu.Unlock()
	return item, priorityOf(placed), shutdown
}

// priorityOf is the priority of a request placed at p*band - r, 0 <= r < band:
// placed/band rounded up.
func priorityOf(placed int) int {
	p := placed / band // rounded toward zero: up when negative
	if placed%band > 0 {
		p++
	}
	return p
}

// Get hands out the next request.
func (q *Queue) Get() (reconcile.Request, bool) {
	item, _, shutdown := q.GetWithPriority()
	return item, shutdown
}
