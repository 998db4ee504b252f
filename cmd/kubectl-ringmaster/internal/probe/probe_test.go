package probe_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/probe"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
)

// servers starts n HTTPS servers on loopback. keys gives each server's
// ticket keys: nil keeps crypto/tls's own, per server.
func servers(t *testing.T, n int, keys func(i int) [][32]byte, disableTickets bool) (addrs []string, ca *testpki.CA) {
	t.Helper()
	ca, err := testpki.NewCA("probe")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Localhost()
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		srv := httptest.NewUnstartedServer(http.NotFoundHandler())
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{leaf.TLS}, SessionTicketsDisabled: disableTickets}
		if keys != nil {
			srv.TLS.SetSessionTicketKeys(keys(i))
		}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		addrs = append(addrs, srv.Listener.Addr().String())
	}
	return addrs, ca
}

func newKey(t *testing.T) [32]byte {
	var k [32]byte
	if _, err := rand.Read(k[:]); err != nil {
		t.Fatal(err)
	}
	return k
}

func balancer(t *testing.T, backends []string) string {
	t.Helper()
	lb, err := fleet.StartBalancer(backends)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lb.Close() })
	return lb.Addr()
}

func TestProbe(t *testing.T) {
	shared := newKey(t)
	for _, tc := range []struct {
		name    string
		keys    func(t *testing.T) func(int) [][32]byte
		version uint16
		// With round robin over 4 servers, one-after-the-other connections
		// reach them in turn: 20 connections reach each server 5 times.
		sessions, oneTicket int
		shared              bool
		keySets             int
		verdict             string
	}{
		{
			name:     "shared keys, TLS 1.3",
			keys:     func(*testing.T) func(int) [][32]byte { return func(int) [][32]byte { return [][32]byte{shared} } },
			version:  tls.VersionTLS13,
			sessions: 19, oneTicket: 20, shared: true, keySets: 1,
			verdict: "share their ticket keys: one connection's ticket resumed on all 20 new connections",
		},
		{
			name:     "shared keys, TLS 1.2",
			keys:     func(*testing.T) func(int) [][32]byte { return func(int) [][32]byte { return [][32]byte{shared} } },
			version:  tls.VersionTLS12,
			sessions: 19, oneTicket: 20, shared: true, keySets: 1,
			verdict: "share their ticket keys",
		},
		{
			name: "keys of each server's own, TLS 1.3",
			keys: func(t *testing.T) func(int) [][32]byte {
				own := [][32]byte{newKey(t), newKey(t), newKey(t), newKey(t)}
				return func(i int) [][32]byte { return [][32]byte{own[i]} }
			},
			version:  tls.VersionTLS13,
			sessions: 0, oneTicket: 5, keySets: 4,
			verdict: "do not share their ticket keys: one connection's ticket resumed on 5 of 20 new connections (25%), as if about 4 groups",
		},
		{
			name:     "crypto/tls's default keys, TLS 1.2",
			keys:     func(*testing.T) func(int) [][32]byte { return nil },
			version:  tls.VersionTLS12,
			sessions: 0, oneTicket: 5, keySets: 4,
			verdict: "do not share their ticket keys",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addrs, ca := servers(t, 4, tc.keys(t), false)
			addr := balancer(t, addrs)
			res, err := probe.Probe(context.Background(), probe.Options{
				Addr: addr, ServerName: "localhost", RootCAs: ca.Pool(), Version: tc.version,
				Connections: 20, Timeout: 10 * time.Second, TicketWait: 5 * time.Second,
			})
			if err != nil {
				t.Fatal(err)
			}
			if !res.TicketsIssued || res.Version != tls.VersionName(tc.version) {
				t.Errorf("tickets issued %v, version %q", res.TicketsIssued, res.Version)
			}
			s, o := res.Sessions, res.OneTicket
			if s.Connections != 20 || s.Failed != 0 || s.Attempts != 19 || s.Resumed != tc.sessions || s.Full != 20-tc.sessions {
				t.Errorf("sessions %+v, want %d of 19 resumed", s, tc.sessions)
			}
			if o.Connections != 20 || o.Failed != 0 || o.Attempts != 20 || o.Resumed != tc.oneTicket || o.Full != 20-tc.oneTicket {
				t.Errorf("one ticket %+v, want %d of 20 resumed", o, tc.oneTicket)
			}
			if res.Shared != tc.shared || res.KeySets != tc.keySets || !strings.Contains(res.Verdict, tc.verdict) {
				t.Errorf("shared %v, key sets %d, verdict %q; want %v, %d, %q", res.Shared, res.KeySets, res.Verdict, tc.shared, tc.keySets, tc.verdict)
			}
		})
	}
}

func TestProbeNoTickets(t *testing.T) {
	addrs, ca := servers(t, 2, nil, true)
	res, err := probe.Probe(context.Background(), probe.Options{
		Addr: balancer(t, addrs), ServerName: "localhost", RootCAs: ca.Pool(),
		Connections: 4, Timeout: 10 * time.Second, TicketWait: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.TicketsIssued || res.Shared || res.Sessions.Resumed != 0 || res.Sessions.Full != 4 || res.OneTicket.Connections != 0 {
		t.Errorf("%+v", res)
	}
	if !strings.Contains(res.Verdict, "issued no session ticket") {
		t.Errorf("verdict %q", res.Verdict)
	}
}

func TestProbeFailures(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	_, err = probe.Probe(context.Background(), probe.Options{Addr: addr, Connections: 2, Timeout: time.Second, TicketWait: time.Second})
	if err == nil || !strings.Contains(err.Error(), "every connection to "+addr+" failed") {
		t.Errorf("error %v", err)
	}
	if _, err := probe.Probe(context.Background(), probe.Options{Addr: "no-port", Connections: 2}); err == nil || !strings.Contains(err.Error(), "want HOST:PORT") {
		t.Errorf("error %v", err)
	}

	// A certificate that does not verify fails every connection, saying
	// why.
	addrs, _ := servers(t, 1, nil, false)
	_, err = probe.Probe(context.Background(), probe.Options{Addr: addrs[0], ServerName: "localhost", Connections: 2, Timeout: 5 * time.Second, TicketWait: time.Second})
	if err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("error %v", err)
	}
}
