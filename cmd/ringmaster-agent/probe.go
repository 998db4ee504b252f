package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// keyNameSize is the size of a ticket's key name: the first 16 bytes of
// every ticket OpenSSL and BoringSSL issue (the layout RFC 5077 suggests),
// so of nginx's, HAProxy's and Envoy's, and the first 16 bytes of the
// 80-byte key each of them is given.
const keyNameSize = 16

// prober asks the server for a ticket and reads which key encrypted it:
// proof that the server encrypts with the key the sidecar made active, not
// only that it was told to.
type prober struct {
	addr, serverName string
}

// keyName returns the key name of a ticket the server issues to a new
// session: over TLS 1.2, where the ticket comes within the handshake, or
// over TLS 1.3 if the server refuses 1.2.
func (p *prober) keyName(ctx context.Context) ([]byte, error) {
	name, err := p.ticket(ctx, tls.VersionTLS12)
	if err == nil {
		return name, nil
	}
	if name, err13 := p.ticket(ctx, tls.VersionTLS13); err13 == nil {
		return name, nil
	}
	return nil, err
}

func (p *prober) ticket(ctx context.Context, version uint16) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cache := &firstSession{}
	d := tls.Dialer{Config: &tls.Config{
		ServerName: p.serverName,
		// The probe reads one thing, the clear key name at the front of the
		// ticket, and compares it with a name it derived itself; it sends
		// nothing. Whose certificate is presented does not matter to it.
		InsecureSkipVerify: true, //nolint:gosec // see above
		MinVersion:         version,
		MaxVersion:         version,
		ClientSessionCache: cache,
	}}
	c, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, fmt.Errorf("probe %s: %w", p.addr, err)
	}
	defer c.Close()
	if version == tls.VersionTLS13 {
		// A TLS 1.3 ticket follows the handshake; reading processes it.
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		var b [1]byte
		_, err := c.Read(b[:])
		if err != nil && !timeout(err) {
			return nil, fmt.Errorf("probe %s: %w", p.addr, err)
		}
	}
	cs := cache.get()
	if cs == nil {
		return nil, fmt.Errorf("probe %s: the server issued no session ticket", p.addr)
	}
	ticket, _, err := cs.ResumptionState()
	if err != nil {
		return nil, fmt.Errorf("probe %s: %w", p.addr, err)
	}
	if len(ticket) < keyNameSize {
		return nil, fmt.Errorf("probe %s: a ticket of %d bytes has no key name", p.addr, len(ticket))
	}
	return append([]byte(nil), ticket[:keyNameSize]...), nil
}

// timeout reports whether err is a deadline passing.
func timeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// firstSession is a session cache that keeps the first session it is given.
type firstSession struct {
	mu sync.Mutex
	cs *tls.ClientSessionState
}

func (c *firstSession) Get(string) (*tls.ClientSessionState, bool) { return nil, false }

func (c *firstSession) Put(_ string, cs *tls.ClientSessionState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cs == nil {
		c.cs = cs
	}
}

func (c *firstSession) get() *tls.ClientSessionState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cs
}
