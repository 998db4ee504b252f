package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

// pollEvery is how often the harness looks at the API server or the fleet
// while it awaits a state.
const pollEvery = 100 * time.Millisecond

// RingSpec is the part of a TicketKeyRing the harness varies.
type RingSpec struct {
	Namespace, Name  string
	RotationInterval time.Duration
	ActivationDelay  time.Duration
	RetainedKeys     int32
	// Confirmation, when set, promotes each staged key only once the pods it
	// selects hold it (Fleet.RegisterPods makes pods of a fleet's replicas).
	Confirmation *v1alpha1.Confirmation
	// Formats are spec.distribution.formats; nil means go alone.
	Formats []v1alpha1.KeyFormat
	// SourceRef names a ClusterKeySource; empty mints from crypto/rand.
	SourceRef string
}

// Object returns the TicketKeyRing to create.
func (s RingSpec) Object() *v1alpha1.TicketKeyRing {
	formats := s.Formats
	if formats == nil {
		formats = []v1alpha1.KeyFormat{"go"}
	}
	var ref *v1alpha1.KeySourceReference
	if s.SourceRef != "" {
		ref = &v1alpha1.KeySourceReference{Name: s.SourceRef}
	}
	return &v1alpha1.TicketKeyRing{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name},
		Spec: v1alpha1.TicketKeyRingSpec{
			RotationInterval: metav1.Duration{Duration: s.RotationInterval},
			ActivationDelay:  metav1.Duration{Duration: s.ActivationDelay},
			RetainedKeys:     s.RetainedKeys,
			Distribution:     v1alpha1.Distribution{Formats: formats},
			Confirmation:     s.Confirmation,
			SourceRef:        ref,
		},
	}
}

// CreateRing creates the ring (and its namespace) and waits until the
// operator has published its first epoch.
func (c *Cluster) CreateRing(ctx context.Context, s RingSpec) (*v1alpha1.TicketKeyRing, error) {
	if err := c.CreateNamespace(ctx, s.Namespace); err != nil {
		return nil, err
	}
	if err := c.Client.Create(ctx, s.Object()); err != nil {
		return nil, fmt.Errorf("create TicketKeyRing %s/%s: %w", s.Namespace, s.Name, err)
	}
	return c.WaitRing(ctx, s.Namespace, s.Name, "Ready", Ready)
}

// Ready reports whether the operator has published the ring's current
// generation: Ready is True for it, and a staged key is waiting.
func Ready(r *v1alpha1.TicketKeyRing) bool {
	cond := apimeta.FindStatusCondition(r.Status.Conditions, v1alpha1.ConditionReady)
	return cond != nil && cond.Status == metav1.ConditionTrue && cond.ObservedGeneration == r.Generation &&
		r.Status.ActiveKey != nil && StagedKey(r) != ""
}

// StagedKey returns the id of the ring's staged key, or "".
func StagedKey(r *v1alpha1.TicketKeyRing) string {
	for _, k := range r.Status.Keys {
		if k.State == "staged" {
			return k.ID
		}
	}
	return ""
}

// ActiveKey returns the id of the key the ring's status calls active.
func ActiveKey(r *v1alpha1.TicketKeyRing) string {
	if r.Status.ActiveKey == nil {
		return ""
	}
	return r.Status.ActiveKey.ID
}

// GetRing reads a ring.
func (c *Cluster) GetRing(ctx context.Context, ns, name string) (*v1alpha1.TicketKeyRing, error) {
	r := &v1alpha1.TicketKeyRing{}
	if err := c.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, r); err != nil {
		return nil, err
	}
	return r, nil
}

// WaitRing polls the ring until cond holds, and returns it. what names the
// awaited state in the error when ctx ends first.
func (c *Cluster) WaitRing(ctx context.Context, ns, name, what string, cond func(*v1alpha1.TicketKeyRing) bool) (*v1alpha1.TicketKeyRing, error) {
	var last *v1alpha1.TicketKeyRing
	var lastErr error
	for {
		r, err := c.GetRing(ctx, ns, name)
		if err == nil && cond(r) {
			return r, nil
		}
		if err == nil {
			last = r
		}
		lastErr = err
		select {
		case <-ctx.Done():
			status, _ := json.Marshal(last)
			return nil, fmt.Errorf("TicketKeyRing %s/%s never became %s (%w; last error %w): %s", ns, name, what, ctx.Err(), lastErr, status)
		case <-time.After(pollEvery):
		}
	}
}

// Rotation is one rotate-now as the ring's status records it.
type Rotation struct {
	// Requested is the annotation value that asked for it.
	Requested string
	// From was active before; To was staged and is now active; Staged is
	// the key minted to follow To.
	From, To, Staged string
	// Epoch is the ring's epoch once Staged was published.
	Epoch int64
}

// RequestRotation sets the rotate-now annotation to a new value and returns
// it. The value is the time in RFC 3339 with nanoseconds, so that two
// requests within a second stay distinct (each value is handled once).
func (c *Cluster) RequestRotation(ctx context.Context, ns, name string) (string, error) {
	value := time.Now().UTC().Format(time.RFC3339Nano)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.RotateRequestedAtAnnotation, value)
	r := &v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := c.Client.Patch(ctx, r, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		return "", fmt.Errorf("annotate %s/%s: %w", ns, name, err)
	}
	return value, nil
}

// Rotate requests a rotation and waits until the operator has handled it:
// the staged key is active and a new key is staged. The promotion happens
// once the staged key has been delivered for activationDelay, so Rotate
// takes up to that long.
func (c *Cluster) Rotate(ctx context.Context, ns, name string) (Rotation, error) {
	before, err := c.WaitRing(ctx, ns, name, "Ready", Ready)
	if err != nil {
		return Rotation{}, err
	}
	rot := Rotation{From: ActiveKey(before), To: StagedKey(before)}
	if rot.Requested, err = c.RequestRotation(ctx, ns, name); err != nil {
		return Rotation{}, err
	}
	after, err := c.WaitRing(ctx, ns, name, fmt.Sprintf("rotated to %s", rot.To), func(r *v1alpha1.TicketKeyRing) bool {
		return r.Status.LastRotateRequestedAt == rot.Requested && ActiveKey(r) == rot.To &&
			StagedKey(r) != "" && StagedKey(r) != rot.To && Ready(r)
	})
	if err != nil {
		return Rotation{}, err
	}
	rot.Staged, rot.Epoch = StagedKey(after), after.Status.Epoch
	return rot, nil
}

// SetRetainedKeys changes spec.retainedKeys and waits until the operator has
// published the ring for the new generation.
func (c *Cluster) SetRetainedKeys(ctx context.Context, ns, name string, n int32) (*v1alpha1.TicketKeyRing, error) {
	patch := fmt.Sprintf(`{"spec":{"retainedKeys":%d}}`, n)
	r := &v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := c.Client.Patch(ctx, r, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		return nil, fmt.Errorf("patch %s/%s retainedKeys: %w", ns, name, err)
	}
	gen := r.Generation // the patch's response: the generation to see published
	return c.WaitRing(ctx, ns, name, fmt.Sprintf("published with retainedKeys %d", n), func(r *v1alpha1.TicketKeyRing) bool {
		return r.Generation >= gen && Ready(r)
	})
}
