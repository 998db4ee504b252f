//go:build integration

package controller_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"io"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/internal/controller"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/operator"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
)

// The suite runs the operator as it is shipped (internal/operator) against a
// real kube-apiserver and etcd: as its own service account, bound to exactly
// the RBAC config/rbac generates, with leader election on. Only the clock is
// the suite's, a fake one the specs step through rotations.

// mintTimeout bounds a mint in the suite: long enough for any real answer,
// short enough for the specs that wait for a Vault that never answers.
const mintTimeout = 8 * time.Second

var (
	suite       *testenv.Suite
	env         *testenv.Env
	k8s         client.Client // a cluster admin, for the specs
	operatorCfg *rest.Config  // the operator's service account
	fakeClock   *clocktesting.FakeClock
	registry    *prometheus.Registry
	// operatorCache is the running operator's cache, for what it holds.
	operatorCache cache.Cache
)

func TestControllers(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Controller suite")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	fakeClock = clocktesting.NewFakeClock(time.Now().Truncate(time.Second))
	var err error
	suite, err = testenv.StartSuite(ctx, testenv.SuiteOptions{
		Log: io.MultiWriter(GinkgoWriter, &operatorLog),
		Operator: operator.Options{
			LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: time.Second,
			SkipNameValidation: true, // a restart registers the controller names again
			Options:            controller.Options{Clock: fakeClock, MintTimeout: mintTimeout},
		},
		DeferOperator: true,
	})
	Expect(err).NotTo(HaveOccurred())
	// A cleanup, not AfterSuite's last step: it runs even when the log
	// check below fails, so that no kube-apiserver or etcd outlives the
	// suite.
	DeferCleanup(suite.Stop)
	env, k8s, operatorCfg = suite.Env, suite.Admin(), suite.OperatorConfig
	startManager()
}, NodeTimeout(2*time.Minute))

var _ = AfterSuite(func() {
	By("finding no key the suite saw in any operator log line")
	logged := operatorLog.String()
	Expect(logged).To(Or(ContainSubstring("Published ticket key epoch"), ContainSubstring("Published ECH epoch")), "the log was captured")
	seenMu.Lock()
	defer seenMu.Unlock()
	Expect(seen).NotTo(BeEmpty())
	for s := range seen {
		for _, enc := range []string{base64.StdEncoding.EncodeToString(s[:]), hex.EncodeToString(s[:])} {
			Expect(logged).NotTo(ContainSubstring(enc))
		}
	}

})

// startManager starts the operator as main.go builds it, as its own service
// account, with leader election and the suite's fake clock, and waits until
// it leads. Calling it again after stopManager is an operator restart:
// nothing carries over in memory, and the stopped one released its Lease.
func startManager() {
	GinkgoHelper()
	Expect(suite.StartOperator()).To(Succeed(), "the operator leads, with its own RBAC")
	registry, operatorCache = suite.Registry, suite.Operator.GetCache()
}

func stopManager() {
	GinkgoHelper()
	Expect(suite.StopOperator()).To(Succeed())
}

// leaseHolder is who holds the operator's leader election Lease.
func leaseHolder(ctx context.Context) string {
	l := &coordinationv1.Lease{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: testenv.Namespace, Name: operator.LeaderElectionID}, l); err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
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
