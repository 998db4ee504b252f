// Package offpath schedules the slow work the operator does off the
// reconcile path: asking pods what they hold (internal/confirm), writing
// and checking DNS records (internal/dnswork), patching pods so that their
// kubelets re-mount a Secret (internal/nudge). A reconcile asks a question
// of an item (Want) and reads at once the latest answer to exactly that
// question; the Scheduler runs each item that falls due on a goroutine of
// its own, the longest waiting first, within a limit of runs per group (a
// namespace, a DNS zone) and overall, drops the items nobody asks for any
// more, and enqueues an item's owner when its answer changes. What one run
// does, and the budget it spends, are the worker's.
//
// It is a table looked over on every tick and every Want, not a client-go
// workqueue: a workqueue hands ready keys to its workers in order, and
// cannot hold back the next key of a group whose runs are all in flight
// without a worker taking it and adding it back, behind every other; and
// whether an item is due depends on what was asked and answered (a staged
// key within its lead by the rings' clock, a record's answer old enough to
// check again, a question changed), not only on when it was added. The
// table holds one item per ring, record or projection being worked on.
// Fairness between the rings of many namespaces in the controllers' own
// queues is internal/fairqueue's; the Scheduler only adds to them.
package offpath

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Owner names who asked for an item: the kind of its controller, and the
// object's namespace (empty for a cluster-scoped one) and name, enqueued
// when the item's answer changes.
type Owner struct {
	Kind string
	types.NamespacedName
}

// Config is what a worker tells the Scheduler of its items: K names an
// item, Q is a question asked of it, A an answer. Run, Same and Group are
// required, and Tick, TTL, Limit and PerGroup must be positive; the other
// fields may be left zero.
type Config[K comparable, Q, A any] struct {
	// Tick is how often the Scheduler looks for due items besides when a
	// Want or a finished run wakes it: how long past its time an item that
	// falls due by time alone (its hold, its worker's pace) may wait.
	Tick time.Duration
	// TTL is how long after the last Want an item is kept: one that falls
	// due when nobody has asked for it for that long is dropped, not run.
	TTL time.Duration
	// GiveUp, when not zero, is how long after its question was first
	// asked an item is dropped when it falls due, asked again or not.
	GiveUp time.Duration
	// Limit is how many runs are in flight at once overall, and PerGroup
	// how many of one group. Urgent items' runs are counted apart from the
	// others', within the same limits, so that urgent work never waits for
	// other work to free a slot.
	Limit, PerGroup int
	// Group names the group whose limit an item's runs count against.
	Group func(K, Q) string
	// Urgent marks the items that run before any other; nil: none is.
	Urgent func(Q) bool
	// Same says whether two questions are the same one: an answer to one
	// answers the other. An answer to another question than the one asked
	// now is never returned, nor kept.
	Same func(a, b Q) bool
	// Merge, when set, makes the question asked of an item from the one
	// it was asked before and the new one (an urgency that must not be
	// lost).
	Merge func(old, new Q) Q
	// Due says whether an item that is not running, nor held, runs now;
	// nil: it does. It is called with the Scheduler's lock held, so it
	// must not call the Scheduler.
	Due func(now time.Time, it Item[K, Q, A]) bool
	// Run does one run of an item, and returns once ctx is done at the
	// latest.
	Run func(ctx context.Context, it Item[K, Q, A]) Outcome[A]
	// Changed says whether a new answer to a question differs, for its
	// owner, from the one before; nil: every new answer does. A first
	// answer always does.
	Changed func(old, new A) bool
	// Finished, when set, is told of each item dropped because a run said
	// it is done.
	Finished func(ctx context.Context, it Item[K, Q, A])
	// Owner names who asked for an item; nil: nobody is enqueued, and
	// Forget drops nothing.
	Owner func(K) Owner
	// Clock paces the runs; nil means the real clock.
	Clock clock.WithTicker
}

// Item is what the Scheduler knows of one item, as Due, Run and Finished
// see it.
type Item[K comparable, Q, A any] struct {
	Key K
	// Asked is the question asked now.
	Asked Q
	// Answer is the latest answer to Asked; nil when there is none yet. It
	// is the Scheduler's: read it, never change it.
	Answer *A
	// AskedAt is when Asked was first asked, WantedAt when it was last,
	// and Started when the item's last run started (zero before any), by
	// Config.Clock.
	AskedAt, WantedAt, Started time.Time
}

// Outcome is what one run came to.
type Outcome[A any] struct {
	// Answer is the run's answer to the question it ran for; nil when it
	// found none (an error, which the run logs): the latest answer stands.
	// An answer to a question no longer asked is dropped.
	Answer *A
	// Hold is how long the item waits before its next run (a budget
	// spent, the worker's interval), unless it is asked another question
	// meanwhile.
	Hold time.Duration
	// Done says the item is finished: it is dropped and Finished told,
	// unless it was asked another question meanwhile.
	Done bool
}

// Scheduler runs a worker's items off the reconcile path. It is a manager
// Runnable, run by the leader only; no goroutine of its outlives Start.
type Scheduler[K comparable, Q, A any] struct {
	cfg   Config[K, Q, A]
	clock clock.WithTicker
	kick  chan struct{}

	mu    sync.Mutex
	items map[K]*entry[K, Q, A]
	// seq numbers the items in the order they came: of two waiting since
	// the same time, the older goes first.
	seq      uint64
	perGroup map[lane]int // runs in flight by group and urgency
	overall  map[bool]int // runs in flight by urgency
	outlets  map[string]*outlet
}

// lane is where a run counts against the limits.
type lane struct {
	urgent bool
	group  string
}

// entry is what the Scheduler keeps of one item.
type entry[K comparable, Q, A any] struct {
	key                        K
	seq                        uint64
	asked                      Q
	answer                     *A // answers asked: dropped when another question is asked
	askedAt, wantedAt, started time.Time
	// since is when the item began to wait: when it came, or its last run
	// ended. The longest waiting runs first.
	since time.Time
	// hold is when the item may run again, unless asked another question.
	hold    time.Time
	running bool
}

func (e *entry[K, Q, A]) item() Item[K, Q, A] {
	return Item[K, Q, A]{Key: e.key, Asked: e.asked, Answer: e.answer, AskedAt: e.askedAt, WantedAt: e.wantedAt, Started: e.started}
}

// outlet is where the answers of one kind's items enqueue their owners: a
// controller's queue once its Source has started, and until then the
// owners to enqueue when it does.
type outlet struct {
	ctx     context.Context
	queue   workqueue.TypedRateLimitingInterface[reconcile.Request]
	pending map[types.NamespacedName]struct{}
}

// New makes a Scheduler of cfg's items. It panics on a Config without Run,
// Same or Group, or without positive Tick, TTL, Limit and PerGroup: a
// worker's mistake, not a runtime condition.
func New[K comparable, Q, A any](cfg Config[K, Q, A]) *Scheduler[K, Q, A] {
	if cfg.Run == nil || cfg.Same == nil || cfg.Group == nil || cfg.Tick <= 0 || cfg.TTL <= 0 || cfg.Limit <= 0 || cfg.PerGroup <= 0 {
		panic("offpath: a Config needs Run, Same, Group, and a positive Tick, TTL, Limit and PerGroup")
	}
	s := &Scheduler[K, Q, A]{cfg: cfg, clock: cfg.Clock, kick: make(chan struct{}, 1),
		items: map[K]*entry[K, Q, A]{}, perGroup: map[lane]int{}, overall: map[bool]int{}, outlets: map[string]*outlet{}}
	if s.clock == nil {
		s.clock = clock.RealClock{}
	}
	return s
}

// Want records that q is asked of item k, and returns the latest answer to
// exactly q, if there is one yet. It never blocks on a run. Asking another
// question drops the answer to the one before, and the item's hold.
func (s *Scheduler[K, Q, A]) Want(k K, q Q) (A, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	e := s.items[k]
	if e == nil {
		s.seq++
		e = &entry[K, Q, A]{key: k, seq: s.seq, askedAt: now, since: now}
		s.items[k] = e
	} else {
		if s.cfg.Merge != nil {
			q = s.cfg.Merge(e.asked, q)
		}
		if !s.cfg.Same(e.asked, q) {
			e.answer, e.hold, e.askedAt = nil, time.Time{}, now
		}
	}
	e.asked, e.wantedAt = q, now
	s.wake()
	if e.answer == nil {
		var none A
		return none, false
	}
	return *e.answer, true
}

// Asked returns the question item k is asked now, if it is kept.
func (s *Scheduler[K, Q, A]) Asked(k K) (Q, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.items[k]; e != nil {
		return e.asked, true
	}
	var none Q
	return none, false
}

// Drop forgets item k. A run of it in flight ends as it will; its answer
// is dropped.
func (s *Scheduler[K, Q, A]) Drop(k K) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.items, k)
}

// Forget drops every item of owner o.
func (s *Scheduler[K, Q, A]) Forget(o Owner) {
	if s.cfg.Owner == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.items {
		if s.cfg.Owner(k) == o {
			delete(s.items, k)
		}
	}
}

// Len is how many items are kept.
func (s *Scheduler[K, Q, A]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.items)
}

// Source is where the Scheduler enqueues the owners of one kind whose
// answers changed, for that kind's controller to watch: the latest Source
// of a kind is the one fed. Owners whose answers change before the
// controller starts it are enqueued when it does.
func (s *Scheduler[K, Q, A]) Source(kind string) source.Source {
	o := &outlet{pending: map[types.NamespacedName]struct{}{}}
	s.mu.Lock()
	s.outlets[kind] = o
	s.mu.Unlock()
	return source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		s.mu.Lock()
		o.ctx, o.queue = ctx, q
		pending := o.pending
		o.pending = map[types.NamespacedName]struct{}{}
		s.mu.Unlock()
		for n := range pending {
			q.Add(reconcile.Request{NamespacedName: n})
		}
		return nil
	})
}

// NeedLeaderElection: the work is done for the reconciles, which only the
// leader runs.
func (s *Scheduler[K, Q, A]) NeedLeaderElection() bool { return true }

// Start runs the items as they fall due until ctx is done, and returns once
// every run it started has ended.
func (s *Scheduler[K, Q, A]) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	t := s.clock.NewTicker(s.cfg.Tick)
	defer t.Stop()
	for {
		for _, r := range s.due() {
			wg.Go(func() { s.run(ctx, r) })
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		case <-s.kick:
		}
	}
}

func (s *Scheduler[K, Q, A]) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// started is a run due() started: its item as the run sees it, and the
// lane it counts in, which a change of the item's question during the run
// does not move.
type started[K comparable, Q, A any] struct {
	e    *entry[K, Q, A]
	it   Item[K, Q, A]
	lane lane
}

// due drops the items that fell due with nobody asking for them, picks
// those to run now (urgent first, then the longest waiting) within the
// limits, and marks them running.
func (s *Scheduler[K, Q, A]) due() []started[K, Q, A] {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	var ready []*entry[K, Q, A]
	for k, e := range s.items {
		if e.running || now.Before(e.hold) || (s.cfg.Due != nil && !s.cfg.Due(now, e.item())) {
			continue
		}
		if now.Sub(e.wantedAt) > s.cfg.TTL || (s.cfg.GiveUp > 0 && now.Sub(e.askedAt) > s.cfg.GiveUp) {
			delete(s.items, k)
			continue
		}
		ready = append(ready, e)
	}
	slices.SortFunc(ready, func(a, b *entry[K, Q, A]) int {
		if ua, ub := s.urgent(a.asked), s.urgent(b.asked); ua != ub {
			if ua {
				return -1
			}
			return 1
		}
		return cmp.Or(a.since.Compare(b.since), cmp.Compare(a.seq, b.seq))
	})
	var out []started[K, Q, A]
	for _, e := range ready {
		l := lane{urgent: s.urgent(e.asked), group: s.cfg.Group(e.key, e.asked)}
		if s.overall[l.urgent] >= s.cfg.Limit || s.perGroup[l] >= s.cfg.PerGroup {
			continue
		}
		s.overall[l.urgent]++
		s.perGroup[l]++
		e.running, e.started = true, now
		out = append(out, started[K, Q, A]{e: e, it: e.item(), lane: l})
	}
	return out
}

func (s *Scheduler[K, Q, A]) urgent(q Q) bool { return s.cfg.Urgent != nil && s.cfg.Urgent(q) }

// run does one run of an item and keeps what it came to, if the item is
// still asked what the run answered; it enqueues the item's owner when the
// answer changed.
func (s *Scheduler[K, Q, A]) run(ctx context.Context, r started[K, Q, A]) {
	out := s.cfg.Run(ctx, r.it)

	s.mu.Lock()
	s.overall[r.lane.urgent]--
	if s.perGroup[r.lane]--; s.perGroup[r.lane] == 0 {
		delete(s.perGroup, r.lane)
	}
	e := r.e
	e.running, e.since = false, s.clock.Now()
	var changed, finished bool
	var it Item[K, Q, A]
	if ctx.Err() == nil && s.items[e.key] == e && s.cfg.Same(e.asked, r.it.Asked) {
		e.hold = e.since.Add(out.Hold)
		if out.Answer != nil {
			changed = e.answer == nil || s.cfg.Changed == nil || s.cfg.Changed(*e.answer, *out.Answer)
			e.answer = out.Answer
		}
		if out.Done {
			delete(s.items, e.key)
			finished, it = true, e.item()
		}
	}
	s.wake() // a slot is free
	s.mu.Unlock()

	if changed && s.cfg.Owner != nil {
		s.enqueue(s.cfg.Owner(e.key))
	}
	if finished && s.cfg.Finished != nil {
		s.cfg.Finished(ctx, it)
	}
}

// enqueue adds o to its kind's controller queue, or keeps it for when the
// controller starts watching.
func (s *Scheduler[K, Q, A]) enqueue(o Owner) {
	s.mu.Lock()
	out := s.outlets[o.Kind]
	if out == nil {
		s.mu.Unlock()
		return
	}
	q := out.queue
	if q == nil || out.ctx.Err() != nil {
		out.pending[o.NamespacedName] = struct{}{}
		q = nil
	}
	s.mu.Unlock()
	if q != nil {
		q.Add(reconcile.Request{NamespacedName: o.NamespacedName})
	}
}
