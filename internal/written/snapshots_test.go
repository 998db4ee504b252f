package written

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
)

// What the snapshot memory answers a reconcile, after the lists, writes
// and doubts it was told of: the cache's snapshots when it can show them
// current, and nothing (a list of the ring's own from the API server)
// otherwise. A sweep of a namespace stands for a list of each ring there.
func TestSnapshotMemory(t *testing.T) {
	owner := func(kind, name string, uid types.UID) distribute.Owner {
		return distribute.Owner{Kind: kind, Name: name, UID: uid, Namespace: "shop", Home: "shop"}
	}
	web := owner(v1alpha1.KindTicketKeyRing, "web", "u-web")
	snap := func(o distribute.Owner, uid types.UID, rv string) *corev1.Secret {
		label := v1alpha1.RingLabel
		if o.Kind == v1alpha1.KindECHKeyRing {
			label = v1alpha1.ECHRingLabel
		}
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
			Namespace: o.Home, Name: o.Name + "-" + string(uid), UID: uid, ResourceVersion: rv,
			Labels:          map[string]string{label: o.Name, v1alpha1.ComponentLabel: v1alpha1.ComponentSnapshot},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: o.Kind, Name: o.Name, UID: o.UID, Controller: ptr.To(true)}},
		}}
	}
	items := func(s ...*corev1.Secret) []corev1.Secret {
		out := make([]corev1.Secret, len(s))
		for i := range s {
			out[i] = *s[i]
		}
		return out
	}
	e1, e2 := snap(web, "s1", "10"), snap(web, "s2", "20")

	for _, tc := range []struct {
		name   string
		told   func(m *Snapshots)
		ring   distribute.Owner
		cached []*corev1.Secret
		// want is the snapshots answered; nil: none, list the ring's own.
		want []*corev1.Secret
	}{
		{name: "nothing known", told: func(*Snapshots) {}, ring: web, cached: nil},
		{
			name: "a sweep that found none of the ring's: it has none",
			told: func(m *Snapshots) { m.Sweep(web, nil) },
			ring: web, cached: nil, want: []*corev1.Secret{},
		},
		{
			name: "a sweep that found none, and a cache holding one the operator never saw",
			told: func(m *Snapshots) { m.Sweep(web, nil) },
			ring: web, cached: []*corev1.Secret{e1},
		},
		{
			name: "a sweep that found the ring's snapshot, and the cache holds it at that version",
			told: func(m *Snapshots) { m.Sweep(web, items(e1)) },
			ring: web, cached: []*corev1.Secret{e1}, want: []*corev1.Secret{e1},
		},
		{
			name: "a sweep that found the ring's snapshot, and the cache is behind: it lacks it",
			told: func(m *Snapshots) { m.Sweep(web, items(e1)) },
			ring: web, cached: nil,
		},
		{
			name: "a sweep, and the cache holds the snapshot at another version",
			told: func(m *Snapshots) { m.Sweep(web, items(e1)) },
			ring: web, cached: []*corev1.Secret{snap(web, "s1", "11")},
		},
		{
			name: "a sweep older than the ring's record does not undo the operator's write",
			told: func(m *Snapshots) {
				m.Sweep(owner(v1alpha1.KindTicketKeyRing, "other", "u-other"), nil)
				m.Current(web, nil)
				m.Wrote(web, e1)
				m.Wrote(web, e2)
				m.Sweep(web, items(e1)) // listed before e2 was written
			},
			ring: web, cached: []*corev1.Secret{e1, e2}, want: []*corev1.Secret{e1, e2},
		},
		{
			name: "after a sweep, the operator's write that the cache has not seen",
			told: func(m *Snapshots) {
				m.Sweep(web, nil)
				m.Wrote(web, e1)
			},
			ring: web, cached: nil,
		},
		{
			name: "after a sweep, a write whose outcome is unsure",
			told: func(m *Snapshots) {
				m.Sweep(web, nil)
				m.Forget(web)
			},
			ring: web, cached: nil,
		},
		{
			name: "a write before any read or sweep: the sweep to come lists it",
			told: func(m *Snapshots) {
				m.Wrote(web, e1)
				m.Sweep(web, items(e1))
			},
			ring: web, cached: []*corev1.Secret{e1}, want: []*corev1.Secret{e1},
		},
		{
			name: "a doubt ended by the ring's own list",
			told: func(m *Snapshots) {
				m.Sweep(web, nil)
				m.Forget(web)
				m.Listed(web, []*corev1.Secret{e1})
			},
			ring: web, cached: []*corev1.Secret{e1}, want: []*corev1.Secret{e1},
		},
		{
			name: "a sweep that found two rings of the name: a doubt for either",
			told: func(m *Snapshots) {
				m.Sweep(web, items(e1, snap(owner(v1alpha1.KindTicketKeyRing, "web", "u-gone"), "s0", "5")))
			},
			ring: web, cached: []*corev1.Secret{e1},
		},
		{
			name: "a ring created again under a name the memory knows: its own list",
			told: func(m *Snapshots) { m.Sweep(web, items(e1)) },
			ring: owner(v1alpha1.KindTicketKeyRing, "web", "u-new"), cached: nil,
		},
		{
			name: "a ring created again after the old one was forgotten: none",
			told: func(m *Snapshots) {
				m.Sweep(web, items(e1))
				m.ForgetRing(v1alpha1.KindTicketKeyRing, "shop", "web")
			},
			ring: owner(v1alpha1.KindTicketKeyRing, "web", "u-new"), cached: nil, want: []*corev1.Secret{},
		},
		{
			name: "a sweep of ticket rings says nothing of ECH rings",
			told: func(m *Snapshots) { m.Sweep(web, nil) },
			ring: owner(v1alpha1.KindECHKeyRing, "web", "u-ech"), cached: nil,
		},
		{
			name: "an ECH ring's snapshot in a sweep of ticket rings is not a ticket ring's",
			told: func(m *Snapshots) {
				m.Sweep(web, items(snap(owner(v1alpha1.KindECHKeyRing, "web", "u-web"), "x1", "7")))
			},
			ring: web, cached: nil, want: []*corev1.Secret{},
		},
		{
			name: "a snapshot the operator deleted, still in the cache, is left out",
			told: func(m *Snapshots) {
				m.Sweep(web, items(e1, e2))
				m.Deleted(web, e1)
			},
			ring: web, cached: []*corev1.Secret{e1, e2}, want: []*corev1.Secret{e2},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m Snapshots
			tc.told(&m)
			got, ok := m.Current(tc.ring, tc.cached)
			if ok != (tc.want != nil) {
				t.Fatalf("current answered %v (ok %v), want %v", names(got), ok, names(tc.want))
			}
			if ok && !equalNames(got, tc.want) {
				t.Fatalf("current answered %v, want %v", names(got), names(tc.want))
			}
		})
	}
}

func names(s []*corev1.Secret) []string {
	out := []string{}
	for _, x := range s {
		out = append(out, x.Name)
	}
	return out
}

func equalNames(a, b []*corev1.Secret) bool {
	x, y := names(a), names(b)
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i] != y[i] {
			return false
		}
	}
	return true
}
