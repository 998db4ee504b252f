package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

// TestHAProxyPlan: each "set ssl tls-key" shifts HAProxy's slots by one
// (oldest, encrypting, next), so the plan is the shortest tail of want
// that, appended, turns have into want.
func TestHAProxyPlan(t *testing.T) {
	k := func(s string) []byte { return []byte(s) }
	slots := func(a, b, c string) [keyring.HAProxySlots][]byte {
		return [keyring.HAProxySlots][]byte{k(a), k(b), k(c)}
	}
	tests := []struct {
		name       string
		have, want [keyring.HAProxySlots][]byte
		sets       []string
	}{
		{"already there", slots("D", "A", "S"), slots("D", "A", "S"), nil},
		{"a new epoch brings the next staged key (rotate-now)", slots("D", "A", "S"), slots("A", "S", "N"), []string{"N"}},
		{"the staged key activates, none staged yet", slots("D", "A", "S"), slots("A", "S", "S"), []string{"S"}},
		{"the next staged key arrives after the activation", slots("A", "S", "S"), slots("A", "S", "N"), []string{"A", "S", "N"}},
		{"a new ring from a repeat of its active key", slots("A", "A", "S"), slots("A", "S", "S"), []string{"S"}},
		{"the oldest key expires", slots("D", "A", "S"), slots("A", "A", "S"), []string{"A", "A", "S"}},
		{"nothing in common", slots("X", "Y", "Z"), slots("D", "A", "S"), []string{"D", "A", "S"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sets := haproxyPlan(tt.have, tt.want)
			var got []string
			for _, s := range sets {
				got = append(got, string(s))
			}
			if !slices.Equal(got, tt.sets) {
				t.Fatalf("plan %v, want %v", got, tt.sets)
			}
			// Carried out as HAProxy does, the plan gives want.
			cur := tt.have
			for _, s := range sets {
				cur = [keyring.HAProxySlots][]byte{cur[1], cur[2], s}
			}
			if !slices.EqualFunc(cur[:], tt.want[:], bytes.Equal) {
				t.Errorf("after the plan HAProxy holds %q, want %q", cur, tt.want)
			}
		})
	}
}

func TestParseFlags(t *testing.T) {
	c, err := parseFlags([]string{"--server", "nginx", "--out-dir", "/shared"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.serverDir != "/shared" || c.nginxPIDFile != "/shared/nginx.pid" || c.haproxySocket != "/shared/haproxy.sock" || c.dir != "/var/run/ringmaster" {
		t.Errorf("defaults: %+v", c)
	}
	for _, args := range [][]string{
		{},
		{"--server", "apache"},
		{"--server", "nginx", "--interval", "0s"},
		{"--server", "nginx", "extra"},
		{"--server", "nginx", "--server-dir", "relative"},
		{"--server", "nginx", "--out-dir", "/a dir"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%q): no error", args)
		}
	}
	var help bytes.Buffer
	if _, err := parseFlags([]string{"--help"}, &help); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v", err)
	}
	for _, want := range []string{"Usage: ringmaster-agent --server nginx|haproxy|envoy", "-probe-addr", "-check-command"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, help.String())
		}
	}
}

// TestWriteFiles: files are replaced by rename, unchanged ones are left
// alone, and only the sidecar's own stale files are removed.
func TestWriteFiles(t *testing.T) {
	dir := t.TempDir()
	set := []file{{"nginx.a.key", []byte("a")}, {"nginx.b.key", []byte("b")}, {nginxConf, []byte("a b")}}
	if changed, err := writeFiles(dir, set); err != nil || !changed {
		t.Fatalf("first write: changed %v, %v", changed, err)
	}
	fi, err := os.Stat(filepath.Join(dir, "nginx.a.key"))
	if err != nil || fi.Mode().Perm() != fileMode {
		t.Errorf("mode %v, %v", fi.Mode(), err)
	}
	if changed, err := writeFiles(dir, set); err != nil || changed {
		t.Errorf("same content again: changed %v, %v", changed, err)
	}
	for _, n := range []string{"nginx.pid", "haproxy.sock", ".nginx.old.key.tmp-0123"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	next := []file{{"nginx.b.key", []byte("b")}, {"nginx.c.key", []byte("c")}, {nginxConf, []byte("b c")}}
	if changed, err := writeFiles(dir, next); err != nil || !changed {
		t.Fatalf("next write: changed %v, %v", changed, err)
	}
	if err := removeStale(dir, "nginx.", ".key", next); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"haproxy.sock", nginxConf, "nginx.b.key", "nginx.c.key", "nginx.pid"}; !slices.Equal(names, want) {
		t.Errorf("directory holds %v, want %v", names, want)
	}
}

// TestFirstLineHidesKeys: an answer to "set ssl tls-key" is quoted in the
// error, unless it holds 16 characters of a key that was set.
func TestFirstLineHidesKeys(t *testing.T) {
	key := []byte("c2VjcmV0IGtleSBtYXRlcmlhbCBvZiA0OCBieXRlcyBmb3IgaGFwcm94eQ==")
	other := []byte("b3RoZXIga2V5IG1hdGVyaWFsIG9mIDQ4IGJ5dGVzIGZvciBoYXByb3h5IQ==")
	for _, tc := range []struct {
		name, answer string
		shown        bool
	}{
		{"HAProxy's refusal", "'set ssl tls-key' received invalid base64 encoded TLS key.\n", true},
		{"the key echoed", "unknown key " + string(key) + "\n", false},
		{"the second key echoed", "bad: " + string(other) + "\n", false},
		{"16 characters of it", "near " + string(key[10:26]), false},
		{"10 characters of it", "near " + string(key[10:20]), true},
		{"the key on a later line", "TLS ticket key updated!\n" + string(key), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := firstLine([]byte(tc.answer), [][]byte{key, other})
			for _, k := range [][]byte{key, other} {
				if strings.Contains(got, string(k[:16])) || strings.Contains(got, string(k[10:26])) {
					t.Errorf("firstLine = %s: shows a key", got)
				}
			}
			if shown := strings.Contains(got, strings.TrimSpace(strings.SplitN(tc.answer, "\n", 2)[0])[:5]); shown != tc.shown {
				t.Errorf("firstLine = %s; shown %v, want %v", got, shown, tc.shown)
			}
		})
	}
}

// TestNoServerAtStartup: the server's absence counts as a reload error
// only once the server has answered or the start-up grace has passed;
// every other cause counts at once.
func TestNoServerAtStartup(t *testing.T) {
	noServer := fail(causeNoServer, "no nginx master")
	for _, tc := range []struct {
		name     string
		age      time.Duration // since the sidecar started
		answered bool          // the server took the keys once before
		err      error
		cause    string
		want     float64
	}{
		{"starting, no server yet", 0, false, noServer, causeNoServer, 0},
		{"grace over, no server", noServerGrace, false, noServer, causeNoServer, 1},
		{"server answered, then went", 0, true, noServer, causeNoServer, 1},
		{"starting, write failed", 0, false, fail(causeWrite, "disk full"), causeWrite, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSidecar("nginx", nil, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Minute, time.Second)
			s.started = time.Now().Add(-tc.age)
			if tc.answered {
				s.record(agent.Status{}, applied{}, nil)
			}
			s.record(agent.Status{}, applied{}, tc.err)
			if got := testutil.ToFloat64(s.errors.WithLabelValues(tc.cause)); got != tc.want {
				t.Errorf("reload errors of cause %s = %v, want %v", tc.cause, got, tc.want)
			}
			if s.report().Ready {
				t.Error("ready after a failed apply")
			}
		})
	}
}

// TestPlanReload: nginx is reloaded at once when the key it encrypts with
// is no longer the active one or it holds a key the ring no longer has; a
// key it does not hold yet waits up to the window for such a reload; a key
// that expires within the window goes with a reload, rather than costing
// one of its own.
func TestPlanReload(t *testing.T) {
	now := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	const window = 5 * time.Second
	key := func(id string, expiresIn time.Duration) agent.TicketKey {
		return agent.TicketKey{ID: id, ActiveFrom: now.Add(expiresIn - 3*time.Hour), ExpiresAt: now.Add(expiresIn)}
	}
	A, S, N := key("A", time.Hour), key("S", 2*time.Hour), key("N", 4*time.Hour)
	// N, staged to activate in 7 s: it may not wait past 2 s from now.
	soonN := agent.TicketKey{ID: "N", ActiveFrom: now.Add(7 * time.Second), ExpiresAt: now.Add(3 * time.Hour)}
	soonerN := agent.TicketKey{ID: "N", ActiveFrom: now.Add(3 * time.Second), ExpiresAt: now.Add(3 * time.Hour)}
	old := key("old", time.Hour)
	soon := key("soon", 3*time.Second)
	seenAt := func(ago time.Duration) map[string]time.Time {
		return map[string]time.Time{"A": now.Add(-time.Hour), "S": now.Add(-time.Hour), "old": now.Add(-time.Hour), "soon": now.Add(-time.Hour), "N": now.Add(-ago)}
	}
	tests := []struct {
		name     string
		window   time.Duration
		keys     []agent.TicketKey
		held     []string
		seen     map[string]time.Time
		wantNow  bool
		wantKeys []string
		wantWake time.Duration // from now; 0: none
	}{
		{"nothing loaded yet", window, []agent.TicketKey{A, S}, nil, seenAt(0), true, []string{"A", "S"}, 0},
		{"the same keys", window, []agent.TicketKey{A, S}, []string{"A", "S"}, seenAt(0), false, []string{"A", "S"}, 0},
		{"decrypt-only keys in another order", window, []agent.TicketKey{A, S, old}, []string{"A", "old", "S"}, seenAt(0), false, []string{"A", "old", "S"}, 0},
		{"a key activated", window, []agent.TicketKey{S, A}, []string{"A", "S"}, seenAt(0), true, []string{"S", "A"}, 0},
		{"a key dropped", window, []agent.TicketKey{A, S}, []string{"A", "S", "old"}, seenAt(0), true, []string{"A", "S"}, 0},
		{"a revoke: no key held is left", window, []agent.TicketKey{N}, []string{"A", "S"}, seenAt(0), true, []string{"N"}, 0},
		{"a new staged key waits", window, []agent.TicketKey{A, N, S}, []string{"A", "S"}, seenAt(2 * time.Second), false, []string{"A", "S"}, 3 * time.Second},
		{"a new staged key that activates soon waits less", window, []agent.TicketKey{A, soonN, S}, []string{"A", "S"}, seenAt(0), false, []string{"A", "S"}, 2 * time.Second},
		{"a new staged key that activates within the window is loaded at once", window, []agent.TicketKey{A, soonerN, S}, []string{"A", "S"}, seenAt(0), true, []string{"A", "N", "S"}, 0},
		{"a new staged key's window ran out", window, []agent.TicketKey{A, N, S}, []string{"A", "S"}, seenAt(window), true, []string{"A", "N", "S"}, 0},
		{"a new staged key rides with an activation", window, []agent.TicketKey{S, N, A}, []string{"A", "S"}, seenAt(0), true, []string{"S", "N", "A"}, 0},
		{"a key expiring within the window goes with a reload", window, []agent.TicketKey{S, A, soon}, []string{"A", "S", "soon"}, seenAt(0), true, []string{"S", "A"}, 0},
		{"a key expiring within the window stays without one", window, []agent.TicketKey{A, S, soon}, []string{"A", "S", "soon"}, seenAt(0), false, []string{"A", "S", "soon"}, 0},
		{"a key expiring within the window is not loaded anew", window, []agent.TicketKey{A, S, soon}, []string{"A", "S"}, seenAt(0), false, []string{"A", "S"}, 0},
		{"the active key is loaded however soon it expires", window, []agent.TicketKey{soon}, []string{"A"}, seenAt(0), true, []string{"soon"}, 0},
		{"window 0: a new staged key at once", 0, []agent.TicketKey{A, N, S}, []string{"A", "S"}, seenAt(0), true, []string{"A", "N", "S"}, 0},
		{"window 0: an expiring key kept to its end", 0, []agent.TicketKey{S, A, soon}, []string{"A", "S", "soon"}, seenAt(0), true, []string{"S", "A", "soon"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := planReload(now, tt.window, tt.keys, tt.held, tt.seen)
			if got.now != tt.wantNow || !slices.Equal(ids(got.keys), tt.wantKeys) {
				t.Errorf("planReload = reload now %v with %v, want %v with %v", got.now, ids(got.keys), tt.wantNow, tt.wantKeys)
			}
			var wake time.Duration
			if !got.wake.IsZero() {
				wake = got.wake.Sub(now)
			}
			if wake != tt.wantWake {
				t.Errorf("wake in %v, want %v", wake, tt.wantWake)
			}
		})
	}
}
