package fleet

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/echring"
	"github.com/ringmaster-io/ringmaster/internal/testing/atomicdir"
)

// These tests cover the harness's own parts that need no control plane; the
// e2e suite in test/e2e drives the whole.

func TestParseHello(t *testing.T) {
	for _, tc := range []struct {
		body    string
		backend string
		epoch   int64
		key     string
		wantErr bool
	}{
		{body: "hello from 127.0.0.1:43121: epoch 3, active key 3f9a1c0d, resumed true\n", backend: "127.0.0.1:43121", epoch: 3, key: "3f9a1c0d"},
		{body: "hello from [::1]:8443: epoch 12, active key , resumed false", backend: "[::1]:8443", epoch: 12, key: ""},
		{body: "hello from 127.0.0.1:8443\n", backend: "127.0.0.1:8443"}, // nginx's, HAProxy's
		{body: "hello from 127.0.0.1:1: epoch x, active key k, resumed true", wantErr: true},
		{body: "hello from \n", wantErr: true},
		{body: "404 page not found", wantErr: true},
		{body: "", wantErr: true},
	} {
		backend, epoch, key, err := parseHello(tc.body)
		if (err != nil) != tc.wantErr {
			t.Errorf("parseHello(%q) error %v, want error %v", tc.body, err, tc.wantErr)
			continue
		}
		if backend != tc.backend || epoch != tc.epoch || key != tc.key {
			t.Errorf("parseHello(%q) = %q, %d, %q; want %q, %d, %q", tc.body, backend, epoch, key, tc.backend, tc.epoch, tc.key)
		}
	}
}

func TestSummary(t *testing.T) {
	at := time.Unix(0, 0)
	s := func(client, seq int, backend string, resumed bool, err string) Sample {
		return Sample{Client: client, Seq: seq, Backend: backend, Resumed: resumed, Err: err, Start: at.Add(time.Duration(seq) * time.Second), Latency: time.Duration(seq+1) * time.Millisecond}
	}
	res := Result{Samples: []Sample{
		s(0, 0, "a", false, ""), // first: full by nature, not a reconnect
		s(1, 0, "b", false, ""),
		s(0, 1, "b", true, ""),  // moved a -> b, resumed
		s(1, 1, "b", true, ""),  // stayed on b
		s(0, 2, "c", false, ""), // moved b -> c, full
		s(1, 2, "", false, "dial tcp: refused"),
		s(1, 3, "a", true, ""), // moved from b (the last success), resumed
	}}
	for i, g := range []tls.CurveID{tls.X25519MLKEM768, tls.X25519MLKEM768, tls.X25519, tls.X25519, tls.X25519, 0, tls.X25519} {
		res.Samples[i].Group = g
	}
	res.Samples[3].Retried = true
	got := res.Summary()
	want := Summary{Conns: 7, Failures: 1, Reconnects: 4, Resumed: 3, Full: 1, FirstFull: 2, Moved: 3, MovedResumed: 2, Retried: 1, P50: 2 * time.Millisecond, P99: 4 * time.Millisecond}
	if got != want {
		t.Errorf("Summary() =\n %+v\nwant\n %+v", got, want)
	}
	if r := got.ResumptionRate(); r != 0.75 {
		t.Errorf("ResumptionRate() = %v, want 0.75", r)
	}
	if n := len(res.Since(at.Add(2 * time.Second)).Samples); n != 3 {
		t.Errorf("Since(2s) kept %d samples, want 3", n)
	}
	if got := res.ByBackend()["b"]; got.Reconnects != 2 || got.Resumed != 2 {
		t.Errorf("ByBackend()[b] = %+v, want 2 reconnects, both resumed", got)
	}
	groups := res.Groups()
	if len(groups) != 3 || groups["first X25519MLKEM768"] != 2 || groups["resumed X25519"] != 3 || groups["full X25519"] != 1 {
		t.Errorf("Groups() = %v", groups)
	}
	if (Summary{}).ResumptionRate() != 0 {
		t.Error("ResumptionRate of nothing is not 0")
	}
}

func TestParseMetric(t *testing.T) {
	const exposition = `# HELP ringmaster_agent_handshakes_total TLS handshakes.
# TYPE ringmaster_agent_handshakes_total counter
ringmaster_agent_handshakes_total{resumed="false"} 12
ringmaster_agent_handshakes_total{resumed="true"} 3400
ringmaster_agent_hello_retry_requests_total 0
ringmaster_agent_hello_retry_requests_total_extra 9
`
	for series, want := range map[string]float64{
		`ringmaster_agent_handshakes_total{resumed="true"}`: 3400,
		"ringmaster_agent_hello_retry_requests_total":       0,
	} {
		if got, err := ParseMetric(exposition, series); err != nil || got != want {
			t.Errorf("ParseMetric(%s) = %v, %v; want %v", series, got, err, want)
		}
	}
	if _, err := ParseMetric(exposition, "ringmaster_agent_epoch"); err == nil {
		t.Error("ParseMetric found a series that is not there")
	}
}

func TestParseStat(t *testing.T) {
	// The command name may hold spaces and parentheses.
	line := "4242 (my (odd) proc) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 3 0 123456 1000 200 18446744073709551615"
	f, err := parseStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if f[0] != "S" || f[1] != "1" || f[11] != "250" || f[12] != "75" || f[19] != "123456" {
		t.Errorf("fields = %q", f)
	}
	if _, err := parseStat("4242 no parenthesis"); err == nil {
		t.Error("parseStat accepted a line without a command name")
	}
}

func TestSupervisorStopsByPID(t *testing.T) {
	sup := NewSupervisor(t.TempDir())
	p, err := sup.Start("sleeper", "/bin/sh", []string{"-c", "echo started; exec sleep 60"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.WaitLine(ctx, "started"); err != nil {
		t.Fatal(err)
	}
	if cpu, err := p.CPU(); err != nil || cpu < 0 {
		t.Errorf("CPU() = %v, %v", cpu, err)
	}
	if left := sup.Tracked(); len(left) != 1 || !left[0].Alive() {
		t.Fatalf("tracked %v, want the live sleeper", left)
	}
	if err := sup.StopAll(); err != nil {
		t.Errorf("StopAll: %v", err)
	}
	if left := sup.Leftovers(); len(left) != 0 {
		t.Errorf("left running: %v", left)
	}
	if _, err := p.WaitLine(ctx, "never printed"); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Errorf("WaitLine on a stopped process: %v", err)
	}
}

// TestSupervisorEndsOrphans stops a shell that dies on SIGTERM and leaves
// its child behind, as hack/controlplane does before its signal handler is
// in place: the child must be found and ended too.
func TestSupervisorEndsOrphans(t *testing.T) {
	sup := NewSupervisor(t.TempDir())
	p, err := sup.Start("parent", "/bin/sh", []string{"-c", "sleep 300 & echo started; wait"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.WaitLine(ctx, "started"); err != nil {
		t.Fatal(err)
	}
	if err := sup.StopAll(); err != nil {
		t.Errorf("StopAll: %v", err)
	}
	if tracked := sup.Tracked(); len(tracked) != 2 {
		t.Errorf("tracked %v, want the shell and its child", tracked)
	}
	if left := sup.Leftovers(); len(left) != 0 {
		t.Errorf("left running: %v", left)
	}
}

func TestSpread(t *testing.T) {
	got := Spread(4, 3*time.Second)
	want := []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Spread(4, 3s) = %v, want %v", got, want)
	}
}

// TestBalancerRoundRobin sends six connections through a balancer over three
// HTTPS backends and checks that they took turns, with TLS passing through.
func TestBalancerRoundRobin(t *testing.T) {
	pki, err := NewPKI(ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(pki.CertPEM, pki.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	var backends []string
	for range 3 {
		ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello from %s: epoch 1, active key k1, resumed %v\n", r.Context().Value(http.LocalAddrContextKey), r.TLS.DidResume)
		})}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { srv.Close() })
		backends = append(backends, ln.Addr().String())
	}
	lb, err := StartBalancer(backends)
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	if !isLoopback(lb.Addr()) {
		t.Errorf("balancer listens on %s", lb.Addr())
	}
	cfg := &tls.Config{ServerName: ServerName, RootCAs: pki.Roots, NextProtos: []string{"http/1.1"}}
	var got []string
	for range 6 {
		s := Connect(context.Background(), lb.Addr(), cfg, 5*time.Second)
		if s.Err != "" {
			t.Fatal(s.Err)
		}
		got = append(got, s.Backend)
	}
	want := append(append([]string{}, backends...), backends...)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("backends reached %v, want %v", got, want)
	}
}

// TestLoadResumesOnOneServer runs a small load against one backend that keeps
// its ticket keys: every reconnect must resume, and the load must stop at its
// connection bound.
func TestLoadResumesOnOneServer(t *testing.T) {
	pki, err := NewPKI(ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(pki.CertPEM, pki.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s: epoch 7, active key k7, resumed %v\n", r.Context().Value(http.LocalAddrContextKey), r.TLS.DidResume)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	for _, v := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
		res := StartLoad(context.Background(), LoadConfig{Addr: ln.Addr().String(), Roots: pki.Roots, Version: v, Clients: 3, ConnsPerClient: 5}).Wait()
		s := res.Summary()
		if s.Conns != 15 || s.Failures != 0 || s.Reconnects != 12 || s.Resumed != 12 {
			t.Errorf("TLS %#x: %+v; errors %v", v, s, res.Errors())
		}
		if keys := res.ActiveKeys(); len(keys) != 1 || keys[0] != "k7" {
			t.Errorf("ActiveKeys() = %v", keys)
		}
	}
}

func TestPKIFiles(t *testing.T) {
	for _, kt := range []KeyType{ECDSAP256, RSA2048} {
		pki, err := NewPKI(kt)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		w, err := atomicdir.NewWriter(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write(pki.Files()); err != nil {
			t.Fatal(err)
		}
		if _, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")); err != nil {
			t.Errorf("%s: %v", kt, err)
		}
		fi, err := os.Stat(filepath.Join(dir, "tls.key"))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: tls.key mode %v, %v", kt, fi.Mode(), err)
		}
	}
	if _, err := NewPKI("dsa"); err == nil {
		t.Error("NewPKI accepted an unknown key type")
	}
}

// TestLoadECH runs a load whose clients attempt ECH against one server
// holding one config: clients holding it are accepted; clients holding
// another are rejected, retry with the server's retry configs, and are
// accepted.
func TestLoadECH(t *testing.T) {
	pki, err := NewPKI(ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(pki.CertPEM, pki.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	mint := func(seed byte) echring.Config {
		c, err := echring.NewConfig(1, bytes.Repeat([]byte{seed}, echring.SeedSize), echring.Params{PublicName: ServerName})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	served, stale := mint(1), mint(2)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13,
		EncryptedClientHelloKeys: []tls.EncryptedClientHelloKey{{Config: served.Config, PrivateKey: served.PrivateKey, SendAsRetry: true}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s: epoch 7, active key k7, resumed %v\n", r.Context().Value(http.LocalAddrContextKey), r.TLS.DidResume)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	lists := [][]byte{echring.ConfigList([]echring.Config{served}), echring.ConfigList([]echring.Config{stale})}
	res := StartLoad(context.Background(), LoadConfig{Addr: ln.Addr().String(), Roots: pki.Roots, Version: tls.VersionTLS13, Clients: 2, ConnsPerClient: 3,
		ECHConfigList: func(client int) []byte { return lists[client] }}).Wait()
	if len(res.Samples) != 6 {
		t.Fatalf("%d samples, want 6; errors %v", len(res.Samples), res.Errors())
	}
	for _, s := range res.Samples {
		if s.Err != "" || !s.ECHAccepted || s.ECHRetried != (s.Client == 1) {
			t.Errorf("client %d connection %d: err %q, ECH accepted %v, retried %v", s.Client, s.Seq, s.Err, s.ECHAccepted, s.ECHRetried)
		}
	}
}
