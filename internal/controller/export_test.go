//go:build integration

package controller

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/internal/distribute"
)

// RingSecrets is the write layer of rings, for a spec that chooses what
// serves as its cache.
type RingSecrets = ringSecrets

// NewRingSecrets is a write layer whose cached reads and writes go through
// c, and whose reads around the cache through api.
func NewRingSecrets(c client.Client, api client.Reader) *RingSecrets {
	return &ringSecrets{Client: c, APIReader: api}
}

func (w *ringSecrets) Snapshots(ctx context.Context, owner distribute.Owner) ([]*corev1.Secret, error) {
	return w.snapshots(ctx, owner)
}

func (w *ringSecrets) Publish(ctx context.Context, owner distribute.Owner, snap *corev1.Secret) error {
	p, err := w.publish(ctx, owner, snap)
	if p != nil && err == nil {
		err = errors.New(p.Message)
	}
	return err
}

func (w *ringSecrets) Destroy(ctx context.Context, owner distribute.Owner, snaps []*corev1.Secret, stale func(*corev1.Secret) bool) error {
	return w.destroy(ctx, owner, snaps, stale)
}
