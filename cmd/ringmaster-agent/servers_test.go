//go:build integration

package main

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
)

// TestNginx drives a real nginx through the sidecar: its first ring, a
// staged key activating with no new file, a new epoch that drops a key, a
// ring the agent refuses, and nginx stopped and started again.
func TestNginx(t *testing.T) {
	g := newRig(t, fleet.Nginx)
	now := time.Now()
	A := keyAt("A", now.Add(-time.Minute), now.Add(4*time.Second), now.Add(time.Hour))
	S := keyAt("S", now.Add(4*time.Second), now.Add(time.Hour), now.Add(2*time.Hour))
	g.write(ringOf(1, S, A))
	g.startSidecar("--check-command", fleet.NginxCheckCommand(g.r))

	t.Log("Before nginx runs, the sidecar is not ready")
	g.waitFor("reporting nginx down", func() bool {
		ok, body := g.ready()
		return !ok && strings.Contains(body, "nginx is not running")
	})
	include, err := os.ReadFile(filepath.Join(g.r.Shared, nginxConf))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("ssl_session_ticket_key %s/nginx.%s.key;\nssl_session_ticket_key %s/nginx.%s.key;\n", g.r.Shared, A.ID, g.r.Shared, S.ID); !strings.HasSuffix(string(include), want) {
		t.Errorf("include:\n%s\nwant it to end with\n%s", include, want)
	}

	g.startServer()
	g.waitTaken(1, A)
	if !g.encryptsWith(A) {
		t.Fatal("nginx does not encrypt with the active key")
	}
	g.checkResumes()
	underA := g.client(tls.VersionTLS13, &fleet.FirstTicket{})
	g.resumes(underA)

	t.Log("At the staged key's activeFrom, with no new file, nginx is reloaded with it first")
	g.waitTaken(1, S)
	if !g.encryptsWith(S) {
		t.Error("nginx does not encrypt with the key that activated")
	}
	if !g.resumes(underA) {
		t.Error("a ticket under the now decrypt-only key does not resume")
	}
	if got := g.metric("ringmaster_sidecar_reloads_total"); got != "2" {
		t.Errorf("ringmaster_sidecar_reloads_total = %q, want 2: the first ring and the activation", got)
	}

	t.Log("A new epoch of the same keys in the same order, where only a key's state differs, does not reload nginx")
	// A retires later in this epoch: it reads active rather than
	// decrypt-only, while S still encrypts; nginx must hold the same keys.
	laterA := A
	laterA.RetireAt = now.Add(time.Hour)
	g.write(ringOf(2, S, laterA))
	g.waitTaken(2, S)
	if got := g.metric("ringmaster_sidecar_reloads_total"); got != "2" {
		t.Errorf("ringmaster_sidecar_reloads_total = %q after an epoch of the same key set, want 2", got)
	}

	t.Log("A new epoch drops A: its tickets no longer resume, its file is gone")
	S2 := keyAt("S2", now.Add(time.Hour), now.Add(2*time.Hour), now.Add(3*time.Hour))
	g.write(ringOf(3, S2, S))
	g.waitTaken(3, S)
	if g.resumes(underA) {
		t.Error("a ticket under a dropped key resumed")
	}
	if _, err := os.Stat(filepath.Join(g.r.Shared, "nginx."+A.ID+".key")); !os.IsNotExist(err) {
		t.Errorf("the dropped key's file is still there: %v", err)
	}
	if held := g.report().ServerKeys; !slices.Equal(held, []string{S.ID, S2.ID}) {
		t.Errorf("nginx holds %v, want %v", held, []string{S.ID, S2.ID})
	}

	t.Log("A ring the agent refuses (an epoch that goes back) leaves nginx as it was")
	g.write(ringOf(1, S, A))
	g.waitFor("refusing the rollback", func() bool { return strings.Contains(g.report().Agent.LastError, "epoch went back") })
	if r := g.report(); !r.Ready || r.Epoch != 3 || !g.encryptsWith(S) {
		t.Errorf("after a refused ring: ready %v epoch %d, want ready at epoch 3 under %s", r.Ready, r.Epoch, S.ID)
	}

	t.Log("nginx stopped: not ready; started again: ready, on the same keys")
	g.stopServer()
	g.waitFor("not ready without nginx", func() bool { ok, _ := g.ready(); return !ok })
	if got := g.metric(`ringmaster_sidecar_reload_errors_total{cause="no_server"}`); got == "0" || got == "" {
		t.Errorf("reload errors of cause no_server = %q", got)
	}
	g.startServer()
	g.waitTaken(3, S)
	if !g.encryptsWith(S) {
		t.Error("the restarted nginx does not encrypt with the active key")
	}
	g.assertNoSecrets(A, S, S2)
}

// TestHAProxy drives a real HAProxy through the sidecar and its runtime
// API: a new ring of two keys, which HAProxy refuses as a file of two
// lines; a staged key activating, with no reload and no dropped
// connection; a key expiring; a new epoch.
func TestHAProxy(t *testing.T) {
	g := newRig(t, fleet.HAProxy)
	now := time.Now()
	A := keyAt("A", now.Add(-time.Minute), now.Add(4*time.Second), now.Add(8*time.Second))
	S := keyAt("S", now.Add(4*time.Second), now.Add(time.Hour), now.Add(2*time.Hour))
	g.write(ringOf(1, S, A))
	g.startSidecar()
	if err := fleet.WaitFile(t.Context(), filepath.Join(g.r.Shared, haproxyKeys), nil); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, filepath.Join(g.r.Shared, haproxyKeys))
	if len(lines) != keyring.HAProxySlots || lines[0] != lines[1] || lines[1] == lines[2] {
		t.Fatalf("haproxy.keys of a new ring: %d lines, want the active key twice then the staged key", len(lines))
	}

	g.startServer()
	g.waitTaken(1, A)
	if !g.encryptsWith(A) {
		t.Fatal("HAProxy does not encrypt with the active key")
	}
	if held := g.report().ServerKeys; !slices.Equal(held, []string{A.ID, A.ID, S.ID}) {
		t.Errorf("HAProxy holds %v, want %v", held, []string{A.ID, A.ID, S.ID})
	}
	g.checkResumes()
	underA := g.client(tls.VersionTLS12, &fleet.FirstTicket{})
	g.resumes(underA)
	pid := g.r.Proc.PID
	conn, err := tls.Dial("tcp", g.r.Addr, g.client(tls.VersionTLS13, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	get(t, conn)

	t.Log("At the staged key's activeFrom, one runtime API command: no reload, the open connection goes on")
	g.waitTaken(1, S)
	if !g.encryptsWith(S) {
		t.Error("HAProxy does not encrypt with the key that activated")
	}
	if held := g.report().ServerKeys; !slices.Equal(held, []string{A.ID, S.ID, S.ID}) {
		t.Errorf("HAProxy holds %v, want %v", held, []string{A.ID, S.ID, S.ID})
	}
	if exited, _ := g.r.Proc.Exited(); exited || g.r.Proc.PID != pid {
		t.Error("HAProxy was restarted")
	}
	get(t, conn) // a second request on the connection opened before
	if !g.resumes(underA) {
		t.Error("a ticket under the now decrypt-only key does not resume")
	}

	t.Log("At A's expiresAt, with no new file, HAProxy drops it")
	g.waitFor("HAProxy without A", func() bool { return !slices.Contains(g.report().ServerKeys, A.ID) })
	if g.resumes(underA) {
		t.Error("a ticket under an expired key resumed")
	}
	if lines := readLines(t, filepath.Join(g.r.Shared, haproxyKeys)); len(lines) != keyring.HAProxySlots {
		t.Errorf("haproxy.keys has %d lines", len(lines))
	}

	t.Log("A new epoch with the next staged key")
	S2 := keyAt("S2", now.Add(time.Hour), now.Add(2*time.Hour), now.Add(3*time.Hour))
	g.write(ringOf(2, S2, S))
	g.waitTaken(2, S)
	if held := g.report().ServerKeys; !slices.Equal(held, []string{S.ID, S.ID, S2.ID}) {
		t.Errorf("HAProxy holds %v, want %v", held, []string{S.ID, S.ID, S2.ID})
	}
	if !g.encryptsWith(S) {
		t.Error("HAProxy does not encrypt with the active key")
	}
	if got := g.metric(`ringmaster_sidecar_reload_errors_total{cause="runtime_api"}`); got != "0" {
		t.Errorf("runtime API errors: %s", got)
	}

	t.Log("Once every key has expired, HAProxy holds none of them")
	last := keyAt("last", now.Add(-time.Minute), time.Now().Add(3*time.Second), time.Now().Add(3*time.Second))
	g.write(ringOf(3, last))
	g.waitTaken(3, last)
	underLast := g.client(tls.VersionTLS13, &fleet.FirstTicket{})
	g.resumes(underLast)
	g.waitFor("HAProxy on the sidecar's random key", func() bool {
		return slices.Equal(g.report().ServerKeys, []string{"random", "random", "random"})
	})
	if g.resumes(underLast) {
		t.Error("a ticket under an expired key resumed")
	}
	g.checkResumes()

	t.Log("The operator, unable to mint, publishes the ring without keys: HAProxy stays on the random key")
	g.write(ringOf(4))
	g.waitFor("the key-less epoch read", func() bool { return g.report().Agent.Epoch == 4 })
	if held := g.report().ServerKeys; !slices.Equal(held, []string{"random", "random", "random"}) {
		t.Errorf("HAProxy holds %v on a key-less ring, want the random key", held)
	}
	t.Log("A sidecar restarted on the key-less ring starts, and HAProxy keeps a random key")
	g.stopSidecar()
	g.startSidecar()
	g.waitFor("the restarted sidecar on a random key", func() bool {
		r := g.report()
		return r.Agent.Epoch == 4 && r.Ready && slices.Equal(r.ServerKeys, []string{"random", "random", "random"})
	})
	g.checkResumes()
	g.assertNoSecrets(A, S, S2, last)
}

// get sends GET / on conn, keeping it open, and checks the answer.
func get(t *testing.T, conn *tls.Conn) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "https://"+fleet.ServerName+"/", nil)
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatalf("the open connection failed: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /: %s", resp.Status)
	}
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}
