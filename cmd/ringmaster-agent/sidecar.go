package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

// sidecar keeps one server on the ring its agent serves: at every change
// the agent makes (a new epoch, a key's activeFrom or expiresAt) and every
// interval, it exports the agent's keys and applies them to the server.
type sidecar struct {
	name     string
	agent    *agent.Agent
	server   server
	log      *slog.Logger
	interval time.Duration
	timeout  time.Duration
	kick     chan struct{}

	// random stands in for the ring's keys once every key has expired, so
	// that the server drops them too; nil otherwise. Only run touches it.
	random *agent.TicketKey

	mu        sync.Mutex
	rep       report
	lastCause string // the cause last logged, to log each failure once
	// started is when the sidecar started; answered reports whether the
	// server ever took the keys. Until one or the other of answered and
	// noServerGrace after started, no_server is the server still starting
	// (a native sidecar starts before its server), not an error.
	started  time.Time
	answered bool

	reloads prometheus.Counter
	errors  *prometheus.CounterVec
}

// report is what /healthz shows: the embedded Status describes what the
// server took (its keys: those of the ring that it holds), Agent what the
// sidecar read. Key ids only, never key bytes.
type report struct {
	agent.Status
	// Server is nginx, haproxy or envoy.
	Server string `json:"server"`
	// Ready reports whether the server holds what the agent serves now.
	Ready bool `json:"ready"`
	// ServerKeys are the ids of the keys the server holds, in its own order
	// (HAProxy: its three slots, oldest, encrypting, next).
	ServerKeys []string `json:"serverKeys,omitempty"`
	// Agent is what the sidecar read from the projected volume.
	Agent agent.Status `json:"agent"`
}

// noServerGrace is how long after it starts the sidecar does not count the
// server's absence (no_server) as an error unless the server has answered
// already: the server starts after the sidecar, once its startup probe
// passes.
const noServerGrace = time.Minute

func newSidecar(name string, srv server, log *slog.Logger, interval, timeout time.Duration) *sidecar {
	s := &sidecar{
		name: name, server: srv, log: log, interval: interval, timeout: timeout,
		kick: make(chan struct{}, 1),
		rep:  report{Server: name}, started: time.Now(),
		// ringmaster_sidecar_reloads_total, no labels.
		reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringmaster_sidecar_reloads_total",
			Help: "Times the server took new ticket keys: an nginx reload, a HAProxy runtime API update, an Envoy SDS file.",
		}),
		// ringmaster_sidecar_reload_errors_total{cause}.
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringmaster_sidecar_reload_errors_total",
			Help: "Attempts to have the server take the ticket keys that failed, by cause; the server keeps the keys it holds.",
		}, []string{"cause"}),
	}
	for _, c := range causes {
		s.errors.WithLabelValues(c)
	}
	return s
}

// onSwap asks for an apply; the agent calls it at every change it serves.
func (s *sidecar) onSwap(agent.Status) {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// run applies the keys at every change and every interval, and sooner
// after a failure, until ctx ends.
func (s *sidecar) run(ctx context.Context) {
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	const firstRetry = 250 * time.Millisecond
	backoff := firstRetry
	for {
		var retry, wake <-chan time.Time
		at, err := s.sync(ctx)
		if err != nil && ctx.Err() == nil {
			retry = time.After(backoff)
			backoff = min(2*backoff, s.interval)
		} else {
			backoff = firstRetry
		}
		if !at.IsZero() {
			wake = time.After(time.Until(at))
		}
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-tick.C:
		case <-retry:
		case <-wake:
		}
	}
}

// sync applies what the agent serves now to the server, and records the
// outcome. It returns when the server wants to be applied again, if it
// does.
func (s *sidecar) sync(ctx context.Context) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var (
		st  agent.Status
		res applied
		err error
	)
	s.agent.ExportTicketKeys(func(status agent.Status, keys []agent.TicketKey) {
		st = status
		if len(keys) > 0 {
			s.dropRandom()
			res, err = s.server.apply(ctx, keys)
			return
		}
		random := []agent.TicketKey{s.randomKey()}
		res, err = s.server.apply(ctx, random)
		clear(random[0].Secret[:])
	})
	s.record(st, res, err)
	return res.wake, err
}

// randomKey returns a random key of the sidecar's own, the same until the
// ring has keys again, to stand in for the ring's once every key has
// expired: the server must drop the expired keys, and HAProxy holds no
// fewer than 3. A Go server falls back on crypto/tls's own random keys
// alike.
func (s *sidecar) randomKey() agent.TicketKey {
	if s.random == nil {
		now := time.Now()
		k := agent.TicketKey{ID: "random", State: "active", ActiveFrom: now, ExpiresAt: now.Add(24 * time.Hour)}
		_, _ = rand.Read(k.Secret[:])
		s.random = &k
	}
	return *s.random
}

// dropRandom overwrites and forgets the random key, once the ring has keys
// again.
func (s *sidecar) dropRandom() {
	if s.random != nil {
		clear(s.random.Secret[:])
		s.random = nil
	}
}

// record keeps the outcome of an apply for /healthz, /readyz and the
// metrics, and logs a failure once per cause.
func (s *sidecar) record(st agent.Status, res applied, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.rep.Agent = st
	if err != nil {
		cause := causeOf(err)
		if cause != causeNoServer || s.answered || now.Sub(s.started) >= noServerGrace {
			s.errors.WithLabelValues(cause).Inc()
		}
		s.rep.Ready = false
		s.rep.LastError, s.rep.LastErrorTime = err.Error(), now
		if cause != s.lastCause {
			s.log.Error("Server did not take the ticket keys; it keeps the keys it holds, retrying",
				"server", s.name, "cause", cause, "err", err, "ring", st.Ring, "epoch", st.Epoch, "activeKeyID", st.ActiveKeyID)
			s.lastCause = cause
		}
		return
	}
	s.answered = true
	if s.lastCause != "" {
		s.log.Info("Server took the ticket keys again", "server", s.name)
		s.lastCause = ""
	}
	taken := st
	taken.Keys = slices.DeleteFunc(slices.Clone(st.Keys), func(k agent.KeyStatus) bool { return !slices.Contains(res.held, k.ID) })
	taken.ServingSince, taken.Swaps = s.rep.ServingSince, s.rep.Swaps
	taken.LastError, taken.LastErrorTime = "", time.Time{}
	if res.took || s.rep.ServingSince.IsZero() {
		taken.ServingSince = now
	}
	if res.took {
		taken.Swaps++
		s.reloads.Inc()
		s.log.Info("Server took the ticket keys", "server", s.name, "ring", st.Ring, "epoch", st.Epoch,
			"activeKeyID", st.ActiveKeyID, "serverKeyIDs", res.held)
	}
	s.rep.Status, s.rep.Ready, s.rep.ServerKeys = taken, true, res.held
}

func (s *sidecar) report() report {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rep
	r.ServerKeys = slices.Clone(r.ServerKeys)
	return r
}

// collectors are the sidecar's own metrics, beside the agent's.
func (s *sidecar) collectors() []prometheus.Collector {
	gauge := func(name, help string, f func(report) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(s.report()) })
	}
	return []prometheus.Collector{
		s.reloads, s.errors,
		// ringmaster_sidecar_server_epoch, no labels.
		gauge("ringmaster_sidecar_server_epoch", "Epoch of the ring whose keys the server holds; 0 before it took any.",
			func(r report) float64 { return float64(r.Epoch) }),
		// ringmaster_sidecar_server_active_key_age_seconds, no labels.
		gauge("ringmaster_sidecar_server_active_key_age_seconds", "Seconds since the key the server encrypts with became active; 0 before it took any.",
			func(r report) float64 {
				for _, k := range r.Keys {
					if k.ID == r.ActiveKeyID {
						return time.Since(k.ActiveFrom).Seconds()
					}
				}
				return 0
			}),
		// ringmaster_sidecar_ready, no labels.
		gauge("ringmaster_sidecar_ready", "1 when the server holds the keys the agent serves now, else 0: what /readyz answers.",
			func(r report) float64 {
				if r.Ready {
					return 1
				}
				return 0
			}),
	}
}

// handler serves /healthz (the report as JSON; 200 while the sidecar runs),
// the same report at agent.StatusPath, where the operator asks what the pod
// holds before it promotes a staged key (its keys are the server's), and
// /readyz (200 only when the server holds the keys the agent serves now,
// 503 otherwise).
func (s *sidecar) handler(metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	report := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.report())
	}
	mux.HandleFunc("GET /healthz", report)
	mux.HandleFunc("GET "+agent.StatusPath, report)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		r := s.report()
		if !r.Ready {
			http.Error(w, fmt.Sprintf("%s has not taken ring %s epoch %d: %s", s.name, r.Agent.Ring, r.Agent.Epoch, r.LastError), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "ok: %s holds ring %s epoch %d, active key %s\n", s.name, r.Ring, r.Epoch, r.ActiveKeyID)
	})
	return mux
}
