// Package tickets is a client session cache that tells a test when a
// session ticket arrives: over QUIC, and in TLS 1.3 generally, the ticket
// follows the handshake, and a second connection made before it arrives
// cannot resume.
package tickets

import "crypto/tls"

// Cache is an LRU client session cache whose Arrived channel receives once
// for each ticket stored (dropped when the test has not read the last).
type Cache struct {
	tls.ClientSessionCache
	Arrived chan struct{}
}

// NewCache is a Cache of capacity sessions.
func NewCache(capacity int) *Cache {
	return &Cache{ClientSessionCache: tls.NewLRUClientSessionCache(capacity), Arrived: make(chan struct{}, 1)}
}

// Put stores the session and signals a ticket.
func (c *Cache) Put(key string, cs *tls.ClientSessionState) {
	c.ClientSessionCache.Put(key, cs)
	if cs != nil {
		select {
		case c.Arrived <- struct{}{}:
		default:
		}
	}
}
