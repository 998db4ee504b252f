// Package written is what the operator remembers of its own writes, so
// that a cache that has not caught up with them is not taken for the
// truth: the snapshots it listed or wrote (Snapshots), the statuses it
// wrote (Statuses), and what it adopted of shared entries (Shared). Each
// holds what is in flight or what the operator serves, never the whole
// cluster.
package written

import (
	"sync"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

// Shared is what one operator remembers of the shared entries its rings
// serve, from one reconcile to the next: the status of the version of each
// entry it last adopted, should the status write of that pass fail (how
// long the version took to arrive is known only then), and the newest
// version of each whose older versions it destroyed. It is safe for
// concurrent use; its zero value is empty.
type Shared struct {
	mu      sync.Mutex
	adopted map[string]v1alpha1.SharedRingStatus
	swept   map[string]int64
}

// Adopt remembers st, the status of a version of the entry at path this
// operator adopted.
func (m *Shared) Adopt(path string, st v1alpha1.SharedRingStatus) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.adopted == nil {
		m.adopted = map[string]v1alpha1.SharedRingStatus{}
	}
	m.adopted[path] = st
}

// Adopted is the status of the version of the entry at path this operator
// last adopted; nil when none.
func (m *Shared) Adopted(path string) *v1alpha1.SharedRingStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.adopted[path]
	if !ok {
		return nil
	}
	return &st
}

// Unswept reports whether the versions of the entry at path older than
// version may hold keys this operator has not yet destroyed.
func (m *Shared) Unswept(path string, version int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.swept[path] < version
}

// Swept remembers that the versions of the entry at path older than
// version were destroyed; an older version swept later changes nothing.
func (m *Shared) Swept(path string, version int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.swept == nil {
		m.swept = map[string]int64{}
	}
	m.swept[path] = max(m.swept[path], version)
}
