// Package controller holds one thin controller per ringmaster kind. The
// decisions live in pure packages: what a ring's reconcile writes in
// internal/ringplan (for both ring kinds), rotation in internal/keyring and
// internal/echring, statuses in internal/ringstatus, who owns a DNS name in
// internal/dnszone, certificate verdicts in internal/certpolicy. The
// controllers read, call them, and write what they decided: both ring kinds
// through one write layer (ringSecrets). Slow I/O runs off the reconcile
// path, in the prober (internal/confirm) and the DNS worker
// (internal/dnswork).
package controller

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/controller/apply"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
)

// +kubebuilder:rbac:groups=ringmaster.io,resources=ticketkeyrings,verbs=get;list;watch
// +kubebuilder:rbac:groups=ringmaster.io,resources=ticketkeyrings/status,verbs=patch
// +kubebuilder:rbac:groups=ringmaster.io,resources=ticketkeyrings/finalizers,verbs=update

// TicketKeyRingReconciler rotates the keys of TicketKeyRings and delivers
// them into each ring's own namespace, and nowhere else.
type TicketKeyRingReconciler struct {
	*rings
}

// Reconcile publishes the ring's next epoch when one is due and keeps its
// projection in step with the newest snapshot; a ring being deleted only
// destroys its keys as they expire, until it goes (ticketplan.Decide).
func (r *TicketKeyRingReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	tkr := &v1alpha1.TicketKeyRing{}
	if err := r.Get(ctx, req.NamespacedName, tkr); err != nil {
		if apierrors.IsNotFound(err) {
			r.gauges.forget(req.NamespacedName)
			r.secrets.known.ForgetRing(v1alpha1.KindTicketKeyRing, req.Namespace, req.Name)
			r.statuses.Forget(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("ring", klog.KObj(tkr)))
	base := r.statuses.Base(tkr, tkr.Status)
	status, res, err := r.reconcile(ctx, ring{
		obj: tkr, owner: distribute.OwnerOf(tkr), spec: tkr.Spec, status: base,
		namespace: tkr.Namespace, targets: []string{tkr.Namespace}, voters: []string{tkr.Namespace},
	})
	return apply.Result(res, errors.Join(err, applyRememberedStatus(ctx, r.Client, r.secrets.APIReader, &r.statuses, tkr, base, status,
		func(x *v1alpha1.TicketKeyRing) v1alpha1.TicketKeyRingStatus { return x.Status })))
}
