package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
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
)

// request is what rotate and revoke share: they set an annotation the
// operator handles once per value (rotate-requested-at,
// revoke-requested-at), then wait, printing each step once, until the
// request is carried out or the wait times out.
type request struct {
	kube    *kube
	streams genericiooptions.IOStreams
	now     func() time.Time
	poll    time.Duration

	wait    bool
	timeout time.Duration
}

func newRequest(k *kube, streams genericiooptions.IOStreams) request {
	return request{kube: k, streams: streams, now: time.Now, poll: 500 * time.Millisecond}
}

func (r *request) addFlags(cmd *cobra.Command, what string, timeout time.Duration) {
	cmd.Flags().BoolVar(&r.wait, "wait", true, "Wait until the "+what+" is published.")
	cmd.Flags().DurationVar(&r.timeout, "timeout", timeout, "How long to wait.")
}

// requestKind is one kind of request: the annotation it sets, and what a
// ring must hold to take it.
type requestKind struct {
	annotation string
	// noun names the request ("a rotation"), verb what the user may not do
	// without the right to patch the ring ("rotate").
	noun, verb string
	// echoed is the last value of the annotation the operator handled.
	echoed func(v1alpha1.TicketKeyRingStatus) string
	// check says why the ring cannot take the request, if it cannot.
	check func(ref ringRef, ring audit.Ring) error
}

// send reads the ring an argument names, checks that it can take the
// request, and makes it. It returns the ring as it was, and the value set.
func (r *request) send(ctx context.Context, arg string, k requestKind) (ringRef, audit.Ring, string, error) {
	ref, err := r.kube.ring(arg)
	if err != nil {
		return ref, audit.Ring{}, "", err
	}
	obj, before, err := r.kube.getRing(ctx, ref)
	if err == nil {
		err = k.check(ref, before)
	}
	if err != nil {
		return ref, before, "", err
	}
	value, err := r.annotate(ctx, obj, k.annotation, k.echoed(before.Status))
	switch {
	case refused(err):
		return ref, before, "", errRefused(k.verb, ref, err)
	case err != nil:
		return ref, before, "", fmt.Errorf("request %s of %s: %w", k.noun, ref, err)
	}
	fmt.Fprintf(r.streams.Out, "Requested %s of %s: %s=%s\n", k.noun, ref, k.annotation, value)
	return ref, before, value, nil
}

// annotate sets annotation on the ring to the current time in RFC 3339,
// with a merge patch as kubectl annotate makes, and returns the value. Each
// value is handled once: a request within the same second as the ring's
// last takes the second's fraction too.
func (r *request) annotate(ctx context.Context, obj client.Object, annotation string, echoed ...string) (string, error) {
	now := r.now().UTC()
	value := now.Format(time.RFC3339)
	for _, v := range append(echoed, obj.GetAnnotations()[annotation]) {
		if v == value {
			value = now.Format(time.RFC3339Nano)
		}
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{annotation: value}}})
	if err != nil {
		return "", err
	}
	return value, r.kube.client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(fieldManager))
}

// step is what a wait sees of the ring: done when the request is carried
// out; say is the step to print, once.
type step struct {
	done bool
	say  string
}

// await polls the ring until check says the request is done, printing
// each new step, and what holds the ring up: its Ready condition when not
// True, and the pods that have not confirmed its staged key. It returns the
// last ring read, and whether the wait timed out.
func (r *request) await(ctx context.Context, ref ringRef, check func(ring audit.Ring, now time.Time) step) (last audit.Ring, timedOut bool, err error) {
	var said string
	say := func(msg string) {
		if msg != "" && msg != said {
			fmt.Fprintln(r.streams.Out, esc(msg)) // it quotes conditions and pods
			said = msg
		}
	}
	var readErr error
	err = wait.PollUntilContextTimeout(ctx, r.poll, r.timeout, true, func(ctx context.Context) (bool, error) {
		_, ring, err := r.kube.getRing(ctx, ref)
		if err != nil {
			if dl, ok := ctx.Deadline(); !ok || time.Now().Before(dl) { // not the wait's end cutting the read short
				readErr = err
			}
			return false, nil // the API server may be briefly away; the timeout bounds it
		}
		readErr, last = nil, ring
		if held := heldUp(ring); held != "" {
			say(held)
			return false, nil
		}
		s := check(ring, r.now())
		say(s.say)
		return s.done, nil
	})
	switch {
	case err == nil:
		return last, false, nil
	case !wait.Interrupted(err):
		return last, false, err
	case readErr != nil:
		return last, true, fmt.Errorf("%s could not be read: %w", ref, readErr)
	}
	return last, true, nil
}

// heldUp says what keeps the operator from carrying a request out: its
// Ready condition, when not True.
func heldUp(ring audit.Ring) string {
	if c := meta.FindStatusCondition(ring.Status.Conditions, v1alpha1.ConditionReady); c != nil && c.Status != metav1.ConditionTrue {
		return fmt.Sprintf("Ready is %s (%s): %s", c.Status, c.Reason, c.Message)
	}
	return ""
}

// awaitingPods says which pods have not confirmed the staged key, under
// spec.confirmation; empty when they all have, or none is asked.
func awaitingPods(ring audit.Ring) string {
	c := ring.Status.Confirmation
	if c == nil || c.Holding >= c.Pods && c.Pods > 0 {
		return ""
	}
	missing := make([]string, len(c.Missing))
	for i, p := range c.Missing {
		missing[i] = fmt.Sprintf("%s/%s on %s (%s)", p.Namespace, p.Name, orDash(p.Node), p.Reason)
	}
	msg := fmt.Sprintf("Waiting for the fleet to confirm key %s: %d of %d ready pod(s) hold it", c.StagedKey, c.Holding, c.Pods)
	if len(missing) > 0 {
		msg += "; not " + strings.Join(missing, ", ")
	}
	return msg
}

// readyMessage states a ring's Ready condition.
func readyMessage(r audit.Ring) string {
	c := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ConditionReady)
	if c == nil {
		return "the operator has not reported on the ring (is it running?)"
	}
	return fmt.Sprintf("%s (%s): %s", c.Status, c.Reason, c.Message)
}
