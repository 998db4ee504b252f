package certificatepolicy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync/atomic"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/certpolicy"
	"github.com/ringmaster-io/ringmaster/internal/controller/apply"
	"github.com/ringmaster-io/ringmaster/internal/schedule"
	"github.com/ringmaster-io/ringmaster/internal/shape"
)

// +kubebuilder:rbac:groups=ringmaster.io,resources=certificatepolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=ringmaster.io,resources=certificatepolicies/status,verbs=patch
// +kubebuilder:rbac:groups=cert-manager.io,resources=certificates,verbs=get;list;watch
// +kubebuilder:rbac:groups=cert-manager.io,resources=certificates/status,verbs=update
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

const (
	// DefaultMaxRenewalsPerMinute bounds Enforce's renewals across the
	// cluster when the operator is given no other figure.
	DefaultMaxRenewalsPerMinute = 10

	// aggregateDelay gathers the changes of many certificates into one
	// status write of each policy they affect.
	aggregateDelay = time.Second

	kindPolicy = "CertificatePolicy"
)

// cpolRequest is one unit of work of the CertificatePolicy controller: a
// policy to aggregate (Kind CertificatePolicy, no namespace), or a
// certificate to evaluate (Kind Certificate or Secret).
type cpolRequest struct {
	Kind string
	types.NamespacedName
}

func policyRequest(name string) cpolRequest {
	return cpolRequest{Kind: kindPolicy, NamespacedName: types.NamespacedName{Name: name}}
}

func certificateRequest(id certpolicy.ID) cpolRequest {
	return cpolRequest{Kind: string(id.Kind), NamespacedName: types.NamespacedName{Namespace: id.Namespace, Name: id.Name}}
}

// Reconciler judges certificates against CertificatePolicies.
//
// Certificates and TLS Secrets are evaluated one at a time, when they change,
// against every policy; a policy's status is aggregated from the stored
// verdicts, and only a policy's own change (or the passing of a deadline)
// re-evaluates what it selects.
//
// Policies and certificates share one work queue with one worker. The store
// of verdicts is then changed by one goroutine, in the order events came, so
// a certificate's new verdict and the aggregation of the policies it changed
// never race; Enforce's rate limit and its memory of renewals need no lock;
// and a policy aggregated after a burst of certificate changes sees them all.
// Evaluating one certificate costs microseconds, so one worker keeps up with
// thousands of Secrets (docs/spec/v1alpha1/certificatepolicies.md: 5,000 in about 120 ms).
type Reconciler struct {
	// Client reads policies, Certificates and Namespaces from the manager's
	// cache and writes statuses.
	client.Client
	// APIReader reads a Certificate fresh before Enforce updates it.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Clock drives evaluation and the renewal rate limit; tests inject a
	// fake one.
	Clock clock.PassiveClock
	// SecretCache holds the kubernetes.io/tls Secrets, each as the facts of
	// its certificate (see NewTLSSecretCache). SetupWithManager makes it;
	// it starts, and the controller watches it, once a CertificatePolicy
	// exists (WatchingSecrets).
	SecretCache cache.Cache
	// Shapes keeps what SecretCache holds to its shape (shape.TLSSecret).
	Shapes *shape.Registry
	// MaxRenewalsPerMinute bounds the renewals Enforce triggers across the
	// cluster: a token bucket of that many, refilled at that rate. 0 means
	// DefaultMaxRenewalsPerMinute.
	MaxRenewalsPerMinute int
	// WatchCertificates: whether cert-manager Certificates are judged. Nil:
	// when the cert-manager.io/v1 API is served at start-up.
	WatchCertificates *bool
	// WatchPodCertificates and WatchTrustBundles: whether
	// PodCertificateRequests and ClusterTrustBundles are judged. Nil: when
	// their certificates.k8s.io/v1 API is served at start-up (Kubernetes
	// 1.37 and later, or the feature gates on).
	WatchPodCertificates, WatchTrustBundles *bool

	store    *certpolicy.Store
	renewals certpolicy.Renewals
	metrics  *cpolMetrics
	limiter  *rate.Limiter
	policies chan event.TypedGenericEvent[string]

	// newestIssued is the newest issued request of each pod and signer,
	// and retained the requests gone from the API whose facts are kept
	// (podcerts.go). The one worker alone reads and writes them.
	newestIssued map[podSigner]podIssued
	retained     map[certpolicy.ID]bool

	// The TLS Secret cache is started lazily: mgr runs it, controller
	// watches it, and secrets says both are done and every Secret it held
	// then was observed.
	mgr         manager.Manager
	controller  controller.TypedController[cpolRequest]
	cacheAdded  bool
	watchAdded  bool
	secretsDone atomic.Bool
}

// WatchingSecrets reports whether the TLS Secret cache runs: from the first
// CertificatePolicy the controller reconciles on. Until then no TLS Secret
// is listed, watched or held.
func (r *Reconciler) WatchingSecrets() bool { return r.secretsDone.Load() }

// SetupWithManager registers the controller, its TLS Secret cache and its
// metrics.
func (r *Reconciler) SetupWithManager(mgr manager.Manager, registry prometheus.Registerer) error {
	if err := r.defaults(mgr); err != nil {
		return err
	}
	for _, c := range r.metrics.collectors() {
		if err := registry.Register(c); err != nil && !errors.As(err, &prometheus.AlreadyRegisteredError{}) {
			return err
		}
	}
	b := builder.TypedControllerManagedBy[cpolRequest](mgr).
		Named("certificatepolicy").
		WithOptions(controller.TypedOptions[cpolRequest]{
			MaxConcurrentReconciles: 1, // one worker: see the type's comment
			LogConstructor:          r.logger(mgr.GetLogger()),
		}).
		WatchesRawSource(source.TypedKind(mgr.GetCache(), &v1alpha1.CertificatePolicy{},
			handler.TypedEnqueueRequestsFromMapFunc(r.requestsOfPolicy),
			predicate.Or[*v1alpha1.CertificatePolicy](predicate.TypedGenerationChangedPredicate[*v1alpha1.CertificatePolicy]{}, predicate.TypedAnnotationChangedPredicate[*v1alpha1.CertificatePolicy]{}))).
		WatchesRawSource(source.TypedKind(mgr.GetCache(), &corev1.Namespace{}, handler.TypedFuncs[*corev1.Namespace, cpolRequest]{UpdateFunc: r.relabelledNamespace})).
		WatchesRawSource(source.TypedChannel(r.policies, handler.TypedFuncs[string, cpolRequest]{GenericFunc: r.aggregateLater}))
	if *r.WatchCertificates {
		b = b.WatchesRawSource(source.TypedKind(mgr.GetCache(), &cmapi.Certificate{}, handler.TypedEnqueueRequestsFromMapFunc(r.requestsOfCertificate)))
	}
	if *r.WatchPodCertificates {
		b = b.WatchesRawSource(source.TypedKind(mgr.GetCache(), &certificatesv1.PodCertificateRequest{}, handler.TypedEnqueueRequestsFromMapFunc(r.requestsOfPodRequest)))
	}
	if *r.WatchTrustBundles {
		b = b.WatchesRawSource(source.TypedKind(mgr.GetCache(), &certificatesv1.ClusterTrustBundle{}, handler.TypedEnqueueRequestsFromMapFunc(r.requestsOfBundle)))
	}
	c, err := b.Build(r)
	if err != nil {
		return err
	}
	r.mgr, r.controller = mgr, c
	return nil
}

// watchSecrets starts the TLS Secret cache and the controller's watch of
// it, once: a cluster without CertificatePolicies never holds its TLS
// Secrets. The Secrets the cache lists at start are observed here, before
// the policy that started it is judged, so that its first status counts
// them all; the watch passes on only what changes after.
func (r *Reconciler) watchSecrets(ctx context.Context) error {
	if r.secretsDone.Load() {
		return nil
	}
	if !r.cacheAdded {
		if err := r.mgr.Add(r.SecretCache); err != nil {
			return fmt.Errorf("start the TLS Secret cache: %w", err)
		}
		r.cacheAdded = true
		log.FromContext(ctx).Info("Started the TLS Secret cache: a CertificatePolicy exists")
	}
	if !r.SecretCache.WaitForCacheSync(ctx) {
		return errors.New("the TLS Secret cache did not sync")
	}
	src := source.TypedKind(r.SecretCache, &corev1.Secret{}, handler.TypedEnqueueRequestsFromMapFunc(r.requestsOfSecret),
		predicate.TypedFuncs[*corev1.Secret]{CreateFunc: func(e event.TypedCreateEvent[*corev1.Secret]) bool { return !e.IsInInitialList }})
	if !r.watchAdded {
		if err := r.controller.Watch(src); err != nil {
			return fmt.Errorf("watch TLS Secrets: %w", err)
		}
		if err := src.WaitForSync(ctx); err != nil {
			return fmt.Errorf("watch TLS Secrets: %w", err)
		}
		r.watchAdded = true
	}
	list := &corev1.SecretList{}
	if err := r.SecretCache.List(ctx, list); err != nil {
		return fmt.Errorf("list TLS Secrets: %w", err)
	}
	r.secretsDone.Store(true)
	for i := range list.Items {
		for _, req := range r.requestsOfSecret(ctx, &list.Items[i]) {
			if _, err := r.Reconcile(ctx, req); err != nil {
				return err
			}
		}
	}
	return nil
}

// defaults fills what the reconciler was not given.
func (r *Reconciler) defaults(mgr manager.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.MaxRenewalsPerMinute <= 0 {
		r.MaxRenewalsPerMinute = DefaultMaxRenewalsPerMinute
	}
	if r.SecretCache == nil {
		if r.Shapes == nil {
			return errors.New("create TLS Secret cache: no shapes to keep its Secrets to")
		}
		c, err := NewTLSSecretCache(mgr.GetConfig(), mgr.GetScheme(), mgr.GetRESTMapper(), r.Shapes)
		if err != nil {
			return fmt.Errorf("create TLS Secret cache: %w", err)
		}
		r.SecretCache = c
	}
	for _, w := range []struct {
		watch **bool
		gvk   schema.GroupVersionKind
		not   string
	}{
		{&r.WatchCertificates, cmapi.SchemeGroupVersion.WithKind(cmapi.CertificateKind),
			"The cert-manager.io/v1 API is not served: CertificatePolicies judge kubernetes.io/tls Secrets only; restart the operator after installing cert-manager"},
		{&r.WatchPodCertificates, certificatesv1.SchemeGroupVersion.WithKind("PodCertificateRequest"),
			"The certificates.k8s.io/v1 PodCertificateRequest API is not served (Kubernetes before 1.37): CertificatePolicies judge no pod certificates"},
		{&r.WatchTrustBundles, certificatesv1.SchemeGroupVersion.WithKind("ClusterTrustBundle"),
			"The certificates.k8s.io/v1 ClusterTrustBundle API is not served (Kubernetes before 1.37): CertificatePolicies judge no trust bundles"},
	} {
		if *w.watch != nil {
			continue
		}
		_, err := mgr.GetRESTMapper().RESTMapping(w.gvk.GroupKind(), w.gvk.Version)
		if err != nil && !meta.IsNoMatchError(err) {
			return fmt.Errorf("look up the %s API: %w", w.gvk, err)
		}
		watch := err == nil
		*w.watch = &watch
		if !watch {
			mgr.GetLogger().Info(w.not)
		}
	}
	r.newestIssued, r.retained = map[podSigner]podIssued{}, map[certpolicy.ID]bool{}
	r.limiter = rate.NewLimiter(rate.Limit(float64(r.MaxRenewalsPerMinute)/60), r.MaxRenewalsPerMinute)
	r.store = certpolicy.NewStore()
	r.policies = make(chan event.TypedGenericEvent[string], 1024)
	r.metrics = newCPolMetrics(r.store, r.Clock)
	return nil
}

func (r *Reconciler) logger(base logr.Logger) func(*cpolRequest) logr.Logger {
	return func(req *cpolRequest) logr.Logger {
		l := base.WithValues("controller", "certificatepolicy")
		if req != nil {
			l = l.WithValues(strings.ToLower(req.Kind), klog.KRef(req.Namespace, req.Name))
		}
		return l
	}
}

// requestsOfPolicy: a policy changed; aggregate it (and judge everything it
// selects if its generation changed).
func (r *Reconciler) requestsOfPolicy(_ context.Context, p *v1alpha1.CertificatePolicy) []cpolRequest {
	return []cpolRequest{policyRequest(p.Name)}
}

// requestsOfSecret: a TLS Secret changed; judge it, and the Certificate
// that manages it, if any.
func (r *Reconciler) requestsOfSecret(_ context.Context, s *corev1.Secret) []cpolRequest {
	out := []cpolRequest{certificateRequest(certpolicy.ID{Kind: v1alpha1.KindSecret, Namespace: s.Namespace, Name: s.Name})}
	if crt, ok := certpolicy.CertificateOfSecret(s.Namespace, s.Annotations); ok && *r.WatchCertificates {
		out = append(out, certificateRequest(certpolicy.ID{Kind: v1alpha1.KindCertificate, Namespace: crt.Namespace, Name: crt.Name}))
	}
	return out
}

// requestsOfCertificate: a Certificate changed; judge it, and its Secret,
// which is judged as the Certificate while it lives.
func (r *Reconciler) requestsOfCertificate(_ context.Context, c *cmapi.Certificate) []cpolRequest {
	return []cpolRequest{
		certificateRequest(certpolicy.ID{Kind: v1alpha1.KindCertificate, Namespace: c.Namespace, Name: c.Name}),
		certificateRequest(certpolicy.ID{Kind: v1alpha1.KindSecret, Namespace: c.Namespace, Name: c.Spec.SecretName}),
	}
}

// relabelledNamespace: a namespace's labels changed; judge again what it
// holds, since namespace selectors may now choose otherwise.
func (r *Reconciler) relabelledNamespace(_ context.Context, e event.TypedUpdateEvent[*corev1.Namespace], q workqueue.TypedRateLimitingInterface[cpolRequest]) {
	if maps.Equal(e.ObjectOld.Labels, e.ObjectNew.Labels) {
		return
	}
	for _, id := range r.store.InNamespace(e.ObjectNew.Name) {
		q.Add(certificateRequest(id))
	}
}

// aggregateLater aggregates a policy whose verdicts changed, after
// aggregateDelay, so that a burst of changes costs one status write.
func (r *Reconciler) aggregateLater(_ context.Context, e event.TypedGenericEvent[string], q workqueue.TypedRateLimitingInterface[cpolRequest]) {
	q.AddAfter(policyRequest(e.Object), aggregateDelay)
}

// Reconcile evaluates one certificate against every policy, or aggregates
// (and enforces) one policy.
func (r *Reconciler) Reconcile(ctx context.Context, req cpolRequest) (reconcile.Result, error) {
	switch req.Kind {
	case kindPolicy:
		return r.reconcilePolicy(ctx, req.Name)
	case string(v1alpha1.KindSecret):
		return reconcile.Result{}, r.observeSecret(ctx, req.NamespacedName)
	case string(v1alpha1.KindCertificate):
		return reconcile.Result{}, r.observeCertificate(ctx, req.NamespacedName)
	case string(v1alpha1.KindPodCertificateRequest):
		again, err := r.observePodRequest(ctx, req.NamespacedName)
		return reconcile.Result{RequeueAfter: again}, err
	case string(v1alpha1.KindClusterTrustBundle):
		return reconcile.Result{}, r.observeBundle(ctx, req.Name)
	}
	return reconcile.Result{}, nil
}

// reconcilePolicy brings a policy's verdicts up to date with its generation
// and the clock, enforces them, and writes its status.
func (r *Reconciler) reconcilePolicy(ctx context.Context, name string) (reconcile.Result, error) {
	policy := &v1alpha1.CertificatePolicy{}
	if err := r.Get(ctx, types.NamespacedName{Name: name}, policy); err != nil {
		if apierrors.IsNotFound(err) {
			r.store.DropPolicy(name)
			r.metrics.renewals.DeleteLabelValues(name)
			r.renewals.ForgetPolicy(name)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("policy", klog.KObj(policy)))
	if err := r.watchSecrets(ctx); err != nil {
		return reconcile.Result{}, err
	}
	now := r.Clock.Now()

	compiled, err := certpolicy.Compile(policy)
	if msg := shape.SpecCut(policy); msg != "" {
		err = errors.New(msg) // its selector selects nothing
	}
	if err != nil {
		r.store.DropPolicy(policy.Name)
		return apply.Result(reconcile.Result{}, r.writePolicyStatus(ctx, policy, certpolicy.Invalid(policy.Status, policy.Generation, err)))
	}
	state := r.store.Policy(compiled)
	if !state.Current() {
		r.store.JudgeAll(state, r.judge(ctx, now))
	} else {
		r.store.Recheck(state, now, r.judge(ctx, now))
	}
	var retry time.Duration
	if compiled.Action == v1alpha1.ActionEnforce {
		if retry, err = r.enforce(ctx, policy, state, now); err != nil {
			return reconcile.Result{}, err
		}
	}
	agg := r.store.Aggregate(state)
	res := reconcile.Result{}
	if !agg.Recheck.IsZero() {
		res.RequeueAfter = schedule.After(now, agg.Recheck)
	}
	if retry > 0 && (res.RequeueAfter == 0 || retry < res.RequeueAfter) {
		res.RequeueAfter = retry
	}
	return apply.Result(res, r.writePolicyStatus(ctx, policy, certpolicy.Status(policy.Status, policy.Generation, agg, *r.WatchCertificates)))
}

// writePolicyStatus emits the events its condition changes call for and
// writes status once, and only when it changed.
func (r *Reconciler) writePolicyStatus(ctx context.Context, policy *v1alpha1.CertificatePolicy, status v1alpha1.CertificatePolicyStatus) error {
	for _, e := range certpolicy.Transitions(policy.Status.Conditions, status.Conditions) {
		typ := corev1.EventTypeNormal
		if e.Warning {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(policy, nil, typ, e.Reason, "Evaluate", "%s", e.Message)
	}
	if !apply.Changed(policy.Status, status) {
		return nil
	}
	if err := apply.Status(ctx, r.Client, policy, policy.Status, status); err != nil {
		return err
	}
	r.metrics.statusWrites.Inc()
	return nil
}
