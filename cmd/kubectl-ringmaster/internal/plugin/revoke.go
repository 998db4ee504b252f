package plugin

import (
	"errors"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// errNoRevoke: the operator has no emergency revoke yet.
var errNoRevoke = errors.New(`revoke is not available yet: the operator has no emergency revoke. Issue 14 ("an emergency revoke: a compromised key gone in seconds") adds it: a fresh key active at once and every older key destroyed; this command will make that request.
Until then, "kubectl ringmaster rotate RING" promotes the staged key as soon as it has been staged for activationDelay, and setting the ring's spec.retainedKeys to 0 destroys retired keys when they retire`)

func newRevokeCommand(_ genericiooptions.IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke RING",
		Short: "Emergency revoke of a ring's keys (not available yet: it arrives with issue 14)",
		Long: `Revoke will request the emergency revoke of a ring: a fresh key active at once, and
every older key destroyed, for a suspected compromise. The operator does not
offer it yet (issue 14), so revoke explains that and exits with status 1.`,
		Example: `  # Explains that the emergency revoke is not available yet, and exits 1
  kubectl ringmaster revoke web -n shop`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(*cobra.Command, []string) error { return errNoRevoke },
	}
}
