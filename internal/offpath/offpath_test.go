package offpath

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// question is what the tests ask of an item: v is the question proper, the
// rest say where its runs count.
type question struct {
	v      string
	group  string
	urgent bool
}

type sched = Scheduler[string, question, string]

// newSched is a Scheduler of test items on a fake clock: a run answers the
// question with "re: " before it, unless cfg says otherwise; every answer
// changes. Items are owned by the ring of their key's name, of kind Ring.
func newSched(cfg Config[string, question, string]) (*sched, *clocktesting.FakeClock) {
	clk := clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	if cfg.Tick == 0 {
		cfg.Tick = time.Second
	}
	if cfg.TTL == 0 {
		cfg.TTL = time.Minute
	}
	if cfg.Limit == 0 {
		cfg.Limit = 10
	}
	if cfg.PerGroup == 0 {
		cfg.PerGroup = 10
	}
	cfg.Group = func(_ string, q question) string { return q.group }
	cfg.Urgent = func(q question) bool { return q.urgent }
	cfg.Same = func(a, b question) bool { return a.v == b.v }
	if cfg.Run == nil {
		cfg.Run = func(_ context.Context, it Item[string, question, string]) Outcome[string] {
			a := "re: " + it.Asked.v
			return Outcome[string]{Answer: &a}
		}
	}
	cfg.Owner = func(k string) Owner {
		return Owner{Kind: "Ring", NamespacedName: types.NamespacedName{Namespace: "ns", Name: k}}
	}
	cfg.Clock = clk
	return New(cfg), clk
}

func keys(runs []started[string, question, string]) []string {
	var out []string
	for _, r := range runs {
		out = append(out, r.it.Key)
	}
	return out
}

// finish ends the runs due() started, in order, as Start's goroutines would.
func finish(s *sched, runs []started[string, question, string]) {
	for _, r := range runs {
		s.run(context.Background(), r)
	}
}

type ask struct {
	key, group string
	urgent     bool
}

// TestDue: which items one look starts, and in what order, from items
// asked one second apart (the earliest waits longest).
func TestDue(t *testing.T) {
	for _, c := range []struct {
		name            string
		limit, perGroup int
		busy            []ask // asked first, and running
		asks            []ask
		want            []string
	}{
		{name: "the longest waiting first, within a group's limit", perGroup: 2,
			asks: []ask{{"a", "ns1", false}, {"b", "ns1", false}, {"c", "ns1", false}, {"d", "ns2", false}},
			want: []string{"a", "b", "d"}},
		{name: "within the overall limit", limit: 2,
			asks: []ask{{"a", "ns1", false}, {"b", "ns2", false}, {"c", "ns3", false}},
			want: []string{"a", "b"}},
		{name: "a group's runs in flight count against its limit", perGroup: 1,
			busy: []ask{{"x", "ns1", false}},
			asks: []ask{{"a", "ns1", false}, {"b", "ns2", false}},
			want: []string{"b"}},
		{name: "runs in flight count against the overall limit", limit: 2,
			busy: []ask{{"x", "ns1", false}},
			asks: []ask{{"a", "ns2", false}, {"b", "ns3", false}},
			want: []string{"a"}},
		{name: "a full group does not hold up the next", limit: 2, perGroup: 1,
			asks: []ask{{"a", "ns1", false}, {"b", "ns1", false}, {"c", "ns1", false}, {"d", "ns2", false}},
			want: []string{"a", "d"}},
		{name: "urgent first, however long the others waited",
			asks: []ask{{"a", "ns1", false}, {"b", "ns2", false}, {"u", "ns2", true}},
			want: []string{"u", "a", "b"}},
		{name: "urgent runs counted apart, within the same limits", limit: 1, perGroup: 1,
			busy: []ask{{"x", "ns1", false}},
			asks: []ask{{"a", "ns1", false}, {"u", "ns1", true}, {"v", "ns1", true}},
			want: []string{"u"}},
		{name: "a group's name may be empty (cluster-scoped owners)", perGroup: 1,
			asks: []ask{{"a", "", false}, {"b", "", false}},
			want: []string{"a"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, clk := newSched(Config[string, question, string]{Limit: c.limit, PerGroup: c.perGroup})
			for _, a := range c.busy {
				s.Want(a.key, question{v: "q", group: a.group, urgent: a.urgent})
			}
			if got := keys(s.due()); len(got) != len(c.busy) {
				t.Fatalf("started %v of the busy items %v", got, c.busy)
			}
			for _, a := range c.asks {
				clk.Step(time.Second)
				s.Want(a.key, question{v: "q", group: a.group, urgent: a.urgent})
			}
			if got := keys(s.due()); !slices.Equal(got, c.want) {
				t.Errorf("started %v, want %v", got, c.want)
			}
		})
	}
}

// An item whose run ended waits behind those that waited longer; one that
// falls due again runs at once only when it waited longest.
func TestDueLongestWaitingAfterARun(t *testing.T) {
	s, clk := newSched(Config[string, question, string]{Limit: 1})
	s.Want("a", question{v: "q"})
	clk.Step(time.Second)
	s.Want("b", question{v: "q"})
	var order []string
	for range 4 {
		clk.Step(time.Second)
		runs := s.due()
		order = append(order, keys(runs)...)
		finish(s, runs)
	}
	if want := []string{"a", "b", "a", "b"}; !slices.Equal(order, want) {
		t.Errorf("ran %v, want %v", order, want)
	}
}

func TestDueAndHold(t *testing.T) {
	due := true
	held := 10 * time.Second
	s, clk := newSched(Config[string, question, string]{
		Due: func(time.Time, Item[string, question, string]) bool { return due },
		Run: func(_ context.Context, it Item[string, question, string]) Outcome[string] {
			a := "re: " + it.Asked.v
			return Outcome[string]{Answer: &a, Hold: held}
		},
	})
	s.Want("a", question{v: "q1"})
	due = false
	if got := keys(s.due()); got != nil {
		t.Fatalf("started %v while the worker says not due", got)
	}
	due = true
	finish(s, s.due())
	clk.Step(held - time.Nanosecond)
	if got := keys(s.due()); got != nil {
		t.Errorf("started %v within its hold", got)
	}
	s.Want("a", question{v: "q2"})
	if got := keys(s.due()); !slices.Equal(got, []string{"a"}) {
		t.Errorf("asked another question within its hold: started %v, want it at once", got)
	}
}

func TestExpiry(t *testing.T) {
	const ttl, giveUp = time.Minute, 5 * time.Minute
	for _, c := range []struct {
		name string
		// then runs after the item was asked q and ran once (when ran is
		// set), on a scheduler with GiveUp when giveUp is set.
		ran, giveUp, due, running bool
		then                      func(s *sched, clk *clocktesting.FakeClock)
		kept                      bool
	}{
		{name: "asked within the TTL: kept", due: true, kept: true,
			then: func(s *sched, clk *clocktesting.FakeClock) {
				clk.Step(ttl)
				s.Want("a", question{v: "q"})
				clk.Step(ttl)
			}},
		{name: "not asked for longer than the TTL: dropped when due", due: true,
			then: func(s *sched, clk *clocktesting.FakeClock) { clk.Step(ttl + time.Second) }},
		{name: "not due (a staged key not yet in its lead): kept", kept: true,
			then: func(s *sched, clk *clocktesting.FakeClock) { clk.Step(time.Hour) }},
		{name: "running: kept", due: true, running: true, kept: true,
			then: func(s *sched, clk *clocktesting.FakeClock) { clk.Step(time.Hour) }},
		{name: "asked again and again, past GiveUp since first asked: dropped", due: true, giveUp: true,
			then: func(s *sched, clk *clocktesting.FakeClock) {
				for range 6 {
					clk.Step(ttl - time.Second)
					s.Want("a", question{v: "q"})
				}
			}},
		{name: "GiveUp counts from another question", due: true, giveUp: true, kept: true,
			then: func(s *sched, clk *clocktesting.FakeClock) {
				clk.Step(giveUp - time.Second)
				s.Want("a", question{v: "q2"})
				clk.Step(ttl - time.Second)
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config[string, question, string]{TTL: ttl,
				Due: func(time.Time, Item[string, question, string]) bool { return c.due }}
			if c.giveUp {
				cfg.GiveUp = giveUp
			}
			s, clk := newSched(cfg)
			s.Want("a", question{v: "q"})
			if c.running {
				s.due()
			}
			c.then(s, clk)
			runs := s.due()
			if got := s.Len(); (got == 1) != c.kept {
				t.Errorf("%d items kept (started %v), want kept %v", got, keys(runs), c.kept)
			}
		})
	}
}

// An answer is returned only for the question it answers, never for
// another asked since, nor kept for when the first is asked again.
func TestStaleAnswerNeverReturned(t *testing.T) {
	s, _ := newSched(Config[string, question, string]{})
	q1, q2 := question{v: "q1"}, question{v: "q2"}
	if _, ok := s.Want("a", q1); ok {
		t.Fatal("an answer before any run")
	}
	finish(s, s.due())
	if got, ok := s.Want("a", q1); !ok || got != "re: q1" {
		t.Fatalf("answer to q1 = %q, %v", got, ok)
	}
	if got, ok := s.Want("a", q2); ok {
		t.Errorf("asked q2: answered %q, the answer to q1", got)
	}
	if got, ok := s.Want("a", q1); ok {
		t.Errorf("asked q1 again after q2: answered %q, kept from before", got)
	}

	// A run of q1 still in flight when q2 is asked: its answer is dropped,
	// and q2 runs at once.
	runs := s.due()
	s.Want("a", q2)
	finish(s, runs)
	if got, ok := s.Want("a", q2); ok {
		t.Errorf("asked q2 while q1 ran: answered %q", got)
	}
	runs = s.due()
	if len(runs) != 1 || runs[0].it.Asked != q2 {
		t.Fatalf("started %+v, want a's run of q2", runs)
	}
	finish(s, runs)
	if got, ok := s.Want("a", q2); !ok || got != "re: q2" {
		t.Errorf("answer to q2 = %q, %v", got, ok)
	}

	// Dropped while running: its run's answer is not kept.
	s.Want("b", q1)
	runs = s.due()
	s.Drop("b")
	finish(s, runs)
	if got, ok := s.Want("b", q1); ok {
		t.Errorf("dropped while running, then asked: answered %q", got)
	}
}

// A run that finds no answer leaves the latest answer standing; one that
// says it is done drops its item, unless another question came meanwhile.
func TestOutcome(t *testing.T) {
	var out Outcome[string]
	var finished []string
	s, _ := newSched(Config[string, question, string]{
		Run: func(context.Context, Item[string, question, string]) Outcome[string] { return out },
		Finished: func(_ context.Context, it Item[string, question, string]) {
			finished = append(finished, it.Key+" "+it.Asked.v+" "+*it.Answer)
		},
	})
	q := question{v: "q"}
	s.Want("a", q)
	first := "first"
	out = Outcome[string]{Answer: &first}
	finish(s, s.due())
	out = Outcome[string]{}
	finish(s, s.due())
	if got, ok := s.Want("a", q); !ok || got != "first" {
		t.Errorf("after a run without an answer: %q, %v; want the one before", got, ok)
	}

	last := "last"
	out = Outcome[string]{Answer: &last, Done: true}
	runs := s.due()
	s.Want("a", question{v: "q2"})
	finish(s, runs)
	if s.Len() != 1 || finished != nil {
		t.Errorf("done with q while asked q2: %d items kept, finished %v; want a kept", s.Len(), finished)
	}
	finish(s, s.due())
	if s.Len() != 0 || !slices.Equal(finished, []string{"a q2 last"}) {
		t.Errorf("done with q2: %d items kept, finished %v", s.Len(), finished)
	}
}

func TestMergeAndForget(t *testing.T) {
	s, _ := newSched(Config[string, question, string]{
		Merge: func(old, q question) question { q.urgent = q.urgent || old.urgent; return q },
	})
	s.Want("a", question{v: "1", urgent: true})
	s.Want("a", question{v: "2"})
	if q, _ := s.Asked("a"); q.v != "2" || !q.urgent {
		t.Errorf("asked %+v, want 2, still urgent", q)
	}
	s.Want("b", question{v: "1"})
	s.Forget(Owner{Kind: "Ring", NamespacedName: types.NamespacedName{Namespace: "ns", Name: "a"}})
	if _, ok := s.Asked("a"); ok || s.Len() != 1 {
		t.Errorf("after forgetting a's owner: a kept %v, %d items", ok, s.Len())
	}
}

// queue stands for a controller's queue: it records what is added.
type queue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	mu    sync.Mutex
	added []string
}

func (q *queue) Add(r reconcile.Request) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.added = append(q.added, r.Name)
}

func (q *queue) seen() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Clone(q.added)
}

// An item's owner is enqueued when its answer changes, not when a run
// answers the same, nor for an answer to a question no longer asked; those
// whose answers changed before the controller watched are enqueued when it
// starts to.
func TestEnqueueOnChange(t *testing.T) {
	answers := map[string]string{}
	s, _ := newSched(Config[string, question, string]{
		Run: func(_ context.Context, it Item[string, question, string]) Outcome[string] {
			a := answers[it.Key]
			return Outcome[string]{Answer: &a}
		},
		Changed: func(was, next string) bool { return was != next },
	})
	src := s.Source("Ring")
	answers["early"] = "x"
	s.Want("early", question{v: "q"})
	finish(s, s.due())
	q := &queue{}
	if err := src.Start(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	if got := q.seen(); !slices.Equal(got, []string{"early"}) {
		t.Fatalf("enqueued %v when the source started, want the answer that came before", got)
	}

	step := func(key, answer string) {
		answers[key] = answer
		s.Want(key, question{v: "q"})
		finish(s, s.due())
	}
	step("a", "x") // first answer
	step("a", "x") // the same
	step("a", "y") // another
	answers["a"] = "z"
	s.Want("a", question{v: "q"})
	runs := s.due()
	s.Want("a", question{v: "q2"}) // the run answers a question no longer asked
	finish(s, runs)
	if got, want := q.seen(), []string{"early", "a", "a"}; !slices.Equal(got, want) {
		t.Errorf("enqueued %v, want %v", got, want)
	}

	// An owner is enqueued only in its kind's controller's queue.
	other, _ := newSched(Config[string, question, string]{})
	oq := &queue{}
	if err := other.Source("Other").Start(context.Background(), oq); err != nil {
		t.Fatal(err)
	}
	other.Want("a", question{v: "q"})
	finish(other, other.due())
	if got := oq.seen(); got != nil {
		t.Errorf("a Ring's answer enqueued %v in another kind's queue", got)
	}
}

// Start runs what falls due (at once when asked, after its hold on a
// tick), and returns only once every run it started has ended.
func TestStart(t *testing.T) {
	running := make(chan string, 4)
	release := make(chan struct{})
	var mu sync.Mutex
	var started, ended int
	s, clk := newSched(Config[string, question, string]{TTL: time.Hour,
		Run: func(ctx context.Context, it Item[string, question, string]) Outcome[string] {
			mu.Lock()
			started++
			mu.Unlock()
			running <- it.Key
			if it.Key == "slow" {
				<-ctx.Done()
				<-release
			}
			mu.Lock()
			ended++
			mu.Unlock()
			return Outcome[string]{Hold: time.Minute}
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()

	s.Want("a", question{v: "q"})
	if got := <-running; got != "a" {
		t.Fatalf("ran %s, want a", got)
	}
	// Held a minute: it runs again on the first tick past that.
	for len(running) == 0 {
		clk.Step(time.Minute)
		time.Sleep(time.Millisecond)
	}
	if got := <-running; got != "a" {
		t.Fatalf("ran %s, want a again", got)
	}

	s.Want("slow", question{v: "q"})
	for got := <-running; got != "slow"; got = <-running {
	}
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Start returned (%v) while a run it started was in flight", err)
	default:
	}
	close(release)
	if err := <-done; err != nil {
		t.Errorf("Start: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if ended != started {
		t.Errorf("Start returned with %d of the %d runs it started ended", ended, started)
	}
}
