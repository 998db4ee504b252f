package ringmaster_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/testing/atomicdir"
	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
)

const serverName = "web.test"

// ring encodes epoch n of a ring rotated by new epochs: k<n> active, k<n+1>
// staged (delivered one epoch before it encrypts), k<n-1> decrypt-only.
func ring(t *testing.T, n int) []byte {
	t.Helper()
	now := time.Now()
	key := func(i int, activeFrom time.Time) keyring.Key {
		k := keyring.NewKey(keyring.Secret(sha256.Sum256(fmt.Appendf(nil, "k%d", i))))
		k.ActiveFrom, k.RetireAt, k.ExpiresAt = activeFrom, now.Add(time.Hour), now.Add(2*time.Hour)
		return k
	}
	keys := []keyring.Key{key(n+1, now.Add(time.Hour)), key(n, now.Add(-time.Minute))}
	if n > 1 {
		keys = append(keys, key(n-1, now.Add(-2*time.Minute)))
		keys[2].RetireAt = now.Add(-time.Minute)
	}
	keys[1].RetireAt = now.Add(time.Hour)
	keys[0].RetireAt = now.Add(90 * time.Minute)
	b, err := keyring.Encode(keyring.Ring{Name: "shop/web", Epoch: int64(n), IssuedAt: now, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// frozenCache holds the first session it is given and never another, so
// that a client keeps offering one old ticket.
type frozenCache struct{ s *tls.ClientSessionState }

func (c *frozenCache) Get(string) (*tls.ClientSessionState, bool) { return c.s, c.s != nil }
func (c *frozenCache) Put(_ string, s *tls.ClientSessionState) {
	if c.s == nil && s != nil {
		c.s = s
	}
}

// caddyBinary builds Caddy with the module (./cmd/caddy).
func caddyBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "caddy")
	out, err := exec.Command("go", "build", "-o", bin, "./cmd/caddy").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/caddy: %v\n%s", err, out)
	}
	return bin
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startCaddy runs one Caddy serving HTTPS on addr with its ticket keys from
// the ring in dir.
func startCaddy(t *testing.T, bin, dir, addr string, cert *testpki.Issued) {
	t.Helper()
	work := t.TempDir()
	crt, key := filepath.Join(work, "tls.crt"), filepath.Join(work, "tls.key")
	if err := os.WriteFile(crt, cert.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, cert.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{
		"admin":   map[string]any{"disabled": true},
		"storage": map[string]any{"module": "file_system", "root": filepath.Join(work, "storage")},
		"apps": map[string]any{
			"tls": map[string]any{
				"certificates":    map[string]any{"load_files": []any{map[string]any{"certificate": crt, "key": key}}},
				"session_tickets": map[string]any{"key_source": map[string]any{"provider": "ringmaster", "dir": dir, "ring": "shop/web"}},
			},
			"http": map[string]any{"servers": map[string]any{"web": map[string]any{
				"listen":                  []string{addr},
				"automatic_https":         map[string]any{"disable": true},
				"tls_connection_policies": []any{map[string]any{}},
				"routes":                  []any{map[string]any{"handle": []any{map[string]any{"handler": "static_response", "body": "ok"}}}},
			}}},
		},
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(work, "caddy.json")
	if err := os.WriteFile(path, js, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "run", "--config", path)
	cmd.Env = append(os.Environ(), "HOME="+work, "XDG_DATA_HOME="+work, "XDG_CONFIG_HOME="+work)
	logf, err := os.Create(filepath.Join(work, "caddy.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		_ = logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("caddy on %s:\n%s", addr, b)
		}
	})
	for range 300 {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("caddy on %s never listened", addr)
}

func handshake(t *testing.T, addr string, cfg *tls.Config) tls.ConnectionState {
	t.Helper()
	d := tls.Dialer{Config: cfg, NetDialer: &net.Dialer{Timeout: 5 * time.Second}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("handshake with %s: %v", addr, err)
	}
	defer c.Close()
	tc := c.(*tls.Conn)
	// A TLS 1.3 ticket arrives after the handshake: read the answer.
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", serverName)
	buf := make([]byte, 512)
	for {
		if _, err := tc.Read(buf); err != nil {
			break
		}
	}
	return tc.ConnectionState()
}

// TestCaddyOnTheRing: two real Caddy instances fed by tls.stek.ringmaster
// from one ring resume each other's sessions, round robin, through three
// rotations, in TLS 1.2 and 1.3; a ticket under a key the ring has dropped
// stops resuming on both; a bad snapshot keeps the last good keys.
func TestCaddyOnTheRing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds Caddy")
	}
	bin := caddyBinary(t)
	ca, err := testpki.NewCA("ringmaster caddy test")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Issue(testpki.Leaf{DNSNames: []string{serverName}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	w, err := atomicdir.NewWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	write := func(data []byte) {
		t.Helper()
		if err := w.Write(map[string]atomicdir.File{keyring.FileName: {Data: data}}); err != nil {
			t.Fatal(err)
		}
	}
	write(ring(t, 1))
	addrs := []string{freeAddr(t), freeAddr(t)}
	for _, a := range addrs {
		startCaddy(t, bin, dir, a, cert)
	}
	client := func(version uint16, cache tls.ClientSessionCache) *tls.Config {
		return &tls.Config{RootCAs: ca.Pool(), ServerName: serverName, MinVersion: version, MaxVersion: version, ClientSessionCache: cache}
	}
	versions := []uint16{tls.VersionTLS12, tls.VersionTLS13}
	// A ticket of epoch 1, under k1, from the first instance.
	old := map[uint16]*tls.Config{}
	for _, v := range versions {
		old[v] = client(v, &frozenCache{})
		handshake(t, addrs[0], old[v])
		if cs := handshake(t, addrs[1], old[v]); !cs.DidResume {
			t.Fatalf("%s: a ticket of the first Caddy does not resume on the second", tls.VersionName(v))
		}
	}

	const perRound = 100
	resumed, total := 0, 0
	for epoch := 2; epoch <= 4; epoch++ {
		write(ring(t, epoch))
		for _, v := range versions {
			cfg := client(v, tls.NewLRUClientSessionCache(4))
			handshake(t, addrs[0], cfg) // the client's first, full
			for i := range perRound {
				if handshake(t, addrs[(i+1)%2], cfg).DidResume {
					resumed++
				}
				total++
			}
		}
		if epoch == 3 {
			// k1 is out of the ring from epoch 3: once both instances
			// took it, the old ticket no longer resumes on either.
			for _, v := range versions {
				for _, a := range addrs {
					gone := false
					for range 100 {
						if !handshake(t, a, old[v]).DidResume {
							gone = true
							break
						}
						time.Sleep(50 * time.Millisecond)
					}
					if !gone {
						t.Errorf("%s on %s: a ticket under k1 still resumes at epoch 3", tls.VersionName(v), a)
					}
				}
			}
		}
	}
	t.Logf("resumed %d of %d round-robin handshakes (%.2f %%) through 3 rotations", resumed, total, 100*float64(resumed)/float64(total))
	if float64(resumed) < 0.995*float64(total) {
		t.Errorf("resumed %d of %d round-robin handshakes, want at least 99.5 %%", resumed, total)
	}

	// A bad snapshot: both instances keep the last good keys.
	write([]byte(`{"not": "a ring"}`))
	time.Sleep(time.Second) // the agent's debounce and read; nothing to wait on
	for _, v := range versions {
		cfg := client(v, tls.NewLRUClientSessionCache(4))
		handshake(t, addrs[0], cfg)
		if !handshake(t, addrs[1], cfg).DidResume {
			t.Errorf("%s: after a bad snapshot, a ticket of one Caddy does not resume on the other", tls.VersionName(v))
		}
	}
}
