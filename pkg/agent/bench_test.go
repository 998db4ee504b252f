package agent_test

// Benchmarks for `make bench`. One invocation runs them all:
//
//	go test -run '^$' -bench . -count 5 ./pkg/agent | go run ./hack/benchratio
//
// Handshakes run over net.Pipe, in memory, so that the kernel adds no noise
// to differences of a few nanoseconds. Every resumed handshake is checked to
// have resumed. The figures cover both ends of each handshake (client and
// server run in the same process), which is the same in every variant, so
// ratios between variants are what matters.

import (
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/echring"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/testing/atomicdir"
	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

// benchSetup is what the resumption benchmarks share: a certificate, a ring
// in steady state, and a client trusting the certificate.
type benchSetup struct {
	p    *pki
	cert tls.Certificate
	leaf leaf
	keys []keyring.Key // serving order: active, staged, decrypt-only
	ring []byte
}

func newBenchSetup(b *testing.B) *benchSetup {
	b.Helper()
	p := newPKI(b)
	l := p.valid()
	now := time.Now()
	h := time.Hour
	k0 := newKey("k0", now.Add(-3*h), now.Add(-h), now.Add(2*h))
	k1 := newKey("k1", now.Add(-h), now.Add(h), now.Add(4*h))
	k2 := newKey("k2", now.Add(h), now.Add(2*h), now.Add(5*h))
	return &benchSetup{
		p: p, leaf: l, cert: l.tlsCertificate(b),
		keys: []keyring.Key{k1, k2, k0},
		ring: encodeRing(b, 1, k2, k1, k0),
	}
}

func (s *benchSetup) secrets() [][32]byte {
	out := make([][32]byte, len(s.keys))
	for i, k := range s.keys {
		out[i] = k.Secret
	}
	return out
}

// static returns a plain server config holding the ring.
func (s *benchSetup) static() *tls.Config {
	c := &tls.Config{Certificates: []tls.Certificate{s.cert}, MinVersion: tls.VersionTLS13}
	c.SetSessionTicketKeys(s.secrets())
	return c
}

// agentConfig returns an agent over a volume holding the ring and the
// certificate, and the config it serves; classical sets
// Options.ClassicalResumption.
func (s *benchSetup) agentConfig(b *testing.B, classical bool) (*agent.Agent, *tls.Config) {
	b.Helper()
	v := newVolume(b)
	v.write(s.ring, s.leaf.crt, s.leaf.key)
	a, err := agent.New(agent.Options{Dir: v.dir, Require: agent.TicketKeys | agent.Certificate,
		Logger: slog.New(slog.DiscardHandler), ClassicalResumption: classical})
	if err != nil {
		b.Fatal(err)
	}
	return a, a.TLSConfig(&tls.Config{MinVersion: tls.VersionTLS13})
}

func (s *benchSetup) client(cache bool) *tls.Config {
	c := s.p.client(tls.VersionTLS13)
	if !cache {
		c.ClientSessionCache = nil
	}
	return c
}

// every runs f every period on its own goroutine until the returned stop is
// called; stop returns how many times f ran.
func every(period time.Duration, f func()) (stop func() int) {
	done := make(chan struct{})
	var n atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				f()
				n.Add(1)
			}
		}
	})
	return func() int {
		close(done)
		wg.Wait()
		return int(n.Load())
	}
}

// pipeHandshake runs one handshake between client and server over net.Pipe
// and returns whether it resumed. The server writes one byte after its
// handshake; reading it makes the client take the TLS 1.3 ticket that
// precedes it, so the next handshake resumes with a fresh ticket, as a real
// client would.
func pipeHandshake(b *testing.B, server, client *tls.Config) bool {
	c, s := net.Pipe()
	deadline := time.Now().Add(10 * time.Second)
	_ = c.SetDeadline(deadline)
	_ = s.SetDeadline(deadline)
	errc := make(chan error, 1)
	go func() {
		ts := tls.Server(s, server)
		err := ts.Handshake()
		if err == nil {
			_, err = ts.Write([]byte{1})
		}
		s.Close()
		errc <- err
	}()
	tc := tls.Client(c, client)
	err := tc.Handshake()
	if err == nil {
		_, err = io.ReadFull(tc, make([]byte, 1))
	}
	resumed := tc.ConnectionState().DidResume
	c.Close()
	if serr := <-errc; err == nil {
		err = serr
	}
	if err != nil {
		b.Fatal(err)
	}
	return resumed
}

// measured is what measuredHandshake saw of one handshake.
type measured struct {
	// state is the client's.
	state tls.ConnectionState
	// serverCPU is the processor time of the server's side.
	serverCPU time.Duration
}

// measuredHandshake is pipeHandshake, measuring the server's processor
// time: the server's goroutine runs locked to one OS thread, whose CPU
// clock then counts the server's work alone (its handshake, its ticket,
// and the scheduler parking and waking it while it waits for the client),
// neither the client's nor that of any other process on the machine.
func measuredHandshake(b *testing.B, server, client *tls.Config) measured {
	c, s := net.Pipe()
	deadline := time.Now().Add(10 * time.Second)
	_ = c.SetDeadline(deadline)
	_ = s.SetDeadline(deadline)
	type result struct {
		cpu time.Duration
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		t0, _ := threadCPU()
		ts := tls.Server(s, server)
		err := ts.Handshake()
		if err == nil {
			_, err = ts.Write([]byte{1})
		}
		t1, _ := threadCPU()
		s.Close()
		done <- result{t1 - t0, err}
	}()
	tc := tls.Client(c, client)
	err := tc.Handshake()
	if err == nil {
		_, err = io.ReadFull(tc, make([]byte, 1))
	}
	state := tc.ConnectionState()
	c.Close()
	r := <-done
	if err == nil {
		err = r.err
	}
	if err != nil {
		b.Fatal(err)
	}
	return measured{state: state, serverCPU: r.cpu}
}

// resumed runs b.N resumed handshakes against server.
func resumed(b *testing.B, server, client *tls.Config) {
	b.Helper()
	pipeHandshake(b, server, client) // the ticket
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if !pipeHandshake(b, server, client) {
			b.Fatal("handshake did not resume")
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "handshakes/s")
}

// BenchmarkResumedTLS13 measures resumed TLS 1.3 handshakes per second:
//
//	static:           a plain config, built once, never written;
//	stdlib-setkeys:   a plain config shared by all handshakes while another
//	                  goroutine calls SetSessionTicketKeys on it every 1 ms;
//	agent-swap:       the agent's config while another goroutine publishes a
//	                  new config (Clone, certificate, SetSessionTicketKeys,
//	                  atomic Store) every 1 ms, a thousand times the rate of
//	                  any real rotation.
func BenchmarkResumedTLS13(b *testing.B) {
	s := newBenchSetup(b)
	b.Run("static", func(b *testing.B) {
		resumed(b, s.static(), s.client(true))
	})
	b.Run("stdlib-setkeys-1ms", func(b *testing.B) {
		cfg := s.static()
		secrets := s.secrets()
		stop := every(time.Millisecond, func() { cfg.SetSessionTicketKeys(secrets) })
		resumed(b, cfg, s.client(true))
		b.ReportMetric(float64(stop())/b.Elapsed().Seconds(), "writes/s")
	})
	b.Run("agent-swap-1ms", func(b *testing.B) {
		a, cfg := s.agentConfig(b, false)
		stop := every(time.Millisecond, func() { agent.ForceSwap(a) })
		resumed(b, cfg, s.client(true))
		b.ReportMetric(float64(stop())/b.Elapsed().Seconds(), "writes/s")
	})
}

// BenchmarkResumedTLS13Interleaved measures the same three variants
// interleaved handshake by handshake, in rotating order, so that drift in
// machine load (other processes, frequency scaling) falls on all three
// alike. Both writers run throughout, so each variant also bears their small
// background cost alike. It reports each variant's handshakes per second
// and the ratios agent/static and agent/stdlib-setkeys.
func BenchmarkResumedTLS13Interleaved(b *testing.B) {
	s := newBenchSetup(b)
	static := s.static()
	shared := s.static()
	secrets := s.secrets()
	a, agentCfg := s.agentConfig(b, false)
	stopShared := every(time.Millisecond, func() { shared.SetSessionTicketKeys(secrets) })
	stopAgent := every(time.Millisecond, func() { agent.ForceSwap(a) })
	defer stopShared()
	defer stopAgent()

	servers := []*tls.Config{static, shared, agentCfg}
	clients := make([]*tls.Config, len(servers))
	for i, srv := range servers {
		clients[i] = s.client(true)
		pipeHandshake(b, srv, clients[i])
	}
	st := interleave(b, len(servers), func(v int) {
		if !pipeHandshake(b, servers[v], clients[v]) {
			b.Fatal("handshake did not resume")
		}
	})
	b.ReportMetric(st.rate(0), "static-hs/s")
	b.ReportMetric(st.rate(1), "setkeys-hs/s")
	b.ReportMetric(st.rate(2), "agent-hs/s")
	b.ReportMetric(st.rate(2)/st.rate(0), "agent/static")
	b.ReportMetric(st.rate(2)/st.rate(1), "agent/setkeys")
	b.ReportMetric(st.p50(0)/st.p50(2), "agent/static-p50")
	b.ReportMetric(st.p50(1)/st.p50(2), "agent/setkeys-p50")
}

// interleaved holds the handshake times of variants run in alternation.
type interleaved struct {
	spent []time.Duration
	each  [][]time.Duration
}

// interleave runs one handshake of each of n variants per b.Loop iteration,
// in rotating order, timing each. Alternating handshake by handshake makes
// drift in machine load (other processes, frequency scaling) fall on every
// variant alike.
func interleave(b *testing.B, n int, run func(variant int)) *interleaved {
	st := &interleaved{spent: make([]time.Duration, n), each: make([][]time.Duration, n)}
	i := 0
	for b.Loop() {
		for j := range n {
			v := (i + j) % n
			t0 := time.Now()
			run(v)
			d := time.Since(t0)
			st.spent[v] += d
			st.each[v] = append(st.each[v], d)
		}
		i++
	}
	return st
}

// rate is the variant's throughput, handshakes over total time.
func (st *interleaved) rate(v int) float64 {
	return float64(len(st.each[v])) / st.spent[v].Seconds()
}

// p50 is the variant's median handshake time in nanoseconds. On a loaded
// machine a preempted handshake costs its variant a whole scheduler slice;
// the median is immune to those outliers, which the means are not.
func (st *interleaved) p50(v int) float64 {
	slices.Sort(st.each[v])
	return float64(st.each[v][len(st.each[v])/2])
}

// BenchmarkClassicalResumption measures the server's processor time per
// resumed TLS 1.3 handshake with the agent's default config, whose key
// exchange is the hybrid X25519MLKEM768, and with
// Options.ClassicalResumption, whose key exchange is X25519, interleaved
// handshake by handshake. The clients are Go's default. Every handshake
// must resume, with the group expected and without a HelloRetryRequest.
// It reports the median server time of each (robust to a preempted
// handshake, whose thread clock stops meanwhile but whose caches go cold),
// their ratio, and the ratio of the means.
func BenchmarkClassicalResumption(b *testing.B) {
	if _, ok := threadCPU(); !ok {
		b.Skip("no per-thread processor clock on this system")
	}
	s := newBenchSetup(b)
	_, hybrid := s.agentConfig(b, false)
	_, classical := s.agentConfig(b, true)
	servers := []*tls.Config{hybrid, classical}
	groups := []tls.CurveID{tls.X25519MLKEM768, tls.X25519}
	clients := make([]*tls.Config, len(servers))
	for i, srv := range servers {
		clients[i] = s.client(true)
		pipeHandshake(b, srv, clients[i]) // the ticket
	}
	cpu := make([][]time.Duration, len(servers))
	interleave(b, len(servers), func(v int) {
		m := measuredHandshake(b, servers[v], clients[v])
		if st := m.state; !st.DidResume || st.CurveID != groups[v] || st.HelloRetryRequest {
			b.Fatalf("handshake resumed %v with %v, HelloRetryRequest %v; want resumed with %v and none",
				st.DidResume, st.CurveID, st.HelloRetryRequest, groups[v])
		}
		cpu[v] = append(cpu[v], m.serverCPU)
	})
	us := func(v int, mean bool) float64 {
		d := cpu[v]
		if mean {
			var sum time.Duration
			for _, x := range d {
				sum += x
			}
			return float64(sum) / float64(len(d)) / 1e3
		}
		slices.Sort(d)
		return float64(d[len(d)/2]) / 1e3
	}
	b.ReportMetric(us(0, false), "hybrid-server-us")
	b.ReportMetric(us(1, false), "classical-server-us")
	b.ReportMetric(us(1, false)/us(0, false), "classical/hybrid")
	b.ReportMetric(us(1, true)/us(0, true), "classical/hybrid-mean")
}

// BenchmarkHandshakeTLS13 compares a full handshake (ECDSA P-256 signature
// and chain verification, key exchange) with a resumed one on a static
// config, interleaved, with Go's default key exchange (X25519MLKEM768) and
// with X25519 alone. TLS 1.3 resumption (psk_dhe_ke) still runs the key
// exchange, so what it saves is the certificate work, a smaller share of a
// handshake with the hybrid post-quantum exchange.
func BenchmarkHandshakeTLS13(b *testing.B) {
	s := newBenchSetup(b)
	for _, kx := range []struct {
		name   string
		curves []tls.CurveID
	}{{"X25519MLKEM768", nil}, {"X25519", []tls.CurveID{tls.X25519}}} {
		b.Run(kx.name, func(b *testing.B) {
			srv := s.static()
			full, resumed := s.client(false), s.client(true)
			full.CurvePreferences, resumed.CurvePreferences = kx.curves, kx.curves
			pipeHandshake(b, srv, resumed) // the ticket
			st := interleave(b, 2, func(v int) {
				if v == 0 && pipeHandshake(b, srv, full) {
					b.Fatal("handshake resumed without a session cache")
				}
				if v == 1 && !pipeHandshake(b, srv, resumed) {
					b.Fatal("handshake did not resume")
				}
			})
			b.ReportMetric(1e6/st.rate(0), "full-us")
			b.ReportMetric(1e6/st.rate(1), "resumed-us")
			b.ReportMetric(st.rate(1)/st.rate(0), "full/resumed")
			b.ReportMetric(st.p50(0)/st.p50(1), "full/resumed-p50")
		})
	}
}

// BenchmarkDecryptTicket measures Config.DecryptTicket on a ticket under the
// oldest of 1, 4 and 16 keys: crypto/tls tries each key's HMAC in order, so
// this is the worst case a retained key costs.
func BenchmarkDecryptTicket(b *testing.B) {
	s := newBenchSetup(b)
	for _, n := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("oldest-of-%d", n), func(b *testing.B) {
			keys := make([][32]byte, n)
			for i := range keys {
				keys[i] = newKey(fmt.Sprint("bench", i), time.Unix(0, 0), time.Unix(1, 0), time.Unix(2, 0)).Secret
			}
			ticket, cs := issueTicket(b, s, keys[n-1])
			cfg := &tls.Config{}
			cfg.SetSessionTicketKeys(keys)
			if ss, err := cfg.DecryptTicket(ticket, cs); ss == nil || err != nil {
				b.Fatalf("ticket under the oldest key not decrypted: %v", err)
			}
			for b.Loop() {
				if ss, _ := cfg.DecryptTicket(ticket, cs); ss == nil {
					b.Fatal("not decrypted")
				}
			}
		})
	}
}

// issueTicket runs a real handshake whose server encrypts its ticket under
// key, and returns that ticket with the server's connection state.
func issueTicket(b *testing.B, s *benchSetup, key [32]byte) ([]byte, tls.ConnectionState) {
	b.Helper()
	issuer := &tls.Config{Certificates: []tls.Certificate{s.cert}, MinVersion: tls.VersionTLS13}
	issuer.SetSessionTicketKeys([][32]byte{key})
	var ticket []byte
	var state tls.ConnectionState
	issuer.WrapSession = func(cs tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
		t, err := issuer.EncryptTicket(cs, ss)
		ticket, state = t, cs
		return t, err
	}
	pipeHandshake(b, issuer, s.client(true))
	if ticket == nil {
		b.Fatal("no ticket issued")
	}
	return ticket, state
}

// BenchmarkECH measures the server's processor time per full TLS 1.3
// handshake (no session cache) with the agent's config, interleaved
// handshake by handshake: without ECH; with ECH, the client holding the
// published config (what DNS serves), the first key tried; and with ECH,
// the client holding the oldest of echring.MaxConfigs (staged, published
// and two retired), which crypto/tls reaches after a failed trial
// decryption under each other key. Every ECH handshake must be accepted.
// It reports the median server time of each and their ratios.
func BenchmarkECH(b *testing.B) {
	if _, ok := threadCPU(); !ok {
		b.Skip("no per-thread processor clock on this system")
	}
	s := newBenchSetup(b)
	_, plain := s.agentConfig(b, false)
	now := time.Now()
	configs := make([]echring.Config, echring.MaxConfigs)
	states := []echring.State{echring.Staged, echring.Published, echring.Retired, echring.Retired}
	for i := range configs {
		configs[i] = echConfig(b, uint8(10-i), fmt.Sprint("bench", i), states[i], now.Add(-time.Duration(i)*time.Hour))
	}
	v := newVolume(b)
	if err := v.w.Write(map[string]atomicdir.File{keyring.FileName: {Data: s.ring}, "tls.crt": {Data: s.leaf.crt}, "tls.key": {Data: s.leaf.key},
		echring.FileName: {Data: encodeECH(b, 1, configs...)}}); err != nil {
		b.Fatal(err)
	}
	a, err := agent.New(agent.Options{Dir: v.dir, Require: agent.TicketKeys | agent.Certificate | agent.ECHKeys, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	ech := a.TLSConfig(&tls.Config{MinVersion: tls.VersionTLS13})
	published, oldest := s.client(false), s.client(false)
	published.EncryptedClientHelloConfigList = echring.ConfigList(configs[1:2])
	oldest.EncryptedClientHelloConfigList = echring.ConfigList(configs[len(configs)-1:])
	servers := []*tls.Config{plain, ech, ech}
	clients := []*tls.Config{s.client(false), published, oldest}
	cpu := make([][]time.Duration, len(servers))
	interleave(b, len(servers), func(v int) {
		m := measuredHandshake(b, servers[v], clients[v])
		if st := m.state; st.DidResume || st.ECHAccepted != (v > 0) {
			b.Fatalf("variant %d: resumed %v, ECH accepted %v", v, st.DidResume, st.ECHAccepted)
		}
		cpu[v] = append(cpu[v], m.serverCPU)
	})
	us := func(v int) float64 {
		d := cpu[v]
		slices.Sort(d)
		return float64(d[len(d)/2]) / 1e3
	}
	b.ReportMetric(us(0), "plain-server-us")
	b.ReportMetric(us(1), "ech-published-server-us")
	b.ReportMetric(us(2), "ech-oldest-server-us")
	b.ReportMetric(us(1)/us(0), "ech-published/plain")
	b.ReportMetric(us(2)/us(0), "ech-oldest/plain")
	b.ReportMetric((us(2)-us(1))/float64(echring.MaxConfigs-1), "ech-per-key-tried-us")
}

// BenchmarkTicketScope measures what the scope binding costs a resumed
// handshake: the agent's config as it was before tickets were scoped (no
// WrapSession or UnwrapSession: crypto/tls seals and opens tickets
// itself) against today's default (the scope sealed into each ticket and
// checked on resumption), interleaved handshake by handshake, for TLS 1.3
// and 1.2. It reports the throughput of each, the ratio scoped/unbound of
// throughputs and of median handshakes (above 1 when scoped is faster),
// and the server's processor time per handshake, median, and its ratio.
func BenchmarkTicketScope(b *testing.B) {
	if _, ok := threadCPU(); !ok {
		b.Skip("no per-thread processor clock on this system")
	}
	s := newBenchSetup(b)
	for _, v := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
		b.Run(map[uint16]string{tls.VersionTLS13: "TLS13", tls.VersionTLS12: "TLS12"}[v], func(b *testing.B) {
			servers := make([]*tls.Config, 2)
			for i, unbound := range []bool{true, false} {
				vol := newVolume(b)
				vol.write(s.ring, s.leaf.crt, s.leaf.key)
				a, err := agent.New(agent.Options{Dir: vol.dir, Require: agent.TicketKeys | agent.Certificate, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				if unbound {
					agent.WithoutTicketHooks(a)
				}
				servers[i] = a.TLSConfig(nil)
			}
			clients := make([]*tls.Config, len(servers))
			for i, srv := range servers {
				clients[i] = s.p.client(v)
				pipeHandshake(b, srv, clients[i]) // the ticket
			}
			cpu := make([][]time.Duration, len(servers))
			st := interleave(b, len(servers), func(i int) {
				m := measuredHandshake(b, servers[i], clients[i])
				if !m.state.DidResume {
					b.Fatal("handshake did not resume")
				}
				cpu[i] = append(cpu[i], m.serverCPU)
			})
			med := func(i int) float64 {
				slices.Sort(cpu[i])
				return float64(cpu[i][len(cpu[i])/2]) / 1e3
			}
			b.ReportMetric(st.rate(0), "unbound-hs/s")
			b.ReportMetric(st.rate(1), "scoped-hs/s")
			b.ReportMetric(st.rate(1)/st.rate(0), "scoped/unbound")
			b.ReportMetric(st.p50(0)/st.p50(1), "scoped/unbound-p50")
			b.ReportMetric(med(0), "unbound-server-us")
			b.ReportMetric(med(1), "scoped-server-us")
			b.ReportMetric(med(0)/med(1), "scoped/unbound-server")
		})
	}
}
