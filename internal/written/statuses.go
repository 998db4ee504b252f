package written

import (
	"encoding/json"
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Statuses holds the status the operator last wrote of each ring until
// the cache shows it. A reconcile started by the watch events of the
// operator's own writes often reads the ring from a cache that has not yet
// seen the status just written: it would plan from the status before (an
// epoch behind, a request not yet echoed), compute the written status
// again with new transition times, and have its apply refused for the
// stale resourceVersion. Starting from the written status instead, it
// finds nothing to write. Only the operator writes a ring's status, so a
// cached status other than the one written is one the cache has not caught
// up with. An entry lives from a write until the cache shows it (the
// cache's update event ends it: Shown), or the ring is gone: what it holds
// grows with the rings in flight, not with all of them.
//
// It is the one rule for the written statuses of every kind of ring: a
// reconcile starts from Base, and a status applied is recorded by Wrote.
// A write the API server refused for a stale resourceVersion is not
// recorded: the next reconcile plans again from what the cache shows.
type Statuses[S any] struct {
	mu      sync.Mutex
	written map[types.NamespacedName]writtenStatus[S]
}

type writtenStatus[S any] struct {
	uid    types.UID
	status S
}

// Base is the status a reconcile of obj starts from: the one last written,
// while the cache's (cached) differs from it; else the cache's.
func (m *Statuses[S]) Base(obj client.Object, cached S) S {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := client.ObjectKeyFromObject(obj)
	w, ok := m.written[key]
	switch {
	case !ok:
		return cached
	case w.shown(obj, cached):
		delete(m.written, key)
		return cached
	}
	return w.status
}

// shown reports whether the cache's copy of obj, with status cached, ends
// the entry: it shows the status written, or is another ring of the name.
func (w writtenStatus[S]) shown(obj client.Object, cached S) bool {
	return w.uid != obj.GetUID() || !statusChanged(w.status, cached)
}

// Wrote records a status written of obj, as the API server stores it:
// through JSON, which keeps times to the second. A status it cannot
// record so is forgotten.
func (m *Statuses[S]) Wrote(obj client.Object, status S) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := client.ObjectKeyFromObject(obj)
	var stored S
	b, err := json.Marshal(status)
	if err == nil {
		err = json.Unmarshal(b, &stored)
	}
	if err != nil {
		delete(m.written, key)
		return
	}
	if m.written == nil {
		m.written = map[types.NamespacedName]writtenStatus[S]{}
	}
	m.written[key] = writtenStatus[S]{uid: obj.GetUID(), status: stored}
}

// Shown drops obj's entry once the cache shows the status written
// (cached), or shows another ring of the name.
func (m *Statuses[S]) Shown(obj client.Object, cached S) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := client.ObjectKeyFromObject(obj)
	if w, ok := m.written[key]; ok && w.shown(obj, cached) {
		delete(m.written, key)
	}
}

// Forget drops a ring that is gone.
func (m *Statuses[S]) Forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.written, key)
}

// statusChanged reports whether two statuses differ, as a status write
// compares them.
func statusChanged[S any](old, next S) bool { return !equality.Semantic.DeepEqual(old, next) }
