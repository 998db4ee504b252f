package plugin

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/audit"
)

type revokeOptions struct {
	request
	fleet fleetFlags
}

func newRevokeCommand(k *kube, streams genericiooptions.IOStreams) *cobra.Command {
	o := &revokeOptions{request: newRequest(k, streams)}
	cmd := &cobra.Command{
		Use:   "revoke RING",
		Short: "Emergency revoke: destroy every key of a ring at once, and encrypt with a fresh key from now",
		Long: `Revoke is for a suspected key compromise. It sets the ring's
ringmaster.io/revoke-requested-at annotation to the current time (RFC 3339),
as:

  kubectl annotate tkr RING --overwrite ringmaster.io/revoke-requested-at="$(date -u +%FT%TZ)"

The operator handles each value once: it destroys every key of the ring at
once and publishes a fresh key that encrypts from now, deletes the snapshots
that held the old keys, records the revoke in status.revocations (with the
field manager of the annotation's write, here kubectl-ringmaster: the client
chooses it, so it names the tool, not the user; the API server's audit log
names the user) and echoes the value in status.lastRevokeRequestedAt.
Tickets issued before stop resuming as soon as the pods take the revoking
epoch, and clients fall back to full handshakes.

Revoke waits until the revoke is recorded and published, or times out
saying why. A revoke the operator could not carry out (its key source
failing, say) leaves the old keys serving: revoke says so. It takes the right
to patch the ring (ringmaster-ring-editor for a TicketKeyRing).

With --selector, --namespace-selector, --key-source, --all-namespaces or
--kind, and no RING, revoke asks every ring they select at once through one
FleetRequest (docs/spec/v1alpha1/fleetrequests.md), and follows it with a
progress bar until every ring served it and its last pod confirmed: after
a key source was compromised, every ring it minted. That takes
cluster-admin or the ringmaster-fleet-operator ClusterRole.`,
		Example: `  # Revoke every key of a ring of namespace shop, and wait
  kubectl ringmaster revoke web -n shop

  # Revoke a ClusterTicketKeyRing's keys
  kubectl ringmaster revoke ctkr/edge

  # A Vault token leaked: revoke every ring its key source minted, cluster-wide
  kubectl ringmaster revoke --key-source vault-prod --all-namespaces`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.fleet.fleet(cmd) {
				if len(args) > 0 {
					return fmt.Errorf("give a RING, or select rings with flags: not both")
				}
				return o.runFleet(cmd.Context(), &o.fleet, v1alpha1.FleetRevoke)
			}
			if len(args) != 1 {
				return fmt.Errorf("name a RING, or select rings with --selector, --namespace-selector, --key-source, --all-namespaces or --kind")
			}
			return o.run(cmd.Context(), args[0])
		},
	}
	o.addFlags(cmd, "revoke", 2*time.Minute)
	o.fleet.add(cmd)
	return cmd
}

// revocation is the emergency revoke request.
var revocation = requestKind{
	annotation: v1alpha1.RevokeRequestedAtAnnotation, noun: "an emergency revoke", verb: "revoke the keys of",
	echoed: func(s v1alpha1.TicketKeyRingStatus) string { return s.LastRevokeRequestedAt },
	check: func(ref ringRef, ring audit.Ring) error {
		if len(ring.Status.Keys) == 0 {
			return fmt.Errorf("%s holds no key to revoke: %s", ref, readyMessage(ring))
		}
		return nil
	},
}

func (o *revokeOptions) run(ctx context.Context, arg string) error {
	ref, _, value, err := o.send(ctx, arg, revocation)
	if err != nil || !o.wait || o.fleet.noWait {
		return err
	}
	fmt.Fprintln(o.streams.Out, "Waiting for the operator to carry it out")
	last, timedOut, err := o.await(ctx, ref, func(ring audit.Ring, _ time.Time) step { return revoked(ref, ring, value) })
	if err != nil || !timedOut {
		return err
	}
	why := fmt.Sprintf("the operator has not carried it out: the ring's keys are not destroyed and still serve (status.lastRevokeRequestedAt is %q)", last.Status.LastRevokeRequestedAt)
	if last.Status.LastRevokeRequestedAt == value {
		why = "the operator carried it out, and the revoking epoch is not published everywhere yet"
	}
	return fmt.Errorf("timed out after %s waiting for %s to be revoked: %s\nReady: %s", o.timeout, ref, why, readyMessage(last))
}

// revoked is whether the revoke requested as value is carried out: echoed,
// recorded, and its epoch published.
func revoked(ref ringRef, ring audit.Ring, value string) step {
	if ring.Status.LastRevokeRequestedAt != value {
		return step{}
	}
	var rev *v1alpha1.Revocation
	for i, r := range ring.Status.Revocations {
		if r.RequestedAt == value {
			rev = &ring.Status.Revocations[i]
		}
	}
	if rev == nil || ring.Status.ActiveKey == nil {
		return step{say: fmt.Sprintf("The operator carried out the revoke; waiting for its record (epoch %d)", ring.Status.Epoch)}
	}
	// RequestedBy is the field manager of the annotation's write, which
	// the client chooses: it says which tool asked, not which user (the API
	// server's audit log does).
	return step{done: true, say: fmt.Sprintf("Revoked %s, requested with field manager %s: keys %s are destroyed; epoch %d encrypts with fresh key %s from %s. Tickets issued before no longer resume on pods that hold epoch %d.",
		ref, cmp.Or(rev.RequestedBy, "(none recorded)"), strings.Join(rev.Keys, " "), rev.Epoch, ring.Status.ActiveKey.ID, stamp(ring.Status.ActiveKey.ActiveFrom.Time), rev.Epoch)}
}
