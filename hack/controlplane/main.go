// Command controlplane runs the local control plane that make demo and the
// end-to-end suite use: a real etcd and kube-apiserver (built by
// hack/envtest.sh and found through KUBEBUILDER_ASSETS), started the way
// controller-runtime's envtest starts them. It writes an admin kubeconfig,
// prints "ready", and runs until it receives SIGINT or SIGTERM, when it stops
// both processes. Secrets are encrypted at rest (secretbox, under a key
// generated at start and removed at stop), as in the cluster suite's
// cluster; -plaintext leaves them as kube-apiserver's default does.
// -audit-policy and -audit-log write kube-apiserver's audit log
// (internal/testing/apiaudit), which make bench-scale counts the operator's
// requests from.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/ringmaster-io/ringmaster/internal/testing/apiaudit"
	"github.com/ringmaster-io/ringmaster/internal/testing/atrest"
)

func main() {
	kubeconfig := flag.String("write-kubeconfig", "kubeconfig", "Where to write the admin kubeconfig.")
	plaintext := flag.Bool("plaintext", false, "Leave Secrets unencrypted at rest.")
	auditPolicy := flag.String("audit-policy", "", "kube-apiserver's audit policy file (internal/testing/apiaudit.WritePolicy); with -audit-log.")
	auditLog := flag.String("audit-log", "", "Where kube-apiserver writes its audit log, JSON, never rotated; with -audit-policy.")
	flag.Parse()
	if (*auditPolicy == "") != (*auditLog == "") {
		fmt.Fprintln(os.Stderr, "controlplane: -audit-policy and -audit-log go together")
		os.Exit(2)
	}
	if err := run(*kubeconfig, *plaintext, *auditPolicy, *auditLog); err != nil {
		fmt.Fprintln(os.Stderr, "controlplane:", err)
		os.Exit(1)
	}
}

func run(kubeconfig string, plaintext bool, auditPolicy, auditLog string) error {
	// Listen for the stop signal before starting anything, so that a stop
	// during start-up still stops etcd and kube-apiserver.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)

	env := &envtest.Environment{}
	if !plaintext {
		dir, err := os.MkdirTemp("", "ringmaster-encryption-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "encryption.yaml")
		if err := atrest.WriteEncryptionConfig(path); err != nil {
			return err
		}
		env.ControlPlane.GetAPIServer().Configure().Set("encryption-provider-config", path)
	}
	if auditPolicy != "" {
		for k, v := range apiaudit.Flags(auditPolicy, auditLog) {
			env.ControlPlane.GetAPIServer().Configure().Set(k, v)
		}
	}
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
