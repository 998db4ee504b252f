// Package nudge makes kubelets re-mount a projection Secret at once after
// the operator writes a new epoch into it. A kubelet refreshes a Secret
// volume on its own periodic sync (up to about 90 s with its defaults), but
// any update to a pod object makes it sync that pod, and re-mount its
// Secret volumes, at once. So after every publication the Nudger sets one
// annotation (Annotation) on each pod that mounts the projection.
//
// It works off the reconcile path, as internal/confirm asks pods: the ring's
// write layer hands it each projection it wrote (Nudge) and goes on; the
// Nudger finds the pods in the operator's pod cache (confirm.Pods) and
// patches them round after round within its Budget: so many pods of one
// projection per round, so many patches in flight per namespace and
// overall, a revoke's first. A pod it cannot patch (gone, replaced, refused)
// is left to its kubelet's own sync and counted: nothing depends on the
// nudge, and every bound of a ring holds without it.
package nudge

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/confirm"
)

// Pods are patched with this annotation alone, by a JSON merge patch that
// also names the pod's UID (so that a pod created again under the name is
// not the one patched), and under the admission guard of
// config/admission/pods.yaml, which lets the operator change nothing else
// of a pod.
//
// +kubebuilder:rbac:groups="",resources=pods,verbs=patch

// Annotation is the one annotation the Nudger sets on a pod: the last
// projection it delivered to the pod, as "<secret>=<epoch>" (Value).
const Annotation = v1alpha1.DeliveredAnnotation

// FieldManager owns the annotation in the pods' managed fields.
const FieldManager = "ringmaster"

// Value is the annotation's value for epoch epoch of projection Secret
// secret. Each new epoch changes it, and only a change of a pod makes its
// kubelet sync: a pod nudged again with the same value is not touched.
func Value(secret, epoch string) string { return secret + "=" + epoch }

// Delivery is a projection Secret the operator wrote a new epoch into.
type Delivery struct {
	Namespace string
	// Secret is the projection's name.
	Secret string
	// Epoch is the epoch it now carries.
	Epoch string
	// Urgent marks a revoke's epoch: its pods are nudged before any other
	// projection's.
	Urgent bool
}

// Budget bounds what the Nudger spends on pods. The zero value of each field
// is its default.
type Budget struct {
	// PodsPerRound is how many pods of one projection are patched in one
	// round; 0 means 100. A projection mounted by more is covered over
	// several rounds, between other projections' rounds.
	PodsPerRound int
	// RoundsPerNamespace is how many projections of one namespace are
	// worked on at once; 0 means 2. A revoke's rounds are counted apart
	// from the others', within the same caps, so that a revoke never waits
	// for a rotation's round to end.
	RoundsPerNamespace int
	// Rounds is how many projections are worked on at once overall; 0
	// means 8 (and as many revokes').
	Rounds int
	// PatchesPerNamespace is how many patches to the pods of one namespace
	// are in flight at once; 0 means 8.
	PatchesPerNamespace int
	// Patches is how many patches are in flight at once overall; 0 means
	// 32. A revoke's take the next free slot ahead of every other.
	Patches int
	// Timeout bounds one patch; 0 means 5s.
	Timeout time.Duration
	// Attempts is how many times a patch that failed for a reason a retry
	// may mend (a timeout, a server error) is tried for one epoch; 0 means
	// 3.
	Attempts int
	// GiveUp is how long after a projection's write the Nudger stops
	// trying its pods; 0 means 2m, by when every kubelet with the default
	// settings has refreshed the volume on its own.
	GiveUp time.Duration
}

func (b Budget) withDefaults() Budget {
	b.PodsPerRound = cmp.Or(b.PodsPerRound, 100)
	b.RoundsPerNamespace = cmp.Or(b.RoundsPerNamespace, 2)
	b.Rounds = cmp.Or(b.Rounds, 8)
	b.PatchesPerNamespace = cmp.Or(b.PatchesPerNamespace, 8)
	b.Patches = cmp.Or(b.Patches, 32)
	b.Timeout = cmp.Or(b.Timeout, 5*time.Second)
	b.Attempts = cmp.Or(b.Attempts, 3)
	b.GiveUp = cmp.Or(b.GiveUp, 2*time.Minute)
	return b
}

// The results of a pod's nudge (the label of ringmaster_nudges_total).
const (
	// Nudged: the pod carries the annotation; its kubelet syncs it now.
	Nudged = "nudged"
	// Gone: the pod no longer exists.
	Gone = "gone"
	// Conflict: a pod of that name exists but is not the one the cache
	// saw (another UID), or the API server reported a conflict.
	Conflict = "conflict"
	// Forbidden: the API server refused (RBAC, or admission: a guard
	// refusing the change, or another admission control).
	Forbidden = "forbidden"
	// Failed: every attempt failed otherwise (timeouts, server errors).
	Failed = "failed"
)

// retryAfter is how long a projection whose pods could not all be reached
// waits before its next round.
const retryAfter = time.Second

// tick is how often the Nudger looks for work, besides when a Nudge or a
// finished round wakes it.
const tick = time.Second

// PatchFunc sets the annotation to value on the pod the cache saw.
type PatchFunc func(ctx context.Context, pod *corev1.Pod, value string) error

// Nudger patches the pods of each projection written, off the reconcile
// path. It is a manager Runnable, run by the leader only; no goroutine of
// its outlives Start.
type Nudger struct {
	// Pods finds the pods that mount a projection: the pod cache
	// (confirm.Pods).
	Pods confirm.PodLister
	// Client patches the pods.
	Client client.Client
	// Budget bounds the work.
	Budget Budget
	// Patch, when set, replaces the patch through Client (tests).
	Patch PatchFunc

	once     sync.Once
	mu       sync.Mutex
	entries  map[target]*entry
	rounds   map[round]int // rounds in flight, by namespace and priority
	running  [2]int        // rounds in flight overall, by priority
	nsSlots  map[string]*slots
	global   *slots
	kick     chan struct{}
	results  *prometheus.CounterVec
	duration *prometheus.HistogramVec
	pending  prometheus.GaugeFunc
}

type target struct{ namespace, secret string }

type round struct {
	namespace string
	urgent    bool
}

// entry is what the Nudger keeps of one projection whose pods are not all
// nudged yet: at most its pods' UIDs, and only until they are.
type entry struct {
	want Delivery
	// written is when the epoch was handed over (real time), queued when
	// the entry last joined the queue.
	written, queued time.Time
	// notBefore delays the next round after a failure.
	notBefore time.Time
	done      map[types.UID]bool
	tries     map[types.UID]int
	busy      bool
}

func (n *Nudger) init() {
	n.once.Do(func() {
		n.Budget = n.Budget.withDefaults()
		if n.Patch == nil {
			n.Patch = n.patch
		}
		n.entries = map[target]*entry{}
		n.rounds = map[round]int{}
		n.nsSlots = map[string]*slots{}
		n.global = newSlots(n.Budget.Patches)
		n.kick = make(chan struct{}, 1)
		n.results = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringmaster_nudges_total",
			Help: "Pods the operator nudged after writing a new epoch to a projection they mount, by result: nudged, gone, conflict, forbidden, failed (all but nudged are left to the kubelet's own sync).",
		}, []string{"result"})
		n.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ringmaster_nudge_seconds",
			Help:    "Seconds from a projection's write to the last of its pods nudged, by priority: revoke, or rotation.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120},
		}, []string{"priority"})
		n.pending = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ringmaster_nudge_pending_projections",
			Help: "Projections written whose pods are not all nudged yet.",
		}, func() float64 {
			n.mu.Lock()
			defer n.mu.Unlock()
			return float64(len(n.entries))
		})
	})
}

// Collectors are the Nudger's metrics, for a registry:
//
//	ringmaster_nudges_total{result}
//	ringmaster_nudge_seconds{priority}
//	ringmaster_nudge_pending_projections
func (n *Nudger) Collectors() []prometheus.Collector {
	n.init()
	return []prometheus.Collector{n.results, n.duration, n.pending}
}

// Nudge hands over a projection just written. It never blocks on a pod: the
// pods are patched in the background. A newer epoch of the same projection
// replaces one whose pods are still being nudged (they are nudged again with
// the newer value), and stays urgent if either was.
func (n *Nudger) Nudge(d Delivery) {
	n.init()
	n.mu.Lock()
	defer n.mu.Unlock()
	t := target{d.Namespace, d.Secret}
	now := time.Now()
	e := n.entries[t]
	switch {
	case e == nil:
		e = &entry{want: d, written: now, queued: now}
		n.entries[t] = e
	case e.want.Epoch != d.Epoch:
		d.Urgent = d.Urgent || e.want.Urgent
		e.want, e.written, e.done, e.tries = d, now, nil, nil
	default:
		e.want.Urgent = e.want.Urgent || d.Urgent
	}
	n.wake()
}

// NeedLeaderElection: only the leader writes projections, so only it
// nudges.
func (n *Nudger) NeedLeaderElection() bool { return true }

// Start nudges until ctx is done, and returns once every round it started
// has ended.
func (n *Nudger) Start(ctx context.Context) error {
	n.init()
	var wg sync.WaitGroup
	defer wg.Wait()
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		for _, e := range n.due(time.Now()) {
			wg.Go(func() { n.round(ctx, e) })
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-n.kick:
		}
	}
}

func (n *Nudger) wake() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// due picks the projections to work on now, revokes' first and then the
// longest queued, within the budget of rounds per namespace and overall
// (each priority apart), and marks them busy. It drops those written longer
// ago than GiveUp: their kubelets have synced on their own.
func (n *Nudger) due(now time.Time) []*entry {
	n.mu.Lock()
	defer n.mu.Unlock()
	var ready []*entry
	for t, e := range n.entries {
		if e.busy {
			continue
		}
		if now.Sub(e.written) > n.Budget.GiveUp {
			delete(n.entries, t)
			continue
		}
		if !now.Before(e.notBefore) {
			ready = append(ready, e)
		}
	}
	slices.SortFunc(ready, func(a, b *entry) int {
		if a.want.Urgent != b.want.Urgent {
			if a.want.Urgent {
				return -1
			}
			return 1
		}
		return cmp.Or(a.queued.Compare(b.queued), cmp.Compare(a.want.Namespace, b.want.Namespace), cmp.Compare(a.want.Secret, b.want.Secret))
	})
	var out []*entry
	for _, e := range ready {
		r, q := round{e.want.Namespace, e.want.Urgent}, queue(e.want.Urgent)
		if n.running[q] >= n.Budget.Rounds || n.rounds[r] >= n.Budget.RoundsPerNamespace {
			continue
		}
		n.rounds[r]++
		n.running[q]++
		e.busy = true
		out = append(out, e)
	}
	return out
}

// round patches up to PodsPerRound pods of one projection that are not
// nudged yet, and keeps what came of each.
func (n *Nudger) round(ctx context.Context, e *entry) {
	n.mu.Lock()
	w := e.want
	n.mu.Unlock()
	r := round{w.Namespace, w.Urgent}

	var batch []*corev1.Pod
	more := false
	pods, err := n.Pods.Mounting(ctx, w.Namespace, w.Secret)
	if err == nil {
		n.mu.Lock()
		for i := range pods {
			p := &pods[i]
			if !syncing(p) || (e.want.Epoch == w.Epoch && e.done[p.UID]) {
				continue
			}
			if len(batch) == n.Budget.PodsPerRound {
				more = true
				break
			}
			batch = append(batch, p)
		}
		n.mu.Unlock()
	} else if ctx.Err() == nil {
		log.FromContext(ctx).Error(err, "Finding the pods to nudge failed", "namespace", w.Namespace, "secret", w.Secret)
	}

	results := make([]string, len(batch))
	var wg sync.WaitGroup
	for i, p := range batch {
		wg.Go(func() { results[i] = n.nudge(ctx, w, p) })
	}
	wg.Wait()

	n.mu.Lock()
	defer n.mu.Unlock()
	defer n.wake() // a round's slot is free
	n.rounds[r]--
	n.running[queue(w.Urgent)]--
	e.busy = false
	if ctx.Err() != nil {
		return
	}
	left := map[string]int{}
	retry := err != nil
	for i, p := range batch {
		res := results[i]
		n.results.WithLabelValues(res).Inc()
		if e.want.Epoch != w.Epoch {
			continue // a newer epoch came meanwhile: its pods start over
		}
		if res == Failed {
			if e.tries == nil {
				e.tries = map[types.UID]int{}
			}
			if e.tries[p.UID]++; e.tries[p.UID] < n.Budget.Attempts {
				retry = true
				continue
			}
		}
		if e.done == nil {
			e.done = map[types.UID]bool{}
		}
		e.done[p.UID] = true
		if res != Nudged {
			left[res]++
		}
	}
	if len(left) > 0 {
		log.FromContext(ctx).Info("Left pods to their kubelet's own sync", "namespace", w.Namespace, "secret", w.Secret, "epoch", w.Epoch,
			"gone", left[Gone], "conflict", left[Conflict], "forbidden", left[Forbidden], "failed", left[Failed])
	}
	now := time.Now()
	switch {
	case e.want.Epoch != w.Epoch || more:
		// Back in the queue, behind those waiting: a large fleet does not
		// hold up another projection's pods.
		e.queued = now
	case retry:
		e.queued, e.notBefore = now, now.Add(retryAfter)
	default:
		priority := "rotation"
		if e.want.Urgent {
			priority = "revoke"
		}
		n.duration.WithLabelValues(priority).Observe(now.Sub(e.written).Seconds())
		log.FromContext(ctx).V(1).Info("Nudged the pods mounting a projection", "namespace", w.Namespace, "secret", w.Secret, "epoch", w.Epoch,
			"pods", len(e.done), "after", now.Sub(e.written).String())
		delete(n.entries, target{w.Namespace, w.Secret})
	}
}

// syncing reports whether a pod's kubelet mounts its volumes now: it is
// bound to a node, not being deleted, and not finished. Others need no
// nudge: a pod not started yet mounts the newest epoch when it starts.
func syncing(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && p.DeletionTimestamp == nil &&
		p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// nudge patches one pod within the budget's slots, a revoke's ahead of the
// others, and says what came of it.
func (n *Nudger) nudge(ctx context.Context, w Delivery, p *corev1.Pod) string {
	n.mu.Lock()
	ns := n.nsSlots[w.Namespace]
	if ns == nil {
		ns = newSlots(n.Budget.PatchesPerNamespace)
		n.nsSlots[w.Namespace] = ns
	}
	n.mu.Unlock()
	if err := ns.acquire(ctx, w.Urgent); err != nil {
		return Failed
	}
	defer ns.release()
	if err := n.global.acquire(ctx, w.Urgent); err != nil {
		return Failed
	}
	defer n.global.release()
	pctx, cancel := context.WithTimeout(ctx, n.Budget.Timeout)
	defer cancel()
	return Classify(n.Patch(pctx, p, Value(w.Secret, w.Epoch)))
}

// Classify names the result of a patch by its error.
func Classify(err error) string {
	switch {
	case err == nil:
		return Nudged
	case apierrors.IsNotFound(err):
		return Gone
	case apierrors.IsConflict(err), errors.Is(err, errReplaced):
		return Conflict
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return Forbidden
	}
	return Failed
}

// errReplaced: the pod of the name is not the one the cache saw.
var errReplaced = errors.New("the pod was replaced by another of its name")

// Body is the merge patch that sets the annotation to value on the pod of
// the given UID, and changes nothing else: the UID is the pod's own, so a
// pod created again under the name fails the patch rather than take it.
func Body(uid types.UID, value string) ([]byte, error) {
	return json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         uid,
		"annotations": map[string]string{Annotation: value},
	}})
}

// patch sets the annotation by a JSON merge patch through Client, reading
// back only the pod's metadata.
func (n *Nudger) patch(ctx context.Context, pod *corev1.Pod, value string) error {
	body, err := Body(pod.UID, value)
	if err != nil {
		return err
	}
	obj := &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
	}
	err = n.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, body), client.FieldOwner(FieldManager))
	if replaced(err) {
		return fmt.Errorf("nudge pod %s/%s: %w: %w", pod.Namespace, pod.Name, errReplaced, err)
	}
	return err
}

// replaced reports whether the API server refused a patch for naming
// another UID than the pod's: the UID is immutable, so it calls the patch
// invalid, in metadata.uid.
func replaced(err error) bool {
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, c := range status.Status().Details.Causes {
		if c.Field == "metadata.uid" {
			return true
		}
	}
	return false
}
