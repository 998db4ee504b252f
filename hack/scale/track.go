package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
)

// tracker watches every TicketKeyRing and records when each one the bench
// created first became Ready, and when its status first echoed the rotate
// and revoke requests of the current phase. A watch, not polling: listing
// 10,000 rings every second would load the API server the bench measures.
type tracker struct {
	mu    sync.Mutex
	rings map[types.NamespacedName]*ringTimes
	// rotate and revoke are the annotation values the current phase asked
	// for; each ring's time is taken when its status first echoes them.
	rotate, revoke string
	// fleet names the FleetRequest the current phase created: a ring's
	// time is taken when its status first records it.
	fleet string
	// changed is closed, and replaced, whenever a ring reaches a state.
	changed chan struct{}
	// ready counts the rings Ready by the phase that created them, the
	// bulk's and the probes' apart; done counts those asked that echoed
	// the current request.
	ready map[origin]*tally
	done  tally
}

// origin is a phase and whether its rings are probes.
type origin struct {
	phase *phase
	probe bool
}

// tally is how many rings reached a state, and when the last did.
type tally struct {
	n    int
	last time.Time
}

func (t *tally) add(at time.Time) {
	t.n++
	t.last = later(t.last, at)
}

// ringTimes are one ring's times, by the bench's clock.
type ringTimes struct {
	// phase created the ring; probe says it was one of the phase's probe
	// rings, created one at a time while the bulk was handled.
	phase   *phase
	probe   bool
	created time.Time
	ready   time.Time
	// asked says the current phase annotated the ring; done is when its
	// status echoed the request.
	asked bool
	done  time.Time
}

func newTracker() *tracker {
	return &tracker{rings: map[types.NamespacedName]*ringTimes{}, changed: make(chan struct{}), ready: map[origin]*tally{}}
}

// start runs an informer of TicketKeyRings as admin until ctx ends, and
// waits for its first list.
func (t *tracker) start(ctx context.Context, cfg *rest.Config, c client.Client) error {
	cache, err := crcache.New(cfg, crcache.Options{Scheme: c.Scheme(), DefaultTransform: crcache.TransformStripManagedFields()})
	if err != nil {
		return err
	}
	inf, err := cache.GetInformer(ctx, &v1alpha1.TicketKeyRing{})
	if err != nil {
		return err
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    t.seen,
		UpdateFunc: func(_, obj any) { t.seen(obj) },
	}); err != nil {
		return err
	}
	go func() { _ = cache.Start(ctx) }()
	if !cache.WaitForCacheSync(ctx) {
		return fmt.Errorf("the bench's watch of TicketKeyRings did not sync: %w", ctx.Err())
	}
	return nil
}

// add records a ring about to be created. Call it before the create, so
// that the watch never sees a ring it does not know.
func (t *tracker) add(key types.NamespacedName, p *phase, probe bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rings[key] = &ringTimes{phase: p, probe: probe, created: time.Now()}
}

// forget drops a ring whose create failed.
func (t *tracker) forget(key types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.rings, key)
}

// size is the number of rings created.
func (t *tracker) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.rings)
}

// seen is the watch's handler.
func (t *tracker) seen(obj any) {
	r, ok := obj.(*v1alpha1.TicketKeyRing)
	if !ok {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	rt := t.rings[types.NamespacedName{Namespace: r.Namespace, Name: r.Name}]
	if rt == nil {
		return
	}
	progress := false
	if rt.ready.IsZero() && fleet.Ready(r) {
		rt.ready, progress = now, true
		o := origin{rt.phase, rt.probe}
		if t.ready[o] == nil {
			t.ready[o] = &tally{}
		}
		t.ready[o].add(now)
		if rt.probe {
			var stamped time.Duration
			if c := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ConditionReady); c != nil {
				stamped = c.LastTransitionTime.Sub(r.CreationTimestamp.Time)
			}
			rt.phase.probeDone(now.Sub(rt.created), stamped)
		}
	}
	if rt.asked && rt.done.IsZero() &&
		((t.rotate != "" && r.Status.LastRotateRequestedAt == t.rotate) || (t.revoke != "" && r.Status.LastRevokeRequestedAt == t.revoke) ||
			(t.fleet != "" && r.Status.FleetRequest != nil && r.Status.FleetRequest.Name == t.fleet)) {
		rt.done, progress = now, true
		t.done.add(now)
	}
	if progress {
		close(t.changed)
		t.changed = make(chan struct{})
	}
}

// ask starts a phase of requests: rotate or revoke set to the value the
// phase annotates every ring with; every ring known is asked.
func (t *tracker) ask(rotate, revoke, fleet string) []types.NamespacedName {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rotate, t.revoke, t.fleet, t.done = rotate, revoke, fleet, tally{}
	keys := make([]types.NamespacedName, 0, len(t.rings))
	for k, rt := range t.rings {
		rt.asked, rt.done = true, time.Time{}
		keys = append(keys, k)
	}
	return keys
}

// readyOf is how many of the rings p created, its probes or its bulk, are
// Ready, and when the last became so.
func (t *tracker) readyOf(p *phase, probe bool) tally {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := t.ready[origin{p, probe}]; n != nil {
		return *n
	}
	return tally{}
}

// echoed is how many of the rings asked have echoed the request, and when
// the last did.
func (t *tracker) echoed() tally {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.done
}

// wait waits until cond holds, checking it whenever a ring reaches a state,
// and at least every second.
func (t *tracker) wait(ctx context.Context, what string, cond func() (bool, string)) error {
	for {
		t.mu.Lock()
		ch := t.changed
		t.mu.Unlock()
		ok, state := cond()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (%s)", what, ctx.Err(), state)
		case <-ch:
		case <-time.After(time.Second):
		}
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
