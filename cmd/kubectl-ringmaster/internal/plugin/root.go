// Package plugin is `kubectl ringmaster`: the cobra commands, how they read
// and write through the user's kubeconfig and RBAC (cli-runtime's
// ConfigFlags), and how they print (cli-runtime's printers).
//
// It never reads key bytes: rings' status holds key ids and times, their
// Secrets are listed by metadata alone, and of kubernetes.io/tls Secrets
// only tls.crt is decoded.
package plugin

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/ringmaster-io/ringmaster/internal/version"
)

// ExitError ends the plugin with a status other than 1, and a message
// unless it is empty.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// Main runs the plugin with args and returns its exit status: 0, 1 on an
// error, or what an ExitError says (audit's --fail-on).
func Main(args []string, streams genericiooptions.IOStreams) int {
	cmd := NewCommand(streams)
	cmd.SetArgs(args)
	err := cmd.Execute()
	if err == nil {
		return 0
	}
	var exit *ExitError
	if errors.As(err, &exit) {
		if exit.Err != nil {
			fmt.Fprintf(streams.ErrOut, "error: %s\n", escLines(exit.Err.Error()))
		}
		return exit.Code
	}
	fmt.Fprintf(streams.ErrOut, "error: %s\n", escLines(err.Error()))
	return 1
}

// NewCommand is `kubectl ringmaster` and its subcommands.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	flags := genericclioptions.NewConfigFlags(true)
	cmd := &cobra.Command{
		Use:   "kubectl-ringmaster",
		Short: "See, rotate and probe ringmaster's TLS session ticket keys, and audit certificate key age",
		Long: `kubectl ringmaster works with ringmaster's TicketKeyRings, ClusterTicketKeyRings and
CertificatePolicies through your kubeconfig and with your RBAC rights. It never
reads key bytes: rings' status holds key ids and times, their Secrets are
listed by metadata alone, and of kubernetes.io/tls Secrets only tls.crt (the
public certificate) is decoded.`,
		Example: `  # Every ring and audited certificate in the cluster, problems first
  kubectl ringmaster audit -A

  # One ring: conditions, keys and their times, projection Secrets, events
  kubectl ringmaster status web -n shop

  # Rotate now and wait until the staged key encrypts
  kubectl ringmaster rotate web -n shop

  # A key may have leaked: destroy every key of the ring at once
  kubectl ringmaster revoke web -n shop

  # Does the fleet behind this address share its ticket keys?
  kubectl ringmaster probe shop.example.com:443`,
		SilenceErrors: true,
		SilenceUsage:  true,
		// --version prints it.
		Version: version.Version(),
		// Installed as kubectl-ringmaster, it is run as kubectl ringmaster.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl ringmaster"},
	}
	cmd.SetIn(streams.In)
	cmd.SetOut(streams.Out)
	cmd.SetErr(streams.ErrOut)
	flags.AddFlags(cmd.PersistentFlags())
	k := &kube{flags: flags}
	cmd.AddCommand(
		newAuditCommand(k, streams),
		newStatusCommand(k, streams),
		newRotateCommand(k, streams),
		newRevokeCommand(k, streams),
		newProbeCommand(streams),
	)
	return cmd
}
