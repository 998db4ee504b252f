// Package invariants checks, from what a harness observes of a ring and its
// fleet, the promises a rotation keeps whatever fails around it: a ring's
// projection only moves forward, one content per epoch; every key is
// delivered for the ring's activationDelay before it encrypts, and reaches
// every pod before any pod encrypts with it; no pod serves a key past its
// expiresAt; no connection fails and every reconnect resumes, except across
// a pod's restart (counted apart).
//
// A Checker is fed observations, in any number of goroutines, and returns
// violations as sentences that name pods, rings, epochs and key ids, never
// key bytes (it never sees any). It imports no client: the cluster suite
// (test/cluster) and the soak (hack/soak, on the fleet harness) feed it
// what they already watch and poll. It is test support, imported by no
// part of the operator.
//
// Observers poll: a pod's status is read every so often, a projection is
// seen when a watch delivers it. Config.Slack is that poll interval, the
// error every time comparison allows for; it is never a grace a ring's
// bounds get.
package invariants

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/agentstatus"
)

// Config is what the checker holds observations to.
type Config struct {
	// ActivationDelay is the rings' spec.activationDelay: the least time a
	// key is delivered before it encrypts. SetActivationDelay overrides it
	// per ring.
	ActivationDelay time.Duration
	// Slack is the observers' poll interval: how late an observation may
	// be after the moment it reports. Every comparison of times allows it.
	// A caller that learns of a publication only through pods (no
	// ObserveStaged) adds the least delivery lag it expects.
	Slack time.Duration
	// PublishLag is how much less than activationDelay a key may be seen
	// staged, for the time between the operator's plan (the instant it
	// counts activationDelay from) and its publication reaching the
	// observer: the writes of a snapshot and a projection, a new leader's
	// first reconcile. Report.ShortestStaged says how much was used.
	PublishLag time.Duration
}

// Checker accumulates observations. The zero value is not usable: use New.
type Checker struct {
	cfg Config

	mu         sync.Mutex
	delay      map[string]time.Duration // ring -> activationDelay override
	rings      map[string]*ringState
	pods       map[string]*podState
	violations []string
	seen       map[string]bool             // violations already reported, by identity
	failures   map[[3]string]int           // (pod, "failed"|"full", error) -> count, none a restart explains
	secrets    map[string]map[int64]string // ring -> epoch -> snapshot Secret
	report     Report
}

type ringState struct {
	maxEpoch int64
	contents map[int64]string // epoch -> content hash
	keys     map[string]*keyState
}

type keyState struct {
	stagedAt  time.Time // first seen staged, anywhere; zero if never
	activeAt  time.Time // the activeFrom it had when first seen encrypting
	active    bool
	baseline  bool // encrypting before the checker saw anything of it
	unknown   bool // staged before the checker saw it: since when is unknown
	expiresAt time.Time
}

type podState struct {
	ring     string
	epoch    int64
	fresh    bool                 // the next observation is a baseline: first, or after a restart
	held     map[string]time.Time // key id -> first seen at this pod
	restarts int
}

// New returns a checker holding observations to cfg.
func New(cfg Config) *Checker {
	return &Checker{
		cfg: cfg, delay: map[string]time.Duration{}, rings: map[string]*ringState{}, pods: map[string]*podState{},
		seen: map[string]bool{}, failures: map[[3]string]int{}, secrets: map[string]map[int64]string{},
	}
}

// SetActivationDelay sets ring's activationDelay, where it differs from
// Config.ActivationDelay.
func (c *Checker) SetActivationDelay(ring string, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.delay[ring] = d
}

func (c *Checker) ring(name string) *ringState {
	r, ok := c.rings[name]
	if !ok {
		r = &ringState{maxEpoch: -1, contents: map[int64]string{}, keys: map[string]*keyState{}}
		c.rings[name] = r
	}
	return r
}

func (c *Checker) violate(id, format string, args ...any) {
	if c.seen[id] {
		return
	}
	c.seen[id] = true
	c.violations = append(c.violations, fmt.Sprintf(format, args...))
}

// ObserveSnapshot records that ring's projection (or snapshot) held epoch,
// with content identified by contentHash (a digest of the payload, or its
// key ids in order), at at. Epochs only grow, and each has one content.
func (c *Checker) ObserveSnapshot(ring string, epoch int64, contentHash string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.ring(ring)
	if prev, ok := r.contents[epoch]; ok && prev != contentHash {
		c.violate(fmt.Sprintf("content %s %d %s", ring, epoch, contentHash),
			"ring %s: epoch %d published with two contents (%s, then %s at %s)", ring, epoch, prev, contentHash, stamp(at))
	}
	if _, ok := r.contents[epoch]; !ok {
		r.contents[epoch] = contentHash
	}
	if epoch < r.maxEpoch {
		c.violate(fmt.Sprintf("back %s %d %d", ring, r.maxEpoch, epoch),
			"ring %s: projection went back from epoch %d to %d at %s", ring, r.maxEpoch, epoch, stamp(at))
		return
	}
	r.maxEpoch = epoch
}

// ObserveSnapshotSecret records that the immutable snapshot Secret
// identified by uid holds ring's epoch: each epoch has one. Snapshot
// Secrets may be observed in any order (a list after a watch breaks).
func (c *Checker) ObserveSnapshotSecret(ring string, epoch int64, uid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.secrets[ring]
	if !ok {
		m = map[int64]string{}
		c.secrets[ring] = m
	}
	if prev, ok := m[epoch]; ok && prev != uid {
		c.violate(fmt.Sprintf("secret %s %d %s", ring, epoch, uid),
			"ring %s: epoch %d published as two snapshot Secrets (%s, %s)", ring, epoch, prev, uid)
		return
	}
	m[epoch] = uid
}

// ObserveStaged records that ring's projection published key id staged at
// at. Without it, a key counts as published when a pod first shows it
// staged, later by that pod's delivery lag.
func (c *Checker) ObserveStaged(ring, id string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.key(c.ring(ring), id)
	if !k.active && (k.stagedAt.IsZero() || at.Before(k.stagedAt)) {
		k.stagedAt = at
	}
}

func (c *Checker) key(r *ringState, id string) *keyState {
	k, ok := r.keys[id]
	if !ok {
		k = &keyState{}
		r.keys[id] = k
	}
	return k
}

// ObservePod records the status pod served at at. It checks that:
//   - no key it holds is past its expiresAt (beyond Slack);
//   - a key it first shows encrypting was staged, somewhere, for the
//     ring's activationDelay before its activeFrom;
//   - it held that key before the key's activeFrom: a pod that receives a
//     key only after the key began encrypting cannot resume the tickets
//     other pods issue under it.
//
// A pod's first status, and its first after ObserveRestart, is a baseline:
// what it holds then it may have been given while no one watched.
func (c *Checker) ObservePod(pod string, st agentstatus.Status, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pods[pod]
	if !ok {
		p = &podState{fresh: true, held: map[string]time.Time{}}
		c.pods[pod] = p
	}
	if st.Ring == "" {
		return // no ticket keys yet
	}
	r := c.ring(st.Ring)
	fresh := p.fresh
	p.fresh = false
	if p.ring != "" && p.ring != st.Ring {
		fresh = true
		p.held = map[string]time.Time{}
	}
	p.ring = st.Ring
	if !fresh && st.Epoch < p.epoch {
		c.violate(fmt.Sprintf("podback %s %d %d", pod, p.epoch, st.Epoch),
			"pod %s: served epoch %d of ring %s after epoch %d, at %s", pod, st.Epoch, st.Ring, p.epoch, stamp(at))
	}
	p.epoch = max(p.epoch, st.Epoch)
	delay, ok := c.delay[st.Ring]
	if !ok {
		delay = c.cfg.ActivationDelay
	}
	for _, ks := range st.Keys {
		k := c.key(r, ks.ID)
		k.expiresAt = ks.ExpiresAt
		if !ks.ExpiresAt.IsZero() && at.Sub(ks.ExpiresAt) > c.cfg.Slack {
			c.violate("expired "+pod+" "+ks.ID,
				"pod %s: key %s of ring %s served at %s, %s past its expiresAt %s", pod, ks.ID, st.Ring, stamp(at), at.Sub(ks.ExpiresAt).Round(time.Millisecond), stamp(ks.ExpiresAt))
		}
		firstHere, heldBefore := p.held[ks.ID]
		if !heldBefore {
			firstHere = at
			p.held[ks.ID] = at
		}
		encrypting := ks.State == "active" || ks.State == "decrypt-only" || ks.ID == st.ActiveKeyID
		if !encrypting {
			if !k.active && k.stagedAt.IsZero() && fresh {
				k.unknown = true
			}
			if !k.active && (k.stagedAt.IsZero() || at.Before(k.stagedAt)) {
				k.stagedAt = at
			}
			continue
		}
		if !k.active {
			k.active, k.activeAt = true, ks.ActiveFrom
			switch {
			case k.stagedAt.IsZero() && fresh:
				// Encrypting already when this pod was first seen: the
				// ring's state before the watch, not a rotation seen.
				k.baseline = true
			case k.unknown:
				// Staged before the checker's first look: how long is
				// unknown.
			case k.stagedAt.IsZero():
				c.violate("unstaged "+st.Ring+" "+ks.ID,
					"ring %s: key %s encrypts from %s at pod %s, never seen staged", st.Ring, ks.ID, stamp(ks.ActiveFrom), pod)
			case ks.ActiveFrom.Sub(k.stagedAt) < delay-c.cfg.Slack-c.cfg.PublishLag:
				c.violate("short "+st.Ring+" "+ks.ID,
					"ring %s: key %s staged at %s encrypts from %s, %s later: less than activationDelay %s", st.Ring, ks.ID, stamp(k.stagedAt), stamp(ks.ActiveFrom), ks.ActiveFrom.Sub(k.stagedAt).Round(time.Millisecond), delay)
			}
			if !k.baseline {
				c.report.Rotations++
			}
			if !k.baseline && !k.unknown && !k.stagedAt.IsZero() {
				if d := ks.ActiveFrom.Sub(k.stagedAt); c.report.ShortestStaged == 0 || d < c.report.ShortestStaged {
					c.report.ShortestStaged = d
				}
			}
		}
		if !heldBefore && !fresh && !k.baseline && firstHere.Sub(k.activeAt) > c.cfg.Slack {
			c.violate("late "+pod+" "+ks.ID,
				"pod %s: received key %s of ring %s at %s, %s after it began encrypting (%s)", pod, ks.ID, st.Ring, stamp(firstHere), firstHere.Sub(k.activeAt).Round(time.Millisecond), stamp(k.activeAt))
		}
	}
}

// ObserveRestart records that pod restarted (its container, or the pod
// replaced under the same name) at at: its next status is a baseline again,
// and connections the caller attributes to the restart are counted apart.
func (c *Checker) ObserveRestart(pod string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pods[pod]
	if !ok {
		p = &podState{held: map[string]time.Time{}}
		c.pods[pod] = p
	}
	p.fresh, p.restarts = true, p.restarts+1
	c.report.Restarts++
}

// ObserveConn records one reconnect (a client's connection after its
// first, which cannot resume) that reached pod (a pod name or address; ""
// when it failed before reaching one): whether it resumed, why it failed,
// and whether a restart of its pod (or of the whole fleet) explains a
// failure or a full handshake. A client's first connection is passed only
// when it failed, with resumed false.
func (c *Checker) ObserveConn(pod string, resumed bool, err error, podRestarted bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err != nil && podRestarted:
		c.report.RestartFailures++
	case err != nil:
		c.report.Failures++
		c.failures[[3]string{pod, "failed", err.Error()}]++
	case resumed:
		c.report.Reconnects++
		c.report.Resumed++
	case podRestarted:
		c.report.Reconnects++
		c.report.RestartFull++
	default:
		c.report.Reconnects++
		c.report.Full++
		c.failures[[3]string{pod, "full", ""}]++
	}
}

// Report is what the checker counted.
type Report struct {
	// Rotations counts the keys seen to begin encrypting, over all rings,
	// after the checker's first observation of each.
	Rotations int
	// ShortestStaged is the least time between a key's first publication
	// seen and its activeFrom, over the rotations counted; zero without
	// one.
	ShortestStaged time.Duration
	// Restarts counts ObserveRestart.
	Restarts int
	// Reconnects counts the successful reconnects: Resumed ones, Full
	// handshakes no restart explains, and RestartFull ones a restart does.
	Reconnects, Resumed, Full, RestartFull int
	// Failures counts the failed connections no restart explains (each a
	// violation), RestartFailures those a restart does.
	Failures, RestartFailures int
}

// ResumptionRate is the share of reconnects that resumed, 0 without any.
func (r Report) ResumptionRate() float64 {
	if r.Reconnects == 0 {
		return 0
	}
	return float64(r.Resumed) / float64(r.Reconnects)
}

// String is the report on one line.
func (r Report) String() string {
	return fmt.Sprintf("%d rotations (shortest staged %s), %d reconnects, %.2f%% resumed, %d full handshakes (+%d across restarts), %d failed (+%d across restarts), %d restarts",
		r.Rotations, r.ShortestStaged.Round(100*time.Millisecond), r.Reconnects, 100*r.ResumptionRate(), r.Full, r.RestartFull, r.Failures, r.RestartFailures, r.Restarts)
}

// Report returns the counts so far.
func (c *Checker) Report() Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.report
}

// Violations returns every broken invariant so far, in the order found,
// then the connections no restart explains that failed or paid a full
// handshake, grouped by pod (and error); nil when there is none.
func (c *Checker) Violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := slices.Clone(c.violations)
	for _, k := range slices.SortedFunc(maps.Keys(c.failures), func(a, b [3]string) int {
		return strings.Compare(strings.Join(a[:], "\x00"), strings.Join(b[:], "\x00"))
	}) {
		pod := k[0]
		if pod == "" {
			pod = "(no pod)"
		}
		if k[1] == "full" {
			out = append(out, fmt.Sprintf("%d reconnects to %s paid a full handshake", c.failures[k], pod))
		} else {
			out = append(out, fmt.Sprintf("%d connections failed at %s: %s", c.failures[k], pod, k[2]))
		}
	}
	return out
}

func stamp(t time.Time) string { return t.UTC().Format("15:04:05.000") }
