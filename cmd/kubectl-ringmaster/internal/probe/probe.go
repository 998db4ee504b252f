// Package probe measures, from the outside, whether the TLS servers behind
// one address (a Service, a load balancer) share their session ticket keys.
//
// It makes two runs of connections, one after the other:
//
//   - as a client with a session cache does: each connection presents the
//     ticket the previous one received. This is the resumption rate clients
//     see;
//   - with one ticket: the first connection's ticket presented on every new
//     connection. The balancer spreads them over the servers, and a server
//     resumes the ticket only if it holds the key that sealed it. If every
//     connection resumes, every server reached decrypts the others' tickets:
//     the fleet shares its ticket keys. If about 1 in K does, about K groups
//     of servers each hold keys of their own.
//
// It only handshakes: it sends no request, and waits after each handshake
// only until the server's ticket arrives (TLS 1.3 sends it after the
// handshake), or TicketWait passes.
package probe

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"time"
)

// Options configure a probe.
type Options struct {
	// Addr is host:port.
	Addr string
	// ServerName is the SNI and the name the certificate is verified
	// for; empty: Addr's host, unless an IP address.
	ServerName string
	// Version is the one TLS version offered (tls.VersionTLS12 or
	// tls.VersionTLS13); 0 offers every version Go supports.
	Version uint16
	// RootCAs verify the servers; nil: the system roots.
	RootCAs *x509.CertPool
	// Insecure skips verification: for a probe of resumption, not of
	// identity.
	Insecure bool
	// Connections is the number of connections of each run.
	Connections int
	// Timeout bounds each connection, dial and handshake.
	Timeout time.Duration
	// TicketWait bounds the wait for a ticket after a handshake.
	TicketWait time.Duration
}

// Run is what one run of connections saw.
type Run struct {
	Connections int `json:"connections"`
	// Resumed and Full count the handshakes that resumed a session and
	// those that did not; Failed the connections that failed.
	Resumed int `json:"resumed"`
	Full    int `json:"full"`
	Failed  int `json:"failed"`
	// Attempts are the handshakes that offered a ticket.
	Attempts int `json:"attempts"`
	// Errors are the distinct failures, with their counts.
	Errors map[string]int `json:"errors,omitempty"`
}

// Rate is the share of the handshakes offering a ticket that resumed.
func (r Run) Rate() float64 {
	if r.Attempts == 0 {
		return 0
	}
	return float64(r.Resumed) / float64(r.Attempts)
}

// Result is a probe's findings.
type Result struct {
	Addr       string `json:"address"`
	ServerName string `json:"serverName,omitempty"`
	// Version is the TLS version negotiated, as "TLS 1.3".
	Version string `json:"version"`
	// Sessions is the run as a client with a session cache; OneTicket the
	// run presenting the first connection's ticket on every connection.
	Sessions  Run `json:"sessions"`
	OneTicket Run `json:"oneTicket"`
	// TicketsIssued: the servers send session tickets.
	TicketsIssued bool `json:"ticketsIssued"`
	// Shared: every connection of OneTicket resumed.
	Shared bool `json:"shared"`
	// KeySets estimates how many groups of servers with keys of their own
	// stand behind the address (connections / resumed of OneTicket); 0
	// when unknown.
	KeySets int `json:"keySets,omitempty"`
	// Verdict says it in words.
	Verdict string `json:"verdict"`
}

// Probe connects to o.Addr as Options say and judges what it saw.
func Probe(ctx context.Context, o Options) (Result, error) {
	if o.Connections < 2 {
		return Result{}, errors.New("probe: at least 2 connections per run")
	}
	host, _, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return Result{}, fmt.Errorf("probe %q: want HOST:PORT: %w", o.Addr, err)
	}
	if o.ServerName == "" && net.ParseIP(host) == nil {
		o.ServerName = host
	}
	res := Result{Addr: o.Addr, ServerName: o.ServerName}

	sessions := &ticketCache{}
	first, run := o.run(ctx, sessions, o.Connections)
	res.Sessions = run
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if first == nil {
		if run.Failed == run.Connections {
			return res, fmt.Errorf("every connection to %s failed: %v", o.Addr, run.Errors)
		}
		res.Version = versionName(sessions.version)
		res.Verdict = fmt.Sprintf("%s issued no session ticket within %s of a handshake: clients cannot resume by ticket, and ticket keys play no part.", o.Addr, o.TicketWait)
		return res, nil
	}
	res.TicketsIssued = true
	res.Version = versionName(sessions.version)

	one := &ticketCache{session: first, keep: true}
	_, res.OneTicket = o.run(ctx, one, o.Connections)
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	res.Shared, res.KeySets, res.Verdict = judge(o.Addr, res.OneTicket)
	return res, nil
}

// judge reads the one-ticket run.
func judge(addr string, r Run) (shared bool, keySets int, verdict string) {
	pct := 100 * r.Rate()
	switch {
	case r.Attempts == 0:
		return false, 0, fmt.Sprintf("No connection to %s offered the ticket: nothing can be said of its ticket keys.", addr)
	case r.Resumed == r.Attempts:
		return true, 1, fmt.Sprintf("The servers behind %s share their ticket keys: one connection's ticket resumed on all %d new connections.", addr, r.Attempts)
	case r.Resumed == 0:
		return false, 0, fmt.Sprintf("None of %d connections resumed a ticket %s issued moments before: its servers accept no ticket, or each ticket only once.", r.Attempts, addr)
	}
	keySets = int(math.Round(float64(r.Attempts) / float64(r.Resumed)))
	if keySets <= 1 {
		return false, 1, fmt.Sprintf("Most servers behind %s share their ticket keys, not all: one connection's ticket resumed on %d of %d new connections (%.0f%%). The others lack its key: a rotation not delivered everywhere yet, or servers with keys of their own.",
			addr, r.Resumed, r.Attempts, pct)
	}
	return false, keySets, fmt.Sprintf("The servers behind %s do not share their ticket keys: one connection's ticket resumed on %d of %d new connections (%.0f%%), as if about %d groups of servers with keys of their own stood behind it. A client resumes only when it reaches a server of the group that issued its ticket.",
		addr, r.Resumed, r.Attempts, pct, keySets)
}

// run makes n connections one after the other with cache, and returns the
// first ticket received.
func (o Options) run(ctx context.Context, cache *ticketCache, n int) (*tls.ClientSessionState, Run) {
	var first *tls.ClientSessionState
	r := Run{Connections: n}
	for range n {
		if ctx.Err() != nil {
			break
		}
		offered := cache.held() != nil
		resumed, err := o.connect(ctx, cache)
		switch {
		case err != nil:
			r.Failed++
			if r.Errors == nil {
				r.Errors = map[string]int{}
			}
			r.Errors[err.Error()]++
			continue
		case resumed:
			r.Resumed++
		default:
			r.Full++
		}
		if offered {
			r.Attempts++
		}
		if first == nil {
			first = cache.held()
		}
	}
	return first, r
}

// connect makes one connection: a handshake, then the wait for the
// server's ticket.
func (o Options) connect(ctx context.Context, cache *ticketCache) (resumed bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	cfg := &tls.Config{
		ServerName: o.ServerName, RootCAs: o.RootCAs, InsecureSkipVerify: o.Insecure, //nolint:gosec // --insecure, asked for
		MinVersion: o.Version, MaxVersion: o.Version, ClientSessionCache: cache,
	}
	if o.Version == 0 {
		cfg.MinVersion = tls.VersionTLS12
	}
	d := tls.Dialer{NetDialer: &net.Dialer{}, Config: cfg}
	nc, err := d.DialContext(ctx, "tcp", o.Addr)
	if err != nil {
		return false, err
	}
	conn := nc.(*tls.Conn)
	defer conn.Close()
	st := conn.ConnectionState()
	cache.setVersion(st.Version)
	cache.awaitTicket(conn, o.TicketWait)
	return st.DidResume, nil
}

// ticketCache is a tls.ClientSessionCache of one session, for every server
// name. It tells when a ticket arrives, so that a connection is closed as
// soon as its ticket is in. With keep set, the session it holds is never
// replaced: every connection presents the same ticket.
type ticketCache struct {
	keep bool

	mu      sync.Mutex
	session *tls.ClientSessionState
	version uint16
	// arrived, when set, is closed by the next ticket.
	arrived chan struct{}
}

// Get implements tls.ClientSessionCache.
func (c *ticketCache) Get(string) (*tls.ClientSessionState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.session, c.session != nil
}

// Put implements tls.ClientSessionCache. crypto/tls puts nil to drop a
// session it found unusable.
func (c *ticketCache) Put(_ string, cs *tls.ClientSessionState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cs == nil {
		if !c.keep {
			c.session = nil
		}
		return
	}
	if !c.keep || c.session == nil {
		c.session = cs
	}
	if c.arrived != nil {
		close(c.arrived)
		c.arrived = nil
	}
}

func (c *ticketCache) held() *tls.ClientSessionState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.session
}

func (c *ticketCache) setVersion(v uint16) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.version = v
}

// awaitTicket waits until the connection's ticket is in, or wait passes.
// TLS 1.2 sends it within the handshake. TLS 1.3 sends it after, and
// crypto/tls takes it in when the connection is read, so a reader runs until
// it is in. A cache that keeps its session needs no new ticket, and neither
// does a resumed connection: the session it offered stays in the cache for
// the next one, and a server need not send a new ticket on resumption
// (HAProxy with tls-ticket-keys sends none), where waiting would cost wait
// per connection.
func (c *ticketCache) awaitTicket(conn *tls.Conn, wait time.Duration) {
	st := conn.ConnectionState()
	if c.keep || st.Version != tls.VersionTLS13 || st.DidResume {
		return
	}
	arrived := make(chan struct{})
	c.mu.Lock()
	c.arrived = arrived
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.arrived = nil
		c.mu.Unlock()
	}()

	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 512)
		for {
			if _, err := conn.Read(buf); err != nil {
				return
			}
		}
	}()
	timer := time.NewTimer(wait)
	select {
	case <-arrived:
	case <-timer.C:
	case <-done:
	}
	timer.Stop()
	_ = conn.SetReadDeadline(time.Now()) // ends the reader
	<-done
}

func versionName(v uint16) string {
	if v == 0 {
		return ""
	}
	return tls.VersionName(v)
}
