// Package dnswork runs the DNS work of ECH rings and zones off the
// reconcile path, as internal/confirm asks pods: a reconcile says what a
// record must hold (Want) and reads the latest answer at once; the Worker
// writes and checks each zone's records in the background, one job of a
// zone at a time, within a budget of signed updates per zone, and enqueues
// whoever asked when an answer changes. A DNS server that does not answer
// slows only its own zone's jobs: no reconcile ever waits for DNS.
package dnswork

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/ringmaster-io/ringmaster/internal/dnspub"
	"github.com/ringmaster-io/ringmaster/internal/offpath"
	"github.com/ringmaster-io/ringmaster/internal/textlimit"
)

// Budget bounds what the Worker spends on DNS. The zero value of each
// field is its default.
type Budget struct {
	// Zones is how many zones are worked on at once; 0 means 8. Within a
	// zone, jobs run one at a time.
	Zones int
	// UpdatesPerMinute is how many signed updates one zone is sent per
	// minute, at most; 0 means 30. Burst is how many may go at once; 0
	// means 10.
	UpdatesPerMinute int
	Burst            int
	// Exchange bounds one DNS exchange (a query to one server, or an
	// update); 0 means 3s.
	Exchange time.Duration
	// Recheck is how often a job whose answer is known is run again, to
	// see that DNS still holds what it should and mend it; 0 means 30s.
	Recheck time.Duration
	// Again is the least time between two runs of a job asked for again
	// (a reconcile's Want after the answer came); 0 means 2s.
	Again time.Duration
}

func (b Budget) withDefaults() Budget {
	b.Zones = cmp.Or(b.Zones, 8)
	b.UpdatesPerMinute = cmp.Or(b.UpdatesPerMinute, 30)
	b.Burst = cmp.Or(b.Burst, 10)
	b.Exchange = cmp.Or(b.Exchange, 3*time.Second)
	b.Recheck = cmp.Or(b.Recheck, 30*time.Second)
	b.Again = cmp.Or(b.Again, 2*time.Second)
	return b
}

// wantTTL is how long a job nobody asks for again is kept.
const wantTTL = 10 * time.Minute

// tick is how often the Worker looks for due jobs, besides when a Want or
// a finished job wakes it.
const tick = 500 * time.Millisecond

// Key names who asked for a job: its kind, and its namespace (empty for a
// DNS name) and name. Its controller is enqueued when an answer changes.
type Key struct {
	Kind string
	types.NamespacedName
}

// KindDNSName is the Kind of the jobs that remove a releasing owner's
// value from a DNS name's record: their Key's Name is the canonical DNS
// name, whose controller decides who owns it.
const KindDNSName = "DNSName"

// Mode is what a job wants of a record.
type Mode int

const (
	// Publish: the record carries List as its ech value; the Worker
	// writes it through the zone's primary when the servers do not
	// answer it.
	Publish Mode = iota
	// Verify: the servers answer List; nothing is written (a verify-only
	// zone, where another system publishes).
	Verify
	// Remove: the record no longer carries List; the Worker removes that
	// value, and only it (dnspub.Remove), when a server still answers it.
	Remove
)

func (m Mode) String() string {
	switch m {
	case Publish:
		return "publish"
	case Verify:
		return "verify"
	}
	return "remove"
}

// Job is what one record must hold.
type Job struct {
	Key Key
	// Item tells apart the jobs of one Key; empty when a Key has one job
	// (a ring's, a DNS name's).
	Item string
	// Zone names the ClusterDNSZone: the jobs of a zone share its budget
	// and run one at a time.
	Zone   string
	Target dnspub.Target
	Mode   Mode
	List   []byte
}

// digest identifies what a job asks, so that an answer to one question is
// never taken for the answer to another.
func (j Job) digest() [sha256.Size]byte {
	h := sha256.New()
	fmt.Fprintf(h, "%d\x00%s\x00%s\x00%s\x00%v\x00%d\x00%t\x00", j.Mode, j.Target.Zone, j.Target.Name, j.Target.Primary, j.Target.Servers, j.Target.TTL, j.Target.TSIG != nil)
	if j.Target.TSIG != nil {
		fmt.Fprintf(h, "%s\x00%s\x00", j.Target.TSIG.Name, j.Target.TSIG.Algorithm)
		h.Write(j.Target.TSIG.Secret)
	}
	h.Write(j.List)
	return [sha256.Size]byte(h.Sum(nil))
}

// Result is the latest answer to a job.
type Result struct {
	// Holds says every server answers what the job wants: List exactly
	// (Publish, Verify), or not List (Remove).
	Holds bool
	// Err says why not, when DNS did not take the change or no server
	// could be asked; nil while servers that answered catch up.
	Err error
	// At is when the servers were last asked, by the rings' clock.
	At time.Time
}

// ErrRateLimited is a job's error while its zone's budget of signed
// updates per minute is spent: it runs again once a token is free.
var ErrRateLimited = errors.New("the zone's budget of DNS updates per minute is spent; the update waits its turn")

// Worker runs DNS jobs off the reconcile path. It is a manager Runnable,
// run by the leader only; no goroutine of its outlives Start.
type Worker struct {
	// Clock stamps answers (Result.At); runs are paced by real time.
	Clock clock.PassiveClock
	// Budget bounds the work.
	Budget Budget
	// Publish, Remove and Verify are dnspub's; tests may wrap them.
	Publish func(context.Context, dnspub.Target, []byte) error
	Remove  func(context.Context, dnspub.Target, []byte) (bool, error)
	Verify  func(context.Context, dnspub.Target, []byte) (dnspub.Result, error)
	// Updates, when set, counts each signed update by zone and outcome.
	Updates func(zone, outcome string)

	once   sync.Once
	jobs   *offpath.Scheduler[jobKey, asked, Result]
	mu     sync.Mutex
	limits map[string]*rate.Limiter // by zone
}

type jobKey struct {
	Key
	item string
}

// asked is a job as the Worker is asked it, with its digest: the answer to
// one digest is never taken for the answer to another.
type asked struct {
	job    Job
	digest [sha256.Size]byte
}

func (w *Worker) init() {
	w.once.Do(func() {
		w.Budget = w.Budget.withDefaults()
		if w.Clock == nil {
			w.Clock = clock.RealClock{}
		}
		if w.Publish == nil {
			w.Publish = dnspub.Publish
		}
		if w.Remove == nil {
			w.Remove = dnspub.Remove
		}
		if w.Verify == nil {
			w.Verify = dnspub.Verify
		}
		w.limits = map[string]*rate.Limiter{}
		// One job of a zone at a time: its updates are signed in turn,
		// and a zone whose servers do not answer holds one slot alone.
		w.jobs = offpath.New(offpath.Config[jobKey, asked, Result]{
			Tick: tick, TTL: wantTTL, Limit: w.Budget.Zones, PerGroup: 1,
			Group:   func(_ jobKey, a asked) string { return a.job.Zone },
			Same:    func(a, b asked) bool { return a.digest == b.digest },
			Due:     w.due,
			Run:     w.run,
			Changed: func(was, next Result) bool { return was.Holds != next.Holds || errText(was.Err) != errText(next.Err) },
			Owner:   func(k jobKey) offpath.Owner { return offpath.Owner(k.Key) },
		})
	})
}

// Source is where the Worker enqueues the objects of one kind whose
// answers changed, for that kind's controller to watch. Call it before
// Start.
func (w *Worker) Source(kind string) source.Source {
	w.init()
	return w.jobs.Source(kind)
}

// Want records what a record must hold and returns the latest answer to
// exactly that, if there is one yet. It never blocks on DNS. An answer to
// another question (another list, mode or target) is never returned.
func (w *Worker) Want(j Job) (Result, bool) {
	w.init()
	return w.jobs.Want(jobKey{Key: j.Key, item: j.Item}, asked{job: j, digest: j.digest()})
}

// Forget drops every job of k.
func (w *Worker) Forget(k Key) {
	w.init()
	w.jobs.Forget(offpath.Owner(k))
}

// ForgetItem drops one job of k.
func (w *Worker) ForgetItem(k Key, item string) {
	w.init()
	w.jobs.Drop(jobKey{Key: k, item: item})
}

// NeedLeaderElection: only the leader reconciles, so only it writes DNS.
func (w *Worker) NeedLeaderElection() bool { return true }

// Start runs jobs until ctx is done, and returns once every run it started
// has ended. Of the zones with a job due, those whose jobs waited longest
// go first, within Budget.Zones.
func (w *Worker) Start(ctx context.Context) error {
	w.init()
	return w.jobs.Start(ctx)
}

// due says whether a job must run now: never answered, asked another
// question since, answered longer ago than Recheck, or asked again since
// its last run, at least Again ago. A job whose zone's updates are spent
// waits besides (its run's hold).
func (w *Worker) due(now time.Time, it offpath.Item[jobKey, asked, Result]) bool {
	switch {
	case it.Answer == nil:
		return true
	case now.Sub(it.Started) >= w.Budget.Recheck:
		return true
	}
	return it.WantedAt.After(it.Started) && now.Sub(it.Started) >= w.Budget.Again
}

// run carries out one job and says what DNS answers, stamped by the rings'
// clock.
func (w *Worker) run(ctx context.Context, it offpath.Item[jobKey, asked, Result]) offpath.Outcome[Result] {
	res, wait := w.carry(ctx, it.Asked.job)
	res.At = w.Clock.Now()
	return offpath.Outcome[Result]{Answer: &res, Hold: wait}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// carry does what j asks of DNS and says what the servers answer, and how
// long to wait before the next run when the zone's budget is spent.
func (w *Worker) carry(ctx context.Context, j Job) (Result, time.Duration) {
	t := j.Target
	verify := func() dnspub.Result {
		vctx, cancel := context.WithTimeout(ctx, w.Budget.Exchange)
		defer cancel()
		res, _ := w.Verify(vctx, t, j.List)
		return res
	}
	first := verify()
	if w.holds(j.Mode, first) {
		return Result{Holds: true}, 0
	}
	switch {
	case j.Mode == Verify:
		// Another system is to publish: not an error while a server
		// answers at all.
		return Result{Err: unanswered(first)}, 0
	case t.Primary == "" && j.Mode == Remove:
		// A verify-only zone: the operator wrote nothing to remove.
		return Result{Holds: true}, 0
	case t.Primary == "":
		return Result{Err: fmt.Errorf("publish HTTPS %s (zone %s): the zone has no primary to update", t.Name, t.Zone)}, 0
	}
	lim := w.limiter(j.Zone)
	r := lim.Reserve()
	if d := r.Delay(); d > 0 {
		r.Cancel()
		w.count(j.Zone, "rate_limited")
		return Result{Err: ErrRateLimited}, d
	}
	uctx, cancel := context.WithTimeout(ctx, 2*w.Budget.Exchange)
	var err error
	if j.Mode == Remove {
		_, err = w.Remove(uctx, t, j.List)
	} else {
		err = w.Publish(uctx, t, j.List)
	}
	cancel()
	if err != nil {
		w.count(j.Zone, "failed")
		log.FromContext(ctx).V(1).Info("DNS update failed", "zone", j.Zone, "name", t.Name, "mode", j.Mode.String(), "error", err.Error())
		return Result{Err: err}, 0
	}
	w.count(j.Zone, "written")
	second := verify()
	if w.holds(j.Mode, second) {
		return Result{Holds: true}, 0
	}
	// Written; the servers that answered something else catch up (a
	// secondary transferring the zone). None answering is an outage.
	return Result{Err: unanswered(second)}, 0
}

// holds says whether the servers' answers are what mode wants.
func (w *Worker) holds(mode Mode, res dnspub.Result) bool {
	if mode != Remove {
		return res.Matched()
	}
	if len(res.Servers) == 0 {
		return false
	}
	for _, s := range res.Servers {
		if s.Match || queryFailed(s.Err) {
			return false
		}
	}
	return true
}

// unanswered is the error of a check no server answered; nil when one did.
func unanswered(res dnspub.Result) error {
	if len(res.Servers) == 0 {
		return errors.New("no server to ask")
	}
	var errs []error
	for _, s := range res.Servers {
		if !queryFailed(s.Err) {
			return nil
		}
		errs = append(errs, s.Err)
	}
	return errors.Join(errs...)
}

func queryFailed(err error) bool {
	var e *dnspub.Error
	return errors.As(err, &e)
}

func (w *Worker) limiter(zone string) *rate.Limiter {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.limits[zone]
	if l == nil {
		l = rate.NewLimiter(rate.Every(time.Minute/time.Duration(w.Budget.UpdatesPerMinute)), w.Budget.Burst)
		w.limits[zone] = l
	}
	return l
}

func (w *Worker) count(zone, outcome string) {
	if w.Updates != nil {
		w.Updates(zone, outcome)
	}
}

// ForTenant says what went wrong with a ring's DNS in words a ring's
// status may carry: the operation, the server's answer or the kind of
// failure, and how many of the zone's servers it concerns, but not the
// servers' addresses or the zone's other names, which are the cluster
// administrator's (the zone's status and the operator's log say more).
func ForTenant(err error) string {
	if errors.Is(err, ErrRateLimited) {
		return ErrRateLimited.Error()
	}
	var all []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		all = j.Unwrap()
	} else {
		all = []error{err}
	}
	var parts []string
	for _, e := range all {
		parts = append(parts, describe(e))
	}
	slices.Sort(parts)
	parts = slices.Compact(parts)
	if len(all) > 1 {
		return fmt.Sprintf("%d of the zone's servers: %s", len(all), textlimit.List(parts, textlimit.MaxListed, "; ", 0))
	}
	return textlimit.List(parts, textlimit.MaxListed, "; ", 0)
}

func describe(err error) string {
	var e *dnspub.Error
	if !errors.As(err, &e) {
		return "the servers answer another value than the ring's"
	}
	what := map[string]string{"publish": "the update", "remove": "the update", "read": "reading the record", "verify": "the check"}[e.Op]
	switch {
	case e.TSIGError != 0:
		return what + " was refused: the zone's TSIG key is not accepted (a cluster administrator's to fix)"
	case e.Rcode >= 0:
		return fmt.Sprintf("%s was answered %s", what, dns.RcodeToString[e.Rcode])
	case errors.Is(e.Err, context.DeadlineExceeded) || isTimeout(e.Err):
		return what + " timed out"
	}
	return what + " failed: the server could not be reached"
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
