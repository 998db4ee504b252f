package controllers_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"path/filepath"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
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
	logf.SetLogger(zap.New(zap.WriteTo(io.MultiWriter(GinkgoWriter, &operatorLog)), zap.UseDevMode(true)))
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
	createOperatorServiceAccount()
	startManager()
})

var _ = AfterSuite(func() {
	By("finding no key the suite saw in any operator log line")
	logged := operatorLog.String()
	Expect(logged).To(ContainSubstring("Published ticket key epoch"), "the log was captured")
	seenMu.Lock()
	defer seenMu.Unlock()
	Expect(seen).NotTo(BeEmpty())
	for s := range seen {
		for _, enc := range []string{base64.StdEncoding.EncodeToString(s[:]), hex.EncodeToString(s[:])} {
			Expect(logged).NotTo(ContainSubstring(enc))
		}
	}

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
	sources := &mint.Sources{Reader: mgr.GetAPIReader(), Client: mgr.GetClient(), ServiceAccount: operatorSA}
	Expect((&controllers.TicketKeyRingReconciler{
		Client:       mgr.GetClient(),
		APIReader:    mgr.GetAPIReader(),
		Recorder:     mgr.GetEventRecorder("ringmaster"),
		Clock:        fakeClock,
		ForgetSource: sources.Forget,
		Source: func(ctx context.Context, ring *v1alpha1.TicketKeyRing) (mint.Source, error) {
			if ring.Annotations[mintFailsAnnotation] != "" {
				return failingSource{}, nil
			}
			return sources.For(ctx, ring)
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

// operatorSA is the operator's service account, which Vault's Kubernetes
// auth logs in with. Vault reviews its tokens with the token itself, so it
// may review tokens (system:auth-delegator), as a deployed operator's would.
var operatorSA = types.NamespacedName{Namespace: "ringmaster-system", Name: "ringmaster"}

func createOperatorServiceAccount() {
	ctx := context.Background()
	Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorSA.Namespace}})).To(Succeed())
	Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: operatorSA.Namespace, Name: operatorSA.Name}})).To(Succeed())
	Expect(k8s.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "ringmaster-auth-delegator"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:auth-delegator"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: operatorSA.Namespace, Name: operatorSA.Name}},
	})).To(Succeed())
}

// operatorLog holds everything the operator logged during the suite, and
// seen every key secret the specs decoded, so that AfterSuite can check that
// no key byte was ever logged.
var (
	operatorLog syncBuffer
	seenMu      sync.Mutex
	seen        = map[keyring.Secret]bool{}
)

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type failingSource struct{}

func (failingSource) Mint(context.Context, int) ([]keyring.Secret, error) {
	return nil, errors.New("key source unavailable")
}
