package agent_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/testing/atomicdir"
	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

// fakeClock is an agent.Clock that moves only when told to.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock(now time.Time) *fakeClock { return &fakeClock{now: now} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, waiter{c.now.Add(d), ch})
	return ch
}

// Set moves the clock to t and fires every timer due by then.
func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
	keep := c.waiters[:0]
	for _, w := range c.waiters {
		if t.Before(w.at) {
			keep = append(keep, w)
			continue
		}
		w.ch <- t
	}
	c.waiters = keep
}

// pki issues ECDSA P-256 certificates for 127.0.0.1 and localhost, from
// the tests' one authority (internal/testing/testpki).
type pki struct {
	t      testing.TB
	ca     *testpki.CA
	serial int64
}

// leaf is one issued certificate in the files a kubernetes.io/tls Secret
// holds.
type leaf struct {
	crt, key []byte
	cert     *x509.Certificate
}

func newPKI(t testing.TB) *pki {
	t.Helper()
	ca, err := testpki.NewCA("ringmaster test CA")
	if err != nil {
		t.Fatal(err)
	}
	return &pki{t: t, ca: ca}
}

func (p *pki) issue(notBefore, notAfter time.Time) leaf {
	p.t.Helper()
	p.serial++
	is, err := p.ca.Issue(testpki.Leaf{
		DNSNames:  []string{"localhost"},
		IPs:       []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: notBefore,
		NotAfter:  notAfter,
	})
	if err != nil {
		p.t.Fatal(err)
	}
	return leaf{crt: is.CertPEM, key: is.KeyPEM, cert: is.Cert}
}

// valid issues a certificate valid from a day ago (so that fake clocks set
// hours back still find it valid) for about a day. Each one expires a
// minute after the previous one, so that NotAfter, which Status reports,
// tells them apart.
func (p *pki) valid() leaf {
	return p.issue(time.Now().Add(-24*time.Hour), time.Now().Add(24*time.Hour+time.Duration(p.serial)*time.Minute))
}

func (l leaf) tlsCertificate(t testing.TB) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(l.crt, l.key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// client returns a client config trusting p, with its own session cache.
func (p *pki) client(version uint16) *tls.Config {
	return &tls.Config{
		RootCAs:            p.ca.Pool(),
		ServerName:         "localhost",
		MinVersion:         version,
		MaxVersion:         version,
		ClientSessionCache: tls.NewLRUClientSessionCache(4),
	}
}

// newKey returns a ticket key whose secret derives from seed.
func newKey(seed string, activeFrom, retireAt, expiresAt time.Time) keyring.Key {
	k := keyring.NewKey(keyring.Secret(sha256.Sum256([]byte(seed))))
	k.ActiveFrom, k.RetireAt, k.ExpiresAt = activeFrom, retireAt, expiresAt
	return k
}

// encodeRing encodes keys, newest first, as ticketkeys.json.
func encodeRing(t testing.TB, epoch int64, keys ...keyring.Key) []byte {
	t.Helper()
	b, err := keyring.Encode(keyring.Ring{Name: "shop/web", Epoch: epoch, IssuedAt: time.Unix(1_700_000_000, 0), Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// editRing decodes an encoded ring as plain JSON, lets edit change it, and
// encodes it again, to build rings the codec itself refuses to write.
// encodeOversized writes a ring of more keys than keyring.Encode accepts,
// as a forged or corrupt file would hold: the first keyring.MaxKeys are
// encoded as a ring, the rest appended to its key list.
func encodeOversized(t *testing.T, epoch int64, keys ...keyring.Key) []byte {
	t.Helper()
	extra := editRing(t, encodeRing(t, epoch, keys[keyring.MaxKeys:]...), func(map[string]any) {})
	var more map[string]any
	if err := json.Unmarshal(extra, &more); err != nil {
		t.Fatal(err)
	}
	return editRing(t, encodeRing(t, epoch, keys[:keyring.MaxKeys]...), func(m map[string]any) {
		m["keys"] = append(m["keys"].([]any), more["keys"].([]any)...)
	})
}

func editRing(t *testing.T, ring []byte, edit func(m map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(ring, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// volume is a directory written the way the kubelet writes projected
// volumes.
type volume struct {
	t   testing.TB
	dir string
	w   *atomicdir.Writer
}

func newVolume(t testing.TB) *volume {
	t.Helper()
	dir := t.TempDir()
	w, err := atomicdir.NewWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	return &volume{t: t, dir: dir, w: w}
}

// write projects the given files; a nil value leaves that file out.
func (v *volume) write(ring, crt, key []byte) {
	v.t.Helper()
	payload := map[string]atomicdir.File{}
	for name, data := range map[string][]byte{keyring.FileName: ring, "tls.crt": crt, "tls.key": key} {
		if data != nil {
			payload[name] = atomicdir.File{Data: data}
		}
	}
	if err := v.w.Write(payload); err != nil {
		v.t.Fatal(err)
	}
}

// logBuffer collects an agent's JSON log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// records returns the log lines whose every given attribute matches.
func (l *logBuffer) records(t *testing.T, match map[string]string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(l.String()) {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		ok := true
		for k, v := range match {
			if s, _ := r[k].(string); s != v {
				ok = false
			}
		}
		if ok {
			out = append(out, r)
		}
	}
	return out
}

const rejectedMsg = "Rejected TLS material; the last good config keeps serving"

// start runs a.Start until the test ends, then checks that it returned nil.
func start(t *testing.T, a *agent.Agent) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Start returned %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Start did not return after cancel")
		}
	})
}

// serve runs a TLS server on loopback with cfg. Each connection handshakes,
// sends one byte (after the TLS 1.3 tickets, so the client has them once it
// reads it) and waits for the client to close.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				tc := tls.Server(c, cfg)
				if tc.Handshake() != nil {
					return
				}
				if _, err := tc.Write([]byte{1}); err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, tc)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

// handshake connects to addr with cfg, reads the server's byte (and with it
// any ticket), and returns the connection's state.
func handshake(t *testing.T, addr string, cfg *tls.Config) tls.ConnectionState {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		t.Fatalf("handshake with %s: %v", addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatalf("read from %s: %v", addr, err)
	}
	return c.ConnectionState()
}

// staticServer serves with a plain config holding exactly keys, to tell
// which key encrypted a ticket.
func staticServer(t *testing.T, cert tls.Certificate, keys ...keyring.Key) string {
	t.Helper()
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}}
	secrets := make([][32]byte, len(keys))
	for i, k := range keys {
		secrets[i] = k.Secret
	}
	cfg.SetSessionTicketKeys(secrets)
	return serve(t, cfg)
}

// eventually polls cond until it holds or a deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// metrics gathers a's metrics through a pedantic registry, keyed
// "name{label=value}".
func metrics(t *testing.T, a *agent.Agent) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(a); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			switch {
			case m.Counter != nil:
				out[key] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[key] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// metricsText renders a's metrics in the exposition format.
func metricsText(t *testing.T, a *agent.Agent) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(a)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// assertNoSecrets fails if text holds any key's secret in any encoding a
// careless log line could use.
func assertNoSecrets(t *testing.T, where, text string, keys ...keyring.Key) {
	t.Helper()
	for _, k := range keys {
		for _, enc := range []string{
			base64.StdEncoding.EncodeToString(k.Secret[:]),
			base64.RawStdEncoding.EncodeToString(k.Secret[:]),
			hex.EncodeToString(k.Secret[:]),
			base64.URLEncoding.EncodeToString(k.Secret[:]),
			string(k.Secret[:]),
			decimal(k.Secret[:]), // %v of the bytes
		} {
			if strings.Contains(text, enc) {
				t.Errorf("%s holds the secret of key %s", where, k.ID)
			}
		}
	}
}

// decimal is b as %v prints a byte slice, without the brackets.
func decimal(b []byte) string {
	parts := make([]string, len(b))
	for i, c := range b {
		parts[i] = strconv.Itoa(int(c))
	}
	return strings.Join(parts, " ")
}

func mustStatusJSON(t *testing.T, a *agent.Agent) string {
	t.Helper()
	b, err := json.Marshal(a.Status())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
