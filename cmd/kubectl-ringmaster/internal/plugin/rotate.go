package plugin

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/audit"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

type rotateOptions struct {
	request
	fleet fleetFlags
}

func newRotateCommand(k *kube, streams genericiooptions.IOStreams) *cobra.Command {
	o := &rotateOptions{request: newRequest(k, streams)}
	cmd := &cobra.Command{
		Use:   "rotate RING",
		Short: "Rotate a ring now, and wait until the staged key encrypts and a new key is staged",
		Long: `Rotate sets the ring's ringmaster.io/rotate-requested-at annotation to the current
time (RFC 3339), the request docs/kubectl-plugin.md documents, as:

  kubectl annotate tkr RING --overwrite ringmaster.io/rotate-requested-at="$(date -u +%FT%TZ)"

The operator handles each value once and echoes it in status.lastRotateRequestedAt.
It promotes the staged key as soon as that key has been delivered for
activationDelay (and, under spec.confirmation, every selected pod reports
holding it), and stages a new key. Rotate waits, printing its progress,
until the operator has taken the request, a newer key than the one active
before encrypts, and a new key is staged; or it times out, saying why: the
Ready condition, or the pods that have not confirmed the staged key. It
takes the right to patch the ring (ringmaster-ring-editor for a
TicketKeyRing).

With --selector, --namespace-selector, --key-source, --all-namespaces or
--kind, and no RING, rotate asks every ring they select at once through one
FleetRequest (docs/spec/v1alpha1/fleetrequests.md), and follows it with a
progress bar until every ring served it and its last pod confirmed. That
takes cluster-admin or the ringmaster-fleet-operator ClusterRole.`,
		Example: `  # Rotate a ring of the current namespace, and wait
  kubectl ringmaster rotate web

  # Rotate a ClusterTicketKeyRing, give it 10 minutes
  kubectl ringmaster rotate ctkr/edge --timeout 10m

  # Only make the request
  kubectl ringmaster rotate web -n shop --wait=false

  # Rotate every ring of every namespace labelled env=prod, and follow
  kubectl ringmaster rotate --namespace-selector env=prod`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.fleet.fleet(cmd) {
				if len(args) > 0 {
					return fmt.Errorf("give a RING, or select rings with flags: not both")
				}
				return o.runFleet(cmd.Context(), &o.fleet, v1alpha1.FleetRotate)
			}
			if len(args) != 1 {
				return fmt.Errorf("name a RING, or select rings with --selector, --namespace-selector, --key-source, --all-namespaces or --kind")
			}
			return o.run(cmd.Context(), args[0])
		},
	}
	o.addFlags(cmd, "rotation", 5*time.Minute)
	o.fleet.add(cmd)
	return cmd
}

// rotation is the rotate-now request.
var rotation = requestKind{
	annotation: v1alpha1.RotateRequestedAtAnnotation, noun: "a rotation", verb: "rotate",
	echoed: func(s v1alpha1.TicketKeyRingStatus) string { return s.LastRotateRequestedAt },
	check: func(ref ringRef, ring audit.Ring) error {
		if ring.Status.Epoch == 0 {
			return fmt.Errorf("%s has no published key to rotate yet: %s", ref, readyMessage(ring))
		}
		return nil
	},
}

func (o *rotateOptions) run(ctx context.Context, arg string) error {
	ref, before, value, err := o.send(ctx, arg, rotation)
	if err != nil || !o.wait || o.fleet.noWait {
		return err
	}
	fmt.Fprintln(o.streams.Out, "Waiting for the operator to take the request")
	var wasActive time.Time
	if k, ok := before.Keys().Active(o.now()); ok {
		wasActive = k.ActiveFrom
	}
	last, timedOut, err := o.await(ctx, ref, func(ring audit.Ring, now time.Time) step { return rotated(ref, ring, value, wasActive, now) })
	if err != nil || !timedOut {
		return err
	}
	why := fmt.Sprintf("the operator has not taken the request: status.lastRotateRequestedAt is %q (is the operator running?)", last.Status.LastRotateRequestedAt)
	if last.Status.LastRotateRequestedAt == value {
		why = "the operator took the request, and the rotation is not published yet"
		if w := awaitingPods(last); w != "" {
			why = "the fleet has not confirmed the staged key. " + w
		}
	}
	return fmt.Errorf("timed out after %s waiting for %s to rotate: %s\nReady: %s", o.timeout, ref, why, readyMessage(last))
}

// rotated is how far the rotation requested as value has gone: the
// operator took it, a newer key than the one active before (since
// wasActive) encrypts by the clock, and a new key is staged behind it.
func rotated(ref ringRef, ring audit.Ring, value string, wasActive, now time.Time) step {
	if ring.Status.LastRotateRequestedAt != value {
		return step{}
	}
	kr := ring.Keys()
	next := promoted(kr, now)
	active, ok := kr.Active(now)
	if !ok || !active.ActiveFrom.After(wasActive) {
		if w := awaitingPods(ring); w != "" {
			return step{say: w}
		}
		if next.ID == "" {
			return step{say: fmt.Sprintf("The operator took the request in epoch %d; waiting for a new key to be staged", ring.Status.Epoch)}
		}
		once := "once it has been staged for activationDelay " + limit(ring.Spec.ActivationDelay.Duration)
		if ring.Spec.Confirmation != nil {
			once += " and every selected pod holds it"
		}
		return step{say: fmt.Sprintf("The operator took the request in epoch %d: key %s encrypts from %s, %s", ring.Status.Epoch, next.ID, stamp(next.ActiveFrom), once)}
	}
	ready := meta.FindStatusCondition(ring.Status.Conditions, v1alpha1.ConditionReady)
	if next.ID == "" || ready == nil || ready.ObservedGeneration < ring.Generation {
		return step{say: fmt.Sprintf("Key %s encrypts since %s; waiting for its successor to be staged", active.ID, stamp(active.ActiveFrom))}
	}
	return step{done: true, say: fmt.Sprintf("Rotated %s: key %s encrypts since %s, key %s is staged to encrypt from %s; epoch %d is published (%s)",
		ref, active.ID, stamp(active.ActiveFrom), next.ID, stamp(next.ActiveFrom), ring.Status.Epoch, ready.Message)}
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
