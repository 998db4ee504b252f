package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/testing/apiaudit"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
)

// monitor watches the operator while the bench runs: its resident set and
// its metrics (Go heap, work queues), and the API server's audit log of
// its requests, each counted into the phase that is running.
type monitor struct {
	pid      int
	metrics  string // the operator's metrics URL, plain HTTP on loopback
	pprof    string // its pprof base URL
	http     *http.Client
	audit    *apiaudit.Reader
	quiet    time.Duration
	scrapeEv time.Duration

	// scraping is held by a metrics scrape and by a heap profile, so that
	// the profile's garbage collection never finds a scrape's transient
	// objects alive (40,000 series at 10,000 rings).
	scraping sync.Mutex

	mu      sync.Mutex
	current *phase
	// lastRequest is when the API server received the operator's latest
	// request that counts toward rings (apiaudit.PerRing).
	lastRequest time.Time
	auditErr    error
}

// reading is the operator's state at one moment.
type reading struct {
	rss, anon, heap, goroutines float64 // anon: RSS's anonymous part (fleet.Mem)
	depth, active               float64 // its work queues' depth and busy workers, all controllers
	leader                      float64
	requests                    map[string]float64 // its rest_client_requests_total by method, Lease included
}

// run samples the operator's RSS every 250 ms, scrapes its metrics every
// scrapeEv and reads the audit log every 200 ms, until ctx ends.
func (m *monitor) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() {
		every(ctx, 250*time.Millisecond, func() {
			if mem, err := fleet.ProcMem(m.pid); err == nil {
				m.withPhase(func(p *phase) {
					p.mem.rss, p.mem.anon = max(p.mem.rss, float64(mem.RSS)), max(p.mem.anon, float64(mem.Anon))
				})
			}
		})
	})
	wg.Go(func() {
		every(ctx, m.scrapeEv, func() {
			if r, err := m.read(ctx); err == nil {
				m.withPhase(func(p *phase) {
					p.mem.heap, p.mem.goroutines = max(p.mem.heap, r.heap), max(p.mem.goroutines, r.goroutines)
				})
			}
		})
	})
	wg.Go(func() { every(ctx, 200*time.Millisecond, m.tail) })
	wg.Wait()
}

func every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		f()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (m *monitor) withPhase(f func(*phase)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.current != nil {
		f(m.current)
	}
}

// begin makes p the phase that readings and requests count into.
func (m *monitor) begin(p *phase) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.current = p
}

// tail reads what the audit log gained and counts it into the current
// phase: the Lease's requests apart, watches left out, requests on the
// probe rings' namespace apart from the bulk's.
func (m *monitor) tail() {
	reqs, err := m.audit.Read()
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil && m.auditErr == nil {
		m.auditErr = err
	}
	p := m.current
	for _, r := range reqs {
		switch {
		case r.Resource == "leases":
			if p != nil {
				p.leases++
			}
			continue
		case !apiaudit.PerRing(r):
			continue
		}
		m.lastRequest = later(m.lastRequest, r.Received)
		if p == nil {
			continue
		}
		if isProbe(r.Namespace) {
			p.probeRequests.Add(r)
		} else {
			p.requests.Add(r)
		}
	}
}

// read scrapes the operator's metrics and reads its RSS.
func (m *monitor) read(ctx context.Context) (reading, error) {
	var r reading
	mem, err := fleet.ProcMem(m.pid)
	if err != nil {
		return r, err
	}
	r.rss, r.anon = float64(mem.RSS), float64(mem.Anon)
	m.scraping.Lock()
	exp, err := fleet.Scrape(ctx, m.http, m.metrics)
	m.scraping.Unlock()
	if err != nil {
		return r, err
	}
	var errs [4]error
	r.heap, errs[0] = fleet.SumMetric(exp, "go_memstats_heap_inuse_bytes")
	r.goroutines, errs[1] = fleet.SumMetric(exp, "go_goroutines")
	r.active, errs[2] = fleet.SumMetric(exp, "controller_runtime_active_workers")
	r.leader, errs[3] = fleet.SumMetric(exp, "leader_election_master_status")
	// The priority queue exports a depth series by priority only once an
	// item of that priority was queued: none yet is an empty queue.
	r.depth, _ = fleet.SumMetric(exp, "workqueue_depth")
	r.requests = fleet.SumMetricBy(exp, "rest_client_requests_total", "method")
	return r, errors.Join(errs[:]...)
}

// waitLeader waits until the operator leads: its controllers run.
func (m *monitor) waitLeader(ctx context.Context, op *fleet.Proc) error {
	for {
		r, err := m.read(ctx)
		if err == nil && r.leader >= 1 {
			return nil
		}
		if exited, _ := op.Exited(); exited {
			return fmt.Errorf("the operator exited:\n%s", op.LogTail(20))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the operator did not lead: %w (its metrics: %w)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitIdle waits until the operator has nothing to do: no request of its
// (but the Lease's) for the quiet time, its work queues empty and no
// reconcile running. It returns the reading that found it idle.
func (m *monitor) waitIdle(ctx context.Context) (reading, error) {
	for {
		m.mu.Lock()
		last, auditErr := m.lastRequest, m.auditErr
		m.mu.Unlock()
		if auditErr != nil {
			return reading{}, fmt.Errorf("read the audit log: %w", auditErr)
		}
		r, err := m.read(ctx)
		if err == nil && r.depth == 0 && r.active == 0 && time.Since(last) >= m.quiet {
			return r, nil
		}
		select {
		case <-ctx.Done():
			return reading{}, fmt.Errorf("the operator never went idle (queue depth %.0f, %0.f reconciles running, last request %s ago; %w): %w",
				r.depth, r.active, time.Since(last).Round(time.Second), err, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// heapProfile writes the operator's heap profile, taken right after a
// garbage collection (gc=1), to path.
func (m *monitor) heapProfile(ctx context.Context, path string) error {
	m.scraping.Lock()
	defer m.scraping.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.pprof+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return err
	}
	resp, err := m.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("heap profile: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
