// Package operator builds ringmaster's manager: the scheme, the narrow
// caches, leader election, the metrics and probe endpoints, and every
// controller. main.go and every test suite build it here, so that the tests
// run the controllers exactly as shipped.
package operator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/confirm"
	"github.com/ringmaster-io/ringmaster/internal/controller"
	"github.com/ringmaster-io/ringmaster/internal/controller/apply"
	"github.com/ringmaster-io/ringmaster/internal/controller/certificatepolicy"
	"github.com/ringmaster-io/ringmaster/internal/controller/unmanagedkeys"
	"github.com/ringmaster-io/ringmaster/internal/dnswork"
	"github.com/ringmaster-io/ringmaster/internal/nudge"
	"github.com/ringmaster-io/ringmaster/internal/shape"
)

// Leader election uses a Lease in the operator's namespace, and nothing
// else, and records its transitions as (core) events there. The metrics endpoint authenticates and authorizes its callers with
// the API server.
//
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=ringmaster-system,resources=leases,verbs=create
// +kubebuilder:rbac:groups="",namespace=ringmaster-system,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=ringmaster-system,resources=leases,verbs=get;update,resourceNames=ringmaster.ringmaster.io
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// LeaderElectionID is the name of the leader election Lease. It is stable
// across releases, so that an upgrade never runs two leaders.
const LeaderElectionID = "ringmaster.ringmaster.io"

// Options configure the operator. The zero value of each field is the
// default of the flag that sets it in main.go.
type Options struct {
	// MetricsAddr serves /metrics; "0" disables it.
	MetricsAddr string
	// MetricsInsecure serves metrics over plain HTTP without authentication,
	// for local runs only. By default metrics are served over HTTPS to
	// callers the API server authenticates and authorizes (RBAC
	// nonResourceURLs /metrics, verb get).
	MetricsInsecure bool
	// MetricsCertDir holds tls.crt and tls.key for the metrics endpoint;
	// empty means a self-signed certificate made at start.
	MetricsCertDir string
	// ProbeAddr serves /healthz and /readyz; "0" disables it.
	ProbeAddr string
	// PprofAddr serves Go's profiles (/debug/pprof/) over plain HTTP,
	// without authentication, for measuring the operator (make
	// bench-scale); "" or "0", the default, disables it. Bind it to
	// loopback: a profile names no key, but a goroutine dump shows every
	// stack.
	PprofAddr string
	// LeaderElection elects one replica to reconcile, with a Lease named
	// LeaderElectionID in the operator's namespace.
	LeaderElection bool
	// WatchNamespaces, when set, are the only namespaces whose rings,
	// Secrets and pods the operator reads and writes (its own namespace is
	// always one): its cache watches those alone, so that RBAC may grant
	// it Secrets and pods by RoleBindings there rather than cluster-wide.
	// Empty means every namespace.
	WatchNamespaces []string

	controller.Options
	// MaxRenewalsPerMinute bounds Enforce's renewals across the cluster; 0
	// means certificatepolicy.DefaultMaxRenewalsPerMinute.
	MaxRenewalsPerMinute int
	// NoCertificatePolicy leaves the CertificatePolicy controller out, and
	// with it every read of Secrets other than ringmaster's own: the
	// operator then needs no cluster-wide Secret read (docs/security.md).
	NoCertificatePolicy bool
	// UnmanagedTicketKeys runs the audit of session-ticket keys no ring
	// manages (--unmanaged-ticket-keys), for its metrics: it lists
	// ConfigMaps, Secrets and Envoy configurations cluster-wide every
	// UnmanagedTicketKeysInterval (0: unmanagedkeys.DefaultInterval).
	UnmanagedTicketKeys         bool
	UnmanagedTicketKeysInterval time.Duration
	// Shapes is what every cache of the operator keeps of each kind
	// (shape.Operator), set by New.
	Shapes *shape.Registry
	// Probing bounds how the operator asks pods what they hold
	// (spec.confirmation); its zero value is the defaults.
	Probing confirm.Budget
	// DNSBudget bounds the DNS work of ECH rings; zero fields default.
	DNSBudget dnswork.Budget
	// NoNudge leaves the pods mounting a projection to their kubelets' own
	// sync (up to about 90 s with the defaults) rather than patch each
	// pod's annotation after every new epoch (--nudge=false): the operator
	// then writes no pod.
	NoNudge bool
	// Nudging bounds how the operator patches pods; zero fields default.
	Nudging nudge.Budget

	// SkipNameValidation allows a test to build the operator more than once
	// in one process, as an operator restart.
	SkipNameValidation bool
	// LeaseDuration, RenewDeadline and RetryPeriod tune leader election;
	// zero means controller-runtime's defaults.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration

	// podCertificatesServed: the API serves PodCertificateRequests, which
	// the cache then watches in every namespace (found by New).
	podCertificatesServed bool
}

// Operator is a built manager and the controllers it runs.
type Operator struct {
	manager.Manager
	// CertificatePolicy is nil under Options.NoCertificatePolicy.
	CertificatePolicy *certificatepolicy.Reconciler
	// Shapes is what the operator's caches keep of each kind, and the
	// informers they made (shape.Registry.Informers).
	Shapes *shape.Registry
	// Pods is the operator's cache of pods, as shape.Pod keeps them.
	Pods *confirm.Pods
}

// Scheme is every API the operator reads or writes.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme, cmapi.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// cacheOptions narrows the manager's cache (controller.CacheOptions) to the
// watched namespaces and the operator's own, when they are listed.
// Cluster-scoped objects are read as ever. The CertificatePolicy audit
// judges Certificates and PodCertificateRequests in every namespace, as it does TLS Secrets (its own
// cache): its RBAC stays cluster-wide, and so does its cache of them.
func cacheOptions(o Options) cache.Options {
	co := controller.CacheOptions(o.Shapes, o.Namespace)
	if len(o.WatchNamespaces) == 0 {
		return co
	}
	co.DefaultNamespaces = map[string]cache.Config{o.Namespace: {}}
	for _, ns := range o.WatchNamespaces {
		co.DefaultNamespaces[ns] = cache.Config{}
	}
	if !o.NoCertificatePolicy {
		if co.ByObject == nil {
			co.ByObject = map[client.Object]cache.ByObject{}
		}
		co.ByObject[&cmapi.Certificate{}] = cache.ByObject{Namespaces: map[string]cache.Config{cache.AllNamespaces: {}}}
		if o.podCertificatesServed {
			co.ByObject[&certificatesv1.PodCertificateRequest{}] = cache.ByObject{Namespaces: map[string]cache.Config{cache.AllNamespaces: {}}}
		}
	}
	return co
}

// served reports whether the API serves resource in groupVersion.
func served(cfg *rest.Config, groupVersion, resource string) (bool, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return false, fmt.Errorf("discover the API: %w", err)
	}
	list, err := dc.ServerResourcesForGroupVersion(groupVersion)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discover %s: %w", groupVersion, err)
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == resource }), nil
}

// ParseNamespaces reads the value of --watch-namespaces: namespace names
// separated by commas, each a valid name, none twice. Empty is none.
func ParseNamespaces(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []string
	for _, ns := range strings.Split(s, ",") {
		ns = strings.TrimSpace(ns)
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, fmt.Errorf("--watch-namespaces: %q is no namespace name: %s", ns, strings.Join(errs, "; "))
		}
		if slices.Contains(out, ns) {
			return nil, fmt.Errorf("--watch-namespaces: %q is listed twice", ns)
		}
		out = append(out, ns)
	}
	return out, nil
}

// New builds the operator against cfg. Run it with Start.
func New(ctx context.Context, cfg *rest.Config, o Options) (*Operator, error) {
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Registry == nil {
		o.Registry = metrics.Registry
	}
	// Every cache of the operator keeps each kind to its shape, and holds
	// no kind without one.
	o.Shapes = shape.Operator(scheme, o.Namespace)
	if len(o.WatchNamespaces) > 0 && !o.NoCertificatePolicy {
		// A cache may name a kind in ByObject only if the API serves it.
		if o.podCertificatesServed, err = served(cfg, certificatesv1.SchemeGroupVersion.String(), "podcertificaterequests"); err != nil {
			return nil, err
		}
	}
	metricsOpts := metricsserver.Options{BindAddress: o.MetricsAddr}
	if !o.MetricsInsecure {
		metricsOpts.SecureServing = true
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
		metricsOpts.CertDir = o.MetricsCertDir
	}
	mo := ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsOpts,
		HealthProbeBindAddress:        o.ProbeAddr,
		PprofBindAddress:              o.PprofAddr,
		LeaderElection:                o.LeaderElection,
		LeaderElectionID:              LeaderElectionID,
		LeaderElectionNamespace:       o.Namespace,
		LeaderElectionReleaseOnCancel: true,
		Cache:                         cacheOptions(o),
		Controller:                    config.Controller{SkipNameValidation: ptr.To(o.SkipNameValidation)},
	}
	if o.LeaseDuration > 0 {
		mo.LeaseDuration, mo.RenewDeadline, mo.RetryPeriod = &o.LeaseDuration, &o.RenewDeadline, &o.RetryPeriod
	}
	mgr, err := ctrl.NewManager(cfg, mo)
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	// Pods are asked off the reconcile path, by one prober with a budget
	// of its own, so that no namespace's pods hold up another's rings. It
	// finds them in a cache of its own that keeps only what voting needs
	// of each pod, started by the first ring that asks its pods.
	// With namespaces listed, RBAC grants pods there alone: the cache
	// watches those (and the operator's own) alone too.
	var podNamespaces []string
	if len(o.WatchNamespaces) > 0 {
		podNamespaces = append(slices.Clone(o.WatchNamespaces), o.Namespace)
	}
	pods, err := confirm.NewPods(mgr.GetConfig(), mgr.GetScheme(), mgr.GetRESTMapper(), confirm.PodsOptions{Namespaces: podNamespaces, Shapes: o.Shapes})
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(pods); err != nil {
		return nil, fmt.Errorf("add the pod cache: %w", err)
	}
	prober := &confirm.Prober{Pods: pods, Clock: o.Clock, Budget: o.Probing}
	if err := mgr.Add(prober); err != nil {
		return nil, fmt.Errorf("add the prober: %w", err)
	}
	o.Prober = prober
	// DNS is written and checked off the reconcile path too, one job of a
	// zone at a time, so that a DNS server that does not answer slows only
	// its own zone's rings.
	dns := &dnswork.Worker{Clock: o.Clock, Budget: o.DNSBudget}
	if err := mgr.Add(dns); err != nil {
		return nil, fmt.Errorf("add the DNS worker: %w", err)
	}
	o.DNS = dns
	if len(o.WatchNamespaces) > 0 {
		o.WatchedNamespaces = append(slices.Clone(o.WatchNamespaces), o.Namespace)
	}
	// After every new epoch, the pods mounting the projection are patched
	// (one annotation) off the reconcile path, so that their kubelets
	// re-mount it at once; they are found in the same pod cache.
	if !o.NoNudge {
		nudger := &nudge.Nudger{Pods: pods, Client: mgr.GetClient(), Budget: o.Nudging}
		if err := mgr.Add(nudger); err != nil {
			return nil, fmt.Errorf("add the nudger: %w", err)
		}
		o.Nudger = nudger
	}
	if err := controller.Setup(ctx, mgr, o.Options); err != nil {
		return nil, err
	}
	var cpol *certificatepolicy.Reconciler
	if !o.NoCertificatePolicy {
		cpol = &certificatepolicy.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: apply.Recorder(mgr.GetEventRecorder("ringmaster")),
			Clock: o.Clock, MaxRenewalsPerMinute: o.MaxRenewalsPerMinute, Shapes: o.Shapes}
		if err := cpol.SetupWithManager(mgr, o.Registry); err != nil {
			return nil, fmt.Errorf("set up the CertificatePolicy controller: %w", err)
		}
	}
	if o.UnmanagedTicketKeys {
		// It lists from the API server, page by page, and keeps only the
		// findings: no informer, so nothing for a shape to bound.
		a := &unmanagedkeys.Auditor{Reader: mgr.GetAPIReader(), Mapper: mgr.GetRESTMapper(), Clock: o.Clock, Interval: o.UnmanagedTicketKeysInterval}
		if err := a.Register(o.Registry); err != nil {
			return nil, fmt.Errorf("register the unmanaged ticket keys' metrics: %w", err)
		}
		if err := mgr.Add(a); err != nil {
			return nil, fmt.Errorf("add the audit of unmanaged ticket keys: %w", err)
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, err
	}
	return &Operator{Manager: mgr, CertificatePolicy: cpol, Shapes: o.Shapes, Pods: pods}, nil
}
