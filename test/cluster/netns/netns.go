// Package netns opens connections from inside a network namespace, without
// moving the calling process into it: the single-node cluster of
// hack/cluster lives in a network namespace of its own, and the harness, the
// API forwarder and the load clients reach it this way.
//
// A socket belongs to the network namespace of the thread that created it,
// for its whole life. Dial creates the socket on a locked OS thread switched
// into the namespace, and switches the thread back before unlocking it; a
// thread that cannot be switched back stays locked, and Go ends it with its
// goroutine.
package netns

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Dialer dials from inside the network namespace bound at Path, such as
// /run/netns/NAME.
type Dialer struct {
	Path string
}

// DialContext connects to addr on network from inside the namespace. It has
// the signature of net.Dialer's and http.Transport's DialContext.
func (d Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		conn, restored, err := d.dialLocked(ctx, network, addr)
		if restored {
			runtime.UnlockOSThread()
		}
		done <- result{conn, err}
	}()
	r := <-done
	return r.conn, r.err
}

// dialLocked runs on a locked thread; restored reports whether the thread is
// back in its own namespace.
func (d Dialer) dialLocked(ctx context.Context, network, addr string) (conn net.Conn, restored bool, err error) {
	own, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, true, err
	}
	defer own.Close()
	target, err := os.Open(d.Path)
	if err != nil {
		return nil, true, fmt.Errorf("network namespace: %w", err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, true, fmt.Errorf("enter network namespace %s: %w", d.Path, err)
	}
	var nd net.Dialer
	conn, err = nd.DialContext(ctx, network, addr)
	if serr := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); serr != nil {
		if conn != nil {
			conn.Close()
		}
		return nil, false, fmt.Errorf("leave network namespace %s: %w", d.Path, serr)
	}
	return conn, true, err
}
