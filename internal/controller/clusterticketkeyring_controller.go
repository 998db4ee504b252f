package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/confirm"
	"github.com/ringmaster-io/ringmaster/internal/controller/apply"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/ringplan"
	ticketplan "github.com/ringmaster-io/ringmaster/internal/ringplan/ticket"
	"github.com/ringmaster-io/ringmaster/internal/shape"
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
			r.secrets.known.ForgetRing(v1alpha1.KindClusterTicketKeyRing, r.Namespace, req.Name)
			r.statuses.Forget(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("clusterRing", klog.KObj(ctkr)))
	base := r.statuses.Base(ctkr, ctkr.Status)
	rg := ring{obj: ctkr, owner: distribute.ClusterOwnerOf(ctkr, r.Namespace), spec: ctkr.Spec.TicketKeyRingSpec, status: base}
	sel, err := metav1.LabelSelectorAsSelector(&ctkr.Spec.NamespaceSelector)
	if err != nil {
		status := ticketplan.Build(ctkr.Status, ticketplan.Pass{Now: r.Clock.Now(), Generation: ctkr.Generation,
			Halted: &ringplan.Problem{Reason: v1alpha1.ReasonInvalidSpec, Message: fmt.Sprintf("Invalid spec.namespaceSelector: %v", err)}})
		r.statuses.Forget(req.NamespacedName)
		return apply.Result(reconcile.Result{}, apply.Status(ctx, r.Client, ctkr, ctkr.Status, status))
	}
	namespaces := &corev1.NamespaceList{}
	if err := r.List(ctx, namespaces); err != nil {
		return reconcile.Result{}, fmt.Errorf("list namespaces: %w", err)
	}
	judged := slices.DeleteFunc(slices.Clone(namespaces.Items), func(ns corev1.Namespace) bool { return shape.WasCut(&ns, shape.CutLabels) })
	if rg.targets, rg.unjudged, err = r.targets(ctx, rg.owner, sel, shape.WasCut(ctkr, shape.CutRingNamespaceSelector), namespaces.Items); err != nil {
		return reconcile.Result{}, err
	}
	if c := ctkr.Spec.Confirmation; c != nil {
		rg.voters = confirm.VoterNamespaces(rg.targets, judged, c.VoterNamespaceSelector)
	}
	status, res, err := r.reconcile(ctx, rg)
	return apply.Result(res, errors.Join(err, applyRememberedStatus(ctx, r.Client, r.secrets.APIReader, &r.statuses, ctkr, base, status,
		func(x *v1alpha1.ClusterTicketKeyRing) v1alpha1.TicketKeyRingStatus { return x.Status })))
}

// targets are the namespaces a cluster ring delivers to: those its
// selector matches, of the namespaces whose labels the cache kept. What it
// cannot judge (a namespace whose labels were not kept, or every
// namespace when its selector was not kept: shape.Cut) neither gains nor
// loses its keys: it delivers where it delivers now. Each namespace it
// could not judge is reported.
func (r *ClusterTicketKeyRingReconciler) targets(ctx context.Context, owner distribute.Owner, sel labels.Selector, selectorCut bool, all []corev1.Namespace) ([]string, []v1alpha1.TargetFailure, error) {
	var judged, unjudged []corev1.Namespace
	for _, ns := range all {
		if selectorCut || shape.WasCut(&ns, shape.CutLabels) {
			unjudged = append(unjudged, ns)
		} else {
			judged = append(judged, ns)
		}
	}
	targets := distribute.Targets(sel, judged)
	if len(unjudged) == 0 {
		return targets, nil, nil
	}
	now, err := r.secrets.projectedIn(ctx, owner)
	if err != nil {
		return nil, nil, err
	}
	var failures []v1alpha1.TargetFailure
	for _, ns := range distribute.Targets(labels.Everything(), unjudged) {
		delivered := slices.Contains(now, ns)
		if delivered {
			targets = append(targets, ns)
		}
		if !selectorCut {
			failures = append(failures, labelsNotKept(ns, delivered))
		}
	}
	slices.Sort(targets)
	return targets, failures, nil
}

// labelsNotKept is the failure of a namespace whose labels the cache did
// not keep.
func labelsNotKept(ns string, delivered bool) v1alpha1.TargetFailure {
	msg := fmt.Sprintf("Namespace %s has labels over the %d bytes the operator keeps: spec.namespaceSelector cannot be judged on it, so ", ns, shape.MaxLabelBytes)
	if delivered {
		msg += "it keeps receiving the ring, as it did"
	} else {
		msg += "it does not receive the ring, as it did not"
	}
	return v1alpha1.TargetFailure{Namespace: ns, Reason: v1alpha1.ReasonNamespaceLabelsNotKept, Message: msg}
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
