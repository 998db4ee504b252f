package controllers_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/controllers"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/mint"
)

// The suite runs the controller in a real manager against a real
// kube-apiserver and etcd (make envtest), with a fake clock that the specs
// step through rotations.

var (
	cfg       *rest.Config
	k8s       client.Client
	testEnv   *envtest.Environment
	scheme    = runtime.NewScheme()
	fakeClock *clocktesting.FakeClock
	registry  *prometheus.Registry
	stopMgr   context.CancelFunc
)

// mintFailsAnnotation makes the suite's key source fail for one ring, as a
// broken source (or, later, an unreachable Vault) would.
const mintFailsAnnotation = "test.ringmaster.io/mint-fails"

func TestControllers(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Controller suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(v1alpha1.AddToScheme(scheme)).To(Succeed())

	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "config", "crd", "bases")},
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

// startManager starts the operator's manager as main.go builds it, with the
// suite's clock, key source and metrics registry. Calling it again after
// stopManager is an operator restart: nothing carries over in memory.
func startManager() {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   controllers.CacheOptions(),
		// A restart in the same process registers the controller name again.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	Expect(err).NotTo(HaveOccurred())
	registry = prometheus.NewRegistry()
	Expect((&controllers.TicketKeyRingReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("ringmaster"),
		Clock:     fakeClock,
		Source: func(_ context.Context, ring *v1alpha1.TicketKeyRing) (mint.Source, error) {
			if ring.Annotations[mintFailsAnnotation] != "" {
				return failingSource{}, nil
			}
			return mint.Random{}, nil
		},
	}).SetupWithManager(mgr, registry)).To(Succeed())

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	stopMgr = func() { cancel(); <-done }
}

func stopManager() {
	stopMgr()
	stopMgr = nil
}

type failingSource struct{}

func (failingSource) Mint(context.Context, int) ([]keyring.Secret, error) {
	return nil, errors.New("key source unavailable")
}
