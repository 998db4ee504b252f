//go:build e2e

// Package e2e_test is ringmaster's end-to-end suite: the operator binary and
// a real control plane rotate a TicketKeyRing; a stand-in kubelet delivers it
// to a fleet of examples/server replicas, each after its own delay; clients
// reconnect through a round-robin load balancer and resume their TLS
// sessions on whichever replica they land. The harness is internal/testing/fleet.
//
// Run it with make test or make test-e2e: both build the control plane and
// set KUBEBUILDER_ASSETS.
package e2e_test

import (
	"os"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
)

var env *fleet.Env

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Fleet end-to-end suite")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	Expect(os.Getenv("KUBEBUILDER_ASSETS")).NotTo(BeEmpty(),
		"KUBEBUILDER_ASSETS is unset: run this suite with make test or make test-e2e, which build kube-apiserver, etcd and kubectl and set it")
	var err error
	env, err = fleet.Setup(ctx, fleet.Options{})
	Expect(err).NotTo(HaveOccurred())
	GinkgoWriter.Printf("Control plane, operator (pid %d) and binaries in %s\n", env.Operator.PID, env.Work)
}, NodeTimeout(3*time.Minute))

// AfterSuite stops every process, each by its own pid, and fails if any of
// them, or the etcd and kube-apiserver under the control plane, survives.
var _ = AfterSuite(func() {
	if env == nil {
		return
	}
	tracked := env.Sup.Tracked()
	Expect(env.Close()).To(Succeed())
	GinkgoWriter.Printf("Stopped %d processes; none left running\n", len(tracked))
})

// dumpOnFailure checks after each spec that the operator still runs, and
// prints what helps to understand a failed spec: the end of the operator's
// log and of each replica's, and what the fleet serves.
func dumpOnFailure(f **fleet.Fleet) {
	AfterEach(func(ctx SpecContext) {
		if env == nil {
			return
		}
		Expect(env.OperatorAlive()).To(Succeed())
		if !CurrentSpecReport().Failed() {
			return
		}
		GinkgoWriter.Printf("--- operator log (%s):\n%s\n", env.Operator.Log, env.Operator.LogTail(40))
		if *f == nil {
			return
		}
		for _, r := range (*f).Replicas {
			if r.Proc != nil {
				GinkgoWriter.Printf("--- replica %d log (%s):\n%s\n", r.Index, r.Proc.Log, r.Proc.LogTail(10))
			}
		}
		if sts, err := (*f).Health(ctx); err == nil {
			GinkgoWriter.Printf("--- fleet health:\n%s", fleet.DescribeHealth(sts))
		}
	})
}
