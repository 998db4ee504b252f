package controller

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/confirm"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/ringstatus"
)

// +kubebuilder:rbac:groups=ringmaster.io,resources=clusterticketkeyrings,verbs=get;list;watch
// +kubebuilder:rbac:groups=ringmaster.io,resources=clusterticketkeyrings/status,verbs=patch
// +kubebuilder:rbac:groups=ringmaster.io,resources=clusterticketkeyrings/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// ClusterTicketKeyRingReconciler rotates the keys of ClusterTicketKeyRings,
// keeps their snapshots in the operator's namespace, and delivers them into
// every namespace their selector matches.
type ClusterTicketKeyRingReconciler struct {
	*rings
	// Namespace is the operator's own, where the snapshots live.
	Namespace string
}

// Reconcile publishes the ring's next epoch when one is due and keeps the
// projection of every selected namespace in step with the newest snapshot.
func (r *ClusterTicketKeyRingReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ctkr := &v1alpha1.ClusterTicketKeyRing{}
	if err := r.Get(ctx, req.NamespacedName, ctkr); err != nil {
		if apierrors.IsNotFound(err) {
			r.gauges.forget(req.NamespacedName)
			r.secrets.known.forgetRing(v1alpha1.KindClusterTicketKeyRing, r.Namespace, req.Name)
			r.statuses.forget(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("clusterRing", klog.KObj(ctkr)))
	base := r.statuses.base(ctkr, ctkr.Status)
	rg := ring{obj: ctkr, owner: distribute.ClusterOwnerOf(ctkr, r.Namespace), spec: ctkr.Spec.TicketKeyRingSpec, status: base}
	sel, err := metav1.LabelSelectorAsSelector(&ctkr.Spec.NamespaceSelector)
	if err != nil {
		status := ringstatus.Build(ctkr.Status, ringstatus.Outcome{Now: r.Clock.Now(), Generation: ctkr.Generation,
			Halted: &ringstatus.Problem{Reason: v1alpha1.ReasonInvalidSpec, Message: fmt.Sprintf("Invalid spec.namespaceSelector: %v", err)}})
		r.statuses.forget(req.NamespacedName)
		return result(reconcile.Result{}, applyStatus(ctx, r.Client, ctkr, ctkr.Status, status))
	}
	namespaces := &corev1.NamespaceList{}
	if err := r.List(ctx, namespaces); err != nil {
		return reconcile.Result{}, fmt.Errorf("list namespaces: %w", err)
	}
	rg.targets = distribute.Targets(sel, namespaces.Items)
	if c := ctkr.Spec.Confirmation; c != nil {
		rg.voters = confirm.VoterNamespaces(rg.targets, namespaces.Items, c.VoterNamespaceSelector)
	}
	status, res, err := r.reconcile(ctx, rg)
	return result(res, errors.Join(err, applyRememberedStatus(ctx, r.Client, r.secrets.APIReader, &r.statuses, ctkr, base, status,
		func(x *v1alpha1.ClusterTicketKeyRing) v1alpha1.TicketKeyRingStatus { return x.Status })))
}

// allRings maps a namespace change to every ClusterTicketKeyRing: any of
// them may start or stop selecting it.
func (r *ClusterTicketKeyRingReconciler) allRings(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &v1alpha1.ClusterTicketKeyRingList{}
	if err := r.List(ctx, list); err != nil {
		log.FromContext(ctx).Error(err, "Listing ClusterTicketKeyRings failed; a namespace change waits for their next requeue")
		return nil
	}
	out := make([]reconcile.Request, len(list.Items))
	for i, c := range list.Items {
		out[i] = reconcile.Request{NamespacedName: types.NamespacedName{Name: c.Name}}
	}
	return out
}
