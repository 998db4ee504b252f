package distribute

import (
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/echring"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

// A Secret that no live ring controls still holds keys: an orphan delete
// (kubectl delete --cascade=orphan) leaves a ring's snapshots and
// projections behind with their owner references stripped, and a ring
// removed while the operator was down leaves them to the garbage collector.
// No key may outlive its expiresAt, so the operator destroys such a Secret
// when the first key it holds expires (a live ring would rewrite or delete
// it then: it cannot drop one key from a Secret it no longer serves), and
// at once when a ring of its name lives again
// (that ring takes its place). This file decides which Secrets those are,
// and when each must go.
//
// Which Secrets are ringmaster's is decided by their shape alone, the type
// and labels that only the operator may write where the admission guard
// is installed (config/admission): a Secret a tenant made cannot have
// that shape there, and one of any other type (the type of a Secret can
// never change), labelled for no ring or for more than one, named unlike
// the ring's snapshots, or owned by anything but a ring is never one.

// Claim is the ring a Secret of ringmaster's says it belongs to.
type Claim struct {
	// Kind is the ring's kind: v1alpha1.KindTicketKeyRing,
	// KindClusterTicketKeyRing or KindECHKeyRing.
	Kind string
	// Ring is the ring's key: namespace (none for a cluster ring) and name.
	Ring types.NamespacedName
	// Component is v1alpha1.ComponentSnapshot or ComponentProjection.
	Component string
}

// ClaimOf reads the ring a Secret of ringmaster's shape belongs to. ok is
// false for any Secret the operator does not write:
//   - its type is not SecretType;
//   - it carries no ring label, or those of more than one kind;
//   - its component label is neither snapshot nor projection;
//   - a snapshot whose epoch label is not an epoch a ring reaches, whose
//     name is not the one the ring gives that epoch, or (a cluster ring's)
//     that is not in home, the operator's namespace;
//   - an owner reference names anything but a ring of the claimed kind and
//     name: the garbage collector strips a deleted ring's references and
//     leaves the others, so a Secret something else owns is not an
//     orphan of a ring.
func ClaimOf(s *corev1.Secret, home string) (Claim, bool) {
	if s == nil || s.Type != SecretType {
		return Claim{}, false
	}
	var c Claim
	kinds := 0
	for label, kind := range map[string]string{
		v1alpha1.RingLabel: v1alpha1.KindTicketKeyRing, v1alpha1.ClusterRingLabel: v1alpha1.KindClusterTicketKeyRing, v1alpha1.ECHRingLabel: v1alpha1.KindECHKeyRing,
	} {
		if name, ok := s.Labels[label]; ok {
			kinds++
			c.Kind, c.Ring.Name = kind, name
		}
	}
	if kinds != 1 || c.Ring.Name == "" {
		return Claim{}, false
	}
	if c.Kind != v1alpha1.KindClusterTicketKeyRing {
		c.Ring.Namespace = s.Namespace
	}
	c.Component = s.Labels[v1alpha1.ComponentLabel]
	switch c.Component {
	case v1alpha1.ComponentProjection:
	case v1alpha1.ComponentSnapshot:
		epoch, err := strconv.ParseInt(s.Labels[v1alpha1.EpochLabel], 10, 64)
		o := Owner{Kind: c.Kind, Name: c.Ring.Name}
		if err != nil || epoch < 1 || epoch > MaxEpoch || s.Name != o.SnapshotName(epoch) ||
			(c.Kind == v1alpha1.KindClusterTicketKeyRing && s.Namespace != home) {
			return Claim{}, false
		}
	default:
		return Claim{}, false
	}
	for _, ref := range s.OwnerReferences {
		if ref.APIVersion != v1alpha1.GroupVersion.String() || ref.Kind != c.Kind || ref.Name != c.Ring.Name {
			return Claim{}, false
		}
	}
	return c, true
}

// Orphan is a Secret of ringmaster's that no live ring controls.
type Orphan struct {
	Claim
	// Superseded: a ring of the claimed kind and name lives, with another
	// UID. It takes the Secret's place: the Secret goes at once.
	Superseded bool
}

// Live is the ring a claim names, as it exists: its UID, empty when none
// does, and whether it is being deleted.
type Live struct {
	UID      types.UID
	Deleting bool
}

// OrphanOf reports whether s, a Secret of ringmaster's shape (ClaimOf,
// with the operator's namespace home), is controlled by no live ring.
// live is the ring the claim names. A Secret that ring controls is not an
// orphan, even while the ring is being deleted: the ring prunes it at each
// key's expiresAt until it goes, and a second hand deleting it then would
// race the ring's own writes. Any other Secret of the claim is an orphan,
// superseded when the ring lives on (it takes the Secret's place), not
// while it is being deleted (it takes none: an orphan delete's Secrets,
// stripped while it waits for the garbage collector, go at their expiry).
func OrphanOf(s *corev1.Secret, home string, live Live) (Orphan, bool) {
	c, ok := ClaimOf(s, home)
	if !ok {
		return Orphan{}, false
	}
	if ref := metav1.GetControllerOfNoCopy(s); live.UID != "" && ref != nil && ref.UID == live.UID {
		return Orphan{}, false
	}
	return Orphan{Claim: c, Superseded: live.UID != "" && !live.Deleting}, true
}

// Deadline is when an orphan must be gone: at once when a ring of its name
// has taken its place, or when its keys' expiry is unknown (expiry zero:
// its data holds nothing a reader accepts); otherwise at expiry, the
// expiresAt of the first key it holds to expire, and never later.
func (o Orphan) Deadline(expiry, now time.Time) time.Time {
	if o.Superseded || expiry.IsZero() || expiry.Before(now) {
		return now
	}
	return expiry
}

// AnnotatedExpiry is the expiry a snapshot or projection Secret carries in
// v1alpha1.ExpiresAtAnnotation, written when the operator built it; ok is
// false when it has none (written before the annotation existed) or the
// value is no RFC 3339 time.
func AnnotatedExpiry(s metav1.Object) (time.Time, bool) {
	v, ok := s.GetAnnotations()[v1alpha1.ExpiresAtAnnotation]
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}

// DataExpiry is the expiresAt of the first key a snapshot or projection
// Secret holds to expire, read from its ring file (ticketkeys.json, or echkeys.json
// for an ECH ring's): for a Secret written before ExpiresAtAnnotation
// existed. An error says that its data holds no ring a reader accepts, and
// so nothing to wait for; it names the Secret, never the data.
func DataExpiry(s *corev1.Secret) (time.Time, error) {
	if f, ok := s.Data[echring.FileName]; ok && s.Labels[v1alpha1.ECHRingLabel] != "" {
		r, err := echring.Decode(f)
		if err != nil {
			return time.Time{}, fmt.Errorf("secret %s/%s: %w", s.Namespace, s.Name, err)
		}
		first := firstECHExpiry(r)
		for i := range r.Configs {
			clear(r.Configs[i].PrivateKey)
		}
		return first, nil
	}
	r, err := keyring.Decode(s.Data[keyring.FileName])
	if err != nil {
		return time.Time{}, fmt.Errorf("secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	first := firstExpiry(r)
	for i := range r.Keys {
		clear(r.Keys[i].Secret[:])
	}
	return first, nil
}

// firstExpiry is the earliest expiresAt of r's keys; zero for none.
func firstExpiry(r keyring.Ring) time.Time {
	var first time.Time
	for _, k := range r.Keys {
		if !k.ExpiresAt.IsZero() && (first.IsZero() || k.ExpiresAt.Before(first)) {
			first = k.ExpiresAt
		}
	}
	return first
}

// firstECHExpiry is the earliest expiresAt of r's configs; zero for none.
func firstECHExpiry(r echring.Ring) time.Time {
	var first time.Time
	for _, c := range r.Configs {
		if !c.ExpiresAt.IsZero() && (first.IsZero() || c.ExpiresAt.Before(first)) {
			first = c.ExpiresAt
		}
	}
	return first
}

// formatExpiry writes an expiry to the second, rounded down: the Secret
// goes no later than its key.
func formatExpiry(t time.Time) string {
	return t.UTC().Truncate(time.Second).Format(time.RFC3339)
}
