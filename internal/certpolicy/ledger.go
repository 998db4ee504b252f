package certpolicy

import (
	"sync"
	"time"
)

// Ledger remembers, for each public key, the notBefore of the earliest
// certificate seen carrying it, for as long as some holder (a Certificate or
// a Secret) carries it. A key reused across renewals is thereby dated by its
// first certificate, not its current one. It lives in memory only: after a
// restart it learns again from the certificates in use. Safe for concurrent
// use.
type Ledger struct {
	mu      sync.Mutex
	keys    map[string]*ledgerEntry
	holders map[string]string // holder -> key id
}

type ledgerEntry struct {
	since   time.Time
	holders int
}

// Observe records that holder now carries c's key and returns the earliest
// notBefore seen for that key.
func (l *Ledger) Observe(holder string, c Certificate) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keys == nil {
		l.keys, l.holders = map[string]*ledgerEntry{}, map[string]string{}
	}
	if old, ok := l.holders[holder]; ok && old != c.KeyID {
		l.release(holder)
	}
	e := l.keys[c.KeyID]
	if e == nil {
		e = &ledgerEntry{since: c.NotBefore}
		l.keys[c.KeyID] = e
	}
	if _, ok := l.holders[holder]; !ok {
		l.holders[holder] = c.KeyID
		e.holders++
	}
	if c.NotBefore.Before(e.since) {
		e.since = c.NotBefore
	}
	return e.since
}

// Release forgets that holder carries a key. A key that no holder carries
// any more is forgotten.
func (l *Ledger) Release(holder string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.release(holder)
}

func (l *Ledger) release(holder string) {
	id, ok := l.holders[holder]
	if !ok {
		return
	}
	delete(l.holders, holder)
	if e := l.keys[id]; e != nil {
		if e.holders--; e.holders <= 0 {
			delete(l.keys, id)
		}
	}
}

// Len is the number of keys remembered.
func (l *Ledger) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}
