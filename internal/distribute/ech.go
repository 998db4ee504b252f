package distribute

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/echring"
)

// ECHOwnerOf describes an ECHKeyRing: its Secrets, all in its namespace,
// are of SecretType, like every Secret ringmaster writes, so that the
// admission guard and the operator's cache cover them; they are labelled
// v1alpha1.ECHRingLabel, and its snapshots are named <ring>-ech-e<epoch>.
func ECHOwnerOf(r *v1alpha1.ECHKeyRing) Owner {
	return Owner{Kind: v1alpha1.KindECHKeyRing, Name: r.Name, UID: r.UID, Namespace: r.Namespace, Home: r.Namespace,
		SecretName: r.ProjectionSecretName(), Deleting: !r.DeletionTimestamp.IsZero()}
}

// ECHSnapshot builds the immutable snapshot Secret of an ECH ring's epoch,
// owned by o: echkeys.json, and, when the ring's published config was
// published unconfirmed, its id (v1alpha1.PublishedUnconfirmedAnnotation):
// the record travels with the epochs, so that a reconcile reading a status
// that lags still says how the config got there. Projection copies the
// data as it is.
func ECHSnapshot(o Owner, r echring.Ring, unconfirmed *uint8) (*corev1.Secret, error) {
	file, err := echring.Encode(r)
	if err != nil {
		return nil, fmt.Errorf("encode epoch %d: %w", r.Epoch, err)
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:            o.SnapshotName(r.Epoch),
			Namespace:       o.Home,
			Labels:          o.labelled(o.SnapshotLabels()),
			OwnerReferences: []metav1.OwnerReference{o.ownerRef()},
		},
		Immutable: ptr.To(true),
		Type:      SecretType,
		Data:      map[string][]byte{echring.FileName: file},
	}
	s.Labels[v1alpha1.EpochLabel] = strconv.FormatInt(r.Epoch, 10)
	if first := firstECHExpiry(r); !first.IsZero() {
		s.Annotations = map[string]string{v1alpha1.ExpiresAtAnnotation: formatExpiry(first)}
	}
	if unconfirmed != nil {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[v1alpha1.PublishedUnconfirmedAnnotation] = strconv.Itoa(int(*unconfirmed))
	}
	return s, nil
}

// ECHUnconfirmed is the config an ECH snapshot records as published
// unconfirmed; nil when none.
func ECHUnconfirmed(s *corev1.Secret) *uint8 {
	id, err := strconv.ParseUint(s.Annotations[v1alpha1.PublishedUnconfirmedAnnotation], 10, 8)
	if err != nil {
		return nil
	}
	v := uint8(id)
	return &v
}

// ECHRecord reads an ECH ring's snapshot Secret back, checking the ring it
// holds against the Secret's epoch label, so that a Secret altered by hand
// is refused with an error naming it.
func ECHRecord(s *corev1.Secret) (echring.Ring, error) {
	epoch := SnapshotEpoch(s)
	r, err := echring.Decode(s.Data[echring.FileName])
	switch {
	case epoch > MaxEpoch:
		return echring.Ring{}, fmt.Errorf("snapshot %s/%s: labelled epoch %d, above %d, the most a ring may reach", s.Namespace, s.Name, epoch, int64(MaxEpoch))
	case err != nil:
		return echring.Ring{}, fmt.Errorf("snapshot %s/%s: %w", s.Namespace, s.Name, err)
	case r.Epoch != epoch:
		return echring.Ring{}, fmt.Errorf("snapshot %s/%s: holds epoch %d but is labelled epoch %q", s.Namespace, s.Name, r.Epoch, s.Labels[v1alpha1.EpochLabel])
	}
	return r, nil
}
