// Command ringmaster is the operator: it rotates TicketKeyRings and
// ClusterTicketKeyRings and delivers their keys to the fleets that mount
// them, checks ClusterKeySources, and judges the cluster's certificates
// against CertificatePolicies.
package main

import (
	"cmp"
	"flag"
	"fmt"
	"os"
	"runtime/debug"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/ringmaster-io/ringmaster/internal/confirm"
	"github.com/ringmaster-io/ringmaster/internal/controller"
	"github.com/ringmaster-io/ringmaster/internal/controller/certificatepolicy"
	"github.com/ringmaster-io/ringmaster/internal/operator"
	"github.com/ringmaster-io/ringmaster/internal/version"
)

func main() {
	var o operator.Options
	podNamespace := os.Getenv("POD_NAMESPACE")
	flag.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8443", "Address of the Prometheus metrics endpoint, served over HTTPS to callers the API server authorizes; 0 disables it.")
	flag.BoolVar(&o.MetricsInsecure, "metrics-insecure", false, "Serve metrics over plain HTTP to anyone, for local runs only.")
	flag.StringVar(&o.MetricsCertDir, "metrics-cert-dir", "", "Directory holding tls.crt and tls.key for the metrics endpoint (default: a self-signed certificate).")
	flag.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz probes; 0 disables them.")
	flag.StringVar(&o.PprofAddr, "pprof-bind-address", "0", "Address of Go's profiles (/debug/pprof/), plain HTTP without authentication, for measurements: bind it to loopback; 0 disables them.")
	flag.BoolVar(&o.LeaderElection, "leader-elect", true, "Elect a leader, so that only one replica rotates keys.")
	flag.StringVar(&o.Namespace, "cluster-resource-namespace", podNamespace,
		"The operator's namespace: its leader election Lease, ClusterTicketKeyRing snapshots, and the Secrets and ConfigMaps ClusterKeySources name (default $POD_NAMESPACE).")
	flag.StringVar(&o.ServiceAccount, "service-account-name", "ringmaster", "The operator's service account, in its namespace, for Vault's Kubernetes auth.")
	flag.IntVar(&o.RingWorkers, "ring-workers", controller.DefaultRingWorkers, "Rings of each kind reconciled at once, so that a slow key source holds up only its own rings.")
	flag.IntVar(&o.MaxRenewalsPerMinute, "max-renewals-per-minute", certificatepolicy.DefaultMaxRenewalsPerMinute, "Most cert-manager Certificates that Enforce CertificatePolicies re-issue per minute, across the cluster (bursts of as many).")
	flag.IntVar(&o.Probing.MaxPods, "confirmation-max-pods", confirm.DefaultMaxPods, "Most pods one ring under spec.confirmation may select; a ring selecting more is not probed, and its staged keys are not confirmed.")
	certificatePolicy := flag.Bool("certificate-policy", true,
		"Run the CertificatePolicy audit, which reads kubernetes.io/tls Secrets cluster-wide; without it the operator reads no Secret but ringmaster's own.")
	flag.BoolVar(&o.UnmanagedTicketKeys, "unmanaged-ticket-keys", false,
		"Audit the session-ticket keys no ring manages (ingress-nginx ConfigMaps, Envoy configurations, HAProxy key files) for the ringmaster_unmanaged_ticket_keys metrics: lists ConfigMaps, Secrets and Envoy configurations cluster-wide every 10 minutes, keeping only where keys are, never their bytes.")
	watch := flag.String("watch-namespaces", "",
		"Namespaces whose rings, Secrets and pods the operator serves, comma-separated (its own namespace always); empty: every namespace. RBAC may then grant Secrets and pods by RoleBindings there alone.")
	nudgePods := flag.Bool("nudge", true,
		"After every new epoch, patch one annotation (ringmaster.io/delivered) of each pod mounting the projection, so that its kubelet re-mounts it at once rather than on its own sync (up to about 90 s). Needs RBAC to patch pods, under the admission guard of config/admission/pods.yaml.")
	exclude := flag.Bool("exclude-secrets-from-backup", true,
		"Label every Secret that holds keys velero.io/exclude-from-backup=true, so that backups skip them: a key in a backup outlives its expiresAt.")
	qps := flag.Float64("kube-api-qps", -1,
		"Most requests a second to the API server, on average; negative: no limit in the client, and the API server's priority and fairness queues the operator's requests among everyone's.")
	burst := flag.Int("kube-api-burst", 0, "Requests the operator may send at once over --kube-api-qps (default: twice it).")
	memoryRatio := flag.Float64("memory-limit-ratio", operator.DefaultMemoryLimitRatio,
		"The Go runtime's soft memory limit as a share of the container's memory limit ($"+operator.MemoryLimitEnv+", in bytes, which the chart sets from the downward API), so that the garbage collector works harder before the container is OOM-killed; GOMEMLIMIT, when set, wins.")
	gcPercent := flag.Int("gc-percent", operator.DefaultGCPercent,
		"The garbage collector's target: collect once the heap has grown by this percentage of what was live after the last collection; GOGC, when set, wins; negative: Go's default, 100.")
	printVersion := flag.Bool("version", false, "Print the version and exit.")
	zo := zap.Options{}
	zo.BindFlags(flag.CommandLine)
	flag.Parse()
	if *printVersion {
		fmt.Println(version.String("ringmaster"))
		return
	}
	o.KeepSecretsInBackups = !*exclude
	o.NoCertificatePolicy = !*certificatePolicy
	o.NoNudge = !*nudgePods
	namespaces, err := operator.ParseNamespaces(*watch)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	o.WatchNamespaces = namespaces
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zo)))
	limit, err := operator.SoftMemoryLimit(os.Getenv(operator.MemoryLimitEnv), os.Getenv("GOMEMLIMIT"), *memoryRatio)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if limit > 0 {
		debug.SetMemoryLimit(limit)
		ctrl.Log.WithName("setup").Info("Set the Go runtime's soft memory limit", "bytes", limit, "ratio", *memoryRatio)
	}
	if p, ok := operator.GCPercent(*gcPercent, os.Getenv("GOGC")); ok {
		debug.SetGCPercent(p)
		ctrl.Log.WithName("setup").Info("Set the garbage collector's target", "percent", p)
	}

	if err := run(o, float32(*qps), *burst); err != nil {
		ctrl.Log.WithName("setup").Error(err, "Operator stopped")
		os.Exit(1)
	}
}

func run(o operator.Options, qps float32, burst int) error {
	if o.Namespace == "" {
		return fmt.Errorf("the operator's namespace is unknown: set --cluster-resource-namespace or $POD_NAMESPACE")
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	// Without a limit in the client (controller-runtime's default), the API
	// server's priority and fairness decides: it queues the operator's
	// requests in its service account's flow, apart from other clients', and
	// a bulk of rings then runs as fast as the API server allows.
	cfg.QPS, cfg.Burst = -1, 0
	if qps > 0 {
		cfg.QPS, cfg.Burst = qps, cmp.Or(burst, int(2*qps))
	}
	ctx := ctrl.SetupSignalHandler()
	op, err := operator.New(ctx, cfg, o)
	if err != nil {
		return err
	}
	ctrl.Log.WithName("setup").Info("Starting operator", "version", version.Version(), "namespace", o.Namespace, "leaderElection", o.LeaderElection,
		"metrics", cmp.Or(o.MetricsAddr, "0"), "watchNamespaces", o.WatchNamespaces, "certificatePolicy", !o.NoCertificatePolicy, "unmanagedTicketKeys", o.UnmanagedTicketKeys, "nudge", !o.NoNudge,
		"kubeAPIQPS", cfg.QPS, "kubeAPIBurst", cfg.Burst)
	return op.Start(ctx)
}
