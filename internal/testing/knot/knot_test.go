package knot_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/ringmaster-io/ringmaster/internal/testing/knot"
)

// TestServer starts knotd, reads the zone's HTTPS record with its other
// params, updates it with the TSIG key, restarts the server and finds the
// update kept, and leaves no process behind.
func TestServer(t *testing.T) {
	s := knot.Run(t, "example.test.", knot.Key{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	rrs, err := s.Query(ctx, "www.example.test.", dns.TypeHTTPS)
	if err != nil {
		t.Fatal(err)
	}
	if len(rrs) != 1 || !strings.Contains(rrs[0].String(), `alpn="h2,http/1.1" port="8443" ipv4hint="127.0.0.1"`) {
		t.Fatalf("HTTPS RRset = %v, want the default record with alpn, port and ipv4hint", rrs)
	}

	if err := s.Replace(ctx, "www", dns.TypeHTTPS, "www 60 IN HTTPS 2 svc.example.test. alpn=h3"); err != nil {
		t.Fatal(err)
	}
	pid := s.Pid()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatalf("knotd (pid %d) still running after Stop", pid)
	}
	if _, err := s.Query(ctx, "www.example.test.", dns.TypeHTTPS); err == nil {
		t.Fatal("a stopped server answered")
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	rrs, err = s.Query(ctx, "www.example.test.", dns.TypeHTTPS)
	if err != nil {
		t.Fatal(err)
	}
	if len(rrs) != 1 || rrs[0].(*dns.HTTPS).Priority != 2 || rrs[0].Header().Ttl != 60 {
		t.Fatalf("HTTPS RRset after restart = %v, want the update kept", rrs)
	}
}

// TestWrongKey: an update signed with another key is refused.
func TestWrongKey(t *testing.T) {
	s := knot.Run(t, "example.test.", knot.Key{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s.Key = knot.NewKey(s.Key.Name)
	if err := s.Replace(ctx, "www", dns.TypeHTTPS); err == nil {
		t.Fatal("update with a wrong secret accepted")
	}
	rrs, err := s.Query(ctx, "www.example.test.", dns.TypeHTTPS)
	if err != nil || len(rrs) != 1 {
		t.Fatalf("HTTPS RRset = %v, %v; want the record untouched", rrs, err)
	}
}
