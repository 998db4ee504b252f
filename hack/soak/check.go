package main

import (
	"fmt"
	"sync"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/agentstatus"
)

// checker is what the soak feeds its observations to.
type checker interface {
	ObserveSnapshot(ring string, epoch int64, contentHash string, at time.Time)
	ObservePod(pod string, st agentstatus.Status, at time.Time)
	ObserveConn(pod string, resumed bool, err error, podRestarted bool)
	Violations() []string
	// Summary is a line of the checker's own counts, or "".
	Summary() string
}

// localChecker checks the invariants the soak can break: per ring, epochs
// only grow and each has one content; per pod, a key encrypts only after
// it was held activationDelay (less the poll interval, the slack of
// sampling), and no key is held past its expiresAt (plus that slack); no
// connection fails, and every reconnect resumes.
type localChecker struct {
	delay, slack time.Duration

	mu         sync.Mutex
	maxEpoch   map[string]int64
	content    map[string]string // ring#epoch -> digest
	firstHeld  map[string]time.Time
	active     map[string]string // pod -> key id
	violations []string
}

func newChecker(activationDelay, poll time.Duration) checker {
	return &localChecker{delay: activationDelay, slack: poll, maxEpoch: map[string]int64{}, content: map[string]string{},
		firstHeld: map[string]time.Time{}, active: map[string]string{}}
}

func (c *localChecker) violate(format string, args ...any) {
	c.violations = append(c.violations, fmt.Sprintf(format, args...))
}

func (c *localChecker) ObserveSnapshot(ring string, epoch int64, digest string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := fmt.Sprintf("%s#%d", ring, epoch)
	if d, ok := c.content[key]; ok {
		if d != digest {
			c.violate("%s: ring %s epoch %d has two contents (%s, then %s)", at.UTC().Format(time.RFC3339), ring, epoch, d, digest)
		}
		return
	}
	c.content[key] = digest
	if m, ok := c.maxEpoch[ring]; ok && epoch <= m {
		c.violate("%s: ring %s published epoch %d after epoch %d", at.UTC().Format(time.RFC3339), ring, epoch, m)
	}
	c.maxEpoch[ring] = max(c.maxEpoch[ring], epoch)
}

func (c *localChecker) ObservePod(pod string, st agentstatus.Status, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, known := c.active[pod]
	for _, k := range st.Keys {
		id := pod + "#" + k.ID
		if _, ok := c.firstHeld[id]; !ok {
			// Keys in a pod's first status arrived before it was watched:
			// how long it held them is unknown, and not judged.
			c.firstHeld[id] = at
			if !known {
				c.firstHeld[id] = time.Time{}
			}
		}
		if at.After(k.ExpiresAt.Add(c.slack)) {
			c.violate("%s: pod %s holds key %s past its expiresAt %s", at.UTC().Format(time.RFC3339), pod, k.ID, k.ExpiresAt.UTC().Format(time.RFC3339))
		}
	}
	if st.ActiveKeyID == "" || st.ActiveKeyID == c.active[pod] {
		return
	}
	first, seen := c.active[pod], c.firstHeld[pod+"#"+st.ActiveKeyID]
	c.active[pod] = st.ActiveKeyID
	if first == "" {
		return // the pod's first key: nothing to compare with
	}
	if held := at.Sub(seen); held < c.delay-c.slack {
		c.violate("%s: pod %s encrypts with key %s held only %s (activationDelay %s)", at.UTC().Format(time.RFC3339), pod, st.ActiveKeyID, held.Round(time.Millisecond), c.delay)
	}
}

func (c *localChecker) ObserveConn(pod string, resumed bool, err error, podRestarted bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err != nil:
		c.violate("connection to %s failed: %v", pod, err)
	case !resumed && !podRestarted:
		c.violate("reconnect to %s did not resume", pod)
	}
}

func (c *localChecker) Violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.violations...)
}

func (c *localChecker) Summary() string { return "" }
