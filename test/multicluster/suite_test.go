//go:build e2e

// Package multicluster_test runs one ring across two clusters: two local
// control planes, two operator binaries and two fleets of examples/server,
// sharing a ring through one real Vault's KV v2 engine (reached through a
// proxy on loopback that the suite can take down). Clients that move
// between the fleets resume their sessions in either cluster.
//
// Run it with make test or make test-e2e, which build the control plane and
// Vault and set KUBEBUILDER_ASSETS and RINGMASTER_VAULT.
package multicluster_test

import (
	"os"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

func TestMultiCluster(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Rings shared across clusters")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	Expect(os.Getenv("KUBEBUILDER_ASSETS")).NotTo(BeEmpty(),
		"KUBEBUILDER_ASSETS is unset: run this suite with make test or make test-e2e")
	Expect(os.Getenv("RINGMASTER_VAULT")).NotTo(BeEmpty(),
		"RINGMASTER_VAULT is unset: run this suite with make test or make test-e2e, which build Vault")
})
