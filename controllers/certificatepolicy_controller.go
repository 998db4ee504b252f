package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
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

	// maxStatusViolations caps status.violations; the rest are counted.
	maxStatusViolations = 50

	// renewalPatience is how long Enforce waits for cert-manager to act on a
	// renewal before asking again.
	renewalPatience = time.Hour

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

func (r cpolRequest) subject() subjectKey {
	return subjectKey{Kind: v1alpha1.CertificateKind(r.Kind), NamespacedName: r.NamespacedName}
}

// CertificatePolicyReconciler judges certificates against CertificatePolicies.
//
// Certificates and TLS Secrets are evaluated one at a time, when they change,
// against every policy; a policy's status is aggregated from the stored
// verdicts, and only a policy's own change (or the passing of a deadline)
// re-evaluates what it selects. One worker does all of it, in order, so the
// store needs no other synchronisation than for the metrics scraper.
type CertificatePolicyReconciler struct {
	// Client reads policies, Certificates and Namespaces from the manager's
	// cache and writes statuses.
	client.Client
	// APIReader reads a Certificate fresh before Enforce updates it.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Clock drives evaluation and the renewal rate limit; tests inject a
	// fake one.
	Clock clock.PassiveClock
	// SecretCache holds the kubernetes.io/tls Secrets, stripped of their
	// private keys (see NewTLSSecretCache). SetupWithManager makes it when
	// nil.
	SecretCache cache.Cache
	// MaxRenewalsPerMinute bounds the renewals Enforce triggers across the
	// cluster: a token bucket of that many, refilled at that rate. 0 means
	// DefaultMaxRenewalsPerMinute.
	MaxRenewalsPerMinute int
	// WatchCertificates: whether cert-manager Certificates are judged. Nil:
	// when the cert-manager.io/v1 API is served at start-up.
	WatchCertificates *bool

	store    *cpolStore
	metrics  *cpolMetrics
	limiter  *rate.Limiter
	policies chan event.TypedGenericEvent[string]
	// renewals remembers the renewals Enforce triggered, by Certificate.
	renewals map[subjectKey]renewal
	// reported remembers, per policy and certificate, what Enforce last
	// said it cannot mend, so that it says it once.
	reported map[string]map[subjectKey]string
}

// renewal is a re-issuance Enforce asked for.
type renewal struct {
	revision int
	at       time.Time
	mends    []certpolicy.Rule
}

// SetupWithManager registers the controller, its TLS Secret cache and its
// metrics.
func (r *CertificatePolicyReconciler) SetupWithManager(mgr manager.Manager, registry prometheus.Registerer) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.MaxRenewalsPerMinute <= 0 {
		r.MaxRenewalsPerMinute = DefaultMaxRenewalsPerMinute
	}
	if r.SecretCache == nil {
		c, err := NewTLSSecretCache(mgr.GetConfig(), mgr.GetScheme(), mgr.GetRESTMapper())
		if err != nil {
			return fmt.Errorf("create TLS Secret cache: %w", err)
		}
		if err := mgr.Add(c); err != nil {
			return err
		}
		r.SecretCache = c
	}
	if r.WatchCertificates == nil {
		_, err := mgr.GetRESTMapper().RESTMapping(schema.GroupKind{Group: cmapi.SchemeGroupVersion.Group, Kind: cmapi.CertificateKind}, cmapi.SchemeGroupVersion.Version)
		if err != nil && !meta.IsNoMatchError(err) {
			return fmt.Errorf("look up the cert-manager Certificate API: %w", err)
		}
		watch := err == nil
		r.WatchCertificates = &watch
		if !watch {
			mgr.GetLogger().Info("The cert-manager.io/v1 API is not served: CertificatePolicies judge kubernetes.io/tls Secrets only; restart the operator after installing cert-manager")
		}
	}
	r.limiter = rate.NewLimiter(rate.Limit(float64(r.MaxRenewalsPerMinute)/60), r.MaxRenewalsPerMinute)
	r.store = newCPolStore()
	r.renewals = map[subjectKey]renewal{}
	r.reported = map[string]map[subjectKey]string{}
	r.policies = make(chan event.TypedGenericEvent[string], 1024)
	r.metrics = newCPolMetrics(r.store, r.Clock)
	for _, c := range r.metrics.collectors() {
		if err := registry.Register(c); err != nil && !errors.As(err, &prometheus.AlreadyRegisteredError{}) {
			return err
		}
	}

	b := builder.TypedControllerManagedBy[cpolRequest](mgr).
		Named("certificatepolicy").
		WithOptions(controller.TypedOptions[cpolRequest]{
			MaxConcurrentReconciles: 1, // the store is ordered by this one worker
			LogConstructor: func(req *cpolRequest) logr.Logger {
				l := mgr.GetLogger().WithValues("controller", "certificatepolicy")
				if req != nil {
					l = l.WithValues(strings.ToLower(req.Kind), klog.KRef(req.Namespace, req.Name))
				}
				return l
			},
		}).
		WatchesRawSource(source.TypedKind(mgr.GetCache(), &v1alpha1.CertificatePolicy{},
			handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, p *v1alpha1.CertificatePolicy) []cpolRequest {
				return []cpolRequest{policyRequest(p.Name)}
			}),
			predicate.Or[*v1alpha1.CertificatePolicy](predicate.TypedGenerationChangedPredicate[*v1alpha1.CertificatePolicy]{}, predicate.TypedAnnotationChangedPredicate[*v1alpha1.CertificatePolicy]{}))).
		WatchesRawSource(source.TypedKind(r.SecretCache, &corev1.Secret{},
			handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, s *corev1.Secret) []cpolRequest {
				out := []cpolRequest{{Kind: string(v1alpha1.KindSecret), NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}}}
				if crt := s.Annotations[cmapi.CertificateNameKey]; crt != "" && *r.WatchCertificates {
					out = append(out, cpolRequest{Kind: string(v1alpha1.KindCertificate), NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: crt}})
				}
				return out
			}))).
		WatchesRawSource(source.TypedKind(mgr.GetCache(), &corev1.Namespace{},
			handler.TypedFuncs[*corev1.Namespace, cpolRequest]{
				UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*corev1.Namespace], q workqueue.TypedRateLimitingInterface[cpolRequest]) {
					if !maps.Equal(e.ObjectOld.Labels, e.ObjectNew.Labels) {
						for _, k := range r.store.inNamespace(e.ObjectNew.Name) {
							q.Add(cpolRequest{Kind: string(k.Kind), NamespacedName: k.NamespacedName})
						}
					}
				},
			})).
		WatchesRawSource(source.TypedChannel(r.policies, handler.TypedFuncs[string, cpolRequest]{
			GenericFunc: func(_ context.Context, e event.TypedGenericEvent[string], q workqueue.TypedRateLimitingInterface[cpolRequest]) {
				q.AddAfter(policyRequest(e.Object), aggregateDelay)
			},
		}))
	if *r.WatchCertificates {
		b = b.WatchesRawSource(source.TypedKind(mgr.GetCache(), &cmapi.Certificate{},
			handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, c *cmapi.Certificate) []cpolRequest {
				return []cpolRequest{
					{Kind: string(v1alpha1.KindCertificate), NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}},
					// Its Secret is judged as the Certificate while it lives.
					{Kind: string(v1alpha1.KindSecret), NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Spec.SecretName}},
				}
			})))
	}
	return b.Complete(r)
}

func policyRequest(name string) cpolRequest {
	return cpolRequest{Kind: kindPolicy, NamespacedName: types.NamespacedName{Name: name}}
}

// Reconcile evaluates one certificate against every policy, or aggregates
// (and enforces) one policy.
func (r *CertificatePolicyReconciler) Reconcile(ctx context.Context, req cpolRequest) (reconcile.Result, error) {
	switch req.Kind {
	case kindPolicy:
		return r.reconcilePolicy(ctx, req.Name)
	case string(v1alpha1.KindSecret):
		return reconcile.Result{}, r.observeSecret(ctx, req.NamespacedName)
	case string(v1alpha1.KindCertificate):
		return reconcile.Result{}, r.observeCertificate(ctx, req.NamespacedName)
	}
	return reconcile.Result{}, nil
}

func (r *CertificatePolicyReconciler) reconcilePolicy(ctx context.Context, name string) (reconcile.Result, error) {
	policy := &v1alpha1.CertificatePolicy{}
	if err := r.Get(ctx, types.NamespacedName{Name: name}, policy); err != nil {
		if apierrors.IsNotFound(err) {
			r.store.dropPolicy(name)
			r.metrics.renewals.DeleteLabelValues(name)
			delete(r.reported, name)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("policy", klog.KObj(policy)))
	status, res, err := r.reconcile(ctx, policy)
	return res, errors.Join(err, r.writePolicyStatus(ctx, policy, status))
}

// reconcile brings the policy's verdicts up to date with its generation and
// the clock, enforces them, and returns the status to write.
func (r *CertificatePolicyReconciler) reconcile(ctx context.Context, policy *v1alpha1.CertificatePolicy) (v1alpha1.CertificatePolicyStatus, reconcile.Result, error) {
	status := *policy.Status.DeepCopy()
	now := r.Clock.Now()

	compiled, err := compilePolicy(policy)
	if err != nil {
		r.store.dropPolicy(policy.Name)
		r.setPolicyCondition(policy, &status, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec, fmt.Sprintf("Invalid spec: %v", err))
		return status, reconcile.Result{}, nil
	}
	state := r.store.policy(compiled)
	if state.generation != policy.Generation {
		r.evaluateAll(ctx, state, now)
	} else {
		r.recheck(ctx, state, now)
	}

	var retry time.Duration
	if compiled.action == v1alpha1.ActionEnforce {
		if retry, err = r.enforce(ctx, policy, state, now); err != nil {
			return status, reconcile.Result{}, err
		}
	}

	agg := r.store.aggregate(state)
	status.Evaluated, status.Compliant, status.Violating = agg.evaluated, agg.evaluated-agg.violating, agg.violating
	status.OldestKey, status.SoonestExpiry = agg.oldestKey, agg.soonestExpiry
	status.Violations, status.ViolationsOmitted = agg.violations, agg.omitted

	msg := fmt.Sprintf("Evaluated %d certificate(s)", agg.evaluated)
	if !*r.WatchCertificates {
		msg += "; cert-manager Certificates are not judged: the cert-manager.io/v1 API was not served when the operator started"
	}
	r.setPolicyCondition(policy, &status, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonEvaluated, msg)
	if agg.violating == 0 {
		r.setPolicyCondition(policy, &status, v1alpha1.ConditionCompliant, metav1.ConditionTrue, v1alpha1.ReasonNoViolations,
			fmt.Sprintf("All %d selected certificate(s) obey the rules", agg.evaluated))
	} else {
		r.setPolicyCondition(policy, &status, v1alpha1.ConditionCompliant, metav1.ConditionFalse, v1alpha1.ReasonViolationsFound,
			fmt.Sprintf("%d of %d selected certificate(s) break a rule: %s", agg.violating, agg.evaluated, agg.byRuleSummary()))
	}

	res := reconcile.Result{}
	if !agg.recheck.IsZero() {
		res.RequeueAfter = requeueAfter(now, agg.recheck)
	}
	if retry > 0 && (res.RequeueAfter == 0 || retry < res.RequeueAfter) {
		res.RequeueAfter = retry
	}
	return status, res, nil
}

// evaluateAll judges every known certificate against a new or changed
// policy.
func (r *CertificatePolicyReconciler) evaluateAll(ctx context.Context, state *policyState, now time.Time) {
	nsLabels := map[string]labels.Set{}
	r.store.replaceResults(state, func(f *subjectFacts) (certpolicy.Verdict, bool) {
		set, ok := nsLabels[f.key.Namespace]
		if !ok {
			set = r.namespaceLabels(ctx, f.key.Namespace)
			nsLabels[f.key.Namespace] = set
		}
		if !state.compiled.selects(f, set) {
			return certpolicy.Verdict{}, false
		}
		r.metrics.evaluations.Inc()
		return certpolicy.Evaluate(state.compiled.rules, f.subject, now), true
	})
}

// recheck re-evaluates the certificates whose verdict the passing of time
// may have changed.
func (r *CertificatePolicyReconciler) recheck(_ context.Context, state *policyState, now time.Time) {
	r.store.recheck(state, now, func(f *subjectFacts) certpolicy.Verdict {
		r.metrics.evaluations.Inc()
		return certpolicy.Evaluate(state.compiled.rules, f.subject, now)
	})
}

// observeSecret records the facts of a kubernetes.io/tls Secret that no
// Certificate manages, and re-evaluates it against every policy. A Secret
// that a Certificate manages is judged as that Certificate.
func (r *CertificatePolicyReconciler) observeSecret(ctx context.Context, key types.NamespacedName) error {
	sk := subjectKey{Kind: v1alpha1.KindSecret, NamespacedName: key}
	secret := &corev1.Secret{}
	if err := r.SecretCache.Get(ctx, key, secret); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(ctx, sk)
			return nil
		}
		return err
	}
	managed, err := r.managedByCertificate(ctx, secret)
	if err != nil {
		return err
	}
	if managed {
		r.forget(ctx, sk)
		return nil
	}
	f := &subjectFacts{key: sk, labels: secret.Labels, issuer: issuerOfSecret(secret)}
	f.subject = r.readCertificate(sk, secret, nil)
	r.observe(ctx, f)
	return nil
}

// managedByCertificate reports whether a Certificate names the Secret as its
// spec.secretName; cert-manager annotates the Secrets it writes with the
// Certificate's name.
func (r *CertificatePolicyReconciler) managedByCertificate(ctx context.Context, s *corev1.Secret) (bool, error) {
	name := s.Annotations[cmapi.CertificateNameKey]
	if name == "" || !*r.WatchCertificates {
		return false, nil
	}
	crt := &cmapi.Certificate{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: name}, crt); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return crt.Spec.SecretName == s.Name && crt.DeletionTimestamp.IsZero(), nil
}

// observeCertificate records the facts of a cert-manager Certificate and of
// the certificate in its Secret, and re-evaluates it against every policy.
func (r *CertificatePolicyReconciler) observeCertificate(ctx context.Context, key types.NamespacedName) error {
	sk := subjectKey{Kind: v1alpha1.KindCertificate, NamespacedName: key}
	crt := &cmapi.Certificate{}
	if err := r.Get(ctx, key, crt); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(ctx, sk)
			return nil
		}
		return err
	}
	if !crt.DeletionTimestamp.IsZero() {
		r.forget(ctx, sk)
		return nil
	}
	cm := &certpolicy.CertManager{RotationPolicy: certpolicy.RotateAlways}
	if pk := crt.Spec.PrivateKey; pk != nil && pk.RotationPolicy != "" {
		cm.RotationPolicy = certpolicy.RotationPolicy(pk.RotationPolicy)
	}
	if crt.Spec.Duration != nil {
		cm.Duration = crt.Spec.Duration.Duration
	}
	f := &subjectFacts{
		key:    sk,
		labels: crt.Labels,
		issuer: issuerRef{Name: crt.Spec.IssuerRef.Name, Kind: cmp.Or(crt.Spec.IssuerRef.Kind, cmapi.IssuerKind), Group: cmp.Or(crt.Spec.IssuerRef.Group, "cert-manager.io")},
	}
	if crt.Status.Revision != nil {
		f.revision = *crt.Status.Revision
	}
	for _, c := range crt.Status.Conditions {
		if c.Type == cmapi.CertificateConditionIssuing && c.Status == cmmeta.ConditionTrue {
			f.issuing = true
		}
	}
	secret := &corev1.Secret{}
	err := r.SecretCache.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: crt.Spec.SecretName}, secret)
	switch {
	case apierrors.IsNotFound(err):
		f.subject = certpolicy.Subject{CertManager: cm} // not issued yet
		r.store.ledger.Release(sk.String())
	case err != nil:
		return err
	default:
		f.subject = r.readCertificate(sk, secret, cm)
	}
	// The Certificate's status follows the Secret: until this cache has
	// seen the Secret cert-manager wrote, the two disagree, and Enforce
	// waits rather than judge a renewal by the certificate it replaced.
	f.current = f.subject.Cert != nil && crt.Status.NotAfter != nil && crt.Status.NotAfter.Time.Equal(f.subject.Cert.NotAfter)
	r.observe(ctx, f)
	return nil
}

// readCertificate parses a Secret's tls.crt and dates its key.
func (r *CertificatePolicyReconciler) readCertificate(sk subjectKey, secret *corev1.Secret, cm *certpolicy.CertManager) certpolicy.Subject {
	s := certpolicy.Subject{CertManager: cm}
	c, err := certpolicy.Parse(secret.Data[corev1.TLSCertKey])
	if err != nil {
		s.ReadError = fmt.Sprintf("Secret %s/%s: %s: %v", secret.Namespace, secret.Name, corev1.TLSCertKey, err)
		r.store.ledger.Release(sk.String())
		return s
	}
	s.Cert = &c
	s.KeySince = certpolicy.KeySince(c, cm, r.store.ledger.Observe(sk.String(), c))
	return s
}

// observe stores new facts, evaluates them against every policy, and has
// each policy whose verdict changed aggregated again.
func (r *CertificatePolicyReconciler) observe(ctx context.Context, f *subjectFacts) {
	now := r.Clock.Now()
	nsLabels := r.namespaceLabels(ctx, f.key.Namespace)
	changed := r.store.upsert(f, func(state *policyState) (certpolicy.Verdict, bool) {
		if !state.compiled.selects(f, nsLabels) {
			return certpolicy.Verdict{}, false
		}
		r.metrics.evaluations.Inc()
		return certpolicy.Evaluate(state.compiled.rules, f.subject, now), true
	})
	r.enqueuePolicies(ctx, changed)
}

// forget removes a certificate that is gone, or now judged as another kind.
func (r *CertificatePolicyReconciler) forget(ctx context.Context, sk subjectKey) {
	r.store.ledger.Release(sk.String())
	delete(r.renewals, sk)
	r.enqueuePolicies(ctx, r.store.remove(sk))
}

// enqueuePolicies has policies aggregated again, after aggregateDelay.
func (r *CertificatePolicyReconciler) enqueuePolicies(ctx context.Context, names []string) {
	for _, n := range names {
		select {
		case r.policies <- event.TypedGenericEvent[string]{Object: n}:
		case <-ctx.Done(): // shutting down: nobody reads the channel any more
			return
		}
	}
}

func (r *CertificatePolicyReconciler) namespaceLabels(ctx context.Context, name string) labels.Set {
	ns := &corev1.Namespace{}
	if err := r.Get(ctx, types.NamespacedName{Name: name}, ns); err != nil {
		log.FromContext(ctx).V(1).Info("Namespace not readable; judged as unlabelled", "namespace", name, "error", err.Error())
		return labels.Set{}
	}
	return ns.Labels
}

// enforce has cert-manager re-issue the violating Certificates that
// re-issuing mends, within the cluster-wide rate limit, and reports once
// what it cannot mend. It returns when to try again the renewals the rate
// limit held back.
func (r *CertificatePolicyReconciler) enforce(ctx context.Context, policy *v1alpha1.CertificatePolicy, state *policyState, now time.Time) (time.Duration, error) {
	reported := r.reported[policy.Name]
	if reported == nil {
		reported = map[subjectKey]string{}
		r.reported[policy.Name] = reported
	}
	var retry time.Duration
	for _, sk := range r.store.violatingKeys(state) {
		f, v := r.store.get(sk, state)
		if f == nil {
			continue
		}
		remedy := certpolicy.Plan(state.compiled.rules, f.subject, v)
		cannot := remedy.Cannot
		if remedy.Renew {
			why, renew := r.renewable(state, f, remedy, now)
			if why != "" {
				cannot = append(cannot, certpolicy.Violation{Rule: remedy.Mends[0], Message: why})
			}
			if renew {
				if d := r.reserve(now); d > 0 {
					if retry == 0 || d < retry {
						retry = d
					}
					continue
				}
				if err := r.renew(ctx, policy, f, remedy, now); err != nil {
					return 0, err
				}
			}
		}
		r.reportCannot(policy, f, reported, cannot)
	}
	for sk := range reported {
		if _, v := r.store.get(sk, state); len(v.Violations) == 0 {
			delete(reported, sk)
		}
	}
	return retry, nil
}

// renewable decides whether to re-issue a Certificate that Plan says a
// renewal mends. It waits while cert-manager is issuing, or while a renewal
// asked for earlier is pending (for up to renewalPatience); and it gives up,
// saying why, when the certificate a renewal brought breaks the rule again
// sooner than a fresh one could (certpolicy.Unmended).
func (r *CertificatePolicyReconciler) renewable(state *policyState, f *subjectFacts, remedy certpolicy.Remedy, now time.Time) (why string, renew bool) {
	if f.issuing {
		return "", false
	}
	prev, ok := r.renewals[f.key]
	if !ok {
		return "", true
	}
	if f.revision <= prev.revision {
		return "", now.Sub(prev.at) >= renewalPatience
	}
	if !f.current {
		return "", false // this cache has not seen the new certificate yet
	}
	for _, rule := range prev.mends {
		if remedy.MendsRule(rule) && certpolicy.Unmended(state.compiled.rules, f.subject.CertManager, rule, prev.at, now) {
			return fmt.Sprintf("re-issued at revision %d on request at %s and still breaks %s: the issuer does not grant what the Certificate asks", f.revision, prev.at.UTC().Format(time.RFC3339), rule), false
		}
	}
	return "", true
}

// reserve takes a renewal from the rate limit, or says how long to wait.
func (r *CertificatePolicyReconciler) reserve(now time.Time) time.Duration {
	res := r.limiter.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return d
	}
	return 0
}

// renew sets the Certificate's Issuing condition, as `cmctl renew` does, with
// a reason and message naming the policy and the rules.
func (r *CertificatePolicyReconciler) renew(ctx context.Context, policy *v1alpha1.CertificatePolicy, f *subjectFacts, remedy certpolicy.Remedy, now time.Time) error {
	crt := &cmapi.Certificate{}
	if err := r.APIReader.Get(ctx, f.key.NamespacedName, crt); err != nil {
		return client.IgnoreNotFound(err)
	}
	for _, c := range crt.Status.Conditions {
		if c.Type == cmapi.CertificateConditionIssuing && c.Status == cmmeta.ConditionTrue {
			return nil // already issuing: the cache was behind
		}
	}
	rules := make([]string, len(remedy.Mends))
	for i, m := range remedy.Mends {
		rules[i] = string(m)
	}
	msg := fmt.Sprintf("Re-issuance triggered by CertificatePolicy %s: breaks %s", policy.Name, strings.Join(rules, ", "))
	setIssuing(crt, msg, now)
	if err := r.Status().Update(ctx, crt, client.FieldOwner("ringmaster")); err != nil {
		return fmt.Errorf("set Issuing on Certificate %s: %w", f.key, err)
	}
	r.renewals[f.key] = renewal{revision: f.revision, at: now, mends: remedy.Mends}
	f.issuing = true
	r.metrics.renewals.WithLabelValues(policy.Name).Inc()
	log.FromContext(ctx).Info("Triggered re-issuance", "certificate", klog.KRef(f.key.Namespace, f.key.Name), "rules", rules)
	r.Recorder.Eventf(crt, policy, corev1.EventTypeNormal, v1alpha1.ReasonRenewalTriggered, "Renew", "%s", msg)
	r.Recorder.Eventf(policy, crt, corev1.EventTypeNormal, v1alpha1.ReasonRenewalTriggered, "Renew",
		"Re-issuing Certificate %s/%s: breaks %s", f.key.Namespace, f.key.Name, strings.Join(rules, ", "))
	return nil
}

// setIssuing sets the Issuing condition the way cmctl renew does.
func setIssuing(crt *cmapi.Certificate, msg string, now time.Time) {
	cond := cmapi.CertificateCondition{
		Type: cmapi.CertificateConditionIssuing, Status: cmmeta.ConditionTrue,
		Reason: v1alpha1.IssuingReason, Message: msg,
		LastTransitionTime: &metav1.Time{Time: now}, ObservedGeneration: crt.Generation,
	}
	for i, c := range crt.Status.Conditions {
		if c.Type == cond.Type {
			crt.Status.Conditions[i] = cond
			return
		}
	}
	crt.Status.Conditions = append(crt.Status.Conditions, cond)
}

// reportCannot emits one Warning event, on the certificate's object and on
// the policy, when what Enforce cannot mend about it changes.
func (r *CertificatePolicyReconciler) reportCannot(policy *v1alpha1.CertificatePolicy, f *subjectFacts, reported map[subjectKey]string, cannot []certpolicy.Violation) {
	var parts []string
	for _, c := range cannot {
		parts = append(parts, fmt.Sprintf("%s: %s", c.Rule, c.Message))
	}
	note := strings.Join(parts, "; ")
	if reported[f.key] == note {
		return
	}
	reported[f.key] = note
	if note == "" {
		return
	}
	var regarding client.Object = &cmapi.Certificate{}
	if f.key.Kind == v1alpha1.KindSecret {
		regarding = &corev1.Secret{}
	}
	regarding.SetNamespace(f.key.Namespace)
	regarding.SetName(f.key.Name)
	obj, err := r.objectRef(regarding)
	if err != nil {
		return // gone meanwhile
	}
	r.Recorder.Eventf(obj, policy, corev1.EventTypeWarning, v1alpha1.ReasonCannotEnforce, "Enforce", "CertificatePolicy %s cannot mend this: %s", policy.Name, note)
	r.Recorder.Eventf(policy, obj, corev1.EventTypeWarning, v1alpha1.ReasonCannotEnforce, "Enforce", "%s %s/%s: %s", f.key.Kind, f.key.Namespace, f.key.Name, note)
}

// objectRef reads the object an event is about from the caches, for its UID.
func (r *CertificatePolicyReconciler) objectRef(obj client.Object) (client.Object, error) {
	key := client.ObjectKeyFromObject(obj)
	if _, ok := obj.(*corev1.Secret); ok {
		return obj, r.SecretCache.Get(context.Background(), key, obj)
	}
	return obj, r.Get(context.Background(), key, obj)
}

// setPolicyCondition sets a condition, and emits an event when it turns:
// Warning when the policy turns not Ready or not Compliant, Normal when it
// comes back.
func (r *CertificatePolicyReconciler) setPolicyCondition(policy *v1alpha1.CertificatePolicy, status *v1alpha1.CertificatePolicyStatus, typ string, s metav1.ConditionStatus, reason, msg string) {
	old := meta.FindStatusCondition(status.Conditions, typ)
	if old == nil || old.Status != s || old.Reason != reason {
		switch {
		case s == metav1.ConditionFalse:
			r.Recorder.Eventf(policy, nil, corev1.EventTypeWarning, reason, "Evaluate", "%s", msg)
		case old != nil && typ == v1alpha1.ConditionCompliant:
			r.Recorder.Eventf(policy, nil, corev1.EventTypeNormal, reason, "Evaluate", "%s", msg)
		}
	}
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{
		Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: policy.Generation,
	})
}

// writePolicyStatus writes status once, and only when it changed.
func (r *CertificatePolicyReconciler) writePolicyStatus(ctx context.Context, policy *v1alpha1.CertificatePolicy, status v1alpha1.CertificatePolicyStatus) error {
	if equality.Semantic.DeepEqual(policy.Status, status) {
		return nil
	}
	if err := applyStatus(ctx, r.Client, policy, policy.Status, status); err != nil {
		return err
	}
	r.metrics.statusWrites.Inc()
	return nil
}

func issuerOfSecret(s *corev1.Secret) issuerRef {
	name := s.Annotations[cmapi.IssuerNameAnnotationKey]
	if name == "" {
		return issuerRef{}
	}
	return issuerRef{Name: name, Kind: cmp.Or(s.Annotations[cmapi.IssuerKindAnnotationKey], cmapi.IssuerKind), Group: cmp.Or(s.Annotations[cmapi.IssuerGroupAnnotationKey], "cert-manager.io")}
}
