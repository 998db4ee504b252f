// Command controlplane runs the local control plane that make demo and the
// end-to-end suite use: a real etcd and kube-apiserver (built by
// hack/envtest.sh and found through KUBEBUILDER_ASSETS), started the way
// controller-runtime's envtest starts them. It writes an admin kubeconfig,
// prints "ready", and runs until it receives SIGINT or SIGTERM, when it stops
// both processes.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

func main() {
	kubeconfig := flag.String("write-kubeconfig", "kubeconfig", "Where to write the admin kubeconfig.")
	flag.Parse()
	if err := run(*kubeconfig); err != nil {
		fmt.Fprintln(os.Stderr, "controlplane:", err)
		os.Exit(1)
	}
}

func run(kubeconfig string) error {
	// Listen for the stop signal before starting anything, so that a stop
	// during start-up still stops etcd and kube-apiserver.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)

	env := &envtest.Environment{}
	if _, err := env.Start(); err != nil {
		return fmt.Errorf("start (is KUBEBUILDER_ASSETS set? make envtest prints it): %w", err)
	}
	defer env.Stop() //nolint:errcheck // stopping on the way out
	select {
	case <-stop:
		return nil
	default:
	}

	admin, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("add admin user: %w", err)
	}
	cfg, err := admin.KubeConfig()
	if err != nil {
		return fmt.Errorf("render kubeconfig: %w", err)
	}
	if err := os.WriteFile(kubeconfig, cfg, 0o600); err != nil {
		return err
	}
	fmt.Println("ready")
	<-stop
	return nil
}
