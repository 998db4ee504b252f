package confirm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/offpath"
	"github.com/ringmaster-io/ringmaster/internal/shape"
)

// Budget bounds what the Prober spends on pods, so that no namespace's pods,
// however many or however silent, hold up another namespace's rings. The
// zero value of each field is its default.
type Budget struct {
	// PodsPerRing is how many pods of one ring are asked in one round; 0
	// means 64. Pods already holding the staged key are not asked again,
	// so a larger fleet is covered over several rounds.
	PodsPerRing int
	// RingsPerNamespace is how many rings of one namespace are probed at
	// once (cluster rings count as one namespace); 0 means 4.
	RingsPerNamespace int
	// Rings is how many rings are probed at once overall; 0 means 32.
	Rings int
	// FetchesPerNamespace is how many requests to the pods of one
	// namespace are in flight at once; 0 means 16.
	FetchesPerNamespace int
	// Fetches is how many requests are in flight at once overall; 0 means
	// 64.
	Fetches int
	// ConnectTimeout bounds connecting to one pod; 0 means 1s.
	ConnectTimeout time.Duration
	// FetchTimeout bounds one pod's whole answer; 0 means 2s.
	FetchTimeout time.Duration
	// RoundDeadline bounds one round of one ring, waiting for a slot
	// included; 0 means 10s. A pod not asked by then counts as not
	// confirmed this round.
	RoundDeadline time.Duration
	// Interval is the least time between two rounds of one ring; 0 means
	// 5s.
	Interval time.Duration
	// Lead is how long before its staged key falls due a ring's pods are
	// first asked, so that a confirmed key activates on time; 0 means 30s.
	Lead time.Duration
	// MaxPods is the most pods one ring may select (in all its
	// namespaces, among those mounting its projection Secret); 0 means
	// DefaultMaxPods. A ring selecting more is not probed: its answers say
	// so (Seen.OverCap) and confirm nothing.
	MaxPods int
}

// DefaultMaxPods is Budget.MaxPods's default.
const DefaultMaxPods = 1000

func (b Budget) withDefaults() Budget {
	b.PodsPerRing = cmp.Or(b.PodsPerRing, 64)
	b.MaxPods = cmp.Or(b.MaxPods, DefaultMaxPods)
	b.RingsPerNamespace = cmp.Or(b.RingsPerNamespace, 4)
	b.Rings = cmp.Or(b.Rings, 32)
	b.FetchesPerNamespace = cmp.Or(b.FetchesPerNamespace, 16)
	b.Fetches = cmp.Or(b.Fetches, 64)
	b.ConnectTimeout = cmp.Or(b.ConnectTimeout, time.Second)
	b.FetchTimeout = cmp.Or(b.FetchTimeout, 2*time.Second)
	b.RoundDeadline = cmp.Or(b.RoundDeadline, 10*time.Second)
	b.Interval = cmp.Or(b.Interval, 5*time.Second)
	b.Lead = cmp.Or(b.Lead, 30*time.Second)
	return b
}

// MaxAge is how old answers may be, by the ring's clock, and still confirm a
// staged key: older ones are shown but confirm nothing.
const MaxAge = time.Minute

// wantTTL is how long a ring inside its probing window stays probed
// without a reconcile asking for it again (a ring deleted meanwhile).
// Reconciles of a ring awaiting its fleet ask every few seconds.
const wantTTL = 2 * time.Minute

// tick is how often the Prober looks for rings to probe, besides when a
// reconcile or a finished round wakes it.
const tick = time.Second

// Key names a ring: its kind, and its namespace (empty for a cluster ring)
// and name.
type Key struct {
	Kind string
	types.NamespacedName
}

// Want is what a reconcile needs to know of a ring's fleet.
type Want struct {
	Key
	// Ring is the ring's name as its pods serve it ("shop/web").
	Ring string
	// StagedKey is the id of the held staged key the pods are asked about;
	// for an ECHKeyRing (Kind), the staged config's config_id in decimal.
	StagedKey string
	// Due is when it falls due: its pods are asked from Budget.Lead before.
	Due time.Time
	// Namespaces are where the ring's pods live: its targets.
	Namespaces []string
	// SecretName is the ring's projection Secret.
	SecretName string
	// Confirmation is the ring's spec.confirmation.
	Confirmation v1alpha1.Confirmation
}

// same reports whether two wants ask the same question: answers to one
// answer the other.
func (w Want) same(o Want) bool {
	return w.Ring == o.Ring && w.StagedKey == o.StagedKey && w.SecretName == o.SecretName &&
		slices.Equal(w.Namespaces, o.Namespaces) && equality.Semantic.DeepEqual(w.Confirmation, o.Confirmation)
}

// Seen is the latest round's answers about a ring's staged key.
type Seen struct {
	Result
	// At is when the round ended, by the ring's clock.
	At time.Time
	// OverCap, when not zero, is the cap (Budget.MaxPods) that the pods
	// the ring selects exceed: no pod was asked, Pods counts those found
	// before the count stopped (more than OverCap) and none holds the key.
	// The ring's status should say so (Note).
	OverCap int
}

// Note says what the answers mean beyond the counts and the pods named in
// Missing; empty when there is nothing more to say.
func (s Seen) Note() string {
	if s.OverCap == 0 {
		return ""
	}
	return fmt.Sprintf("the ring selects more than %d pods, the most the operator asks (--confirmation-max-pods): none was asked", s.OverCap)
}

// Confirms reports whether the answers confirm the staged key at now: every
// pod holds it, and the answers are at most MaxAge old.
func (s Seen) Confirms(now time.Time) bool {
	return s.Confirmed() && now.Sub(s.At) <= MaxAge
}

// SelectFunc chooses, among the pods a ring's podSelector matched in its
// namespaces, those to ask (targets) and those that count as not confirmed
// without being asked (missing, with why).
type SelectFunc func(w Want, pods []corev1.Pod) (targets []Target, missing []v1alpha1.PodReport)

// Selected is the default SelectFunc: every ready pod off the host
// network, at the port of spec.confirmation (see Targets).
func Selected(w Want, pods []corev1.Pod) ([]Target, []v1alpha1.PodReport) {
	return Voters(pods, w.SecretName, w.Confirmation.Port)
}

// Prober asks rings' pods what they hold, off the reconcile path: a
// reconcile says what it needs (Want) and reads the latest answers at once;
// the Prober asks the pods of each ring whose staged key is due, or about
// to be, round after round within its Budget, and enqueues a ring when its
// answers change. It is a manager Runnable, run by the leader only; no
// goroutine of its outlives Start.
type Prober struct {
	// Pods finds the pods that mount a ring's projection Secret: the pod
	// cache (Pods).
	Pods PodLister
	// Clock is the rings' clock: it says when a staged key is due and
	// stamps the answers. Rounds are paced by real time.
	Clock clock.PassiveClock
	// Budget bounds the probing.
	Budget Budget
	// Select chooses the pods to ask; nil means Selected.
	Select SelectFunc
	// Client asks the pods; nil means NewClient within the budget's
	// timeouts.
	Client *http.Client

	once    sync.Once
	rings   *offpath.Scheduler[Key, Want, probed]
	mu      sync.Mutex
	fetches map[string]chan struct{} // by pod namespace
	global  chan struct{}
}

// probed is what the Prober keeps of a ring's latest round: its answers,
// and each pod's verdict, for the next round to ask only those that have
// not confirmed.
type probed struct {
	seen     Seen
	verdicts map[Target]verdict
}

// verdict is what a pod's last answer said of the staged key (the reason
// it does not confirm it; empty when it does), and when (real time) it was
// asked. Only this is kept of an answer, however large it was.
type verdict struct {
	reason string
	at     time.Time
}

func (p *Prober) init() {
	p.once.Do(func() {
		p.Budget = p.Budget.withDefaults()
		if p.Select == nil {
			p.Select = Selected
		}
		if p.Client == nil {
			p.Client = NewClient(p.Budget.ConnectTimeout, p.Budget.FetchTimeout)
		}
		p.fetches = map[string]chan struct{}{}
		p.global = make(chan struct{}, p.Budget.Fetches)
		// Rounds of one namespace's rings count against its budget
		// (cluster rings, of namespace "", share one).
		p.rings = offpath.New(offpath.Config[Key, Want, probed]{
			Tick: tick, TTL: wantTTL, Limit: p.Budget.Rings, PerGroup: p.Budget.RingsPerNamespace,
			Group: func(k Key, _ Want) string { return k.Namespace },
			Same:  Want.same,
			Due: func(_ time.Time, it offpath.Item[Key, Want, probed]) bool {
				return !p.Clock.Now().Before(it.Asked.Due.Add(-p.Budget.Lead))
			},
			Run:     p.round,
			Changed: probed.changed,
			Owner:   func(k Key) offpath.Owner { return offpath.Owner(k) },
		})
	})
}

// Source is where the Prober enqueues the rings of one kind whose answers
// changed, for that kind's controller to watch. Call it before Start.
func (p *Prober) Source(kind string) source.Source {
	p.init()
	return p.rings.Source(kind)
}

// Want records what a reconcile needs to know of a ring's fleet and returns
// the latest answers to it, if there are any yet. It never blocks on a pod.
func (p *Prober) Want(w Want) (Seen, bool) {
	p.init()
	last, ok := p.rings.Want(w.Key, w)
	return last.seen, ok
}

// Forget stops probing a ring: its staged key is no longer held.
func (p *Prober) Forget(k Key) {
	p.init()
	p.rings.Drop(k)
}

// NeedLeaderElection: only the leader reconciles, so only it probes.
func (p *Prober) NeedLeaderElection() bool { return true }

// Start probes until ctx is done, and returns once every round it started
// has ended. A ring is probed from Budget.Lead before its staged key falls
// due, and a reconcile's Want keeps it probed: one nobody asks for within
// wantTTL is dropped.
func (p *Prober) Start(ctx context.Context) error {
	p.init()
	return p.rings.Start(ctx)
}

// errNotAsked is a pod's answer when the budget left it for a later round.
var errNotAsked = errors.New("not asked yet: over the budget of pods asked per round")

// round asks one ring's pods, within the round's deadline, and says what
// they said. The ring's next round comes Budget.Interval later, whatever
// came of this one.
func (p *Prober) round(ctx context.Context, it offpath.Item[Key, Want, probed]) offpath.Outcome[probed] {
	var previous map[Target]verdict
	if it.Answer != nil {
		previous = it.Answer.verdicts
	}
	rctx, cancel := context.WithTimeout(ctx, p.Budget.RoundDeadline)
	defer cancel()
	verdicts, seen, err := p.ask(rctx, it.Asked, previous)
	seen.At = p.Clock.Now()
	out := offpath.Outcome[probed]{Hold: p.Budget.Interval}
	if err != nil {
		if ctx.Err() == nil {
			log.FromContext(ctx).Error(err, "Probing a ring's pods failed", "ring", it.Asked.Ring)
		}
		return out
	}
	out.Answer = &probed{seen: seen, verdicts: verdicts}
	return out
}

// changed reports whether a round's answers, next, are news to the ring's
// controller: other counts or pods, or a confirmation, each of which is
// (the ring acts on it, fresher than MaxAge).
func (was probed) changed(next probed) bool {
	return next.seen.Confirmed() || !sameResult(was.seen.Result, next.seen.Result) || was.seen.OverCap != next.seen.OverCap
}

// ask finds and selects the ring's pods, asks those that have not yet
// confirmed (the longest unasked first, at most PodsPerRing), and tallies
// every selected pod by its latest answer. A ring selecting more than
// MaxPods pods is not asked at all.
func (p *Prober) ask(ctx context.Context, w Want, previous map[Target]verdict) (map[Target]verdict, Seen, error) {
	sel, err := metav1.LabelSelectorAsSelector(&w.Confirmation.PodSelector)
	if err != nil {
		// The API's validation let an invalid selector through: nobody
		// confirms.
		return nil, Seen{}, fmt.Errorf("spec.confirmation.podSelector: %w", err)
	}
	var pods []corev1.Pod
	for _, ns := range w.Namespaces {
		mounting, err := p.Pods.Mounting(ctx, ns, w.SecretName)
		if err != nil {
			return nil, Seen{}, err
		}
		for _, pod := range mounting {
			// A pod whose labels the cache cut may be selected: Voters
			// reports it.
			if shape.WasCut(&pod, shape.CutLabels) || sel.Matches(labels.Set(pod.Labels)) {
				pods = append(pods, pod)
			}
		}
		if len(pods) > p.Budget.MaxPods {
			return nil, Seen{Result: Result{Pods: len(pods), MissingCount: len(pods)}, OverCap: p.Budget.MaxPods}, nil
		}
	}
	targets, missing := p.Select(w, pods)

	var toAsk []Target
	for _, t := range targets {
		if v, ok := previous[t]; !ok || v.reason != "" {
			toAsk = append(toAsk, t)
		}
	}
	slices.SortStableFunc(toAsk, func(a, b Target) int { return previous[a].at.Compare(previous[b].at) })
	toAsk = toAsk[:min(len(toAsk), p.Budget.PodsPerRing)]

	now := time.Now()
	// The budget's slots pace the requests (acquire), not the Asker.
	asker := &Asker{Client: p.Client, Parallel: max(1, len(toAsk)), Acquire: p.acquire}
	fresh := map[Target]string{}
	for _, a := range asker.Ask(ctx, toAsk) {
		fresh[a.Target] = w.judge(a)
	}

	answers := make(map[Target]verdict, len(targets))
	r := Result{Pods: len(targets) + len(missing)}
	for _, m := range missing {
		r.miss(m)
	}
	for _, t := range targets {
		v, before := previous[t]
		if reason, ok := fresh[t]; ok {
			v = verdict{reason: reason, at: now}
		} else if !before {
			v = verdict{reason: errNotAsked.Error()}
		}
		answers[t] = v
		if v.reason == "" {
			r.Holding++
		} else {
			r.miss(v1alpha1.PodReport{Namespace: t.Namespace, Name: t.Name, Node: t.Node, Reason: v.reason})
		}
	}
	return answers, Seen{Result: r}, nil
}

// judge is why one answer does not confirm w's staged key; empty when it
// does.
func (w Want) judge(a Answer) string {
	r := w.tally([]Answer{a}, nil)
	if r.Confirmed() {
		return ""
	}
	if len(r.Missing) == 0 { // an ECH config id that does not parse
		return "holds no config " + w.StagedKey
	}
	return r.Missing[0].Reason
}

// tally judges the answers about w's staged key, or its staged config for
// an ECHKeyRing.
func (w Want) tally(answers []Answer, missing []v1alpha1.PodReport) Result {
	if w.Kind == v1alpha1.KindECHKeyRing {
		// The reconcile writes the id; one that does not parse is held by
		// no pod.
		id, err := strconv.ParseUint(w.StagedKey, 10, 8)
		if err != nil {
			return Result{Pods: len(answers) + len(missing), MissingCount: len(answers) + len(missing)}
		}
		return TallyECH(w.Ring, uint8(id), answers, missing)
	}
	return Tally(w.Ring, w.StagedKey, answers, missing)
}

// acquire takes a slot of the pod's namespace, then one of the whole
// operator, within the round's deadline.
func (p *Prober) acquire(ctx context.Context, t Target) (func(), error) {
	late := fmt.Errorf("not asked within the round's deadline of %s", p.Budget.RoundDeadline)
	p.mu.Lock()
	ns := p.fetches[t.Namespace]
	if ns == nil {
		ns = make(chan struct{}, p.Budget.FetchesPerNamespace)
		p.fetches[t.Namespace] = ns
	}
	p.mu.Unlock()
	select {
	case ns <- struct{}{}:
	case <-ctx.Done():
		return nil, late
	}
	select {
	case p.global <- struct{}{}:
	case <-ctx.Done():
		<-ns
		return nil, late
	}
	release := func() { <-p.global; <-ns }
	if ctx.Err() != nil { // both were ready: select chose at random
		release()
		return nil, late
	}
	return release, nil
}

func sameResult(a, b Result) bool {
	return a.Pods == b.Pods && a.Holding == b.Holding && a.MissingCount == b.MissingCount && slices.Equal(a.Missing, b.Missing)
}
