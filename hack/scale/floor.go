package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/controller"
	"github.com/ringmaster-io/ringmaster/internal/controller/apply"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	fleetplan "github.com/ringmaster-io/ringmaster/internal/fleet"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/mint"
)

// standIn replaces the operator under -floor. For each ring the bench
// creates it makes the requests the operator makes, as the operator's
// service account, with as many workers as the operator's default
// --ring-workers and no client rate limit, as the operator runs: the
// snapshot, the projection and the status by server-side apply; for each
// rotate-now, the Rotated event, the next snapshot, the projection's
// update and the status. Its objects are the operator's, built by the
// same functions (keyring.Next, distribute.Snapshot and Projection), with
// a status of the same fields. It does nothing else: no cache, no watch,
// no plan from what the cluster holds, no retry. What the control plane
// takes to serve it is the floor of a phase on this machine: the bench's
// own requests and the fewest the operator can make, and no operator's
// work beside.
type standIn struct {
	client client.Client
	work   chan standInWork
	wg     sync.WaitGroup
	// err is the first request that failed, which ends the phase.
	err atomic.Pointer[error]
	// requests counts the requests made.
	requests atomic.Int64

	mu    sync.Mutex
	rings map[types.NamespacedName]*standInRing
}

// standInWork is a ring just created (ring set) or asked a rotate-now.
type standInWork struct {
	ring   *v1alpha1.TicketKeyRing
	key    types.NamespacedName
	rotate string
	// fleet is the FleetRequest that asks the rotate-now, if any: its
	// epoch gets no Rotated event, and its status records the request.
	fleet *v1alpha1.FleetRequest
}

// standInRing is what the stand-in keeps of a ring between its requests:
// what the operator's cache would hold.
type standInRing struct {
	obj        *v1alpha1.TicketKeyRing
	current    keyring.Ring
	projection *corev1.Secret
}

// newStandIn starts the stand-in's workers, as the operator's service
// account (the kubeconfig fleet wrote for the operator), until close; a
// request in flight ends with ctx.
func newStandIn(ctx context.Context, kubeconfig string, scheme *runtime.Scheme) (*standIn, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("the operator's kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = -1, 0 // as main.go sets the operator's
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	s := &standIn{client: c, work: make(chan standInWork, 1024), rings: map[types.NamespacedName]*standInRing{}}
	for range controller.DefaultRingWorkers {
		s.wg.Go(func() {
			for w := range s.work {
				if err := s.do(ctx, w); err != nil {
					s.err.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	return s, nil
}

func (s *standIn) close() {
	close(s.work)
	s.wg.Wait()
}

// failed is the first request that failed, if any.
func (s *standIn) failed() error {
	if err := s.err.Load(); err != nil {
		return *err
	}
	return nil
}

func (s *standIn) do(ctx context.Context, w standInWork) error {
	now := time.Now().Truncate(time.Second)
	if w.ring != nil {
		return s.publish(ctx, &standInRing{obj: w.ring}, now, "", nil)
	}
	s.mu.Lock()
	r := s.rings[w.key]
	s.mu.Unlock()
	if r == nil {
		return fmt.Errorf("stand-in: a rotate-now of %s, which it did not publish", w.key)
	}
	return s.publish(ctx, r, now, w.rotate, w.fleet)
}

// publish makes the next epoch of r, as the operator would: its first, or
// a rotate-now's.
func (s *standIn) publish(ctx context.Context, r *standInRing, now time.Time, rotate string, fr *v1alpha1.FleetRequest) error {
	spec := r.obj.Spec
	policy := keyring.Policy{RotationInterval: spec.RotationInterval.Duration, RetainedKeys: int(spec.RetainedKeys), ActivationDelay: spec.ActivationDelay.Duration}
	plan := keyring.Next(now, policy, r.current, keyring.Inputs{RotateNow: rotate != ""})
	secrets, err := mint.Random{}.Mint(ctx, plan.Mint)
	if err != nil {
		return err
	}
	next, err := plan.Fill(secrets)
	if err != nil {
		return err
	}
	owner := distribute.OwnerOf(r.obj)
	next.Name, next.Epoch, next.IssuedAt = owner.RingName(), r.current.Epoch+1, now
	req := distribute.Requests{Rotate: rotate}
	if fr != nil {
		req = distribute.Requests{Fleet: distribute.FleetRequestValue(fr.Spec.Action, string(fr.UID))}
	}
	snap, err := distribute.Snapshot(owner, next, req)
	if err != nil {
		return err
	}
	if rotate != "" && fr == nil {
		if err := s.event(ctx, r.obj, snap, next.Epoch); err != nil {
			return err
		}
	}
	if err := s.count(func() error { return s.client.Create(ctx, snap) }); err != nil {
		return fmt.Errorf("stand-in: create snapshot %s/%s: %w", snap.Namespace, snap.Name, err)
	}
	want := distribute.Projection(owner, snap, r.obj.Namespace)
	if r.projection != nil {
		want = distribute.Updated(r.projection, want)
	}
	if err := s.count(func() error {
		if r.projection == nil {
			return s.client.Create(ctx, want)
		}
		return s.client.Update(ctx, want)
	}); err != nil {
		return fmt.Errorf("stand-in: write projection %s/%s: %w", want.Namespace, want.Name, err)
	}
	st := status(next, snap.Name, now, rotate)
	if fr != nil {
		rec := fleetplan.Record(fr)
		rec.Epoch, rec.ServedAt = next.Epoch, &metav1.Time{Time: now}
		st.LastRotateRequestedAt, st.FleetRequest = "", &rec
	}
	if err := s.count(func() error { return s.applyStatus(ctx, r.obj, st) }); err != nil {
		return fmt.Errorf("stand-in: apply the status of %s/%s: %w", r.obj.Namespace, r.obj.Name, err)
	}
	s.mu.Lock()
	s.rings[client.ObjectKeyFromObject(r.obj)] = &standInRing{obj: r.obj, current: next, projection: want}
	s.mu.Unlock()
	return nil
}

// count counts a request, before it is made: the bench may see its
// outcome before the call returns.
func (s *standIn) count(request func() error) error {
	s.requests.Add(1)
	return request()
}

// event is the operator's Rotated event of a rotate-now, as its
// events.k8s.io recorder writes it.
func (s *standIn) event(ctx context.Context, ring *v1alpha1.TicketKeyRing, snap *corev1.Secret, epoch int64) error {
	suffix := make([]byte, 8)
	_, _ = rand.Read(suffix) // never fails (crypto/rand)
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: ring.Namespace, Name: ring.Name + "." + hex.EncodeToString(suffix)},
		EventTime:  metav1.NewMicroTime(time.Now()), ReportingController: "ringmaster", ReportingInstance: "ringmaster-stand-in",
		Action: "Publish", Reason: "Rotated", Type: corev1.EventTypeNormal,
		Regarding: corev1.ObjectReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.KindTicketKeyRing, Namespace: ring.Namespace,
			Name: ring.Name, UID: ring.UID, ResourceVersion: ring.ResourceVersion},
		Related: &corev1.ObjectReference{APIVersion: "v1", Kind: "Secret", Namespace: snap.Namespace, Name: snap.Name},
		Note:    fmt.Sprintf("Published epoch %d (%s): 3 keys, rotate-now", epoch, snap.Name),
	}
	if err := s.count(func() error { return s.client.Create(ctx, ev) }); err != nil {
		return fmt.Errorf("stand-in: create the Rotated event of %s/%s: %w", ring.Namespace, ring.Name, err)
	}
	return nil
}

// applyStatus writes a ring's whole status by server-side apply, as the
// operator's applyStatus does.
func (s *standIn) applyStatus(ctx context.Context, ring *v1alpha1.TicketKeyRing, st v1alpha1.TicketKeyRingStatus) error {
	status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": ring.Name, "namespace": ring.Namespace}, "status": status}}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(v1alpha1.KindTicketKeyRing))
	return s.client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(apply.FieldOwner), client.ForceOwnership)
}

// status is a published ring's status with the fields the operator sets.
func status(r keyring.Ring, snapshot string, now time.Time, rotate string) v1alpha1.TicketKeyRingStatus {
	at := metav1.NewTime(now)
	cond := func(t string, s metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: 1, LastTransitionTime: at}
	}
	st := v1alpha1.TicketKeyRingStatus{
		Conditions: []metav1.Condition{
			cond(v1alpha1.ConditionRotationOverdue, metav1.ConditionFalse, v1alpha1.ReasonOnSchedule, "No rotation is overdue"),
			cond(v1alpha1.ConditionRetentionLimited, metav1.ConditionFalse, "FormatsKeepRetainedKeys", "Every format listed keeps the 3 retained key(s)"),
			cond(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonPublished, fmt.Sprintf("Epoch %d is published to 1 namespace(s)", r.Epoch)),
		},
		Epoch: r.Epoch, Snapshot: snapshot, Targets: 1, LastRotateRequestedAt: rotate,
	}
	for _, k := range r.Keys {
		state := r.StateOf(k, now)
		st.Keys = append(st.Keys, v1alpha1.KeyStatus{ID: k.ID, State: v1alpha1.KeyState(state), ActiveFrom: metav1.NewTime(k.ActiveFrom),
			RetireAt: metav1.NewTime(k.RetireAt), ExpiresAt: metav1.NewTime(k.ExpiresAt)})
		if state == keyring.Active {
			st.ActiveKey = &v1alpha1.ActiveKey{ID: k.ID, ActiveFrom: metav1.NewTime(k.ActiveFrom)}
			st.NextRotation = &metav1.Time{Time: k.RetireAt}
		}
	}
	return st
}

// runFloorPhase is runPhase under -floor: the bulk's requests, each handed
// to the stand-in, until done holds.
func (b *bench) runFloorPhase(ctx context.Context, p *phase, bulk func(context.Context) error, done func() (bool, string), last func() time.Time) error {
	start := time.Now()
	if err := bulk(ctx); err != nil {
		return err
	}
	p.issued = time.Since(start)
	err := b.track.wait(ctx, p.name, func() (bool, string) {
		ok, state := done()
		return ok || b.stand.failed() != nil, state
	})
	if err = errors.Join(err, b.stand.failed()); err != nil {
		return err
	}
	p.done = last().Sub(start)
	fmt.Fprintf(os.Stderr, "Phase %s: %d rings done %.1f s after its start (all requested after %.1f s)\n", p.name, p.rings, p.done.Seconds(), p.issued.Seconds())
	return nil
}

// runFloor runs the phases under -floor and prints their times.
func runFloor(ctx context.Context, b *bench) error {
	var phases []*phase
	defer func() {
		fmt.Printf("\nThe floor (the operator stopped; a stand-in made %d requests, only the operator's, with %d workers), %d rings in %d namespaces:\n",
			b.stand.requests.Load(), controller.DefaultRingWorkers, b.cfg.rings, b.cfg.namespaces)
		for _, p := range phases {
			if p.err == nil {
				fmt.Printf("  %-7s all done %.1f s after the first request (all requested after %.1f s)\n", p.name, p.done.Seconds(), p.issued.Seconds())
			}
		}
	}()
	p, err := b.create(ctx)
	phases = append(phases, p)
	if err != nil {
		return err
	}
	for _, ph := range []struct {
		on         bool
		name, note string
	}{{b.cfg.rotate, "rotate", "rotate-now"}, {b.cfg.fleet, "fleet", "rotate-now through one FleetRequest"}} {
		if !ph.on {
			continue
		}
		p, err := b.request(ctx, ph.name, ph.note)
		phases = append(phases, p)
		if err != nil {
			return err
		}
	}
	return nil
}
