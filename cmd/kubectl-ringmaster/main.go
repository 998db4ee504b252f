// Command kubectl-ringmaster is the kubectl plugin of ringmaster: installed
// on the PATH, it runs as `kubectl ringmaster`.
//
//	kubectl ringmaster audit -A          # key and certificate age across the cluster, problems first
//	kubectl ringmaster status web        # one ring: conditions, keys, projections, events
//	kubectl ringmaster rotate web        # rotate now, and wait until it is published
//	kubectl ringmaster revoke web        # emergency: destroy every key, encrypt with a fresh one
//	kubectl ringmaster probe host:443    # do the servers behind an address share ticket keys?
//
// Install it with
//
//	go install github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster@latest
package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/plugin"
)

func main() {
	os.Exit(plugin.Main(os.Args[1:], genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}))
}
