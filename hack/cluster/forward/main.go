// Command forward lets host-side tools (kubectl, helm, the test harness)
// reach the single-node cluster's API server without any address of the
// cluster in the machine's own network namespace: it listens on loopback and
// opens each connection's other end from inside the cluster's network
// namespace. It prints the address it listens on, and copies bytes both ways
// untouched (TLS ends at kube-apiserver).
//
//	forward -netns /run/netns/ringmaster-node -to 10.240.0.2:6443 -listen 127.0.0.1:0
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ringmaster-io/ringmaster/test/cluster/netns"
)

func main() {
	ns := flag.String("netns", "", "the network namespace, e.g. /run/netns/ringmaster-node")
	to := flag.String("to", "", "address to reach inside it")
	listen := flag.String("listen", "127.0.0.1:0", "loopback address to listen on")
	flag.Parse()
	if err := run(*ns, *to, *listen); err != nil {
		fmt.Fprintln(os.Stderr, "forward:", err)
		os.Exit(1)
	}
}

func run(ns, to, listen string) error {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-listen %s: only a loopback address", listen)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	fmt.Printf("forwarding %s to %s in %s\n", ln.Addr(), to, ns)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	d := netns.Dialer{Path: ns}
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go forward(ctx, d, c, to)
	}
}

func forward(ctx context.Context, d netns.Dialer, c net.Conn, to string) {
	defer c.Close()
	dial, cancel := context.WithTimeout(ctx, 10*time.Second)
	up, err := d.DialContext(dial, "tcp", to)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "forward:", err)
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(up, c)
	go cp(c, up)
	select {
	case <-done:
		<-done
	case <-ctx.Done():
	}
}
