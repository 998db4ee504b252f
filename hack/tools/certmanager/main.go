// Command cert-manager-controller runs cert-manager's own controllers, for
// the certificate tests: certificates (trigger, key manager, request manager,
// issuing, readiness, revision manager), issuers and clusterissuers, and
// certificaterequests with the approver and the self-signed and CA issuers.
// No webhook, cainjector, ACME or ingress shim.
//
// cert-manager's cmd/controller is a module of its own, which the Go module
// proxy does not serve; this main builds the same controller context from
// the served github.com/cert-manager/cert-manager module.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"

	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

var controllers = []string{
	"issuers", "clusterissuers",
	"certificates-trigger", "certificates-key-manager", "certificates-request-manager",
	"certificates-issuing", "certificates-readiness", "certificates-revision-manager",
	"certificaterequests-approver", "certificaterequests-issuer-selfsigned", "certificaterequests-issuer-ca",
}

func main() {
	var (
		kubeconfig string
		clusterNS  string
	)
	flag.StringVar(&kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "Kubeconfig of the API server.")
	flag.StringVar(&clusterNS, "cluster-resource-namespace", "cert-manager", "Namespace of the Secrets that ClusterIssuers refer to.")
	klog.InitFlags(nil)
	flag.Parse()
	if err := run(kubeconfig, clusterNS); err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager-controller:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, clusterNS string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = logf.NewContext(ctx, klog.Background(), "cert-manager")

	factory, err := controllerpkg.NewContextFactory(ctx, controllerpkg.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   100,
		KubernetesAPIBurst: 200,
		IssuerOptions:      controllerpkg.IssuerOptions{ClusterResourceNamespace: clusterNS},
		CertificateOptions: controllerpkg.CertificateOptions{
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	})
	if err != nil {
		return err
	}
	var run []controllerpkg.Interface
	for _, name := range controllers {
		construct, ok := controllerpkg.Known()[name]
		if !ok {
			return fmt.Errorf("controller %q is not registered", name)
		}
		c, err := construct(factory)
		if err != nil {
			return fmt.Errorf("construct %s: %w", name, err)
		}
		run = append(run, c)
	}

	// The controllers asked for their informers while being constructed;
	// start them all now.
	shared, err := factory.Build()
	if err != nil {
		return err
	}
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	shared.SharedInformerFactory.Start(ctx.Done())

	var wg sync.WaitGroup
	errs := make(chan error, len(run))
	for i, c := range run {
		wg.Go(func() {
			if err := c.Run(2, ctx); err != nil {
				errs <- fmt.Errorf("%s: %w", controllers[i], err)
				stop()
			}
		})
	}
	klog.Info("cert-manager controllers started", "controllers", controllers)
	wg.Wait()
	close(errs)
	return <-errs
}
