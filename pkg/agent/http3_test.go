package agent_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/testing/tickets"
	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

// serveH3 runs an HTTP/3 server on loopback UDP with cfg, as an
// application hands its config to quic-go's http3.Server; quicConf nil
// is http3's default (which allows 0-RTT).
func serveH3(t *testing.T, cfg *tls.Config, quicConf *quic.Config) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http3.Server{TLSConfig: cfg, QUICConfig: quicConf, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s", pc.LocalAddr())
	})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(pc)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		_ = pc.Close()
		<-done
	})
	return pc.LocalAddr().String()
}

// h3Client is an HTTP/3 client whose TLS session cache outlives its
// connections: each get is a new QUIC connection, as a client's reconnect.
type h3Client struct {
	tls   *tls.Config
	cache *tickets.Cache
}

func newH3Client(p *pki) *h3Client {
	cache := tickets.NewCache(4)
	cfg := p.client(tls.VersionTLS13)
	cfg.ClientSessionCache = cache
	return &h3Client{tls: cfg, cache: cache}
}

// get makes one request on a new connection to addr and returns the
// connection's state once the server's ticket is in. method
// http3.MethodGet0RTT sends the request as early data when the session
// allows it.
func (c *h3Client) get(t *testing.T, addr, method string) quic.ConnectionState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var conn *quic.Conn
	tr := &http3.Transport{TLSClientConfig: c.tls, Dial: func(ctx context.Context, a string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
		cn, err := quic.DialAddrEarly(ctx, a, tc, qc)
		conn = cn
		return cn, err
	}}
	defer tr.Close()
	select { // a ticket left over from the connection before
	case <-c.cache.Arrived:
	default:
	}
	req, err := http.NewRequestWithContext(ctx, method, "https://"+addr+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("HTTP/3 GET %s: %v", addr, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || len(body) == 0 {
		t.Fatalf("HTTP/3 GET %s: %d %q, %v", addr, resp.StatusCode, body, err)
	}
	select {
	case <-c.cache.Arrived:
	case <-time.After(5 * time.Second):
		t.Fatalf("no session ticket from %s", addr)
	}
	return conn.ConnectionState()
}

// TestHTTP3Fleet runs three agent-backed http3.Servers on one ring through
// two rotations, and three with per-replica keys (crypto/tls's own, the
// default), and reconnects a client round robin over each fleet: every
// reconnect lands on another replica than the one that issued its ticket.
// On the ring every one resumes, before, across and after each rotation;
// with per-replica keys none does.
func TestHTTP3Fleet(t *testing.T) {
	const replicas, rotations, perEpoch = 3, 2, 4
	p := newPKI(t)
	cert := p.valid()
	t0 := time.Now().Truncate(time.Second)
	h := time.Hour
	keys := make([]keyring.Key, rotations+3) // keys[e] is active at epoch e
	for e := 1; e < len(keys); e++ {
		from := t0.Add(time.Duration(e-1) * h)
		keys[e] = newKey(fmt.Sprintf("h3-k%d", e), from, from.Add(h), from.Add(2*h))
	}
	ringAt := func(e int) []byte { // staged, active, decrypt-only
		held := []keyring.Key{keys[e+1], keys[e]}
		if e > 1 {
			held = append(held, keys[e-1])
		}
		return encodeRing(t, int64(e), held...)
	}
	clock := newFakeClock(t0.Add(time.Minute))
	vols := make([]*volume, replicas)
	agents := make([]*agent.Agent, replicas)
	ring := make([]string, replicas)
	own := make([]string, replicas)
	for i := range replicas {
		vols[i] = newVolume(t)
		vols[i].write(ringAt(1), cert.crt, cert.key)
		a, err := agent.New(agent.Options{Dir: vols[i].dir, Require: agent.TicketKeys | agent.Certificate, Clock: clock, ResyncPeriod: time.Hour, Debounce: -1})
		if err != nil {
			t.Fatal(err)
		}
		start(t, a)
		agents[i] = a
		// The wiring docs/agent.md gives for HTTP/3: the agent's config
		// handed to http3.Server as it is, and a QUICConfig without
		// Allow0RTT.
		ring[i] = serveH3(t, a.TLSConfig(nil), &quic.Config{})
		own[i] = serveH3(t, &tls.Config{Certificates: []tls.Certificate{cert.tlsCertificate(t)}}, &quic.Config{})
	}
	rotate := func(e int) { // to epoch e: delivered, then its key activates
		for _, v := range vols {
			v.write(ringAt(e), cert.crt, cert.key)
		}
		for i, a := range agents {
			eventually(t, fmt.Sprintf("replica %d at epoch %d", i, e), func() bool { return a.Status().Epoch == int64(e) })
		}
		clock.Set(keys[e].ActiveFrom.Add(time.Minute))
		for i, a := range agents {
			eventually(t, fmt.Sprintf("replica %d encrypting with key %d", i, e), func() bool { return a.Status().ActiveKeyID == keys[e].ID })
		}
	}

	results := map[string]int{}
	for _, fleet := range []struct {
		name   string
		addrs  []string
		rotate bool
	}{{"ring", ring, true}, {"per-replica keys", own, false}} {
		c := newH3Client(p)
		if c.get(t, fleet.addrs[0], http.MethodGet).TLS.DidResume {
			t.Fatalf("%s: the first connection resumed", fleet.name)
		}
		n := 1
		for e := 1; e <= rotations+1; e++ {
			if e > 1 && fleet.rotate {
				rotate(e)
			}
			for range perEpoch {
				if c.get(t, fleet.addrs[n%replicas], http.MethodGet).TLS.DidResume {
					results[fleet.name]++
				}
				n++
			}
		}
		t.Logf("HTTP/3, %s: %d of %d reconnects, each to another replica, resumed", fleet.name, results[fleet.name], n-1)
	}
	if want := (rotations + 1) * perEpoch; results["ring"] != want {
		t.Errorf("ring: %d of %d reconnects resumed, want all", results["ring"], want)
	}
	if results["per-replica keys"] != 0 {
		t.Errorf("per-replica keys: %d reconnects resumed on a replica that did not issue the ticket", results["per-replica keys"])
	}
	for i, a := range agents {
		if st := a.Status(); st.Epoch != rotations+1 {
			t.Errorf("replica %d ended at epoch %d, want %d", i, st.Epoch, rotations+1)
		}
	}
}

// TestHTTP3SetSessionTicketKeysAfterStart shows why an HTTP/3 server needs
// the agent's GetConfigForClient: http3.Server serves a clone of the
// config taken when it starts, so keys set on the config afterwards never
// reach it. A ticket sealed under the new key is not resumed by the
// running server, and is by one started after the keys were set.
func TestHTTP3SetSessionTicketKeysAfterStart(t *testing.T) {
	p := newPKI(t)
	cert := p.valid().tlsCertificate(t)
	oldKey, newKey := [32]byte{1}, [32]byte{2}
	issuer := &tls.Config{Certificates: []tls.Certificate{cert}}
	issuer.SetSessionTicketKeys([][32]byte{newKey})
	issuerAddr := serveH3(t, issuer, &quic.Config{})

	cfg := &tls.Config{Certificates: []tls.Certificate{cert}}
	cfg.SetSessionTicketKeys([][32]byte{oldKey})
	running := serveH3(t, cfg, &quic.Config{})
	newH3Client(p).get(t, running, http.MethodGet)       // it serves: it has taken its clone
	cfg.SetSessionTicketKeys([][32]byte{newKey, oldKey}) // a "rotation" after start
	startedAfter := serveH3(t, cfg, &quic.Config{})

	for _, c := range []struct {
		name, addr string
		resumed    bool
	}{{"the running server", running, false}, {"a server started after the keys were set", startedAfter, true}} {
		client := newH3Client(p)
		client.get(t, issuerAddr, http.MethodGet) // a ticket under the new key
		if got := client.get(t, c.addr, http.MethodGet).TLS.DidResume; got != c.resumed {
			t.Errorf("%s: resumed %v, want %v", c.name, got, c.resumed)
		}
	}
}

// TestHTTP3EarlyData: the agent's tickets allow no 0-RTT by default.
// Under the wiring docs/agent.md gives (a QUICConfig without Allow0RTT),
// a GET that may go as early data goes after the handshake, on a resumed
// connection. Under http3.Server's default QUIC config, which allows
// 0-RTT, the server tells clients they may send early data and the agent
// rejects it: the client's 0-RTT is rejected, and the agent logs once why.
// With Options.EarlyData and Allow0RTT, the GET goes as early data.
func TestHTTP3EarlyData(t *testing.T) {
	p := newPKI(t)
	cert := p.valid()
	now := time.Now()
	ring := encodeRing(t, 1, newKey("h3-0rtt", now.Add(-time.Hour), now.Add(time.Hour), now.Add(2*time.Hour)))
	for _, c := range []struct {
		name      string
		earlyData bool
		quic      *quic.Config
		used0RTT  bool
		warned    bool
	}{
		{"default, QUICConfig without Allow0RTT", false, &quic.Config{}, false, false},
		{"default, http3's default QUIC config", false, nil, false, true},
		{"EarlyData, Allow0RTT", true, &quic.Config{Allow0RTT: true}, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := newVolume(t)
			v.write(ring, cert.crt, cert.key)
			var logs logBuffer
			a, err := agent.New(agent.Options{Dir: v.dir, Require: agent.TicketKeys | agent.Certificate, EarlyData: c.earlyData, Logger: logs.logger()})
			if err != nil {
				t.Fatal(err)
			}
			addr := serveH3(t, a.TLSConfig(nil), c.quic)
			client := newH3Client(p)
			client.get(t, addr, http.MethodGet)
			var st quic.ConnectionState
			if c.warned {
				// quic-go's HTTP/3 client fails a request whose 0-RTT is
				// rejected: look at the QUIC connection alone.
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				tc := client.tls.Clone()
				tc.NextProtos = []string{http3.NextProtoH3}
				conn, err := quic.DialAddrEarly(ctx, addr, tc, &quic.Config{})
				if err != nil {
					t.Fatal(err)
				}
				select {
				case <-conn.HandshakeComplete():
				case <-ctx.Done():
					t.Fatal("handshake did not complete")
				}
				st = conn.ConnectionState()
				_ = conn.CloseWithError(0, "")
			} else {
				st = client.get(t, addr, http3.MethodGet0RTT)
			}
			if !st.TLS.DidResume || st.Used0RTT != c.used0RTT {
				t.Errorf("resumed %v, 0-RTT used %v; want resumed, 0-RTT %v", st.TLS.DidResume, st.Used0RTT, c.used0RTT)
			}
			if got := strings.Count(logs.String(), "allows 0-RTT"); got != b2i(c.warned) {
				t.Errorf("logged the 0-RTT warning %d times, want %d:\n%s", got, b2i(c.warned), logs.String())
			}
		})
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
