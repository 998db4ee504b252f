// Package certmanager_test is the end-to-end test of CertificatePolicy
// against a real cert-manager: cert-manager's own controllers (built by
// hack/certmanager.sh) issue certificates on a real kube-apiserver, the
// operator's CertificatePolicy controller enforces a policy in real time,
// and pkg/agent serves the certificates over real TLS from a directory
// written the way the kubelet writes projected volumes.
package certmanager_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/controllers"
)

var (
	k8s      client.Client
	testEnv  *envtest.Environment
	scheme   = runtime.NewScheme()
	registry = prometheus.NewRegistry()
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
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(v1alpha1.AddToScheme(scheme)).To(Succeed())
	Expect(cmapi.AddToScheme(scheme)).To(Succeed())

	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases"), certManagerCRDs()},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := testEnv.Start()
	Expect(err).NotTo(HaveOccurred(), "start the control plane; run through make test, which builds it and sets KUBEBUILDER_ASSETS")
	DeferCleanup(testEnv.Stop)
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())

	By("starting cert-manager's controllers")
	user, err := testEnv.AddUser(envtest.User{Name: "cert-manager", Groups: []string{"system:masters"}}, nil)
	Expect(err).NotTo(HaveOccurred())
	kubeconfig, err := user.KubeConfig()
	Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(GinkgoT().TempDir(), "kubeconfig")
	Expect(os.WriteFile(path, kubeconfig, 0o600)).To(Succeed())
	cm := exec.Command(bin, "--kubeconfig", path, "--cluster-resource-namespace", "cert-manager", "-v=2")
	cm.Stdout, cm.Stderr = GinkgoWriter, GinkgoWriter
	Expect(cm.Start()).To(Succeed())
	DeferCleanup(func() {
		_ = cm.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cm.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cm.Process.Kill()
			<-done
		}
	})

	By("starting the operator's CertificatePolicy controller, on the real clock")
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   controllers.CacheOptions(),
	})
	Expect(err).NotTo(HaveOccurred())
	Expect((&controllers.CertificatePolicyReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("ringmaster"),
	}).SetupWithManager(mgr, registry)).To(Succeed())
	mctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		Expect(mgr.Start(mctx)).To(Succeed())
	}()
	DeferCleanup(func() { cancel(); <-done })
}, NodeTimeout(2*time.Minute))

// certManagerCRDs is the deploy/crds directory of the cert-manager module
// go.mod requires, from the module cache.
func certManagerCRDs() string {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/cert-manager/cert-manager").Output()
	Expect(err).NotTo(HaveOccurred(), "locate the cert-manager module")
	return filepath.Join(strings.TrimSpace(string(out)), "deploy", "crds")
}
