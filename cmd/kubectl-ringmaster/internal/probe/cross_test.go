package probe_test

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/probe"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

// crossServer starts an HTTPS server on loopback with cfg.
func crossServer(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.TLS = cfg
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// agentServer starts a server whose config comes from a pkg/agent reading
// ring and the certificate leaf.
func agentServer(t *testing.T, ring []byte, leaf *testpki.Issued) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range map[string][]byte{keyring.FileName: ring, "tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	a, err := agent.New(agent.Options{Dir: dir, Require: agent.TicketKeys | agent.Certificate, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return crossServer(t, a.TLSConfig(&tls.Config{NextProtos: []string{"http/1.1"}}))
}

// TestCrossScope: a plain crypto/tls server sharing one ring across two
// names resumes a ticket of one at the other; the agent refuses it, and
// resumes it at the same name on another replica.
func TestCrossScope(t *testing.T) {
	ca, err := testpki.NewCA("cross")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(testpki.Leaf{DNSNames: []string{"a.test", "b.test"}})
	if err != nil {
		t.Fatal(err)
	}
	k, ring := oneKeyRing(t)
	plain := &tls.Config{Certificates: []tls.Certificate{leaf.TLS}}
	plain.SetSessionTicketKeys([][32]byte{k.Secret})
	plainAddr := crossServer(t, plain)
	agent1, agent2 := agentServer(t, ring, leaf), agentServer(t, ring, leaf)

	for _, tc := range []struct {
		name     string
		from, to probe.Target
		outcome  string
		verdict  string
	}{
		{"plain crypto/tls, another name", probe.Target{Addr: plainAddr, ServerName: "a.test"}, probe.Target{Addr: plainAddr, ServerName: "b.test"},
			probe.CrossResumed, "resumed a ticket that " + plainAddr + " (server name a.test) issued (TLS 1.3, TLS 1.2): the two share a ticket scope"},
		{"agent, another name", probe.Target{Addr: agent1, ServerName: "a.test"}, probe.Target{Addr: agent1, ServerName: "b.test"},
			probe.CrossRefused, "refused every ticket that " + agent1 + " (server name a.test) issued and resumed itself (TLS 1.3, TLS 1.2)"},
		{"agent, same name, another replica", probe.Target{Addr: agent1, ServerName: "a.test"}, probe.Target{Addr: agent2, ServerName: "a.test"},
			probe.CrossResumed, "share a ticket scope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := probe.CrossScope(context.Background(), probe.CrossOptions{
				From: tc.from, To: tc.to, RootCAs: ca.Pool(), Offers: 3, Timeout: 10 * time.Second, TicketWait: 5 * time.Second,
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Versions) != 2 {
				t.Fatalf("versions %+v, want TLS 1.3 and 1.2", res.Versions)
			}
			for _, v := range res.Versions {
				wantCross := map[string]int{probe.CrossResumed: 3, probe.CrossRefused: 0}[tc.outcome]
				if v.Outcome != tc.outcome || v.Control.Resumed != 3 || v.Cross.Resumed != wantCross || v.Cross.Full != 3-wantCross || v.Cross.Failed+v.Control.Failed != 0 {
					t.Errorf("%s: %+v; want %s, control 3 of 3 resumed, cross %d of 3", v.Version, v, tc.outcome, wantCross)
				}
			}
			if res.Crossed != (tc.outcome == probe.CrossResumed) || !strings.Contains(res.Verdict, tc.verdict) {
				t.Errorf("crossed %v, verdict %q; want it to say %q", res.Crossed, res.Verdict, tc.verdict)
			}
		})
	}
}

// oneKeyRing is a ring of one key, active for the hour, and its encoding
// as the agent reads it.
func oneKeyRing(t *testing.T) (keyring.Key, []byte) {
	t.Helper()
	now := time.Now()
	k := keyring.NewKey(keyring.Secret(newKey(t)))
	k.ActiveFrom, k.RetireAt, k.ExpiresAt = now.Add(-time.Hour), now.Add(time.Hour), now.Add(2*time.Hour)
	ring, err := keyring.Encode(keyring.Ring{Name: "shop/web", Epoch: 1, IssuedAt: now, Keys: []keyring.Key{k}})
	if err != nil {
		t.Fatal(err)
	}
	return k, ring
}

func TestCrossScopeNoTicket(t *testing.T) {
	addrs, ca := servers(t, 1, nil, true)
	res, err := probe.CrossScope(context.Background(), probe.CrossOptions{
		From: probe.Target{Addr: addrs[0], ServerName: "localhost"}, To: probe.Target{Addr: addrs[0], ServerName: "other.test"},
		RootCAs: ca.Pool(), Offers: 2, Timeout: 10 * time.Second, TicketWait: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Crossed || len(res.Versions) != 2 || res.Versions[0].Outcome != probe.CrossNoTicket || !strings.Contains(res.Verdict, "no ticket issued under TLS 1.3, TLS 1.2") {
		t.Errorf("%+v", res)
	}
}
