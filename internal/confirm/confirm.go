// Package confirm asks a ring's pods which keys they hold, the way
// Prometheus scrapes its targets: it reads the read-only status each pod's
// agent serves (pkg/agent.StatusHandler) and tallies whether every
// pod that votes holds the staged key. Choosing the voters and judging
// their answers are pure (Voters, VoterNamespaces, Tally); Ask does the
// HTTP.
package confirm

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/agentstatus"
)

// MaxMissing bounds the pods a ring's status names.
const MaxMissing = 20

// Target is one pod to ask.
type Target struct {
	Namespace, Name, Node string
	// URL is the pod's agent status: http://<pod IP>:<port>/ringmaster/v1/status.
	URL string
}

// Answer is what one pod said, or why it could not be asked.
type Answer struct {
	Target
	Status agentstatus.Status
	Err    error
}

// Result is the fleet's answer about a staged key.
type Result struct {
	// Pods counts the selected, ready pods.
	Pods int
	// Holding counts those that hold the staged key.
	Holding int
	// Missing names the others (the first MaxMissing), and why.
	Missing []v1alpha1.PodReport
	// MissingCount counts them all.
	MissingCount int
}

// Confirmed reports whether every selected, ready pod holds the key. A fleet
// of no ready pod confirms: no pod can fail to resume.
func (r Result) Confirmed() bool { return r.Holding == r.Pods }

// Tally judges the answers: a pod holds the staged key when it serves the
// ring named ring with a key of that id, whatever its state.
func Tally(ring, stagedKey string, answers []Answer, unreachable []v1alpha1.PodReport) Result {
	return tally(answers, unreachable, func(st agentstatus.Status) string {
		switch {
		case st.Ring != ring:
			return fmt.Sprintf("serves ring %q, not %q", clip(st.Ring), ring)
		case !slices.ContainsFunc(st.Keys, func(k agentstatus.KeyStatus) bool { return k.ID == stagedKey }):
			return fmt.Sprintf("holds epoch %d, without key %s", st.Epoch, stagedKey)
		}
		return ""
	})
}

// TallyECH judges the answers about an ECH ring's staged config: a pod
// holds it when it serves the ECH ring named ring with a config of that
// config_id, whatever its state.
func TallyECH(ring string, configID uint8, answers []Answer, unreachable []v1alpha1.PodReport) Result {
	return tally(answers, unreachable, func(st agentstatus.Status) string {
		switch {
		case st.ECH == nil:
			return fmt.Sprintf("serves no ECH ring, not %q", ring)
		case st.ECH.Ring != ring:
			return fmt.Sprintf("serves ECH ring %q, not %q", clip(st.ECH.Ring), ring)
		case !slices.ContainsFunc(st.ECH.Configs, func(c agentstatus.ECHConfigStatus) bool { return c.ID == configID }):
			return fmt.Sprintf("holds ECH epoch %d, without config %d", st.ECH.Epoch, configID)
		}
		return ""
	})
}

// tally counts the pods whose answer lacks says nothing against.
func tally(answers []Answer, unreachable []v1alpha1.PodReport, lacks func(agentstatus.Status) string) Result {
	r := Result{Pods: len(answers) + len(unreachable)}
	for _, rep := range unreachable {
		r.miss(rep)
	}
	for _, a := range answers {
		rep := v1alpha1.PodReport{Namespace: a.Namespace, Name: a.Name, Node: a.Node}
		if a.Err != nil {
			rep.Reason = fmt.Sprintf("cannot be asked: %v", a.Err)
		} else if rep.Reason = lacks(a.Status); rep.Reason == "" {
			r.Holding++
			continue
		}
		r.miss(rep)
	}
	return r
}

// miss counts a pod that does not confirm, and names it among the first
// MaxMissing.
func (r *Result) miss(rep v1alpha1.PodReport) {
	r.MissingCount++
	if len(r.Missing) < MaxMissing {
		r.Missing = append(r.Missing, rep)
	}
}

// clip keeps what a pod says short in a status.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// maxAnswer bounds what the operator reads of one pod's answer.
const maxAnswer = 64 << 10

// Asker asks pods, several at a time, each within a deadline.
type Asker struct {
	// Client makes the requests; it must not follow redirects. Nil: one
	// from NewClient with a 1-second connect timeout and a 2-second
	// timeout per pod.
	Client *http.Client
	// Parallel is how many pods one Ask asks at once; 0 means 16.
	Parallel int
	// Acquire, when set, is called before each request and must return a
	// release for after it: it bounds requests across Asks (the Prober's
	// budget). Its error is the pod's answer.
	Acquire func(context.Context, Target) (release func(), err error)
}

// NewClient is an HTTP client for pods' status ports: it connects within
// connect, gives up on a pod after timeout, follows no redirect, uses no
// proxy, and keeps no idle connection (no goroutine of its stays behind).
func NewClient(connect, timeout time.Duration) *http.Client {
	dialer := &net.Dialer{Timeout: connect}
	return &http.Client{
		Timeout:       timeout,
		Transport:     &http.Transport{DialContext: dialer.DialContext, DisableKeepAlives: true, MaxResponseHeaderBytes: 16 << 10},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Ask asks every target and returns their answers, in order.
func (a *Asker) Ask(ctx context.Context, targets []Target) []Answer {
	c := a.Client
	if c == nil {
		c = NewClient(time.Second, 2*time.Second)
	}
	sem := make(chan struct{}, cmp.Or(a.Parallel, 16))
	out := make([]Answer, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		out[i] = Answer{Target: t}
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				out[i].Err = ctx.Err()
				return
			}
			defer func() { <-sem }()
			if a.Acquire != nil {
				release, err := a.Acquire(ctx, t)
				if err != nil {
					out[i].Err = err
					return
				}
				defer release()
			}
			out[i].Status, out[i].Err = ask(ctx, c, t.URL)
		})
	}
	wg.Wait()
	return out
}

func ask(ctx context.Context, c *http.Client, url string) (agentstatus.Status, error) {
	var st agentstatus.Status
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return st, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswer)).Decode(&st); err != nil {
		return st, fmt.Errorf("the answer is not an agent's status: %w", err)
	}
	return st, nil
}
