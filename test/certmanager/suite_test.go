//go:build integration

// Package certmanager_test is the end-to-end test of CertificatePolicy
// against a real cert-manager: cert-manager's own controllers (built by
// hack/certmanager.sh) issue certificates on a real kube-apiserver, the
// operator, built as main.go builds it and running as its own service account
// with the generated RBAC, enforces a policy in real time, and pkg/agent
// serves the certificates over real TLS from a directory written the way the
// kubelet writes projected volumes.
package certmanager_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
)

var (
	k8s      client.Client
	registry *prometheus.Registry
)

func TestCertManager(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "cert-manager end-to-end suite")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	bin := os.Getenv("RINGMASTER_CERT_MANAGER")
	if bin == "" {
		Fail("RINGMASTER_CERT_MANAGER is not set: run through make test, which builds cert-manager's controllers (hack/certmanager.sh)")
	}
	suite, err := testenv.StartSuite(ctx, testenv.SuiteOptions{Log: GinkgoWriter, DeferOperator: true})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(suite.Stop)
	k8s = suite.Admin()

	By("starting cert-manager's controllers")
	kubeconfig, err := suite.AddAdmin("cert-manager")
	Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(GinkgoT().TempDir(), "kubeconfig")
	Expect(os.WriteFile(path, kubeconfig, 0o600)).To(Succeed())
	cm := exec.Command(bin, "--kubeconfig", path, "--cluster-resource-namespace", "cert-manager", "-v=2")
	cm.Stdout, cm.Stderr = GinkgoWriter, GinkgoWriter
	Expect(cm.Start()).To(Succeed())
	DeferCleanup(func() {
		_ = cm.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cm.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cm.Process.Kill()
			<-done
		}
	})

	By("starting the operator as its own service account, on the real clock")
	Expect(suite.StartOperator()).To(Succeed())
	registry = suite.Registry
	// Stopped before cert-manager, as it started after it.
	DeferCleanup(suite.StopOperator)
}, NodeTimeout(2*time.Minute))
