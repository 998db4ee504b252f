package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/dnszone"
)

// +kubebuilder:rbac:groups=ringmaster.io,resources=clusterdnszones,verbs=get;list;watch
// +kubebuilder:rbac:groups=ringmaster.io,resources=clusterdnszones/status,verbs=patch

// A zone's TSIG Secret is read uncached (the cache holds ringmaster's own
// Secrets only), so it is checked again this often while it works, and
// this often while it does not, so that a fixed Secret shows Ready soon.
const (
	dnsZoneRecheck = 5 * time.Minute
	dnsZoneRetry   = time.Minute
)

// ClusterDNSZoneReconciler reports in each ClusterDNSZone's Ready
// condition whether its TSIG Secret, in the operator's namespace, holds a
// well-formed key. Whether the zone's servers answer is each ECHKeyRing's
// concern.
type ClusterDNSZoneReconciler struct {
	client.Client
	// APIReader reads the TSIG Secret (no cache, no watch).
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// Namespace is the operator's, where TSIG Secrets live.
	Namespace string
}

// SetupWithManager registers the controller.
func (r *ClusterDNSZoneReconciler) SetupWithManager(mgr manager.Manager) error {
	return builder.ControllerManagedBy(mgr).Named("clusterdnszone").
		For(&v1alpha1.ClusterDNSZone{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(r)
}

// Reconcile checks one zone.
func (r *ClusterDNSZoneReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	z := &v1alpha1.ClusterDNSZone{}
	if err := r.Get(ctx, req.NamespacedName, z); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("dnsZone", klog.KObj(z)))
	reason, message, err := r.check(ctx, z)
	if err != nil {
		return reconcile.Result{}, err
	}
	status := *z.Status.DeepCopy()
	status.ObservedGeneration = z.Generation
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: reason, Message: message,
		ObservedGeneration: z.Generation, LastTransitionTime: metav1.NewTime(r.Clock.Now())}
	res := reconcile.Result{RequeueAfter: dnsZoneRecheck}
	if reason != v1alpha1.ReasonZoneReady {
		ready.Status, res.RequeueAfter = metav1.ConditionFalse, dnsZoneRetry
	}
	if old := meta.FindStatusCondition(z.Status.Conditions, v1alpha1.ConditionReady); old == nil || old.Status != ready.Status || old.Reason != ready.Reason || old.Message != ready.Message {
		typ := corev1.EventTypeNormal
		if ready.Status == metav1.ConditionFalse {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(z, nil, typ, ready.Reason, "Check", "%s", ready.Message)
		log.FromContext(ctx).Info("DNS zone checked", "ready", ready.Status, "reason", ready.Reason, "message", ready.Message)
	}
	meta.SetStatusCondition(&status.Conditions, ready)
	return result(res, applyStatus(ctx, r.Client, z, z.Status, status))
}

// check is the zone's Ready reason and message; an error is one a retry
// may mend (the API server).
func (r *ClusterDNSZoneReconciler) check(ctx context.Context, z *v1alpha1.ClusterDNSZone) (reason, message string, err error) {
	if z.Spec.Primary == "" {
		return v1alpha1.ReasonZoneReady, "verify-only: the operator checks the record and writes nothing", nil
	}
	if z.Spec.TSIGSecretRef == nil {
		return v1alpha1.ReasonTSIGSecretInvalid, "spec.primary is set without spec.tsigSecretRef", nil
	}
	name := r.Namespace + "/" + z.Spec.TSIGSecretRef.Name
	sec := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: z.Spec.TSIGSecretRef.Name}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return v1alpha1.ReasonTSIGSecretNotFound, fmt.Sprintf("Secret %s named by spec.tsigSecretRef does not exist", name), nil
		}
		return "", "", fmt.Errorf("read the TSIG Secret %s: %w", name, err)
	}
	key, err := dnszone.TSIG(sec.Data)
	if err != nil {
		return v1alpha1.ReasonTSIGSecretInvalid, fmt.Sprintf("Secret %s: %v", name, err), nil
	}
	return v1alpha1.ReasonZoneReady, fmt.Sprintf("updates to %s are signed with %s", z.Spec.Primary, key), nil
}
