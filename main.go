// Command ringmaster is the operator: it rotates TicketKeyRings and delivers
// their keys to the fleets that mount them, and judges the cluster's
// certificates against CertificatePolicies.
package main

import (
	"flag"
	"fmt"
	"os"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/controllers"
	"github.com/ringmaster-io/ringmaster/internal/mint"
)

// Leader election: a Lease in the operator's namespace, and the core/v1
// Events that controller-runtime's leader election records on it.
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=ringmaster-system,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",namespace=ringmaster-system,resources=events,verbs=create;patch

// leaderElectionID is stable across releases, so that an upgrade never runs
// two leaders.
const leaderElectionID = "ringmaster.ringmaster.io"

func main() {
	var (
		metricsAddr    string
		probeAddr      string
		leaderElection bool
		leaderNS       string
		sa             types.NamespacedName
		maxRenewals    int
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Address of the Prometheus metrics endpoint; 0 disables it.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz probes.")
	flag.BoolVar(&leaderElection, "leader-elect", true, "Elect a leader, so that only one replica rotates keys.")
	flag.StringVar(&leaderNS, "leader-election-namespace", "", "Namespace of the leader election lease (default: the pod's namespace).")
	flag.StringVar(&sa.Namespace, "service-account-namespace", os.Getenv("POD_NAMESPACE"), "Namespace of the operator's service account, for Vault's Kubernetes auth (default $POD_NAMESPACE).")
	flag.StringVar(&sa.Name, "service-account-name", "ringmaster", "Name of the operator's service account, for Vault's Kubernetes auth.")
	flag.IntVar(&maxRenewals, "max-renewals-per-minute", controllers.DefaultMaxRenewalsPerMinute, "Most cert-manager Certificates that Enforce CertificatePolicies re-issue per minute, across the cluster (bursts of as many).")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")

	if err := run(metricsAddr, probeAddr, leaderElection, leaderNS, sa, maxRenewals); err != nil {
		log.Error(err, "Operator stopped")
		os.Exit(1)
	}
}

func run(metricsAddr, probeAddr string, leaderElection bool, leaderNS string, sa types.NamespacedName, maxRenewals int) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	if err := cmapi.AddToScheme(scheme); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:        probeAddr,
		LeaderElection:                leaderElection,
		LeaderElectionID:              leaderElectionID,
		LeaderElectionNamespace:       leaderNS,
		LeaderElectionReleaseOnCancel: true,
		Cache:                         controllers.CacheOptions(),
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	sources := &mint.Sources{Reader: mgr.GetAPIReader(), Client: mgr.GetClient(), ServiceAccount: sa}
	if err := (&controllers.TicketKeyRingReconciler{
		Client:       mgr.GetClient(),
		APIReader:    mgr.GetAPIReader(),
		Recorder:     mgr.GetEventRecorder("ringmaster"),
		Source:       sources.For,
		ForgetSource: sources.Forget,
	}).SetupWithManager(mgr, metrics.Registry); err != nil {
		return fmt.Errorf("set up TicketKeyRing controller: %w", err)
	}
	if err := (&controllers.CertificatePolicyReconciler{
		Client:               mgr.GetClient(),
		APIReader:            mgr.GetAPIReader(),
		Recorder:             mgr.GetEventRecorder("ringmaster"),
		MaxRenewalsPerMinute: maxRenewals,
	}).SetupWithManager(mgr, metrics.Registry); err != nil {
		return fmt.Errorf("set up CertificatePolicy controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	ctrl.Log.WithName("setup").Info("Starting operator", "leaderElection", leaderElection)
	return mgr.Start(ctrl.SetupSignalHandler())
}
