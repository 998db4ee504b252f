// Package blackhole is test support: a loopback listener that accepts
// connections and never answers, as a peer behind a dropped route, or a
// process that hangs, looks to its client. It stands in for a silent pod's
// status port and for an unreachable Vault.
package blackhole

import (
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
)

// TB is what Listen needs of a test: testing.TB, or Ginkgo's GinkgoT().
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// Listener accepts on loopback and writes nothing back. Each connection
// stays open until its client hangs up or the test ends.
type Listener struct {
	// Addr is the listener's host:port.
	Addr string

	accepted, open, maxOpen atomic.Int64
}

// Listen starts a Listener on 127.0.0.1. The test's cleanup closes it and
// every connection it holds, and waits for its goroutines.
func Listen(t TB) *Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen on loopback: %v", err)
	}
	l := &Listener{Addr: ln.Addr().String()}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]bool{}
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.accepted.Add(1)
			n := l.open.Add(1)
			for m := l.maxOpen.Load(); n > m && !l.maxOpen.CompareAndSwap(m, n); m = l.maxOpen.Load() {
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Go(func() {
				_, _ = io.Copy(io.Discard, c) // until the client hangs up
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
				_ = c.Close()
				l.open.Add(-1)
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l
}

// Port is the port of Addr.
func (l *Listener) Port() int32 {
	_, p, _ := net.SplitHostPort(l.Addr)
	n, _ := strconv.Atoi(p)
	return int32(n)
}

// Accepted counts the connections accepted so far.
func (l *Listener) Accepted() int64 { return l.accepted.Load() }

// Open counts the connections open now.
func (l *Listener) Open() int64 { return l.open.Load() }

// MaxOpen is the most connections that were open at once.
func (l *Listener) MaxOpen() int64 { return l.maxOpen.Load() }
