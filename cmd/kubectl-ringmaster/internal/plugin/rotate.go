package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/audit"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

type rotateOptions struct {
	kube    *kube
	streams genericiooptions.IOStreams
	now     func() time.Time
	poll    time.Duration

	wait    bool
	timeout time.Duration
}

func newRotateCommand(k *kube, streams genericiooptions.IOStreams) *cobra.Command {
	o := &rotateOptions{kube: k, streams: streams, now: time.Now, poll: 500 * time.Millisecond}
	cmd := &cobra.Command{
		Use:   "rotate RING",
		Short: "Rotate a ring now, and wait until the staged key encrypts and a new key is staged",
		Long: `Rotate sets the ring's ringmaster.io/rotate-requested-at annotation to the current
time (RFC 3339), the request the README documents, as:

  kubectl annotate tkr RING --overwrite ringmaster.io/rotate-requested-at="$(date -u +%FT%TZ)"

The operator handles each value once and echoes it in status.lastRotateRequestedAt.
It promotes the staged key as soon as that key has been delivered for
activationDelay, and stages a new key. Rotate waits, printing its progress,
until the operator has taken the request, a newer key than the one active
before encrypts, and a new key is staged; or it times out, saying why (the
Ready condition's message). It takes the right to patch the ring
(ringmaster-ring-editor for a TicketKeyRing).`,
		Example: `  # Rotate a ring of the current namespace, and wait
  kubectl ringmaster rotate web

  # Rotate a ClusterTicketKeyRing, give it 10 minutes
  kubectl ringmaster rotate ctkr/edge --timeout 10m

  # Only make the request
  kubectl ringmaster rotate web -n shop --wait=false`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd.Context(), args[0]) },
	}
	cmd.Flags().BoolVar(&o.wait, "wait", true, "Wait until the rotation is published.")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 5*time.Minute, "How long to wait. A staged key encrypts no sooner than activationDelay after it was staged.")
	return cmd
}

func (o *rotateOptions) run(ctx context.Context, arg string) error {
	ref, err := o.kube.ring(arg)
	if err != nil {
		return err
	}
	obj, before, err := o.kube.getRing(ctx, ref)
	if err != nil {
		return err
	}
	if before.Status.Epoch == 0 {
		return fmt.Errorf("%s has no published key to rotate yet: %s", ref, readyMessage(before))
	}
	// Each value is handled once: two requests within a second need the
	// second's fraction to differ.
	now := o.now().UTC()
	value := now.Format(time.RFC3339)
	if value == obj.GetAnnotations()[v1alpha1.RotateRequestedAtAnnotation] || value == before.Status.LastRotateRequestedAt {
		value = now.Format(time.RFC3339Nano)
	}
	if err := o.request(ctx, obj, value); err != nil {
		if refused(err) {
			return errRefused("rotate", ref, err)
		}
		return fmt.Errorf("request a rotation of %s: %w", ref, err)
	}
	fmt.Fprintf(o.streams.Out, "Requested a rotation of %s: %s=%s\n", ref, v1alpha1.RotateRequestedAtAnnotation, value)
	if !o.wait {
		return nil
	}
	return o.await(ctx, ref, before, value)
}

// request sets the annotation with a merge patch, as kubectl annotate does.
func (o *rotateOptions) request(ctx context.Context, obj client.Object, value string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{v1alpha1.RotateRequestedAtAnnotation: value}}})
	if err != nil {
		return err
	}
	return o.kube.client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(fieldManager))
}

// await polls the ring until the rotation requested as value is published:
// the operator echoed the request in a new epoch, a newer key than the one
// active before encrypts by the clock, and a new key is staged behind it,
// with Ready True. Each step it sees is printed once.
func (o *rotateOptions) await(ctx context.Context, ref ringRef, before audit.Ring, value string) error {
	var wasActive time.Time
	if k, ok := before.Keys().Active(o.now()); ok {
		wasActive = k.ActiveFrom
	}
	var last audit.Ring
	var said string
	say := func(format string, args ...any) {
		if msg := fmt.Sprintf(format, args...); msg != said {
			fmt.Fprintln(o.streams.Out, msg)
			said = msg
		}
	}
	say("Waiting for the operator to take the request")
	var getErr error
	err := wait.PollUntilContextTimeout(ctx, o.poll, o.timeout, true, func(ctx context.Context) (bool, error) {
		_, ring, err := o.kube.getRing(ctx, ref)
		if err != nil {
			if dl, ok := ctx.Deadline(); !ok || time.Now().Before(dl) { // not the wait's end cutting the read short
				getErr = err
			}
			return false, nil // the API server may be briefly away; the timeout bounds it
		}
		getErr, last = nil, ring
		now := o.now()
		taken := ring.Status.LastRotateRequestedAt == value
		ready := meta.FindStatusCondition(ring.Status.Conditions, v1alpha1.ConditionReady)
		switch {
		case ready != nil && ready.Status != metav1.ConditionTrue:
			say("Ready is %s (%s): %s", ready.Status, ready.Reason, ready.Message)
			return false, nil
		case !taken:
			return false, nil
		}
		kr := ring.Keys()
		active, ok := kr.Active(now)
		if !ok || !active.ActiveFrom.After(wasActive) {
			if next := promoted(kr, now); next.ID != "" {
				say("The operator took the request in epoch %d: key %s encrypts from %s, once it has been staged for activationDelay %s",
					ring.Status.Epoch, next.ID, stamp(next.ActiveFrom), limit(ring.Spec.ActivationDelay.Duration))
			} else {
				say("The operator took the request in epoch %d; waiting for a new key to be staged", ring.Status.Epoch)
			}
			return false, nil
		}
		staged := promoted(kr, now)
		if staged.ID == "" || ready == nil || ready.ObservedGeneration < ring.Generation {
			say("Key %s encrypts since %s; waiting for its successor to be staged", active.ID, stamp(active.ActiveFrom))
			return false, nil
		}
		say("Rotated %s: key %s encrypts since %s, key %s is staged from %s; epoch %d is published (%s)",
			ref, active.ID, stamp(active.ActiveFrom), staged.ID, stamp(staged.ActiveFrom), ring.Status.Epoch, ready.Message)
		return true, nil
	})
	if err == nil {
		return nil
	}
	if !wait.Interrupted(err) {
		return err
	}
	why := "the operator has not taken the request: status.lastRotateRequestedAt is " + fmt.Sprintf("%q", last.Status.LastRotateRequestedAt) + " (is the operator running?)"
	switch {
	case getErr != nil:
		why = fmt.Sprintf("the ring could not be read: %v", getErr)
	case last.Status.LastRotateRequestedAt == value:
		why = "the operator took the request, and the rotation is not published yet"
	}
	return fmt.Errorf("timed out after %s waiting for %s to rotate: %s\nReady: %s", o.timeout, ref, why, readyMessage(last))
}

// promoted is the next key to encrypt at now: the staged key with the
// soonest activeFrom; zero when none is staged.
func promoted(kr keyring.Ring, now time.Time) keyring.Key {
	var next keyring.Key
	for _, k := range kr.Keys {
		if kr.StateOf(k, now) == keyring.Staged && (next.ID == "" || k.ActiveFrom.Before(next.ActiveFrom)) {
			next = k
		}
	}
	return next
}

// readyMessage states a ring's Ready condition.
func readyMessage(r audit.Ring) string {
	c := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ConditionReady)
	if c == nil {
		return "the operator has not reported on the ring (is it running?)"
	}
	return fmt.Sprintf("%s (%s): %s", c.Status, c.Reason, c.Message)
}
