package written

import (
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ringmaster-io/ringmaster/internal/distribute"
)

// Snapshots is what the operator knows of each ring's snapshots, so
// that a reconcile may read them from the cache once the cache is shown
// current: the snapshots it last listed from the API server or created
// since, each by UID at the resourceVersion the API server returned, and
// those it deleted since, which the cache may still hold.
//
// It learns a ring's snapshots from a list of the ring's alone, or from a
// sweep: one list of every snapshot of the ring's kind in its home
// namespace, which stands for a list of each ring there. After a sweep, a
// ring of that home it holds no record of has no snapshot: one it had
// would have been in the sweep, and any written since was written by this
// operator, which records each write. Only the leader reconciles, so no
// other operator writes snapshots after a sweep; a sweep is never older
// than the leadership it was made under.
//
// It forgets a ring at any write whose outcome it cannot be sure of, and
// the ring's next read lists the ring's snapshots from the API server.
type Snapshots struct {
	mu    sync.Mutex
	rings map[ringID]*knownSnapshots
	// swept are the homes of each kind whose snapshots were listed whole.
	swept map[homeID]bool
}

// ringID names a ring of any kind by where its snapshots live.
type ringID struct{ kind, home, name string }

// homeID names the snapshots of one kind of ring in one namespace.
type homeID struct{ kind, home string }

func idOf(o distribute.Owner) ringID { return ringID{kind: o.Kind, home: o.Home, name: o.Name} }

func homeOf(o distribute.Owner) homeID { return homeID{kind: o.Kind, home: o.Home} }

// knownSnapshots is the record of one ring. A record whose ring is empty
// is a doubt: the ring's snapshots are unknown, whatever a sweep said.
// A ring has a few snapshots: slices, not maps, for ten thousand rings.
type knownSnapshots struct {
	// ring is the ring's UID: a ring created again under its name is
	// another ring.
	ring types.UID
	// have are the snapshots known, each at a resourceVersion.
	have []knownSnapshot
	// gone are the snapshots the operator deleted that the cache may
	// still hold.
	gone []types.UID
}

type knownSnapshot struct {
	uid types.UID
	rv  string
}

func newKnown(ring types.UID) *knownSnapshots { return &knownSnapshots{ring: ring} }

// version is the resourceVersion the record knows uid at.
func (k *knownSnapshots) version(uid types.UID) (string, bool) {
	for _, s := range k.have {
		if s.uid == uid {
			return s.rv, true
		}
	}
	return "", false
}

// add records uid at rv.
func (k *knownSnapshots) add(uid types.UID, rv string) {
	k.drop(uid)
	k.have = append(k.have, knownSnapshot{uid: uid, rv: rv})
	k.gone = slices.DeleteFunc(k.gone, func(g types.UID) bool { return g == uid })
}

// drop forgets uid.
func (k *knownSnapshots) drop(uid types.UID) {
	k.have = slices.DeleteFunc(k.have, func(s knownSnapshot) bool { return s.uid == uid })
}

// record is o's record, nil if the memory does not know o's snapshots: a
// Sweep of o's home without a record of o stands for a record of none.
// The caller holds mu.
func (m *Snapshots) record(o distribute.Owner) *knownSnapshots {
	k, ok := m.rings[idOf(o)]
	switch {
	case ok && k.ring == o.UID:
		return k
	case ok || !m.swept[homeOf(o)]:
		return nil
	}
	k = newKnown(o.UID)
	m.set(idOf(o), k)
	return k
}

func (m *Snapshots) set(id ringID, k *knownSnapshots) {
	if m.rings == nil {
		m.rings = map[ringID]*knownSnapshots{}
	}
	m.rings[id] = k
}

// IsSwept reports whether o's home has been swept.
func (m *Snapshots) IsSwept(o distribute.Owner) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.swept[homeOf(o)]
}

// Current returns the snapshots of the cache, less those the operator
// deleted, when they are exactly those the operator knows, at the
// resourceVersions it knows; otherwise false, and the caller lists them from
// the API server.
func (m *Snapshots) Current(o distribute.Owner, cached []*corev1.Secret) ([]*corev1.Secret, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := m.record(o)
	if k == nil {
		return nil, false
	}
	var out []*corev1.Secret
	for _, s := range cached {
		if slices.Contains(k.gone, s.UID) {
			continue
		}
		if rv, ok := k.version(s.UID); !ok || rv != s.ResourceVersion {
			return nil, false
		}
		out = append(out, s)
	}
	if len(out) != len(k.have) {
		return nil, false
	}
	// The cache has seen the deletes of those it no longer holds.
	k.gone = slices.DeleteFunc(k.gone, func(g types.UID) bool {
		return !slices.ContainsFunc(cached, func(s *corev1.Secret) bool { return s.UID == g })
	})
	return out, true
}

// Listed records the snapshots an API server list of o's returned.
func (m *Snapshots) Listed(o distribute.Owner, snaps []*corev1.Secret) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := newKnown(o.UID)
	if old := m.rings[idOf(o)]; old != nil && old.ring == o.UID {
		k.gone = old.gone
	}
	for _, s := range snaps {
		k.add(s.UID, s.ResourceVersion)
	}
	m.set(idOf(o), k)
}

// Sweep records an API server list of every snapshot of o's kind in o's
// home (distribute.Owner.HomeSnapshots). A ring with a record keeps it:
// the record is as new as the sweep or newer, for the operator records
// each of its writes. A ring of the sweep without one gets one; where two
// rings of one name appear (one deleted, one created again), the name gets
// a doubt, and its ring lists its own.
func (m *Snapshots) Sweep(o distribute.Owner, list []corev1.Secret) {
	found := map[string]*knownSnapshots{}
	for i := range list {
		s := &list[i]
		name, uid, ok := o.SnapshotRing(s)
		if !ok {
			continue
		}
		k := found[name]
		switch {
		case k == nil:
			k = newKnown(uid)
			found[name] = k
		case k.ring != uid:
			k.ring = "" // a doubt
		}
		k.add(s.UID, s.ResourceVersion)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, k := range found {
		id := ringID{kind: o.Kind, home: o.Home, name: name}
		if _, ok := m.rings[id]; !ok {
			m.set(id, k)
		}
	}
	if m.swept == nil {
		m.swept = map[homeID]bool{}
	}
	m.swept[homeOf(o)] = true
}

// Wrote records a snapshot the operator created, as the API server
// returned it.
func (m *Snapshots) Wrote(o distribute.Owner, s *corev1.Secret) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if k := m.record(o); k != nil && s.UID != "" && s.ResourceVersion != "" {
		k.add(s.UID, s.ResourceVersion)
		return
	}
	m.unknown(o)
}

// Deleted records a snapshot the operator deleted (or found gone).
func (m *Snapshots) Deleted(o distribute.Owner, s *corev1.Secret) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if k := m.record(o); k != nil {
		k.drop(s.UID)
		k.gone = append(k.gone, s.UID)
	}
}

// Forget drops what the operator knows of o's snapshots, sweep or not: the
// next read lists them from the API server.
func (m *Snapshots) Forget(o distribute.Owner) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.unknown(o)
}

// unknown makes o's snapshots unknown: a doubt once o's home is swept, no
// record before (the sweep to come will list them). The caller holds mu.
func (m *Snapshots) unknown(o distribute.Owner) {
	if m.swept[homeOf(o)] {
		m.set(idOf(o), newKnown(""))
		return
	}
	delete(m.rings, idOf(o))
}

// ForgetRing drops a ring that is gone. A ring created again under its name
// has another UID, and no snapshot but those the operator writes for it.
func (m *Snapshots) ForgetRing(kind, home, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.rings, ringID{kind: kind, home: home, name: name})
}
