// Package distribute builds the Secrets that carry a ring to pods: one
// immutable snapshot Secret per epoch, the record, and one mutable projection
// Secret per target namespace, a copy of the newest snapshot that pods mount.
// It also decides, from what exists, what to do with each of them.
//
// It builds and reads objects; it never talks to the API server.
package distribute

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

// SecretType is the type of every Secret ringmaster writes, so that tools
// (and people) can tell ticket key Secrets from others at a glance, and the
// operator's cache holds these Secrets and no others.
const SecretType corev1.SecretType = "ringmaster.io/ticket-keys"

// ExcludeFromBackupLabel, with the value "true", makes Velero leave an
// object out of every backup. ringmaster puts it on every Secret it writes,
// unless Owner.KeepInBackups says not to: a backup holding a key keeps the
// key's bytes as long as the backup lives, however early the key expires,
// and a ring restored from one would bring back keys destroyed since.
const ExcludeFromBackupLabel = "velero.io/exclude-from-backup"

// Owner is the ring a set of Secrets belongs to: a TicketKeyRing, whose
// Secrets all live in its namespace, or a ClusterTicketKeyRing, whose
// snapshots live in the operator's namespace and whose projections live in
// every namespace it selects.
type Owner struct {
	// Kind is v1alpha1.KindTicketKeyRing or v1alpha1.KindClusterTicketKeyRing.
	Kind string
	Name string
	UID  types.UID
	// Namespace is a TicketKeyRing's namespace; empty for a cluster ring.
	Namespace string
	// Home is where the snapshots live.
	Home string
	// SecretName is the projection Secret's name.
	SecretName string
	// Formats are written beside ticketkeys.json.
	Formats []v1alpha1.KeyFormat
	// KeepInBackups leaves ExcludeFromBackupLabel off the ring's Secrets.
	KeepInBackups bool
	// Deleting says the ring is being deleted, held by a finalizer. It
	// still prunes the Secrets it controls, and takes nothing else: no
	// Secret's place (Predecessor), no projection it has not got, none
	// moved back to an older epoch (Decide). The garbage collector is
	// handing its Secrets on (an orphan delete strips their owner
	// references, a foreground delete deletes them), and the orphan
	// controller destroys those it no longer controls on time.
	Deleting bool
}

// labelled adds the labels every Secret of the ring carries besides those
// that select it.
func (o Owner) labelled(l map[string]string) map[string]string {
	if !o.KeepInBackups {
		l[ExcludeFromBackupLabel] = "true"
	}
	return l
}

// OwnerOf describes a TicketKeyRing.
func OwnerOf(r *v1alpha1.TicketKeyRing) Owner {
	return Owner{
		Kind: v1alpha1.KindTicketKeyRing, Name: r.Name, UID: r.UID, Namespace: r.Namespace, Home: r.Namespace,
		SecretName: r.ProjectionSecretName(), Formats: r.Spec.Distribution.Formats, Deleting: !r.DeletionTimestamp.IsZero(),
	}
}

// ClusterOwnerOf describes a ClusterTicketKeyRing whose snapshots live in
// the namespace home.
func ClusterOwnerOf(r *v1alpha1.ClusterTicketKeyRing, home string) Owner {
	return Owner{
		Kind: v1alpha1.KindClusterTicketKeyRing, Name: r.Name, UID: r.UID, Home: home,
		SecretName: r.ProjectionSecretName(), Formats: r.Spec.Distribution.Formats, Deleting: !r.DeletionTimestamp.IsZero(),
	}
}

// RingName is the ring's name in ticketkeys.json: "<namespace>/<name>" for
// a TicketKeyRing, "<name>" for a ClusterTicketKeyRing.
func (o Owner) RingName() string {
	if o.Namespace == "" {
		return o.Name
	}
	return o.Namespace + "/" + o.Name
}

// ringLabel is the label naming the ring on its Secrets.
func (o Owner) ringLabel() string {
	switch o.Kind {
	case v1alpha1.KindClusterTicketKeyRing:
		return v1alpha1.ClusterRingLabel
	case v1alpha1.KindECHKeyRing:
		return v1alpha1.ECHRingLabel
	}
	return v1alpha1.RingLabel
}

// SnapshotLabels select the ring's snapshots in its home namespace.
func (o Owner) SnapshotLabels() map[string]string {
	return map[string]string{o.ringLabel(): o.Name, v1alpha1.ComponentLabel: v1alpha1.ComponentSnapshot}
}

// HomeSnapshots selects the snapshots of every ring of the owner's kind in
// its home namespace, so that one list can stand for a list per ring.
func (o Owner) HomeSnapshots() labels.Selector {
	sel := labels.SelectorFromSet(labels.Set{v1alpha1.ComponentLabel: v1alpha1.ComponentSnapshot})
	exists, err := labels.NewRequirement(o.ringLabel(), selection.Exists, nil)
	if err != nil {
		panic(err) // a constant, valid label key
	}
	return sel.Add(*exists)
}

// SnapshotRing is the ring of the owner's kind that controls s, by name
// and UID: s is labelled with the name and its controller reference is a
// ring of that kind and name. ok is false for a Secret of another kind's
// ring, of no ring, or being deleted, which no ring plans from.
func (o Owner) SnapshotRing(s *corev1.Secret) (name string, uid types.UID, ok bool) {
	ref := metav1.GetControllerOfNoCopy(s)
	if ref == nil || ref.Kind != o.Kind || ref.APIVersion != v1alpha1.GroupVersion.String() ||
		s.Labels[o.ringLabel()] != ref.Name || !s.DeletionTimestamp.IsZero() {
		return "", "", false
	}
	return ref.Name, ref.UID, true
}

// ProjectionLabels are the labels of every projection Secret of the ring.
func (o Owner) ProjectionLabels() map[string]string {
	return map[string]string{o.ringLabel(): o.Name, v1alpha1.ComponentLabel: v1alpha1.ComponentProjection}
}

// SnapshotName is the name of the snapshot Secret of an epoch:
// <ring>-e<epoch>, or <ring>-ce<epoch> for a cluster ring, so that a cluster
// ring's snapshots never take the name of a namespaced ring's in the
// operator's namespace, and <ring>-ech-e<epoch> for an ECHKeyRing, so that
// an ECH ring and a ticket ring of one name keep apart. The API forbids
// projection names of these forms.
func (o Owner) SnapshotName(epoch int64) string {
	switch o.Kind {
	case v1alpha1.KindClusterTicketKeyRing:
		return fmt.Sprintf("%s-ce%d", o.Name, epoch)
	case v1alpha1.KindECHKeyRing:
		return fmt.Sprintf("%s-ech-e%d", o.Name, epoch)
	}
	return fmt.Sprintf("%s-e%d", o.Name, epoch)
}

// Owns reports whether s is controlled by the ring: owner references carry
// the ring's UID, so a ring deleted and created again owns nothing of the
// old one's, and nobody else's Secret is ever taken over.
func (o Owner) Owns(s *corev1.Secret) bool {
	ref := metav1.GetControllerOfNoCopy(s)
	return ref != nil && ref.UID == o.UID && ref.Kind == o.Kind && ref.APIVersion == v1alpha1.GroupVersion.String()
}

// Predecessor reports whether s was left by a ring deleted before this one
// was created under its name, so that this ring takes its place:
//   - s is labelled as the ring's, and its controller is a ring of the same
//     kind and name with another UID. Names are unique, so that ring no
//     longer exists, and the garbage collector deletes s in its own time;
//   - or s is a Secret of ringmaster's (ClaimOf) that claims this ring and
//     that no ring controls: what an orphan delete (kubectl delete
//     --cascade=orphan) leaves once the garbage collector has stripped its
//     owner references. The orphan controller destroys such a Secret at
//     first key's expiry; a ring of the name takes its place at once.
//
// The ring deletes it now rather than wedge on the name. A Secret of anyone
// else is never one: not of ringmaster's type, labelled for another ring,
// or owned by anything but a ring of this kind and name. A ring being
// deleted has none: it takes no Secret's place, and what an orphan delete
// strips while it still exists was its own.
func (o Owner) Predecessor(s *corev1.Secret) bool {
	ref := metav1.GetControllerOfNoCopy(s)
	if s.Type != SecretType || o.Deleting {
		return false
	}
	if ref == nil {
		c, ok := ClaimOf(s, o.Home)
		return ok && c.Kind == o.Kind && c.Ring.Name == o.Name && (o.Namespace == "" || s.Namespace == o.Namespace)
	}
	return ref.UID != o.UID && ref.Kind == o.Kind && ref.Name == o.Name &&
		ref.APIVersion == v1alpha1.GroupVersion.String() && s.Labels[o.ringLabel()] == o.Name
}

func (o Owner) ownerRef() metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: v1alpha1.GroupVersion.String(), Kind: o.Kind, Name: o.Name, UID: o.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}
}

// Requests are the requests an epoch carries out: the record of a request
// travels with the epoch it caused, so that a reconcile reading a ring
// whose status lags never carries it out twice.
type Requests struct {
	// Rotate is a rotate-now request (v1alpha1.RotateRequestedAtAnnotation).
	Rotate string
	// Revoke is a revoke request (v1alpha1.RevokeRequestedAtAnnotation).
	Revoke string
	// Fleet is the FleetRequest the epoch carries out, as
	// FleetRequestValue makes it (v1alpha1.FleetRequestAnnotation); "" for
	// none.
	Fleet string
	// Shared is the version of the ring's shared entry in Vault that the
	// epoch serves (v1alpha1.SharedVersionAnnotation); 0 for a ring that is
	// not shared.
	Shared int64
}

// Snapshot builds the immutable snapshot Secret of r, owned by o:
// ticketkeys.json, the record, and the requests it carries out. The files
// of the extra formats are derived from it into the projections only: the
// record does not need them, and every copy of a key written to etcd is one
// more that etcd's files and backups keep. They are derived here too, and
// dropped, so that a format that cannot be derived fails the publication.
func Snapshot(o Owner, r keyring.Ring, req Requests) (*corev1.Secret, error) {
	ringFile, err := keyring.Encode(r)
	if err != nil {
		return nil, fmt.Errorf("encode epoch %d: %w", r.Epoch, err)
	}
	data := map[string][]byte{keyring.FileName: ringFile}
	if _, err := formatFiles(o, r); err != nil {
		return nil, err
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
		Data:      data,
	}
	s.Labels[v1alpha1.EpochLabel] = strconv.FormatInt(r.Epoch, 10)
	ann := map[string]string{}
	if req.Rotate != "" {
		ann[v1alpha1.RotateRequestedAtAnnotation] = req.Rotate
	}
	if req.Revoke != "" {
		ann[v1alpha1.RevokeRequestedAtAnnotation] = req.Revoke
	}
	if req.Fleet != "" {
		ann[v1alpha1.FleetRequestAnnotation] = req.Fleet
	}
	if req.Shared > 0 {
		ann[v1alpha1.SharedVersionAnnotation] = strconv.FormatInt(req.Shared, 10)
	}
	if !r.Due.IsZero() {
		ann[v1alpha1.DueAnnotation] = r.Due.UTC().Format(time.RFC3339)
	}
	if first := firstExpiry(r); !first.IsZero() {
		ann[v1alpha1.ExpiresAtAnnotation] = formatExpiry(first)
	}
	if len(ann) > 0 {
		s.Annotations = ann
	}
	return s, nil
}

// formatFiles derives the files of o's extra formats from r, with the keys
// ordered as of the epoch's IssuedAt.
func formatFiles(o Owner, r keyring.Ring) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, f := range o.Formats {
		files, err := r.Files(keyring.Format(f), r.IssuedAt)
		if err != nil {
			return nil, fmt.Errorf("epoch %d: %w", r.Epoch, err)
		}
		maps.Copy(out, files)
	}
	return out, nil
}

// Projection builds the projection Secret for namespace ns, under the
// ring's projection name, owned by the ring (a namespaced Secret may have a
// cluster-scoped owner, so a cluster ring's copies are garbage collected
// with it too): the snapshot's ticketkeys.json and the files of the ring's
// formats derived from it. A snapshot whose ring does not decode (never
// the newest: the reconcile halts on it) is copied as it is.
func Projection(o Owner, snapshot *corev1.Secret, ns string) *corev1.Secret {
	data := snapshot.DeepCopy().Data // bytes and all: the two must never alias
	if r, err := keyring.Decode(snapshot.Data[keyring.FileName]); err == nil {
		if files, err := formatFiles(o, r); err == nil {
			data = map[string][]byte{keyring.FileName: bytes.Clone(snapshot.Data[keyring.FileName])}
			maps.Copy(data, files)
		}
		for i := range r.Keys {
			clear(r.Keys[i].Secret[:])
		}
	}
	ann := map[string]string{v1alpha1.EpochAnnotation: snapshot.Labels[v1alpha1.EpochLabel]}
	if exp, ok := snapshot.Annotations[v1alpha1.ExpiresAtAnnotation]; ok {
		// The copy holds the snapshot's keys, and goes when they do.
		ann[v1alpha1.ExpiresAtAnnotation] = exp
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:            o.SecretName,
			Namespace:       ns,
			Labels:          o.labelled(o.ProjectionLabels()),
			Annotations:     ann,
			OwnerReferences: []metav1.OwnerReference{o.ownerRef()},
		},
		Type: SecretType,
		Data: data,
	}
}

// Action is what to do about one target's projection Secret.
type Action int

const (
	// Keep: the projection carries the newest epoch already.
	Keep Action = iota
	// Create: there is no Secret of that name.
	Create
	// Update: ours, carrying an older epoch (routine) or edited by hand.
	Update
	// Recreate: left by a deleted ring of this name (Owner.Predecessor):
	// delete it and create it again on the next pass.
	Recreate
	// Conflict: a Secret of that name exists and is not the ring's, or is
	// not of ringmaster's type (whatever its owner references say: only the
	// operator writes Secrets of that type, so another is someone else's).
	// It is left untouched.
	Conflict
	// Leave: the ring is being deleted (Owner.Deleting) and the Secret is
	// not one it updates: absent (it creates none, and does not restore
	// one a foreground delete removed), not its own (an orphan delete
	// stripped it), or holding a later epoch than want (the snapshot
	// want copies is older than one the garbage collector took). Nothing
	// is written and nothing is reported.
	Leave
)

// Decide says what to do about the projection want, given the Secret of
// its name that exists (nil for none). edited reports an Update of a Secret
// that carried the right epoch with other content: someone edited it.
func Decide(o Owner, have, want *corev1.Secret) (a Action, edited bool) {
	if o.Deleting && (have == nil || have.Type != want.Type || !o.Owns(have) || epochOf(have) > epochOf(want)) {
		return Leave, false
	}
	switch {
	case have == nil:
		return Create, false
	case have.Type != want.Type:
		return Conflict, false
	case o.Predecessor(have):
		return Recreate, false
	case !o.Owns(have):
		return Conflict, false
	case InSync(have, want):
		return Keep, false
	}
	return Update, have.Annotations[v1alpha1.EpochAnnotation] == want.Annotations[v1alpha1.EpochAnnotation]
}

// InSync reports whether the projection Secret have carries what want does,
// so that an unchanged projection is never rewritten and a hand edit is.
// have may be as the operator's cache keeps a projection, its data's
// digest in place of the data (Digested).
func InSync(have, want *corev1.Secret) bool {
	var sameData bool
	if Digested(have) {
		sameData = bytes.Equal(have.Data[DigestKey], DataDigest(want.Data))
	} else {
		sameData = maps.EqualFunc(have.Data, want.Data, func(a, b []byte) bool { return string(a) == string(b) })
	}
	return have.Type == want.Type && sameData &&
		maps.Equal(have.Labels, want.Labels) &&
		have.Annotations[v1alpha1.EpochAnnotation] == want.Annotations[v1alpha1.EpochAnnotation]
}

// DigestKey is the one data key of a projection Secret as the operator's
// cache keeps it: the SHA-256 of its data (DataDigest) in place of the
// data, which the operator never reads back. So the operator's memory
// holds each key once, in its snapshot, not again in every projection.
const DigestKey = "ringmaster.io/data-sha256"

// DataDigest is the SHA-256 of a Secret's data: each key and its value,
// in key order, each preceded by its length.
func DataDigest(data map[string][]byte) []byte {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(data)) {
		_ = binary.Write(h, binary.BigEndian, uint64(len(k)))
		h.Write([]byte(k))
		_ = binary.Write(h, binary.BigEndian, uint64(len(data[k])))
		h.Write(data[k])
	}
	return h.Sum(nil)
}

// Digested reports whether s's data is a digest (DigestKey), as the
// operator's cache keeps a projection.
func Digested(s *corev1.Secret) bool {
	d, ok := s.Data[DigestKey]
	return ok && len(s.Data) == 1 && len(d) == sha256.Size
}

// Updated is have brought in line with want: want's data and labels, and
// have's annotations with want's merged in.
func Updated(have, want *corev1.Secret) *corev1.Secret {
	out := have.DeepCopy()
	out.Labels, out.Data = want.Labels, want.DeepCopy().Data
	out.Annotations = labels.Merge(out.Annotations, want.Annotations)
	return out
}

// MaxEpoch is the highest epoch a ring may reach: 2^53-1, the largest
// integer every JSON reader of ticketkeys.json reads exactly, and so far
// beyond any ring's rotations (one a second for 285 million years) that a
// snapshot labelled above it was forged or corrupted. Refusing it keeps
// keyring.NextEpoch from overflowing into a ring that can never publish.
const MaxEpoch = 1<<53 - 1

// Record reads a snapshot Secret back into the record of its epoch. The
// ring it holds is checked against the Secret's epoch label, and the label
// against MaxEpoch, so that a Secret altered by hand is refused with an
// error naming it rather than trusted.
func Record(s *corev1.Secret) keyring.Record {
	rec := keyring.Record{Epoch: SnapshotEpoch(s), RotateRequest: s.Annotations[v1alpha1.RotateRequestedAtAnnotation],
		RevokeRequest: s.Annotations[v1alpha1.RevokeRequestedAtAnnotation]}
	rec.FleetRequest, _ = FleetRequestOf(s)
	r, err := keyring.Decode(s.Data[keyring.FileName])
	switch {
	case rec.Epoch > MaxEpoch:
		rec.Err = fmt.Errorf("snapshot %s/%s: labelled epoch %d, above %d, the most a ring may reach", s.Namespace, s.Name, rec.Epoch, int64(MaxEpoch))
	case err != nil:
		rec.Err = fmt.Errorf("snapshot %s/%s: %w", s.Namespace, s.Name, err)
	case strconv.FormatInt(r.Epoch, 10) != s.Labels[v1alpha1.EpochLabel]:
		rec.Err = fmt.Errorf("snapshot %s/%s: holds epoch %d but is labelled epoch %q", s.Namespace, s.Name, r.Epoch, s.Labels[v1alpha1.EpochLabel])
	default:
		rec.Ring = r
		if due, ok := s.Annotations[v1alpha1.DueAnnotation]; ok {
			t, err := time.Parse(time.RFC3339, due)
			if err != nil {
				rec.Ring, rec.Err = keyring.Ring{}, fmt.Errorf("snapshot %s/%s: annotation %s: %w", s.Namespace, s.Name, v1alpha1.DueAnnotation, err)
				break
			}
			rec.Ring.Due = t
		}
	}
	return rec
}

// SharedVersion is the shared entry's version a snapshot Secret serves
// (v1alpha1.SharedVersionAnnotation), or 0 when it has none or nil.
func SharedVersion(s *corev1.Secret) int64 {
	if s == nil {
		return 0
	}
	v, err := strconv.ParseInt(s.Annotations[v1alpha1.SharedVersionAnnotation], 10, 64)
	if err != nil || v < 0 {
		return 0
	}
	return v
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

// Targets are the namespaces a cluster ring delivers to, in name order: those
// the selector matches, less those being deleted (a write there would only
// fail, and their Secrets go with them).
func Targets(selector labels.Selector, namespaces []corev1.Namespace) []string {
	var out []string
	for _, ns := range namespaces {
		if ns.DeletionTimestamp.IsZero() && ns.Status.Phase != corev1.NamespaceTerminating && selector.Matches(labels.Set(ns.Labels)) {
			out = append(out, ns.Name)
		}
	}
	slices.Sort(out)
	return out
}

// RingOf names the ring a Secret says it belongs to, by its labels: a
// TicketKeyRing or an ECHKeyRing (namespaced key) or a ClusterTicketKeyRing
// (name only).
// Labels are only a hint for what to reconcile; ownership is decided by
// owner references (Owner.Owns).
func RingOf(s metav1.Object) (kind string, key types.NamespacedName, ok bool) {
	l := s.GetLabels()
	if name := l[v1alpha1.ClusterRingLabel]; name != "" {
		return v1alpha1.KindClusterTicketKeyRing, types.NamespacedName{Name: name}, true
	}
	if name := l[v1alpha1.ECHRingLabel]; name != "" {
		return v1alpha1.KindECHKeyRing, types.NamespacedName{Namespace: s.GetNamespace(), Name: name}, true
	}
	if name := l[v1alpha1.RingLabel]; name != "" {
		return v1alpha1.KindTicketKeyRing, types.NamespacedName{Namespace: s.GetNamespace(), Name: name}, true
	}
	return "", types.NamespacedName{}, false
}

// epochOf is the epoch a projection Secret carries
// (v1alpha1.EpochAnnotation), or 0 when missing or malformed.
func epochOf(s *corev1.Secret) int64 {
	e, err := strconv.ParseInt(s.Annotations[v1alpha1.EpochAnnotation], 10, 64)
	if err != nil {
		return 0
	}
	return e
}

// FleetRequestValue is the value of v1alpha1.FleetRequestAnnotation on
// the snapshot of an epoch that carried out the FleetRequest of uid:
// "<action>/<uid>".
func FleetRequestValue(action v1alpha1.FleetAction, uid string) string {
	return string(action) + "/" + uid
}

// FleetRequestOf reads the FleetRequest a snapshot's epoch carried out:
// its UID, and whether it was a revoke.
func FleetRequestOf(s *corev1.Secret) (uid string, revoke bool) {
	action, uid, ok := strings.Cut(s.Annotations[v1alpha1.FleetRequestAnnotation], "/")
	if !ok {
		return "", false
	}
	return uid, action == string(v1alpha1.FleetRevoke)
}
