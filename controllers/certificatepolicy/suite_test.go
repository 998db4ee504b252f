// Package certificatepolicy_test is the envtest suite of the
// CertificatePolicy controller: a real kube-apiserver and etcd with
// ringmaster's and cert-manager's CRDs installed, and the controller in a
// manager built as main.go builds it, with a fake clock. No cert-manager
// controller runs here: the specs play its part (writing Secrets, Certificate
// statuses) where they need it; test/e2e runs the real one.
package certificatepolicy_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/controllers"
)

// maxRenewals is the suite's renewal rate limit, small enough to see it bite.
const maxRenewals = 2

var (
	cfg        *rest.Config
	k8s        client.Client
	testEnv    *envtest.Environment
	scheme     = runtime.NewScheme()
	fakeClock  *clocktesting.FakeClock
	registry   *prometheus.Registry
	reconciler *controllers.CertificatePolicyReconciler
	stopMgr    context.CancelFunc
)

func TestCertificatePolicy(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "CertificatePolicy suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(v1alpha1.AddToScheme(scheme)).To(Succeed())
	Expect(cmapi.AddToScheme(scheme)).To(Succeed())

	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases"), certManagerCRDs()},
		ErrorIfCRDPathMissing: true,
	}
	var err error
	cfg, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred(), "start the control plane; run through make test, which builds it and sets KUBEBUILDER_ASSETS")
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())

	fakeClock = clocktesting.NewFakeClock(time.Now().Truncate(time.Second))
	startManager()
})

var _ = AfterSuite(func() {
	if stopMgr != nil {
		stopMgr()
	}
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

// certManagerCRDs is the deploy/crds directory of the cert-manager module
// go.mod requires, from the module cache.
func certManagerCRDs() string {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/cert-manager/cert-manager").Output()
	Expect(err).NotTo(HaveOccurred(), "locate the cert-manager module")
	return filepath.Join(strings.TrimSpace(string(out)), "deploy", "crds")
}

// startManager starts the operator's manager as main.go builds it, with the
// suite's clock, rate limit and metrics registry.
func startManager() {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   controllers.CacheOptions(),
	})
	Expect(err).NotTo(HaveOccurred())
	registry = prometheus.NewRegistry()
	reconciler = &controllers.CertificatePolicyReconciler{
		Client:               mgr.GetClient(),
		APIReader:            mgr.GetAPIReader(),
		Recorder:             mgr.GetEventRecorder("ringmaster"),
		Clock:                fakeClock,
		MaxRenewalsPerMinute: maxRenewals,
	}
	Expect(reconciler.SetupWithManager(mgr, registry)).To(Succeed())

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	stopMgr = func() { cancel(); <-done }
}
