package confirm

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/agentstatus"
	"github.com/ringmaster-io/ringmaster/internal/shape"
	"github.com/ringmaster-io/ringmaster/internal/testing/blackhole"
)

// pods stands for the pod cache: it finds the pods a test placed, by
// namespace, as shape.Pod keeps them.
type pods struct {
	mu  sync.Mutex
	all map[string][]corev1.Pod
}

func (p *pods) Mounting(_ context.Context, namespace, secret string) ([]corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []corev1.Pod
	for _, pod := range p.all[namespace] {
		kept, err := shape.Pod(pod.DeepCopy())
		if err != nil {
			return nil, err
		}
		if slices.Contains(secretsOf(kept.(*corev1.Pod)), secret) {
			out = append(out, *kept.(*corev1.Pod))
		}
	}
	return out, nil
}

// place adds n ready pods to ns, named prefix-i, whose status port is addr's.
func (p *pods) place(t *testing.T, ns, prefix string, n int, addr string) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	num, _ := strconv.Atoi(port)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.all == nil {
		p.all = map[string][]corev1.Pod{}
	}
	for i := range n {
		p.all[ns] = append(p.all[ns], corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: prefix + "-" + strconv.Itoa(i), Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "server",
				Ports:        []corev1.ContainerPort{{Name: "status", ContainerPort: int32(num)}},
				VolumeMounts: []corev1.VolumeMount{{Name: "ticket-keys", MountPath: "/var/run/ringmaster"}}}},
				Volumes: []corev1.Volume{{Name: "ticket-keys", VolumeSource: corev1.VolumeSource{
					Secret: &corev1.SecretVolumeSource{SecretName: "web-ticket-keys"}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: host,
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		})
	}
}

// holding answers as an agent holding the given keys of ring shop/web, and
// counts the requests it served.
func holding(t *testing.T, ids ...string) (addr string, served *atomic.Int64) {
	t.Helper()
	served = &atomic.Int64{}
	st := agentstatus.Status{Ring: "shop/web", Epoch: 2}
	for _, id := range ids {
		st.Keys = append(st.Keys, agentstatus.KeyStatus{ID: id})
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		served.Add(1)
		_ = json.NewEncoder(w).Encode(st)
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), served
}

// queue stands for a ring controller's queue: it passes on what the
// Prober adds.
type queue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	added chan<- reconcile.Request
}

func (q queue) Add(r reconcile.Request) { q.added <- r }

func want(ns, name string, due time.Time) Want {
	return Want{
		Key:  Key{Kind: v1alpha1.KindTicketKeyRing, NamespacedName: types.NamespacedName{Namespace: ns, Name: name}},
		Ring: "shop/web", StagedKey: "k2", Due: due, Namespaces: []string{ns}, SecretName: "web-ticket-keys",
		Confirmation: v1alpha1.Confirmation{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Port: intstr.FromString("status")},
	}
}

// run starts p and stops it at the end of the test, checking that Start
// returns (no round outlives it) within the budget of one fetch.
func run(t *testing.T, p *Prober) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Start: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Start did not return once its context was done")
		}
	})
}

// seen polls p.Want until cond holds of the answers, or fails after 10s.
func seen(t *testing.T, p *Prober, w Want, what string, cond func(Seen) bool) Seen {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, ok := p.Want(w)
		if ok && cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: last answers %+v (any: %v)", what, s, ok)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func reasons(s Seen) (out []string) {
	for _, m := range s.Missing {
		out = append(out, m.Reason)
	}
	return out
}

func count(all []string, sub string) (n int) {
	for _, s := range all {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

func TestProberAsksOnlyWhileDue(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	addr, served := holding(t, "k1", "k2")
	lister := &pods{}
	lister.place(t, "shop", "web", 2, addr)
	p := &Prober{Pods: lister, Clock: clk, Budget: Budget{Interval: 10 * time.Millisecond, Lead: time.Minute}}
	run(t, p)

	w := want("shop", "web", clk.Now().Add(time.Hour))
	if _, ok := p.Want(w); ok {
		t.Fatal("answers before any round")
	}
	time.Sleep(3 * tick)
	if n := served.Load(); n != 0 {
		t.Fatalf("a staged key due in an hour: its pods were asked %d times", n)
	}

	clk.Step(time.Hour - 30*time.Second) // within the lead: asked
	s := seen(t, p, w, "about to be due", func(s Seen) bool { return s.Confirmed() })
	if s.Pods != 2 || s.Holding != 2 || !s.Confirms(clk.Now()) {
		t.Errorf("answers %+v", s)
	}

	before := served.Load()
	time.Sleep(3 * tick)
	if n := served.Load(); n != before {
		t.Errorf("pods holding the key were asked again: %d requests, then %d", before, n)
	}

	w.StagedKey = "k3" // a new staged key: a new question
	if _, ok := p.Want(w); ok {
		t.Error("answers about k2 were returned for k3")
	}
	s = seen(t, p, w, "the next key", func(Seen) bool { return true })
	if s.Confirmed() || count(reasons(s), "without key k3") != 2 {
		t.Errorf("answers about k3: %+v", s)
	}
}

func TestProberBudget(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	addr := blackhole.Listen(t).Addr

	t.Run("pods per ring", func(t *testing.T) {
		lister := &pods{}
		lister.place(t, "attack", "silent", 6, addr)
		p := &Prober{Pods: lister, Clock: clk, Budget: Budget{PodsPerRing: 3, FetchesPerNamespace: 3,
			FetchTimeout: 200 * time.Millisecond, RoundDeadline: 5 * time.Second, Interval: 10 * time.Millisecond}}
		run(t, p)
		w := want("attack", "web", clk.Now())
		s := seen(t, p, w, "first round", func(Seen) bool { return true })
		if got := reasons(s); s.Pods != 6 || s.MissingCount != 6 || count(got, "Client.Timeout") != 3 || count(got, "not asked yet") != 3 {
			t.Errorf("first round: %d pods, %q", s.Pods, got)
		}
		// The next round asks the pods the first one left out.
		seen(t, p, w, "second round", func(s Seen) bool { return count(reasons(s), "Client.Timeout") == 6 })
	})

	t.Run("round deadline", func(t *testing.T) {
		lister := &pods{}
		lister.place(t, "attack", "silent", 4, addr)
		p := &Prober{Pods: lister, Clock: clk, Budget: Budget{FetchesPerNamespace: 1,
			FetchTimeout: time.Second, RoundDeadline: 1500 * time.Millisecond, Interval: time.Hour}}
		run(t, p)
		start := time.Now()
		s := seen(t, p, want("attack", "web", clk.Now()), "one round", func(Seen) bool { return true })
		if got := reasons(s); count(got, "not asked within the round's deadline of 1.5s") < 2 || s.Confirmed() {
			t.Errorf("answers %q", got)
		}
		t.Logf("a round of 4 silent pods, one at a time, took %s", time.Since(start))
	})

	t.Run("another namespace is not held up", func(t *testing.T) {
		lister := &pods{}
		good, _ := holding(t, "k1", "k2")
		lister.place(t, "shop", "web", 2, good)
		p := &Prober{Pods: lister, Clock: clk, Budget: Budget{RingsPerNamespace: 2, FetchesPerNamespace: 4, Fetches: 8,
			FetchTimeout: 3 * time.Second, RoundDeadline: 20 * time.Second}}
		// 10 rings over 40 silent pods: each round of one takes at least
		// 40 / 4 x 3s, were it alone.
		var attack []Want
		for i := range 10 {
			lister.place(t, "attack", "silent"+strconv.Itoa(i), 4, addr)
			attack = append(attack, want("attack", "ring-"+strconv.Itoa(i), clk.Now()))
		}
		ch := make(chan reconcile.Request, 64)
		if err := p.Source(v1alpha1.KindTicketKeyRing).Start(context.Background(), queue{added: ch}); err != nil {
			t.Fatal(err)
		}
		run(t, p)
		for _, w := range attack {
			p.Want(w)
		}
		time.Sleep(2 * tick) // the attack's rounds are in flight
		victim := want("shop", "web", clk.Now())
		p.Want(victim)
		select {
		case e := <-ch:
			if e.NamespacedName != victim.NamespacedName {
				t.Errorf("enqueued %v, not the victim", e.NamespacedName)
			}
		case <-time.After(3 * time.Second):
			t.Fatal("the victim's answers did not arrive within one silent fetch")
		}
		if s, _ := p.Want(victim); !s.Confirms(clk.Now()) {
			t.Errorf("victim: %+v", s)
		}
		for _, w := range attack {
			if _, ok := p.Want(w); ok {
				t.Errorf("ring %s: a round over 40 silent pods ended before the victim's", w.Name)
			}
		}
	})
}

// A ring selecting more pods than MaxPods is not probed, and says so.
func TestProberMaxPods(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	addr, served := holding(t, "k1", "k2")
	lister := &pods{}
	lister.place(t, "shop", "web", 3, addr)
	lister.place(t, "shop-2", "web", 2, addr)
	p := &Prober{Pods: lister, Clock: clk, Budget: Budget{MaxPods: 4, Interval: 10 * time.Millisecond}}
	run(t, p)

	w := want("shop", "web", clk.Now())
	s := seen(t, p, w, "one namespace, under the cap", func(s Seen) bool { return s.Confirmed() })
	if s.Pods != 3 || s.OverCap != 0 || s.Note() != "" {
		t.Errorf("under the cap: %+v, note %q", s, s.Note())
	}

	w.Namespaces = []string{"shop", "shop-2"}
	before := served.Load()
	s = seen(t, p, w, "two namespaces, over the cap", func(s Seen) bool { return s.OverCap != 0 })
	if s.OverCap != 4 || s.Pods != 5 || s.Holding != 0 || s.Confirms(clk.Now()) || len(s.Missing) != 0 ||
		!strings.Contains(s.Note(), "more than 4 pods") {
		t.Errorf("over the cap: %+v, note %q", s, s.Note())
	}
	if n := served.Load(); n != before {
		t.Errorf("%d pods of a ring over the cap were asked", n-before)
	}
}

func TestSeenConfirms(t *testing.T) {
	t0 := time.Now()
	all, some := Result{Pods: 2, Holding: 2}, Result{Pods: 2, Holding: 1}
	for _, c := range []struct {
		name string
		seen Seen
		now  time.Time
		want bool
	}{
		{"every pod, just now", Seen{Result: all, At: t0}, t0, true},
		{"every pod, MaxAge ago", Seen{Result: all, At: t0}, t0.Add(MaxAge), true},
		{"every pod, longer ago", Seen{Result: all, At: t0}, t0.Add(MaxAge + time.Second), false},
		{"one pod lacks it", Seen{Result: some, At: t0}, t0, false},
		{"no ready pod", Seen{At: t0}, t0, true},
	} {
		if got := c.seen.Confirms(c.now); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestWantSame(t *testing.T) {
	w := want("shop", "web", time.Now())
	for _, c := range []struct {
		name   string
		mutate func(*Want)
		same   bool
	}{
		{"due moved (rotate-now)", func(w *Want) { w.Due = w.Due.Add(-time.Hour) }, true},
		{"another staged key", func(w *Want) { w.StagedKey = "k3" }, false},
		{"another port", func(w *Want) { w.Confirmation.Port = intstr.FromInt32(9090) }, false},
		{"another selector", func(w *Want) { w.Confirmation.PodSelector.MatchLabels = map[string]string{"app": "api"} }, false},
		{"another target", func(w *Want) { w.Namespaces = []string{"shop", "shop-2"} }, false},
		{"another projection", func(w *Want) { w.SecretName = "other" }, false},
	} {
		o := w
		o.Namespaces = append([]string(nil), w.Namespaces...)
		c.mutate(&o)
		if got := w.same(o); got != c.same {
			t.Errorf("%s: same %v, want %v", c.name, got, c.same)
		}
	}
}
