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
