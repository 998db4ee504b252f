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
	"maps"
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
	"github.com/ringmaster-io/ringmaster/internal/offpath"
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
// finished round wakes it: a projection waiting retryAfter waits at most
// this longer.
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

	once sync.Once
	// projections holds those whose pods are not all nudged yet, each
	// with its latest epoch (the question) and what came of its pods so
	// far (the answer).
	projections *offpath.Scheduler[target, Delivery, progress]
	mu          sync.Mutex
	nsSlots     map[string]*slots
	global      *slots
	results     *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	pending     prometheus.GaugeFunc
}

type target struct{ namespace, secret string }

// progress is what came of a projection's pods for its latest epoch: at
// most their UIDs, and only until every one is nudged.
type progress struct {
	done  map[types.UID]bool
	tries map[types.UID]int
}

func (n *Nudger) init() {
	n.once.Do(func() {
		n.Budget = n.Budget.withDefaults()
		if n.Patch == nil {
			n.Patch = n.patch
		}
		n.nsSlots = map[string]*slots{}
		n.global = newSlots(n.Budget.Patches)
		// A revoke's rounds are urgent: they go first, counted apart. A
		// projection is given up GiveUp after its epoch was handed over:
		// by then its kubelets have synced on their own.
		n.projections = offpath.New(offpath.Config[target, Delivery, progress]{
			Tick: tick, TTL: n.Budget.GiveUp, GiveUp: n.Budget.GiveUp,
			Limit: n.Budget.Rounds, PerGroup: n.Budget.RoundsPerNamespace,
			Group:  func(t target, _ Delivery) string { return t.namespace },
			Urgent: func(d Delivery) bool { return d.Urgent },
			Same:   func(a, b Delivery) bool { return a.Epoch == b.Epoch },
			Merge: func(old, d Delivery) Delivery {
				d.Urgent = d.Urgent || old.Urgent
				return d
			},
			Run:      n.round,
			Finished: n.finished,
		})
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
		}, func() float64 { return float64(n.projections.Len()) })
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
	n.projections.Want(target{d.Namespace, d.Secret}, d)
}

// NeedLeaderElection: only the leader writes projections, so only it
// nudges.
func (n *Nudger) NeedLeaderElection() bool { return true }

// Start nudges until ctx is done, and returns once every round it started
// has ended. Revokes' projections go first, then those waiting longest,
// within the budget of rounds per namespace and overall.
func (n *Nudger) Start(ctx context.Context) error {
	n.init()
	return n.projections.Start(ctx)
}

// round patches up to PodsPerRound pods of one projection that are not
// nudged yet, and says what came of each. A projection with pods left goes
// back in the queue, behind those waiting: a large fleet does not hold up
// another projection's pods.
func (n *Nudger) round(ctx context.Context, it offpath.Item[target, Delivery, progress]) offpath.Outcome[progress] {
	w := it.Asked
	var last progress
	if it.Answer != nil {
		last = *it.Answer
	}
	var batch []*corev1.Pod
	more := false
	pods, err := n.Pods.Mounting(ctx, w.Namespace, w.Secret)
	if err == nil {
		for i := range pods {
			p := &pods[i]
			if !syncing(p) || last.done[p.UID] {
				continue
			}
			if len(batch) == n.Budget.PodsPerRound {
				more = true
				break
			}
			batch = append(batch, p)
		}
	} else if ctx.Err() == nil {
		log.FromContext(ctx).Error(err, "Finding the pods to nudge failed", "namespace", w.Namespace, "secret", w.Secret)
	}

	results := make([]string, len(batch))
	var wg sync.WaitGroup
	for i, p := range batch {
		wg.Go(func() { results[i] = n.nudge(ctx, w, p) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return offpath.Outcome[progress]{}
	}

	next := progress{done: maps.Clone(last.done), tries: maps.Clone(last.tries)}
	if next.done == nil {
		next.done = map[types.UID]bool{}
	}
	if next.tries == nil {
		next.tries = map[types.UID]int{}
	}
	left := map[string]int{}
	retry := err != nil
	for i, p := range batch {
		res := results[i]
		n.results.WithLabelValues(res).Inc()
		if res == Failed {
			if next.tries[p.UID]++; next.tries[p.UID] < n.Budget.Attempts {
				retry = true
				continue
			}
		}
		next.done[p.UID] = true
		if res != Nudged {
			left[res]++
		}
	}
	if len(left) > 0 {
		log.FromContext(ctx).Info("Left pods to their kubelet's own sync", "namespace", w.Namespace, "secret", w.Secret, "epoch", w.Epoch,
			"gone", left[Gone], "conflict", left[Conflict], "forbidden", left[Forbidden], "failed", left[Failed])
	}
	switch {
	case more:
		return offpath.Outcome[progress]{Answer: &next}
	case retry:
		return offpath.Outcome[progress]{Answer: &next, Hold: retryAfter}
	}
	return offpath.Outcome[progress]{Answer: &next, Done: true}
}

// finished records a projection whose pods are all nudged with its latest
// epoch, or left to their kubelets.
func (n *Nudger) finished(ctx context.Context, it offpath.Item[target, Delivery, progress]) {
	priority := "rotation"
	if it.Asked.Urgent {
		priority = "revoke"
	}
	after := time.Since(it.AskedAt)
	n.duration.WithLabelValues(priority).Observe(after.Seconds())
	log.FromContext(ctx).V(1).Info("Nudged the pods mounting a projection", "namespace", it.Asked.Namespace, "secret", it.Asked.Secret, "epoch", it.Asked.Epoch,
		"pods", len(it.Answer.done), "after", after.String())
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
