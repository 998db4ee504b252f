//go:build integration

// Package certificatepolicy_test is the envtest suite of the
// CertificatePolicy controller: a real kube-apiserver and etcd with
// ringmaster's and cert-manager's CRDs installed, and the operator built as
// main.go builds it, running as its own service account with the generated
// RBAC and leader election on, with a fake clock. No cert-manager controller
// runs here: the specs play its part (writing Secrets, Certificate statuses)
// where they need it; test/certmanager runs the real one.
package certificatepolicy_test

import (
	"errors"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/ringmaster-io/ringmaster/internal/controller"
	"github.com/ringmaster-io/ringmaster/internal/operator"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
)

// maxRenewals is the suite's renewal rate limit, small enough to see it bite.
const maxRenewals = 2

var (
	env        *testenv.Env
	k8s        client.Client
	fakeClock  *clocktesting.FakeClock
	registry   *prometheus.Registry
	reconciler *controller.CertificatePolicyReconciler
)

func TestCertificatePolicy(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "CertificatePolicy suite")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	var err error
	env, err = testenv.Start()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)
	k8s = env.Client
	cfg, err := env.OperatorConfig(ctx)
	Expect(err).NotTo(HaveOccurred())
	fakeClock = clocktesting.NewFakeClock(time.Now().Truncate(time.Second))

	registry = prometheus.NewRegistry()
	op, stop, err := testenv.RunOperator(cfg, operator.Options{
		MetricsAddr: "0", ProbeAddr: "0", LeaderElection: true,
		Options: controller.Options{
			Namespace: testenv.Namespace, ServiceAccount: testenv.ServiceAccount,
			Clock: fakeClock, Registry: registry, MaxRenewalsPerMinute: maxRenewals,
		},
	})
	Expect(err).NotTo(HaveOccurred(), "the operator leads, with its own RBAC")
	DeferCleanup(stop)
	reconciler = op.CertificatePolicy

	// No CertificatePolicy exists yet: the operator holds no TLS Secret.
	Expect(reconciler.WatchingSecrets()).To(BeFalse())
	err = reconciler.SecretCache.List(ctx, &corev1.SecretList{})
	Expect(errors.As(err, new(*cache.ErrCacheNotStarted))).To(BeTrue(), "the TLS Secret cache has not started: %v", err)
}, NodeTimeout(2*time.Minute))
