package fleet

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// Balancer is a round-robin TCP load balancer on loopback: each accepted
// connection goes to the next backend in turn, bytes copied both ways
// untouched, as a layer-4 load balancer in front of a fleet does. TLS ends at
// the replicas, so a client cannot tell which one it reached except by what
// it says.
type Balancer struct {
	ln       net.Listener
	backends []string
	next     atomic.Uint64
	wg       sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// StartBalancer listens on a free loopback port and forwards to backends.
func StartBalancer(backends []string) (*Balancer, error) {
	return ListenBalancer("127.0.0.1:0", backends)
}

// ListenBalancer listens on addr, a loopback address, and forwards to
// backends: a balancer closed and started again on its address is a
// service that went down and came back.
func ListenBalancer(addr string, backends []string) (*Balancer, error) {
	if len(backends) == 0 {
		return nil, errors.New("balancer: no backends")
	}
	if !isLoopback(addr) {
		return nil, fmt.Errorf("balancer: %s is not a loopback address", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	b := &Balancer{ln: ln, backends: backends, conns: map[net.Conn]struct{}{}}
	b.wg.Go(b.serve)
	return b, nil
}

// Addr is the address clients connect to.
func (b *Balancer) Addr() string { return b.ln.Addr().String() }

func (b *Balancer) serve() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return // closed
		}
		backend := b.backends[(b.next.Add(1)-1)%uint64(len(b.backends))]
		if !b.track(c) {
			c.Close()
			return
		}
		b.wg.Go(func() { b.forward(c, backend) })
	}
}

func (b *Balancer) forward(client net.Conn, backend string) {
	defer b.untrack(client)
	server, err := net.Dial("tcp", backend)
	if err != nil {
		return // the client sees its connection closed, as behind a real LB
	}
	if !b.track(server) {
		server.Close()
		return
	}
	defer b.untrack(server)
	done := make(chan struct{})
	go func() {
		defer close(done)
		pipe(server, client)
	}()
	pipe(client, server)
	<-done
}

// pipe copies src to dst until src ends, then passes the end on as a
// half-close, so that each direction ends on its own.
func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	} else {
		_ = dst.Close()
	}
}

func (b *Balancer) track(c net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.conns[c] = struct{}{}
	return true
}

func (b *Balancer) untrack(c net.Conn) {
	c.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.conns, c)
}

// Close stops accepting, cuts every open connection and waits for its
// goroutines.
func (b *Balancer) Close() error {
	err := b.ln.Close()
	b.mu.Lock()
	b.closed = true
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
	return err
}
