package controller

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/controller/apply"
	"github.com/ringmaster-io/ringmaster/internal/mint"
	"github.com/ringmaster-io/ringmaster/internal/shape"
)

// +kubebuilder:rbac:groups=ringmaster.io,resources=clusterkeysources,verbs=get;list;watch
// +kubebuilder:rbac:groups=ringmaster.io,resources=clusterkeysources/status,verbs=patch

// Key sources are checked this often while they work, and this often while
// they fail, so that a fixed Vault shows Ready soon.
const (
	keySourceRecheck = 5 * time.Minute
	keySourceRetry   = time.Minute
)

// ClusterKeySourceReconciler logs in with each ClusterKeySource and reports
// in its Ready condition whether it can mint, before any ring needs it.
type ClusterKeySourceReconciler struct {
	client.Client
	Recorder events.EventRecorder
	Clock    clock.PassiveClock
	Sources  *mint.Sources
}

// Reconcile checks one key source.
func (r *ClusterKeySourceReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cks := &v1alpha1.ClusterKeySource{}
	if err := r.Get(ctx, req.NamespacedName, cks); err != nil {
		if apierrors.IsNotFound(err) {
			r.Sources.Forget(req.Name) // its client and token go with it
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("keySource", klog.KObj(cks)))
	res := reconcile.Result{RequeueAfter: keySourceRecheck}
	err := r.Sources.Check(ctx, cks)
	reason := mint.ReportedReason(err)
	if msg := shape.SpecCut(cks); msg != "" {
		// It can log in, but allows no namespace the operator can judge.
		err, reason = errors.New(msg), v1alpha1.ReasonInvalidSpec
	}
	if err != nil {
		res.RequeueAfter = keySourceRetry
	}
	var last *mint.LastMint
	if m, ok := r.Sources.LastMint(cks.Name); ok {
		last = &mint.LastMint{At: m.At, Reason: mint.ReportedReason(m.Err), Err: m.Err}
	}
	status, changed := mint.KeySourceStatus(cks.Status, cks.Generation, cks.Spec.Vault.Address, reason, err, last, r.Clock.Now())
	if changed {
		ready := meta.FindStatusCondition(status.Conditions, v1alpha1.ConditionReady)
		typ := corev1.EventTypeNormal
		if ready.Status == metav1.ConditionFalse {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(cks, nil, typ, ready.Reason, "Check", "%s", ready.Message)
		log.FromContext(ctx).Info("Key source checked", "ready", ready.Status, "reason", ready.Reason, "message", ready.Message)
	}
	return apply.Result(res, apply.Status(ctx, r.Client, cks, cks.Status, status))
}
