package agent_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

// scopeSetup is one ring's keys and a certificate naming every server
// name the scope tests use, so that the client itself never stands in the
// way of offering a ticket to another name: what is tested is the server.
type scopeSetup struct {
	ca   *testpki.CA
	cert tls.Certificate
	ring []byte
	crt  []byte
	key  []byte
}

func newScopeSetup(t *testing.T) *scopeSetup {
	t.Helper()
	ca, err := testpki.NewCA("ringmaster scope CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(testpki.Leaf{DNSNames: []string{"a.test", "b.test", "x.shop.test", "y.shop.test"}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	k := newKey("scope", now.Add(-time.Hour), now.Add(time.Hour), now.Add(3*time.Hour))
	return &scopeSetup{ca: ca, cert: leaf.TLS, ring: encodeRing(t, 1, k), crt: leaf.CertPEM, key: leaf.KeyPEM}
}

// replica is one agent on the ring, as a pod of the fleet runs it, with
// a server on loopback.
func (s *scopeSetup) replica(t *testing.T, opts agent.Options, base *tls.Config) (*agent.Agent, string) {
	t.Helper()
	v := newVolume(t)
	v.write(s.ring, s.crt, s.key)
	opts.Dir, opts.Require = v.dir, agent.TicketKeys|agent.Certificate
	a, err := agent.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return a, serve(t, a.TLSConfig(base))
}

// oneSession is a tls.ClientSessionCache holding one session for every
// server name, as an attacker, or a cache keyed by address, offers it.
type oneSession struct {
	mu sync.Mutex
	cs *tls.ClientSessionState
}

func (c *oneSession) Get(string) (*tls.ClientSessionState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cs, c.cs != nil
}

func (c *oneSession) Put(_ string, cs *tls.ClientSessionState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cs == nil && cs != nil {
		c.cs = cs
	}
}

// client offers, at serverName, the one session it received first.
func (s *scopeSetup) client(version uint16, serverName string, cache *oneSession) *tls.Config {
	return &tls.Config{RootCAs: s.ca.Pool(), ServerName: serverName, MinVersion: version, MaxVersion: version, ClientSessionCache: cache}
}

var versions = []uint16{tls.VersionTLS13, tls.VersionTLS12}

// TestTicketScope: a ticket resumes where it was issued (its ring and
// server name) on any replica, and nowhere else: at another name on the
// same ring and the same agent, the handshake is a full one, and counted.
func TestTicketScope(t *testing.T) {
	s := newScopeSetup(t)
	for _, v := range versions {
		t.Run(tls.VersionName(v), func(t *testing.T) {
			a1, replica1 := s.replica(t, agent.Options{}, nil)
			_, replica2 := s.replica(t, agent.Options{}, nil)
			cache := &oneSession{}
			if handshake(t, replica1, s.client(v, "a.test", cache)).DidResume {
				t.Fatal("first handshake resumed")
			}
			for _, c := range []struct {
				name, addr, serverName string
				resumed                bool
			}{
				{"same name, another replica", replica2, "a.test", true},
				{"same name, same replica", replica1, "a.test", true},
				{"same name, other case and a trailing dot", replica1, "A.Test.", true},
				{"another name, same replica", replica1, "b.test", false},
				{"another name, another replica", replica2, "b.test", false},
				{"no name", replica1, "", false},
			} {
				cfg := s.client(v, c.serverName, cache)
				if c.serverName == "" {
					cfg.InsecureSkipVerify = true //nolint:gosec // no name to verify; the server's choice is tested
				}
				cs := handshake(t, c.addr, cfg) // fails the test if the handshake fails
				if cs.DidResume != c.resumed {
					t.Errorf("%s: resumed %v, want %v", c.name, cs.DidResume, c.resumed)
				}
			}
			m := metrics(t, a1)
			if got := m["ringmaster_agent_ticket_scope_refusals_total{reason=other_scope}"]; got != 2 {
				t.Errorf("replica 1 counted %v tickets of another scope, want 2 (b.test, no name)", got)
			}
			if got := m["ringmaster_agent_ticket_scope_refusals_total{reason=unscoped}"]; got != 0 {
				t.Errorf("replica 1 counted %v unscoped tickets, want 0", got)
			}
		})
	}
}

// TestTicketScopeOptions: named scopes widen a scope to several names,
// TicketScopeClientAuth narrows it, UnscopedTickets turns it off, and
// tickets of servers that bind no scope are refused and counted.
func TestTicketScopeOptions(t *testing.T) {
	s := newScopeSetup(t)
	shop := map[string][]string{"shop": {"a.test", "*.shop.test"}}
	for _, v := range versions {
		t.Run(tls.VersionName(v), func(t *testing.T) {
			t.Run("named scope", func(t *testing.T) {
				_, addr := s.replica(t, agent.Options{TicketScopes: shop}, nil)
				cache := &oneSession{}
				handshake(t, addr, s.client(v, "x.shop.test", cache))
				for name, want := range map[string]bool{"a.test": true, "y.shop.test": true, "b.test": false} {
					if got := handshake(t, addr, s.client(v, name, cache)).DidResume; got != want {
						t.Errorf("ticket of x.shop.test at %s: resumed %v, want %v", name, got, want)
					}
				}
			})
			t.Run("unscoped", func(t *testing.T) {
				_, addr := s.replica(t, agent.Options{UnscopedTickets: true}, nil)
				cache := &oneSession{}
				handshake(t, addr, s.client(v, "a.test", cache))
				if !handshake(t, addr, s.client(v, "b.test", cache)).DidResume {
					t.Error("UnscopedTickets: ticket of a.test did not resume at b.test")
				}
			})
			t.Run("ticket of a server that binds no scope", func(t *testing.T) {
				a, addr := s.replica(t, agent.Options{}, nil)
				plain := &tls.Config{Certificates: []tls.Certificate{s.cert}}
				plain.SetSessionTicketKeys([][32]byte{newKey("scope", time.Time{}, time.Time{}, time.Time{}).Secret})
				cache := &oneSession{}
				handshake(t, serve(t, plain), s.client(v, "a.test", cache))
				if handshake(t, addr, s.client(v, "a.test", cache)).DidResume {
					t.Error("a ticket without scope resumed")
				}
				if got := metrics(t, a)["ringmaster_agent_ticket_scope_refusals_total{reason=unscoped}"]; got != 1 {
					t.Errorf("counted %v unscoped tickets, want 1", got)
				}
			})
			// A listener that asks for no client certificate and one that
			// requests one, for the same name on one agent. crypto/tls
			// resumes the first's ticket at the second (the ticket holds no
			// certificate, which RequestClientCert allows); the narrowed
			// scope does not.
			for _, narrow := range []bool{false, true} {
				t.Run("client auth narrowing "+map[bool]string{false: "off", true: "on"}[narrow], func(t *testing.T) {
					a, open := s.replica(t, agent.Options{TicketScopeClientAuth: narrow}, nil)
					asking := serve(t, a.TLSConfig(&tls.Config{ClientAuth: tls.RequestClientCert}))
					cache := &oneSession{}
					handshake(t, open, s.client(v, "a.test", cache))
					if got := handshake(t, asking, s.client(v, "a.test", cache)).DidResume; got == narrow {
						t.Errorf("TicketScopeClientAuth %v: ticket of the open listener resumed at the asking one: %v", narrow, got)
					}
					if !handshake(t, open, s.client(v, "a.test", cache)).DidResume {
						t.Error("ticket did not resume at the listener that issued it")
					}
				})
			}
		})
	}
}

func TestTicketScopeOptionsInvalid(t *testing.T) {
	dir := newVolume(t)
	dir.write(newScopeSetup(t).ring, nil, nil)
	for name, opts := range map[string]agent.Options{
		"name in two scopes":    {TicketScopes: map[string][]string{"a": {"x.test"}, "b": {"X.test."}}},
		"scope without names":   {TicketScopes: map[string][]string{"a": nil}},
		"empty scope name":      {TicketScopes: map[string][]string{"": {"x.test"}}},
		"wildcard inside":       {TicketScopes: map[string][]string{"a": {"x.*.test"}}},
		"unscoped with scopes":  {UnscopedTickets: true, TicketScopes: map[string][]string{"a": {"x.test"}}},
		"unscoped, client auth": {UnscopedTickets: true, TicketScopeClientAuth: true},
	} {
		opts.Dir = dir.dir
		if _, err := agent.New(opts); err == nil || !strings.Contains(err.Error(), "Options.") {
			t.Errorf("%s: New = %v, want an error naming the option", name, err)
		}
	}
}

// TestGoResumptionChecks records what crypto/tls's server checks by
// itself when it resumes a ticket its keys decrypt: plain configs sharing
// one ticket key, no agent. docs/agent.md ("What crypto/tls checks")
// states these results; a Go release that changes one fails here.
func TestGoResumptionChecks(t *testing.T) {
	s := newScopeSetup(t)
	other, err := s.ca.Issue(testpki.Leaf{DNSNames: []string{"b.test"}})
	if err != nil {
		t.Fatal(err)
	}
	clientCA, err := testpki.NewCA("client CA")
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := testpki.NewCA("another client CA")
	if err != nil {
		t.Fatal(err)
	}
	clientCert, err := clientCA.Issue(testpki.Leaf{CommonName: "client", Client: true})
	if err != nil {
		t.Fatal(err)
	}
	key := newKey("go", time.Time{}, time.Time{}, time.Time{}).Secret
	server := func(cert tls.Certificate, edit func(*tls.Config)) string {
		c := &tls.Config{Certificates: []tls.Certificate{cert}}
		c.SetSessionTicketKeys([][32]byte{key})
		if edit != nil {
			edit(c)
		}
		return serve(t, c)
	}
	verifyWith := func(ca *testpki.CA, auth tls.ClientAuthType) func(*tls.Config) {
		return func(c *tls.Config) { c.ClientAuth, c.ClientCAs = auth, ca.Pool() }
	}
	var verifiedPeer, verifiedConn int
	var mu sync.Mutex
	rejectPeer := func(c *tls.Config) {
		c.ClientAuth = tls.RequireAnyClientCert
		c.VerifyPeerCertificate = func([][]byte, [][]*x509.Certificate) error {
			mu.Lock()
			verifiedPeer++
			mu.Unlock()
			return errors.New("this listener would refuse the client")
		}
		c.VerifyConnection = func(tls.ConnectionState) error {
			mu.Lock()
			verifiedConn++
			mu.Unlock()
			return nil
		}
	}
	for _, v := range versions {
		t.Run(tls.VersionName(v), func(t *testing.T) {
			for _, c := range []struct {
				name           string
				issuer, target string
				withClientCert bool
				resumed        bool
			}{
				// The server name is not checked: a ticket resumes at any name.
				{"another server name", server(s.cert, nil), "", false, true},
				// Nor is the certificate: the resumed handshake sends none,
				// and the client sees the issuer's.
				{"a server with another certificate", server(s.cert, nil), server(other.TLS, nil), false, true},
				// Client certificates are: the ticket must satisfy ClientAuth...
				{"no client cert, at a listener requiring one", server(s.cert, nil), server(s.cert, verifyWith(clientCA, tls.RequireAndVerifyClientCert)), true, false},
				{"a client cert, at a listener asking for none", server(s.cert, verifyWith(clientCA, tls.RequireAndVerifyClientCert)), server(s.cert, nil), true, false},
				// ...and its chain is verified again against ClientCAs...
				{"a client cert, at a listener trusting another CA", server(s.cert, verifyWith(clientCA, tls.RequireAndVerifyClientCert)), server(s.cert, verifyWith(otherCA, tls.RequireAndVerifyClientCert)), true, false},
				// ...but a ticket without one satisfies a listener that
				// only requests one...
				{"no client cert, at a listener requesting one", server(s.cert, nil), server(s.cert, verifyWith(clientCA, tls.VerifyClientCertIfGiven)), false, true},
				// ...and VerifyPeerCertificate is not run on resumption
				// (VerifyConnection is).
				{"a client cert, at a listener whose VerifyPeerCertificate refuses it", server(s.cert, verifyWith(clientCA, tls.RequireAnyClientCert)), server(s.cert, rejectPeer), true, true},
			} {
				cache := &oneSession{}
				cfg := s.client(v, "a.test", cache)
				if c.withClientCert {
					cfg.Certificates = []tls.Certificate{clientCert.TLS}
				}
				handshake(t, c.issuer, cfg)
				target := c.target
				if target == "" {
					target = c.issuer
					cfg = s.client(v, "b.test", cache)
				}
				if c.withClientCert {
					cfg.Certificates = []tls.Certificate{clientCert.TLS}
				}
				got, err := tryHandshake(target, cfg)
				switch {
				case err != nil && c.resumed:
					t.Errorf("%s: %v, want a resumption", c.name, err)
				case err == nil && got.DidResume != c.resumed:
					t.Errorf("%s: resumed %v, want %v", c.name, got.DidResume, c.resumed)
				case err == nil && got.DidResume && !got.PeerCertificates[0].Equal(s.cert.Leaf):
					t.Errorf("%s: on resumption the client saw %v, not the issuer's certificate", c.name, got.PeerCertificates[0].DNSNames)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if verifiedPeer != 0 || verifiedConn != 1 {
				t.Errorf("on resumption VerifyPeerCertificate ran %d times and VerifyConnection %d; want 0 and 1", verifiedPeer, verifiedConn)
			}
			verifiedPeer, verifiedConn = 0, 0
		})
	}
}

// tryHandshake is handshake returning the error: a full handshake that a
// listener refuses (no client certificate) is an expected outcome.
func tryHandshake(addr string, cfg *tls.Config) (tls.ConnectionState, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != nil {
		return tls.ConnectionState{}, err
	}
	return c.ConnectionState(), nil
}
