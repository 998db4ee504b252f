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

	"github.com/ringmaster-io/ringmaster/internal/controller"
	"github.com/ringmaster-io/ringmaster/internal/controller/certificatepolicy"
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
	reconciler *certificatepolicy.Reconciler
)

func TestCertificatePolicy(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "CertificatePolicy suite")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	fakeClock = clocktesting.NewFakeClock(time.Now().Truncate(time.Second))
	suite, err := testenv.StartSuite(ctx, testenv.SuiteOptions{
		Log:      GinkgoWriter,
		Operator: operator.Options{Options: controller.Options{Clock: fakeClock}, MaxRenewalsPerMinute: maxRenewals},
	})
	Expect(err).NotTo(HaveOccurred(), "the control plane runs and the operator leads, with its own RBAC")
	DeferCleanup(suite.Stop)
	env, k8s, registry = suite.Env, suite.Admin(), suite.Registry
	reconciler = suite.Operator.CertificatePolicy

	// No CertificatePolicy exists yet: the operator holds no TLS Secret.
	Expect(reconciler.WatchingSecrets()).To(BeFalse())
	err = reconciler.SecretCache.List(ctx, &corev1.SecretList{})
	Expect(errors.As(err, new(*cache.ErrCacheNotStarted))).To(BeTrue(), "the TLS Secret cache has not started: %v", err)
}, NodeTimeout(2*time.Minute))
