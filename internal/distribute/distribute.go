// Package distribute builds the Secrets that carry a ring to pods: one
// immutable snapshot Secret per epoch, the record, and one mutable projection
// Secret per target namespace, a copy of the newest snapshot that pods mount.
//
// It builds and reads objects; it never talks to the API server.
package distribute

import (
	"fmt"
	"maps"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

// SecretType is the type of every Secret ringmaster writes, so that tools
// (and people) can tell ticket key Secrets from others at a glance.
const SecretType corev1.SecretType = "ringmaster.io/ticket-keys"

// SnapshotName is the name of the snapshot Secret of a ring's epoch.
func SnapshotName(ring string, epoch int64) string {
	return fmt.Sprintf("%s-e%d", ring, epoch)
}

// Snapshot builds the immutable snapshot Secret of r, owned by owner:
// ticketkeys.json plus the files of every extra format, with the derived
// keys ordered as of the epoch's IssuedAt.
func Snapshot(owner *v1alpha1.TicketKeyRing, r keyring.Ring) (*corev1.Secret, error) {
	ringFile, err := keyring.Encode(r)
	if err != nil {
		return nil, fmt.Errorf("encode epoch %d: %w", r.Epoch, err)
	}
	data := map[string][]byte{keyring.FileName: ringFile}
	for _, f := range owner.Spec.Distribution.Formats {
		files, err := r.Files(keyring.Format(f), r.IssuedAt)
		if err != nil {
			return nil, fmt.Errorf("epoch %d: %w", r.Epoch, err)
		}
		maps.Copy(data, files)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      SnapshotName(owner.Name, r.Epoch),
			Namespace: owner.Namespace,
			Labels: map[string]string{
				v1alpha1.RingLabel:      owner.Name,
				v1alpha1.ComponentLabel: v1alpha1.ComponentSnapshot,
				v1alpha1.EpochLabel:     strconv.FormatInt(r.Epoch, 10),
			},
			OwnerReferences: []metav1.OwnerReference{ownerRef(owner)},
		},
		Immutable: ptr.To(true),
		Type:      SecretType,
		Data:      data,
	}, nil
}

// Projection builds the projection Secret for namespace ns: a copy of the
// snapshot's data under the ring's projection name. In the ring's own
// namespace it is owned by the ring; elsewhere it is found by its labels,
// since owner references cannot cross namespaces.
func Projection(owner *v1alpha1.TicketKeyRing, snapshot *corev1.Secret, ns string) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:        owner.ProjectionSecretName(),
			Namespace:   ns,
			Labels:      ProjectionLabels(owner),
			Annotations: map[string]string{v1alpha1.EpochAnnotation: snapshot.Labels[v1alpha1.EpochLabel]},
		},
		Type: SecretType,
		Data: snapshot.DeepCopy().Data, // bytes and all: the two must never alias
	}
	if ns == owner.Namespace {
		s.OwnerReferences = []metav1.OwnerReference{ownerRef(owner)}
	}
	return s
}

// ProjectionLabels are the labels of every projection Secret of owner.
func ProjectionLabels(owner *v1alpha1.TicketKeyRing) map[string]string {
	return map[string]string{
		v1alpha1.RingLabel:          owner.Name,
		v1alpha1.RingNamespaceLabel: owner.Namespace,
		v1alpha1.ComponentLabel:     v1alpha1.ComponentProjection,
	}
}

// InSync reports whether the projection Secret have carries what want does,
// so that an unchanged projection is never rewritten and a hand edit is.
func InSync(have, want *corev1.Secret) bool {
	return have.Type == want.Type &&
		maps.EqualFunc(have.Data, want.Data, func(a, b []byte) bool { return string(a) == string(b) }) &&
		maps.Equal(have.Labels, want.Labels) &&
		have.Annotations[v1alpha1.EpochAnnotation] == want.Annotations[v1alpha1.EpochAnnotation]
}

// ReadSnapshot decodes the ring a snapshot Secret holds and checks it
// against the Secret's name and labels, so that a Secret altered by hand is
// refused with an error naming it rather than trusted.
func ReadSnapshot(s *corev1.Secret) (keyring.Ring, error) {
	r, err := keyring.Decode(s.Data[keyring.FileName])
	if err != nil {
		return keyring.Ring{}, fmt.Errorf("snapshot %s/%s: %w", s.Namespace, s.Name, err)
	}
	if got := strconv.FormatInt(r.Epoch, 10); got != s.Labels[v1alpha1.EpochLabel] {
		return keyring.Ring{}, fmt.Errorf("snapshot %s/%s: holds epoch %s but is labelled epoch %q", s.Namespace, s.Name, got, s.Labels[v1alpha1.EpochLabel])
	}
	return r, nil
}

// SnapshotEpoch is the epoch label of a snapshot Secret, or 0 when missing
// or malformed.
func SnapshotEpoch(s *corev1.Secret) int64 {
	e, err := strconv.ParseInt(s.Labels[v1alpha1.EpochLabel], 10, 64)
	if err != nil {
		return 0
	}
	return e
}

func ownerRef(owner *v1alpha1.TicketKeyRing) metav1.OwnerReference {
	return *metav1.NewControllerRef(owner, v1alpha1.GroupVersion.WithKind("TicketKeyRing"))
}
