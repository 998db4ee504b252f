package nudge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// pods stands for the pod cache: the pods placed, by namespace and the
// Secret they mount, in name order.
type pods struct {
	mu  sync.Mutex
	all map[string][]corev1.Pod // by namespace/secret
}

func (p *pods) Mounting(_ context.Context, namespace, secret string) ([]corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.all[namespace+"/"+secret]), nil
}

// place adds n running pods named prefix-NN to namespace, mounting secret.
func (p *pods) place(namespace, secret, prefix string, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.all == nil {
		p.all = map[string][]corev1.Pod{}
	}
	for i := range n {
		name := fmt.Sprintf("%s-%02d", prefix, i)
		p.all[namespace+"/"+secret] = append(p.all[namespace+"/"+secret], corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-" + namespace + "-" + name)},
			Spec:       corev1.PodSpec{NodeName: "node-1"},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning},
		})
	}
}

// call is one patch the stand-in saw.
type call struct {
	pod   string // namespace/name
	value string
}

// patcher records the patches and answers them: by default at once and
// without error; hold makes every patch wait for a release, one at a time.
type patcher struct {
	mu       sync.Mutex
	calls    []call
	answer   func(call) error
	hold     chan struct{} // when set, each patch waits for a token
	started  chan call     // when set, each patch reports its start
	inflight map[string]int
	peak     map[string]int // most patches in flight, by namespace and "" overall
}

func (p *patcher) patch(ctx context.Context, pod *corev1.Pod, value string) error {
	c := call{pod: pod.Namespace + "/" + pod.Name, value: value}
	p.mu.Lock()
	if p.inflight == nil {
		p.inflight, p.peak = map[string]int{}, map[string]int{}
	}
	for _, k := range []string{pod.Namespace, ""} {
		p.inflight[k]++
		p.peak[k] = max(p.peak[k], p.inflight[k])
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.inflight[pod.Namespace]--
		p.inflight[""]--
		p.mu.Unlock()
	}()
	if p.started != nil {
		p.started <- c
	}
	if p.hold != nil {
		select {
		case <-p.hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, c)
	if p.answer != nil {
		return p.answer(c)
	}
	return nil
}

func (p *patcher) seen() []call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// sorted is calls in pod order: the patches of one round run at once.
func sorted(calls []call) []call {
	out := slices.Clone(calls)
	slices.SortFunc(out, func(a, b call) int { return strings.Compare(a.pod+a.value, b.pod+b.value) })
	return out
}

// run starts n until the test ends, and waits for Start to return.
func run(t *testing.T, n *Nudger) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- n.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
}

// settled waits until no projection is pending.
func settled(t *testing.T, n *Nudger) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if n.projections.Len() == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("projections still pending after 10s")
}

func count(t *testing.T, n *Nudger, result string) float64 {
	t.Helper()
	m := &dto.Metric{}
	if err := n.results.WithLabelValues(result).Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func TestValueAndBody(t *testing.T) {
	if got := Value("web-ticket-keys", "42"); got != "web-ticket-keys=42" {
		t.Errorf("Value = %q", got)
	}
	body, err := Body("0f1e", Value("web-ticket-keys", "42"))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"metadata": map[string]any{"uid": "0f1e", "annotations": map[string]any{"ringmaster.io/delivered": "web-ticket-keys=42"}}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Body = %s, want the UID and the one annotation, nothing else", body)
	}
}

func TestClassify(t *testing.T) {
	pod := schema.GroupResource{Resource: "pods"}
	tests := []struct {
		err  error
		want string
	}{
		{nil, Nudged},
		{apierrors.NewNotFound(pod, "web-0"), Gone},
		{apierrors.NewConflict(pod, "web-0", errors.New("changed")), Conflict},
		{fmt.Errorf("wrapped: %w", errReplaced), Conflict},
		{apierrors.NewForbidden(pod, "web-0", errors.New("ringmaster-pods: refused")), Forbidden},
		{apierrors.NewUnauthorized("who"), Forbidden},
		{apierrors.NewTimeoutError("slow", 1), Failed},
		{apierrors.NewInternalError(errors.New("etcd")), Failed},
		{context.DeadlineExceeded, Failed},
	}
	for _, tt := range tests {
		if got := Classify(tt.err); got != tt.want {
			t.Errorf("Classify(%v) = %s, want %s", tt.err, got, tt.want)
		}
	}
}

func TestSlotsServeUrgentFirst(t *testing.T) {
	s := newSlots(1)
	ctx := context.Background()
	if err := s.acquire(ctx, false); err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 3)
	var wg sync.WaitGroup
	wait := func(name string, urgent bool) {
		queued := waiters(s)
		wg.Go(func() {
			if err := s.acquire(ctx, urgent); err != nil {
				t.Error(err)
				return
			}
			order <- name
			s.release()
		})
		// Each waiter queues before the next comes.
		for waiters(s) == queued {
			time.Sleep(time.Millisecond)
		}
	}
	wait("normal-1", false)
	wait("normal-2", false)
	wait("urgent", true)
	s.release()
	wg.Wait()
	close(order)
	var got []string
	for n := range order {
		got = append(got, n)
	}
	if want := []string{"urgent", "normal-1", "normal-2"}; !slices.Equal(got, want) {
		t.Errorf("slots served %v, want %v", got, want)
	}

	// A waiter whose context ends leaves the queue, and the slot is not
	// lost.
	if err := s.acquire(ctx, false); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.acquire(cctx, true); err == nil {
		t.Error("a cancelled waiter got a slot that was taken")
	}
	s.release()
	if err := s.acquire(ctx, false); err != nil || s.free != 0 {
		t.Errorf("after a cancelled waiter: %v, %d free", err, s.free)
	}
}

func waiters(s *slots) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiting[0]) + len(s.waiting[1])
}

func TestNudgesEveryRunningPodOnce(t *testing.T) {
	p := &pods{}
	p.place("shop", "web-ticket-keys", "web", 5)
	// Pods whose kubelet mounts nothing now: not yet bound, finished,
	// being deleted.
	p.all["shop/web-ticket-keys"][1].Spec.NodeName = ""
	p.all["shop/web-ticket-keys"][2].Status.Phase = corev1.PodSucceeded
	p.all["shop/web-ticket-keys"][3].DeletionTimestamp = &metav1.Time{Time: time.Now()}
	p.place("shop", "other-ticket-keys", "other", 2)
	pt := &patcher{}
	n := &Nudger{Pods: p, Patch: pt.patch}
	run(t, n)

	n.Nudge(Delivery{Namespace: "shop", Secret: "web-ticket-keys", Epoch: "7"})
	settled(t, n)
	want := []call{{"shop/web-00", "web-ticket-keys=7"}, {"shop/web-04", "web-ticket-keys=7"}}
	if got := sorted(pt.seen()); !slices.Equal(got, want) {
		t.Errorf("patched %v, want %v: the running pods mounting the projection, once each", got, want)
	}
	if c := count(t, n, Nudged); c != 2 {
		t.Errorf("ringmaster_nudges_total{result=nudged} = %v, want 2", c)
	}
	m := &dto.Metric{}
	if err := n.duration.WithLabelValues("rotation").(prometheus.Histogram).Write(m); err != nil || m.GetHistogram().GetSampleCount() != 1 {
		t.Errorf("ringmaster_nudge_seconds{priority=rotation}: %v samples (%v), want 1", m.GetHistogram().GetSampleCount(), err)
	}

	// The next epoch nudges them again, with its own value.
	n.Nudge(Delivery{Namespace: "shop", Secret: "web-ticket-keys", Epoch: "8"})
	settled(t, n)
	if got := sorted(pt.seen()[2:]); !slices.Equal(got, []call{{"shop/web-00", "web-ticket-keys=8"}, {"shop/web-04", "web-ticket-keys=8"}}) {
		t.Errorf("after epoch 8: %v", got)
	}
}

func TestRevokeGoesFirst(t *testing.T) {
	p := &pods{}
	p.place("shop", "web-ticket-keys", "web", 6)
	p.place("bank", "vault-ticket-keys", "vault", 3)
	pt := &patcher{hold: make(chan struct{}), started: make(chan call, 16)}
	// One patch at a time overall, so that the order is the budget's
	// alone.
	n := &Nudger{Pods: p, Patch: pt.patch, Budget: Budget{Patches: 1}}
	run(t, n)

	n.Nudge(Delivery{Namespace: "shop", Secret: "web-ticket-keys", Epoch: "3"})
	<-pt.started // the first of the rotation's pods holds the only slot
	for waiters(n.global) < 5 {
		time.Sleep(time.Millisecond)
	}
	n.Nudge(Delivery{Namespace: "bank", Secret: "vault-ticket-keys", Epoch: "9", Urgent: true})
	// Wait until the revoke's pods wait for the slot too, behind the
	// rotation's other 5.
	for waiters(n.global) < 8 {
		time.Sleep(time.Millisecond)
	}
	go func() {
		for range pt.started {
		}
	}()
	for range 9 {
		pt.hold <- struct{}{}
	}
	settled(t, n)
	close(pt.started)

	got := pt.seen()
	var order []string
	for _, c := range got {
		order = append(order, strings.SplitN(c.pod, "/", 2)[0])
	}
	want := []string{"shop", "bank", "bank", "bank", "shop", "shop", "shop", "shop", "shop"}
	if !slices.Equal(order, want) {
		t.Errorf("patched in the order %v, want %v: the revoke's pods next after the patch in flight", order, want)
	}
	m := &dto.Metric{}
	if err := n.duration.WithLabelValues("revoke").(prometheus.Histogram).Write(m); err != nil || m.GetHistogram().GetSampleCount() != 1 {
		t.Errorf("ringmaster_nudge_seconds{priority=revoke}: %v samples (%v), want 1", m.GetHistogram().GetSampleCount(), err)
	}
}

func TestBudgetKeepsNamespacesApart(t *testing.T) {
	p := &pods{}
	p.place("big", "web-ticket-keys", "web", 40)
	p.place("small", "api-ticket-keys", "api", 2)
	// The big namespace's patches never return until released; the small
	// one's answer at once.
	pt := &patcher{}
	release := make(chan struct{})
	var bigStarted sync.WaitGroup
	bigStarted.Add(3)
	n := &Nudger{Pods: p, Budget: Budget{PatchesPerNamespace: 3, Patches: 5}, Patch: func(ctx context.Context, pod *corev1.Pod, value string) error {
		if pod.Namespace == "big" {
			bigStarted.Done()
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return pt.patch(ctx, pod, value)
	}}
	run(t, n)

	n.Nudge(Delivery{Namespace: "big", Secret: "web-ticket-keys", Epoch: "1"})
	bigStarted.Wait() // the big namespace holds its 3 slots
	bigStarted.Add(37)
	n.Nudge(Delivery{Namespace: "small", Secret: "api-ticket-keys", Epoch: "1"})
	deadline := time.Now().Add(10 * time.Second)
	for len(pt.seen()) < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := pt.seen(); len(got) != 2 || !strings.HasPrefix(got[0].pod, "small/") || !strings.HasPrefix(got[1].pod, "small/") {
		t.Fatalf("while another namespace's patches hang, patched %v; want the small namespace's 2 pods", got)
	}
	close(release)
	settled(t, n)
	if got := len(pt.seen()); got != 42 {
		t.Errorf("patched %d pods, want 42", got)
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if pt.peak["big"] > 3 {
		t.Errorf("%d patches in flight in one namespace, budget 3", pt.peak["big"])
	}
}

func TestRoundsInterleaveProjections(t *testing.T) {
	p := &pods{}
	p.place("shop", "web-ticket-keys", "web", 10)
	p.place("shop", "api-ticket-keys", "api", 1)
	pt := &patcher{}
	// One round at a time, of 3 pods.
	n := &Nudger{Pods: p, Patch: pt.patch, Budget: Budget{PodsPerRound: 3, Rounds: 1, RoundsPerNamespace: 1}}
	n.Nudge(Delivery{Namespace: "shop", Secret: "web-ticket-keys", Epoch: "1"})
	n.Nudge(Delivery{Namespace: "shop", Secret: "api-ticket-keys", Epoch: "1"})
	run(t, n)
	settled(t, n)
	got := pt.seen()
	i := slices.IndexFunc(got, func(c call) bool { return c.pod == "shop/api-00" })
	if len(got) != 11 || i < 0 || i > 3 {
		t.Errorf("patched %v; want the other projection's pod after the first round of 3, not after all 10", got)
	}
}

func TestPodsThatCannotBePatchedAreLeft(t *testing.T) {
	p := &pods{}
	p.place("shop", "web-ticket-keys", "web", 4)
	pod := schema.GroupResource{Resource: "pods"}
	tries := map[string]int{}
	pt := &patcher{answer: func(c call) error {
		tries[c.pod]++
		switch c.pod {
		case "shop/web-00":
			return apierrors.NewNotFound(pod, "web-00")
		case "shop/web-01":
			return apierrors.NewForbidden(pod, "web-01", errors.New("refused"))
		case "shop/web-02":
			return apierrors.NewInternalError(errors.New("etcd"))
		}
		return nil
	}}
	n := &Nudger{Pods: p, Patch: pt.patch, Budget: Budget{Attempts: 2}}
	run(t, n)
	n.Nudge(Delivery{Namespace: "shop", Secret: "web-ticket-keys", Epoch: "1"})
	settled(t, n)
	pt.mu.Lock()
	defer pt.mu.Unlock()
	want := map[string]int{"shop/web-00": 1, "shop/web-01": 1, "shop/web-02": 2, "shop/web-03": 1}
	if fmt.Sprint(tries) != fmt.Sprint(want) {
		t.Errorf("tries %v, want %v: gone and refused pods once, a server error up to Attempts", tries, want)
	}
	for res, want := range map[string]float64{Gone: 1, Forbidden: 1, Failed: 2, Nudged: 1} {
		if got := count(t, n, res); got != want {
			t.Errorf("ringmaster_nudges_total{result=%s} = %v, want %v", res, got, want)
		}
	}
}

func TestNewerEpochReplacesPending(t *testing.T) {
	p := &pods{}
	p.place("shop", "web-ticket-keys", "web", 2)
	pt := &patcher{}
	n := &Nudger{Pods: p, Patch: pt.patch}
	// Handed over before the Nudger starts: only the newest is patched,
	// and it stays urgent.
	n.Nudge(Delivery{Namespace: "shop", Secret: "web-ticket-keys", Epoch: "4", Urgent: true})
	n.Nudge(Delivery{Namespace: "shop", Secret: "web-ticket-keys", Epoch: "5"})
	pending, _ := n.projections.Asked(target{"shop", "web-ticket-keys"})
	if !pending.Urgent {
		t.Error("a revoke's epoch superseded before its pods were nudged lost its priority")
	}
	run(t, n)
	settled(t, n)
	want := []call{{"shop/web-00", "web-ticket-keys=5"}, {"shop/web-01", "web-ticket-keys=5"}}
	if got := sorted(pt.seen()); !slices.Equal(got, want) {
		t.Errorf("patched %v, want %v", got, want)
	}
}
