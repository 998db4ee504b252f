package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/ringmaster-io/ringmaster/internal/echring"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/testing/atomicdir"
	"github.com/ringmaster-io/ringmaster/internal/testing/tickets"
	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

// TestServer runs the example on free loopback ports, reads its status and
// metrics on the status port, finds nothing of them on the TLS port,
// delivers a new epoch, and stops it. With -greeting-names-keys, the
// greeting names the epoch and the active key.
func TestServer(t *testing.T) {
	for _, greetKeys := range []bool{false, true} {
		t.Run(fmt.Sprintf("greeting-names-keys=%v", greetKeys), func(t *testing.T) { testServer(t, greetKeys) })
	}
}

func testServer(t *testing.T, greetKeys bool) {
	dir := t.TempDir()
	w, err := atomicdir.NewWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	crt, key, pool := selfSigned(t)
	now := time.Now()
	k1 := newKey("k1", now.Add(-time.Hour), now.Add(time.Hour), now.Add(3*time.Hour))
	k2 := newKey("k2", now.Add(time.Hour), now.Add(2*time.Hour), now.Add(4*time.Hour))
	project := func(epoch int64) {
		t.Helper()
		ring, err := keyring.Encode(keyring.Ring{Name: "shop/web", Epoch: epoch, IssuedAt: now, Keys: []keyring.Key{k2, k1}})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write(map[string]atomicdir.File{keyring.FileName: {Data: ring}, "tls.crt": {Data: crt}, "tls.key": {Data: key, Mode: 0o600}}); err != nil {
			t.Fatal(err)
		}
	}
	project(3)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, stdout := io.Pipe()
	done := make(chan error, 1)
	go func() {
		args := []string{"-dir", dir, "-ring", "shop/web", "-listen", "127.0.0.1:0", "-status-listen", "127.0.0.1:0"}
		if greetKeys {
			args = append(args, "-greeting-names-keys")
		}
		done <- run(ctx, args, stdout, io.Discard)
		stdout.Close()
	}()
	addrs := map[string]string{}
	lines := bufio.NewScanner(out)
	for len(addrs) < 2 && lines.Scan() {
		name, addr, ok := strings.Cut(lines.Text(), " listening on ")
		if !ok {
			t.Fatalf("unexpected output %q", lines.Text())
		}
		addrs[name] = addr
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	if _, _, err := net.SplitHostPort(addrs["https"]); err != nil || strings.HasSuffix(addrs["https"], ":0") {
		t.Fatalf("https address %q", addrs["https"])
	}

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		ForceAttemptHTTP2: true,
		TLSClientConfig:   &tls.Config{RootCAs: pool, ServerName: "localhost", ClientSessionCache: tls.NewLRUClientSessionCache(4)},
	}}
	defer client.CloseIdleConnections()
	health := func() agent.Status {
		t.Helper()
		resp, err := client.Get("http://" + addrs["status"] + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st agent.Status
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := health(); st.Epoch != 3 || st.ActiveKeyID != k1.ID || len(st.Keys) != 2 {
		t.Fatalf("healthz %+v, want epoch 3 with %s active", st, k1.ID)
	}

	resp, err := client.Get("https://" + addrs["https"] + "/")
	if err != nil {
		t.Fatal(err)
	}
	greeting, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Errorf("served over %s, want HTTP/2", resp.Proto)
	}
	want := "hello from " + addrs["https"] + "\n"
	if greetKeys {
		want = "hello from " + addrs["https"] + ": epoch 3, active key " + k1.ID + ", resumed false\n"
	}
	if string(greeting) != want {
		t.Errorf("greeting %q, want %q", greeting, want)
	}
	// Nothing of what the agent holds on the TLS port.
	for _, path := range []string{"/healthz", "/metrics", agent.StatusPath} {
		resp, err := client.Get("https://" + addrs["https"] + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || strings.Contains(string(body), k1.ID) {
			t.Errorf("GET %s on the TLS port: %s %q, want 404", path, resp.Status, body)
		}
	}
	resp, err = client.Get("http://" + addrs["status"] + agent.StatusPath)
	if err != nil {
		t.Fatal(err)
	}
	var st agent.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.ActiveKeyID != k1.ID {
		t.Errorf("%s on the status port: %+v, %v", agent.StatusPath, st, err)
	}
	resp.Body.Close()

	resp, err = client.Get("http://" + addrs["status"] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "ringmaster_agent_epoch 3") {
		t.Errorf("metrics lack ringmaster_agent_epoch 3:\n%s", body)
	}

	project(4)
	deadline := time.Now().Add(10 * time.Second)
	for health().Epoch != 4 {
		if time.Now().After(deadline) {
			t.Fatal("epoch 4 never served")
		}
		time.Sleep(10 * time.Millisecond)
	}

	client.CloseIdleConnections()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}

// TestServerRefusesAnotherRing: -ring pins the ring; a server pointed at a
// volume holding another one does not start.
func TestServerRefusesAnotherRing(t *testing.T) {
	dir := t.TempDir()
	w, err := atomicdir.NewWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	k := newKey("k", now.Add(-time.Hour), now.Add(time.Hour), now.Add(2*time.Hour))
	ring, err := keyring.Encode(keyring.Ring{Name: "shop/web", Epoch: 1, IssuedAt: now, Keys: []keyring.Key{k}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(map[string]atomicdir.File{keyring.FileName: {Data: ring}}); err != nil {
		t.Fatal(err)
	}
	err = run(context.Background(), []string{"-dir", dir, "-require", "keys", "-ring", "shop/api", "-listen", "127.0.0.1:0", "-status-listen", ""}, io.Discard, io.Discard)
	if !errors.Is(err, agent.ErrForeignRing) {
		t.Fatalf("run = %v, want ErrForeignRing", err)
	}
}

// TestServerClassicalResumption: with -classical-resumption, a full TLS 1.3
// handshake keeps the hybrid group and a resumed one uses X25519.
func TestServerClassicalResumption(t *testing.T) {
	lines, out, pool := serveOneKey(t, "k", "-classical-resumption")
	if !lines.Scan() {
		t.Fatal("no output")
	}
	addr, ok := strings.CutPrefix(lines.Text(), "https listening on ")
	if !ok {
		t.Fatalf("unexpected output %q", lines.Text())
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true, // a new connection, and handshake, per request
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS13,
			ClientSessionCache: tls.NewLRUClientSessionCache(4)},
	}}
	for i, want := range []struct {
		resumed bool
		group   tls.CurveID
	}{{false, tls.X25519MLKEM768}, {true, tls.X25519}, {true, tls.X25519}} {
		resp, err := client.Get("https://" + addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body) // and the ticket with it
		resp.Body.Close()
		if cs := resp.TLS; cs.DidResume != want.resumed || cs.CurveID != want.group || cs.HelloRetryRequest {
			t.Errorf("connection %d: resumed %v with %v, HelloRetryRequest %v; want resumed %v with %v and none",
				i, cs.DidResume, cs.CurveID, cs.HelloRetryRequest, want.resumed, want.group)
		}
	}
}

func newKey(seed string, activeFrom, retireAt, expiresAt time.Time) keyring.Key {
	k := keyring.NewKey(keyring.Secret(sha256.Sum256([]byte(seed))))
	k.ActiveFrom, k.RetireAt, k.ExpiresAt = activeFrom, retireAt, expiresAt
	return k
}

// selfSigned returns a P-256 certificate for localhost and 127.0.0.1, its
// key, and a pool trusting its authority (internal/testing/testpki).
func selfSigned(t *testing.T) (crt, key []byte, pool *x509.CertPool) {
	t.Helper()
	ca, err := testpki.NewCA("ringmaster test CA")
	if err != nil {
		t.Fatal(err)
	}
	is, err := ca.Localhost()
	if err != nil {
		t.Fatal(err)
	}
	return is.CertPEM, is.KeyPEM, ca.Pool()
}

// TestServerECH: with echkeys.json in -dir, the server accepts a client's
// ECH with a config of the ring, and rejects one with another config,
// sending the published configs to retry with; its status port reports the
// configs and the handshakes.
func TestServerECH(t *testing.T) {
	dir := t.TempDir()
	w, err := atomicdir.NewWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := testpki.NewCA("ringmaster test CA")
	if err != nil {
		t.Fatal(err)
	}
	const publicName = "public.example.test"
	is, err := ca.Issue(testpki.Leaf{DNSNames: []string{"localhost", publicName}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	k := newKey("k", now.Add(-time.Hour), now.Add(time.Hour), now.Add(2*time.Hour))
	ring, err := keyring.Encode(keyring.Ring{Name: "shop/web", Epoch: 1, IssuedAt: now, Keys: []keyring.Key{k}})
	if err != nil {
		t.Fatal(err)
	}
	mint := func(id uint8, seed string) echring.Config {
		s := sha256.Sum256([]byte(seed))
		c, err := echring.NewConfig(id, s[:], echring.Params{PublicName: publicName})
		if err != nil {
			t.Fatal(err)
		}
		c.State, c.CreatedAt, c.PublishedAt, c.ExpiresAt = echring.Published, now, now, now.Add(time.Hour)
		return c
	}
	served, other := mint(7, "served"), mint(7, "other")
	ech, err := echring.Encode(echring.Ring{Ring: "shop/web", Epoch: 2, IssuedAt: now, Configs: []echring.Config{served}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(map[string]atomicdir.File{keyring.FileName: {Data: ring}, echring.FileName: {Data: ech},
		"tls.crt": {Data: is.CertPEM}, "tls.key": {Data: is.KeyPEM, Mode: 0o600}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out, stdout := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-dir", dir, "-require", "keys,cert,ech", "-listen", "127.0.0.1:0", "-status-listen", "127.0.0.1:0"}, stdout, io.Discard)
		stdout.Close()
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run returned %v", err)
		}
	}()
	addrs := map[string]string{}
	lines := bufio.NewScanner(out)
	for len(addrs) < 2 && lines.Scan() {
		name, addr, ok := strings.Cut(lines.Text(), " listening on ")
		if !ok {
			t.Fatalf("unexpected output %q", lines.Text())
		}
		addrs[name] = addr
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()

	get := func(configs ...echring.Config) (*tls.ConnectionState, error) {
		client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			DisableKeepAlives: true,
			TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", MinVersion: tls.VersionTLS13,
				EncryptedClientHelloConfigList: echring.ConfigList(configs)},
		}}
		resp, err := client.Get("https://" + addrs["https"] + "/")
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.TLS, nil
	}
	cs, err := get(served)
	if err != nil {
		t.Fatal(err)
	}
	if !cs.ECHAccepted {
		t.Error("ECH not accepted with the served config")
	}
	_, err = get(other)
	var rej *tls.ECHRejectionError
	if !errors.As(err, &rej) || !bytes.Equal(rej.RetryConfigList, echring.ConfigList([]echring.Config{served})) {
		t.Errorf("with another config: %v, want an ECH rejection with the served config to retry with", err)
	}

	resp, err := http.Get("http://" + addrs["status"] + agent.StatusPath)
	if err != nil {
		t.Fatal(err)
	}
	var st agent.Status
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || st.ECH == nil || st.ECH.Epoch != 2 || len(st.ECH.Configs) != 1 || st.ECH.Configs[0].ID != 7 || !st.ECH.Configs[0].Retry {
		t.Errorf("status %+v (%v), want ECH epoch 2 serving config 7 as a retry config", st.ECH, err)
	}
	// The client gives up on a rejection as soon as it has checked the
	// server's certificate, maybe before the server has counted the
	// handshake: poll.
	var body []byte
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		resp, err = http.Get("http://" + addrs["status"] + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), `ringmaster_agent_ech_handshakes_total{result="rejected"} 1`) || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range []string{`ringmaster_agent_ech_handshakes_total{result="accepted"} 1`, `ringmaster_agent_ech_handshakes_total{result="rejected"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestServerHTTP3: with -http3, the server answers HTTP/3 on the UDP port
// of -listen's number, with the agent's config: a second connection
// resumes the first's session.
func TestServerHTTP3(t *testing.T) {
	lines, out, pool := serveOneKey(t, "h3", "-http3")
	var tcpAddr, h3Addr string
	for (tcpAddr == "" || h3Addr == "") && lines.Scan() {
		if a, ok := strings.CutPrefix(lines.Text(), "https listening on "); ok {
			tcpAddr = a
		}
		if a, ok := strings.CutPrefix(lines.Text(), "http3 listening on "); ok {
			h3Addr = a
		}
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	if h3Addr == "" || h3Addr != tcpAddr {
		t.Fatalf("HTTP/3 on %q, HTTPS on %q: want both on one port number", h3Addr, tcpAddr)
	}
	cache := tickets.NewCache(4)
	tc := &tls.Config{RootCAs: pool, ServerName: "localhost", ClientSessionCache: cache}
	for i, resumed := range []bool{false, true} {
		tr := &http3.Transport{TLSClientConfig: tc, QUICConfig: &quic.Config{}}
		resp, err := (&http.Client{Timeout: 5 * time.Second, Transport: tr}).Get("https://" + h3Addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		select { // the ticket, which follows the handshake
		case <-cache.Arrived:
		case <-time.After(5 * time.Second):
			t.Fatal("no session ticket")
		}
		tr.Close()
		if resp.ProtoMajor != 3 || resp.TLS.DidResume != resumed || !strings.HasPrefix(string(body), "hello from ") {
			t.Errorf("request %d: HTTP/%d, resumed %v, %q; want HTTP/3, resumed %v, the greeting", i, resp.ProtoMajor, resp.TLS.DidResume, body, resumed)
		}
	}
}

// serveOneKey writes a ring of one active key and a self-signed
// certificate into a directory, and runs the server on it with the extra
// flags until the test ends. It returns the server's output, line by line
// and whole (to drain once the lines wanted are read), and the pool that
// trusts the certificate.
func serveOneKey(t *testing.T, keyID string, flags ...string) (*bufio.Scanner, io.Reader, *x509.CertPool) {
	t.Helper()
	dir := t.TempDir()
	w, err := atomicdir.NewWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	crt, key, pool := selfSigned(t)
	now := time.Now()
	k := newKey(keyID, now.Add(-time.Hour), now.Add(time.Hour), now.Add(2*time.Hour))
	ring, err := keyring.Encode(keyring.Ring{Name: "shop/web", Epoch: 1, IssuedAt: now, Keys: []keyring.Key{k}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(map[string]atomicdir.File{keyring.FileName: {Data: ring}, "tls.crt": {Data: crt}, "tls.key": {Data: key, Mode: 0o600}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out, stdout := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"-dir", dir, "-listen", "127.0.0.1:0", "-status-listen", ""}, flags...), stdout, io.Discard)
		stdout.Close()
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run returned %v", err)
		}
	})
	return bufio.NewScanner(out), out, pool
}
