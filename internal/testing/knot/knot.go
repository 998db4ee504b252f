// Package knot is test support: Debian's Knot DNS (knotd) as an
// authoritative server on loopback, with its own configuration, zone file
// and run directory in a temporary directory (no systemd, no /etc/knot),
// one zone, and a TSIG key allowed to update it (RFC 2136). It stands in
// for the primary DNS server ringmaster publishes ECH configs to.
//
// make servers installs knotd (hack/debian.sh knot). Run skips its test
// when knotd is missing in the unit layer and fails it under the
// integration and e2e tags, which make test uses.
package knot

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// DefaultKnotd is where Debian's knot package installs the server;
// RINGMASTER_KNOTD names another.
const DefaultKnotd = "/usr/sbin/knotd"

// DefaultRecords are the records Run and Start put in the zone when the
// caller names none: an HTTPS record for www that already carries other
// SvcParams (alpn, port, ipv4hint), so that a publisher is seen to merge
// the ech parameter rather than replace the record.
var DefaultRecords = []string{
	"www 300 IN HTTPS 1 . alpn=h2,http/1.1 port=8443 ipv4hint=127.0.0.1",
}

// Key is a TSIG key: Name a DNS name (FQDN), Algorithm knot's name for it
// (hmac-sha256), Secret the raw key bytes.
type Key struct {
	Name      string
	Algorithm string
	Secret    []byte
}

// String names the key without its secret.
func (k Key) String() string { return fmt.Sprintf("TSIG key %s (%s)", k.Name, k.Algorithm) }

// NewKey makes a fresh hmac-sha256 key of 32 random bytes named name.
func NewKey(name string) Key {
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	return Key{Name: dns.Fqdn(name), Algorithm: "hmac-sha256", Secret: secret}
}

// Server is a running knotd.
type Server struct {
	// Addr is the host:port it answers on, UDP and TCP.
	Addr string
	// Zone is the zone it serves, an FQDN.
	Zone string
	// Key is the TSIG key allowed to update Zone.
	Key Key
	// Dir holds its configuration, zone file, database and log.
	Dir string

	knotd string
	mu    sync.Mutex
	cmd   *exec.Cmd
	done  chan struct{}
}

// Binary is the knotd to run: RINGMASTER_KNOTD, or DefaultKnotd; an error
// says how to install it when it is missing.
func Binary() (string, error) {
	bin := DefaultKnotd
	if p := os.Getenv("RINGMASTER_KNOTD"); p != "" {
		bin = p
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("knotd is missing (%s): make servers installs it (hack/debian.sh knot), or set RINGMASTER_KNOTD: %w", bin, err)
	}
	return bin, nil
}

// Start writes a configuration for zone (an FQDN) with key allowed to
// update it, and records (zone-file lines relative to the zone, an SOA
// and NS are added; DefaultRecords when none), in dir, and starts knotd
// on 127.0.0.1 at a free port. It returns once the server answers the
// zone's SOA. A zero key is replaced by a fresh one (Server.Key).
func Start(ctx context.Context, dir, zone string, key Key, records ...string) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	zone = dns.Fqdn(zone)
	if key.Name == "" {
		key = NewKey("ringmaster-test.")
	}
	if len(records) == 0 {
		records = DefaultRecords
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Zone: zone, Key: key, Dir: dir, knotd: bin}
	for _, d := range []string{"run", "db", "zones"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "knot.conf"), []byte(s.config(port)), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(s.zoneFile(), []byte(zoneFile(zone, records)), 0o600); err != nil {
		return nil, err
	}
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// TB is what Run needs of a test: testing.TB, or Ginkgo's GinkgoT().
type TB interface {
	Helper()
	TempDir() string
	Cleanup(func())
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
}

// Run starts a Server for t in a temporary directory and stops it when t
// ends. When knotd is missing it skips t in the unit layer and fails it
// under the integration and e2e tags.
func Run(t TB, zone string, key Key, records ...string) *Server {
	t.Helper()
	if _, err := Binary(); err != nil {
		if required {
			t.Fatalf("%v", err)
		}
		t.Skipf("%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, t.TempDir(), zone, key, records...)
	if err != nil {
		t.Fatalf("start knotd: %v", err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

func (s *Server) zoneFile() string {
	return filepath.Join(s.Dir, "zones", strings.TrimSuffix(s.Zone, ".")+".zone")
}

func (s *Server) config(port int) string {
	return fmt.Sprintf(`server:
    rundir: %[1]q
    listen: 127.0.0.1@%[2]d
    udp-workers: 1
    tcp-workers: 1
    background-workers: 1

control:
    listen: %[3]q

database:
    storage: %[4]q

log:
  - target: stderr
    any: info

key:
  - id: %[5]s
    algorithm: %[6]s
    secret: %[7]s

acl:
  - id: update
    key: %[5]s
    action: update

template:
  - id: default
    storage: %[8]q
    file: "%%s.zone"
    zonefile-sync: 0
    journal-content: changes

zone:
  - domain: %[9]s
    acl: update
`, filepath.Join(s.Dir, "run"), port, filepath.Join(s.Dir, "run", "knot.sock"), filepath.Join(s.Dir, "db"),
		s.Key.Name, s.Key.Algorithm, base64.StdEncoding.EncodeToString(s.Key.Secret),
		filepath.Join(s.Dir, "zones"), s.Zone)
}

func zoneFile(zone string, records []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "$ORIGIN %s\n$TTL 300\n", zone)
	fmt.Fprintf(&b, "@ SOA ns.%s hostmaster.%s 1 3600 600 86400 300\n", zone, zone)
	fmt.Fprintf(&b, "@ NS ns.%s\nns A 127.0.0.1\n", zone)
	for _, r := range records {
		b.WriteString(r)
		b.WriteByte('\n')
	}
	return b.String()
}

// start runs knotd on s's configuration and waits for the zone's SOA.
func (s *Server) start(ctx context.Context) error {
	logf, err := os.OpenFile(filepath.Join(s.Dir, "knotd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.knotd, "-c", filepath.Join(s.Dir, "knot.conf"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("start %s: %w", s.knotd, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	if err := s.waitReady(ctx, done); err != nil {
		_ = s.Stop()
		return fmt.Errorf("knotd on %s: %w\n%s", s.Addr, err, s.LogTail())
	}
	return nil
}

// waitReady asks for the zone's SOA until knotd answers it with
// authority, the process exits, or ctx ends (bounded by ctx).
func (s *Server) waitReady(ctx context.Context, done <-chan struct{}) error {
	c := &dns.Client{Net: "udp", Timeout: 200 * time.Millisecond}
	m := new(dns.Msg)
	m.SetQuestion(s.Zone, dns.TypeSOA)
	m.RecursionDesired = false
	for {
		select {
		case <-done:
			return errors.New("knotd exited")
		default:
		}
		if r, _, err := c.ExchangeContext(ctx, m, s.Addr); err == nil && r.Rcode == dns.RcodeSuccess && r.Authoritative && len(r.Answer) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not answering the SOA of %s: %w", s.Zone, ctx.Err())
		case <-done:
			return errors.New("knotd exited")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop ends knotd (SIGTERM, then SIGKILL after 5s) and waits for it to
// exit. Stopping a stopped server does nothing.
func (s *Server) Stop() error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	return nil
}

// Restart starts a stopped server again on the same address, directory and
// zone; the zone holds every update it had taken before it stopped.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if running {
		return errors.New("knotd is running")
	}
	return s.start(ctx)
}

// Pid is knotd's process id, 0 when stopped.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// LogTail is the end of knotd's log, for a failing test's message.
func (s *Server) LogTail() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "knotd.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(bytes.TrimSpace(b))
}

// Query asks the server (over TCP, no recursion) for name's records of
// type t and returns those of the answer.
func (s *Server) Query(ctx context.Context, name string, t uint16) ([]dns.RR, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), t)
	m.RecursionDesired = false
	r, _, err := (&dns.Client{Net: "tcp", Timeout: 5 * time.Second}).ExchangeContext(ctx, m, s.Addr)
	if err != nil {
		return nil, err
	}
	if r.Rcode != dns.RcodeSuccess && r.Rcode != dns.RcodeNameError {
		return nil, fmt.Errorf("query %s %s: %s", name, dns.TypeToString[t], dns.RcodeToString[r.Rcode])
	}
	var out []dns.RR
	for _, rr := range r.Answer {
		if rr.Header().Rrtype == t {
			out = append(out, rr)
		}
	}
	return out, nil
}

// Replace sets name's RRset of type t to records (zone-file text, owner
// included, relative to the zone or FQDN; none deletes the RRset) by an
// RFC 2136 update signed with the server's key: what another system
// publishing to the zone would do.
func (s *Server) Replace(ctx context.Context, name string, t uint16, records ...string) error {
	m := new(dns.Msg)
	m.SetUpdate(s.Zone)
	owner := dns.Fqdn(name)
	if !strings.HasSuffix(name, ".") {
		owner = name + "." + s.Zone
	}
	m.RemoveRRset([]dns.RR{&dns.ANY{Hdr: dns.RR_Header{Name: owner, Rrtype: t, Class: dns.ClassINET}}})
	var rrs []dns.RR
	for _, text := range records {
		zp := dns.NewZoneParser(strings.NewReader(text), s.Zone, "")
		rr, ok := zp.Next()
		if err := zp.Err(); err != nil {
			return fmt.Errorf("parse %q: %w", text, err)
		}
		if !ok {
			return fmt.Errorf("parse %q: no record", text)
		}
		rrs = append(rrs, rr)
	}
	if len(rrs) > 0 {
		m.Insert(rrs)
	}
	m.SetTsig(s.Key.Name, dns.Fqdn(s.Key.Algorithm), 300, time.Now().Unix())
	c := &dns.Client{Net: "tcp", Timeout: 5 * time.Second,
		TsigSecret: map[string]string{s.Key.Name: base64.StdEncoding.EncodeToString(s.Key.Secret)}}
	r, _, err := c.ExchangeContext(ctx, m, s.Addr)
	if err != nil {
		return err
	}
	if r.Rcode != dns.RcodeSuccess {
		return fmt.Errorf("update %s: %s", owner, dns.RcodeToString[r.Rcode])
	}
	return nil
}

// freePort finds a port free on 127.0.0.1 for both TCP and UDP.
func freePort() (int, error) {
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		_ = l.Close()
		if err == nil {
			_ = u.Close()
			return port, nil
		}
	}
	return 0, errors.New("no port free for both TCP and UDP on 127.0.0.1")
}
