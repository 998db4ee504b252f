package controllers

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

// CacheOptions keeps the manager's cache narrow: of all the cluster's Secrets
// it holds only ringmaster's snapshots and projections, found by label. Other
// Secrets, and their key material, never enter the operator's memory.
func CacheOptions() cache.Options {
	ours, err := labels.NewRequirement(v1alpha1.RingLabel, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant label key: unreachable
	}
	return cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Label: labels.NewSelector().Add(*ours)},
		},
	}
}
