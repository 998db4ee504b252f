package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/dnspub"
	"github.com/ringmaster-io/ringmaster/internal/dnszone"
)

// dnsTarget reads the ClusterDNSZone the ring names, checks that it admits
// the ring's namespace, name and TTL, and returns where the ring publishes,
// signed with the zone's TSIG key. A problem is the user's (or the cluster
// administrator's) to fix; an error is retried.
func (r *ECHKeyRingReconciler) dnsTarget(ctx context.Context, ekr *v1alpha1.ECHKeyRing) (dnspub.Target, *problem, error) {
	d := ekr.Spec.DNS
	z := &v1alpha1.ClusterDNSZone{}
	if err := r.Get(ctx, types.NamespacedName{Name: d.ZoneRef.Name}, z); err != nil {
		if apierrors.IsNotFound(err) {
			return dnspub.Target{}, &problem{v1alpha1.ReasonDNSZoneNotFound,
				fmt.Sprintf("ClusterDNSZone %s does not exist: ask a cluster administrator to create it, or fix spec.dns.zoneRef", d.ZoneRef.Name)}, nil
		}
		return dnspub.Target{}, nil, err
	}
	ns := &corev1.Namespace{}
	if err := r.Get(ctx, types.NamespacedName{Name: ekr.Namespace}, ns); err != nil {
		return dnspub.Target{}, nil, err
	}
	if err := dnszone.Admit(z, ns.Labels, d.Name, d.TTL); err != nil {
		return dnspub.Target{}, &problem{v1alpha1.ReasonDNSNameNotAllowed, err.Error()}, nil
	}
	var key *dnspub.TSIG
	if z.Spec.Primary != "" && z.Spec.TSIGSecretRef != nil {
		s := &corev1.Secret{}
		name := z.Spec.TSIGSecretRef.Name
		if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: name}, s); err != nil {
			if apierrors.IsNotFound(err) {
				// The administrator's Secret: its name and namespace are
				// the zone's to show, not the ring's.
				return dnspub.Target{}, &problem{v1alpha1.ReasonDNSUnavailable,
					fmt.Sprintf("ClusterDNSZone %s cannot sign updates: its TSIG Secret is missing (the zone's status says more)", z.Name)}, nil
			}
			return dnspub.Target{}, nil, err
		}
		k, err := dnszone.TSIG(s.Data)
		if err != nil {
			return dnspub.Target{}, &problem{v1alpha1.ReasonDNSUnavailable,
				fmt.Sprintf("ClusterDNSZone %s cannot sign updates: its TSIG Secret is invalid (the zone's status says more)", z.Name)}, nil
		}
		key = k
	}
	return dnszone.Target(z, d.Name, d.TTL, key), nil, nil
}
