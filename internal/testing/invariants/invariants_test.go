package invariants

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/agentstatus"
)

var t0 = time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

const delay = 45 * time.Second

// key is a key as a pod serves it: state, activeFrom and expiresAt in
// seconds after t0.
func key(id, state string, from, expires float64) agentstatus.KeyStatus {
	return agentstatus.KeyStatus{ID: id, State: state, ActiveFrom: at(from), ExpiresAt: at(expires)}
}

func status(epoch int64, active string, keys ...agentstatus.KeyStatus) agentstatus.Status {
	return agentstatus.Status{Ring: "shop/web", Epoch: epoch, ActiveKeyID: active, Keys: keys}
}

// A rotation as a pod sees it: k1 active, k2 staged at 10 s to encrypt
// from 60 s, then k2 active, k1 decrypt-only.
var (
	before = status(1, "k1", key("k2", "staged", 60, 400), key("k1", "active", 0, 300))
	after  = status(2, "k2", key("k2", "active", 60, 400), key("k1", "decrypt-only", 0, 300))
)

type step func(c *Checker)

func pod(name string, s float64, st agentstatus.Status) step {
	return func(c *Checker) { c.ObservePod(name, st, at(s)) }
}

func snap(epoch int64, hash string, s float64) step {
	return func(c *Checker) { c.ObserveSnapshot("shop/web", epoch, hash, at(s)) }
}

func staged(id string, s float64) step {
	return func(c *Checker) { c.ObserveStaged("shop/web", id, at(s)) }
}

func conn(p string, resumed bool, err error, restarted bool) step {
	return func(c *Checker) { c.ObserveConn(p, resumed, err, restarted) }
}

func restart(p string, s float64) step {
	return func(c *Checker) { c.ObserveRestart(p, at(s)) }
}

func TestChecker(t *testing.T) {
	refused := errors.New("connection refused")
	for _, tc := range []struct {
		name  string
		steps []step
		want  []string // substrings, one per violation, in order
		check func(t *testing.T, r Report)
	}{{
		name: "a clean rotation",
		steps: []step{
			snap(1, "h1", 0), staged("k2", 10), pod("a", 1, before), pod("b", 1, before),
			pod("a", 12, before), snap(2, "h2", 60), snap(2, "h2", 61),
			pod("a", 61, after), pod("b", 66, after),
			conn("a", true, nil, false), conn("b", true, nil, false),
		},
		check: func(t *testing.T, r Report) {
			if r.Rotations != 1 || r.Reconnects != 2 || r.ResumptionRate() != 1 || r.ShortestStaged != 59*time.Second {
				t.Errorf("report %s", r)
			}
		},
	}, {
		name:  "an epoch published twice with different contents",
		steps: []step{snap(1, "h1", 0), snap(2, "h2", 10), snap(2, "h2b", 11)},
		want:  []string{"ring shop/web: epoch 2 published with two contents (h2, then h2b"},
	}, {
		name: "an epoch published as two snapshot Secrets",
		steps: []step{
			func(c *Checker) { c.ObserveSnapshotSecret("shop/web", 2, "uid-2") },
			func(c *Checker) { c.ObserveSnapshotSecret("shop/web", 1, "uid-1") }, // out of order: fine
			func(c *Checker) { c.ObserveSnapshotSecret("shop/web", 2, "uid-2") },
			func(c *Checker) { c.ObserveSnapshotSecret("shop/web", 2, "uid-2b") },
		},
		want: []string{"ring shop/web: epoch 2 published as two snapshot Secrets (uid-2, uid-2b)"},
	}, {
		name:  "the projection going back an epoch",
		steps: []step{snap(1, "h1", 0), snap(3, "h3", 10), snap(2, "h2", 11)},
		want:  []string{"ring shop/web: projection went back from epoch 3 to 2"},
	}, {
		name:  "a pod serving an older epoch than it did",
		steps: []step{pod("a", 1, after), pod("a", 2, before)},
		want:  []string{"pod a: served epoch 1 of ring shop/web after epoch 2"},
	}, {
		name:  "a restarted pod may start over",
		steps: []step{pod("a", 1, after), restart("a", 2), pod("a", 3, before)},
		check: func(t *testing.T, r Report) {
			if r.Restarts != 1 {
				t.Errorf("report %s", r)
			}
		},
	}, {
		name: "a key staged for less than activationDelay",
		steps: []step{
			pod("a", 1, status(1, "k1", key("k1", "active", 0, 300))),
			staged("k2", 30), pod("a", 31, before), pod("a", 61, after),
		},
		want: []string{"ring shop/web: key k2 staged at 01:00:30.000 encrypts from 01:01:00.000, 30s later: less than activationDelay 45s"},
	}, {
		name: "a key staged for activationDelay less the slack passes",
		steps: []step{
			pod("a", 1, status(1, "k1", key("k1", "active", 0, 300))),
			staged("k2", 15.5), pod("a", 16, before), pod("a", 61, after),
		},
	}, {
		name: "a key that encrypts without ever being staged",
		steps: []step{
			pod("a", 1, status(1, "k1", key("k1", "active", 0, 300))),
			pod("a", 61, after),
		},
		want: []string{"ring shop/web: key k2 encrypts from 01:01:00.000 at pod a, never seen staged"},
	}, {
		name: "a pod that receives a key after it began encrypting elsewhere",
		steps: []step{
			staged("k2", 10), pod("a", 1, before), pod("a", 61, after),
			pod("b", 1, status(1, "k1", key("k1", "active", 0, 300))), pod("b", 70, after),
		},
		want: []string{"pod b: received key k2 of ring shop/web at 01:01:10.000, 10s after it began encrypting (01:01:00.000)"},
	}, {
		name: "a new pod starts with the active key",
		steps: []step{
			staged("k2", 10), pod("a", 1, before), pod("a", 61, after), pod("c", 70, after),
		},
	}, {
		name:  "a key served past its expiresAt",
		steps: []step{pod("a", 1, before), pod("a", 302, before)},
		want:  []string{"pod a: key k1 of ring shop/web served at 01:05:02.000, 2s past its expiresAt 01:05:00.000"},
	}, {
		name:  "a key served within the slack of its expiresAt passes",
		steps: []step{pod("a", 1, before), pod("a", 300.5, before)},
	}, {
		name: "failed connections and full handshakes, grouped",
		steps: []step{
			conn("a", false, refused, false), conn("a", false, refused, false), conn("b", false, nil, false),
			conn("a", true, nil, false),
		},
		want: []string{"2 connections failed at a: connection refused", "1 reconnects to b paid a full handshake"},
		check: func(t *testing.T, r Report) {
			if r.Failures != 2 || r.Full != 1 || r.Reconnects != 2 || r.ResumptionRate() != 0.5 {
				t.Errorf("report %s", r)
			}
		},
	}, {
		name: "failures and full handshakes across a restart are counted apart",
		steps: []step{
			conn("a", false, refused, true), conn("a", false, nil, true), conn("a", true, nil, false),
		},
		check: func(t *testing.T, r Report) {
			if r.RestartFailures != 1 || r.RestartFull != 1 || r.Full != 0 || r.Failures != 0 || r.Reconnects != 2 {
				t.Errorf("report %s", r)
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(Config{ActivationDelay: delay, Slack: time.Second})
			for _, s := range tc.steps {
				s(c)
			}
			got := c.Violations()
			if len(got) != len(tc.want) {
				t.Fatalf("violations %q, want %d: %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("violation %d: %q, want it to contain %q", i, got[i], w)
				}
			}
			if tc.check != nil {
				tc.check(t, c.Report())
			}
		})
	}
}

func TestPublishLag(t *testing.T) {
	// Staged 41.5 s of 45 s: within a publication lag of 3 s and the slack.
	steps := []step{pod("a", 1, status(1, "k1", key("k1", "active", 0, 300))), staged("k2", 18.5), pod("a", 61, after)}
	for _, lag := range []struct {
		lag  time.Duration
		want int
	}{{0, 1}, {3 * time.Second, 0}} {
		c := New(Config{ActivationDelay: delay, Slack: time.Second, PublishLag: lag.lag})
		for _, s := range steps {
			s(c)
		}
		if v := c.Violations(); len(v) != lag.want {
			t.Errorf("publication lag %s: violations %q, want %d", lag.lag, v, lag.want)
		}
		if r := c.Report(); r.ShortestStaged != 41500*time.Millisecond {
			t.Errorf("shortest staged %s, want 41.5s", r.ShortestStaged)
		}
	}
}

func TestSetActivationDelay(t *testing.T) {
	c := New(Config{ActivationDelay: delay, Slack: time.Second})
	c.SetActivationDelay("shop/web", 20*time.Second)
	for _, s := range []step{pod("a", 1, status(1, "k1", key("k1", "active", 0, 300))), staged("k2", 30), pod("a", 61, after)} {
		s(c)
	}
	if v := c.Violations(); v != nil {
		t.Errorf("violations %q under a ring's own activationDelay of 20s", v)
	}
}

// TestConcurrent feeds one checker from many goroutines (go test -race).
func TestConcurrent(t *testing.T) {
	c := New(Config{ActivationDelay: delay, Slack: time.Second})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 100 {
				c.ObservePod(string(rune('a'+i)), before, at(float64(j)/10))
				c.ObserveSnapshot("shop/web", 1, "h1", at(1))
				c.ObserveConn("a", true, nil, false)
				_ = c.Report()
			}
		})
	}
	wg.Wait()
	if r := c.Report(); r.Resumed != 800 {
		t.Errorf("report %s, want 800 resumed", r)
	}
}
