//go:build integration

package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/testing/atomicdir"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
)

// rig is one real nginx or HAProxy from Debian's packages, fed by the
// sidecar (run in-process) from a volume written as the kubelet writes
// one. The test writes the rings itself, with keyring: no control plane
// here; test/e2e drives the same servers through the operator.
type rig struct {
	t    *testing.T
	kind fleet.ServerKind
	sup  *fleet.Supervisor
	pki  *fleet.PKI
	vol  *atomicdir.Writer
	r    *fleet.Replica
	http *http.Client

	sidecarAddr string
	stop        context.CancelFunc
	done        chan error
	log         string // the sidecar's log file
}

func newRig(t *testing.T, kind fleet.ServerKind) *rig {
	t.Helper()
	if err := fleet.CheckServer(kind); err != nil {
		t.Fatal(err) // never a silent skip: make test installs them
	}
	dir := t.TempDir()
	addr, err := fleet.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	r := &fleet.Replica{Dir: filepath.Join(dir, "volume"), Shared: filepath.Join(dir, "shared"), Conf: filepath.Join(dir, "conf"), Addr: addr}
	pki, err := fleet.NewPKI(fleet.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{r.Dir, r.Shared, r.Conf} {
		mkdir(t, d)
	}
	vol, err := atomicdir.NewWriter(r.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := fleet.WriteServerConfig(kind, r, true); err != nil {
		t.Fatal(err)
	}
	g := &rig{t: t, kind: kind, sup: fleet.NewSupervisor(dir), pki: pki, vol: vol, r: r, http: &http.Client{Timeout: 5 * time.Second}}
	t.Cleanup(func() {
		g.stopSidecar()
		if err := g.sup.StopAll(); err != nil {
			t.Error(err)
		}
		if left := g.sup.Leftovers(); len(left) > 0 {
			t.Errorf("left running: %v", left)
		}
		if t.Failed() {
			t.Logf("sidecar log:\n%s", g.logText())
		}
	})
	return g
}

// write projects ring, with the certificate, into the server's volume.
func (g *rig) write(ring keyring.Ring) {
	g.t.Helper()
	data, err := keyring.Encode(ring)
	if err != nil {
		g.t.Fatal(err)
	}
	files := g.pki.Files()
	files["tls.crt.key"] = files["tls.key"] // HAProxy's name for the key of tls.crt
	files[keyring.FileName] = atomicdir.File{Data: data}
	if err := g.vol.Write(files); err != nil {
		g.t.Fatal(err)
	}
}

// startSidecar runs the sidecar in-process on the rig's directories.
func (g *rig) startSidecar(extra ...string) {
	g.t.Helper()
	g.runSidecar(append([]string{"--server", string(g.kind), "--dir", g.r.Dir, "--out-dir", g.r.Shared,
		"--listen", "127.0.0.1:0", "--interval", "500ms", "--timeout", "5s",
		"--probe-addr", g.r.Addr, "--probe-server-name", fleet.ServerName}, extra...))
}

// runSidecar runs the sidecar in-process with args, which must listen on
// loopback.
func (g *rig) runSidecar(args []string) {
	g.t.Helper()
	g.log = filepath.Join(g.t.TempDir(), "sidecar.log")
	logFile, err := os.Create(g.log)
	if err != nil {
		g.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	g.stop, g.done = cancel, make(chan error, 1)
	go func() {
		err := run(ctx, args, pw, logFile)
		pw.Close()
		logFile.Close()
		g.done <- err
	}()
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if addr, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
			g.sidecarAddr = addr
			go func() { _, _ = io.Copy(io.Discard, pr) }()
			return
		}
	}
	g.t.Fatalf("the sidecar did not start: %v\n%s", <-g.done, g.logText())
}

// logText is what the sidecar logged so far.
func (g *rig) logText() string {
	b, _ := os.ReadFile(g.log)
	return string(b)
}

// stopSidecar cancels the in-process sidecar and checks it returned nil.
func (g *rig) stopSidecar() {
	if g.stop == nil {
		return
	}
	g.stop()
	select {
	case err := <-g.done:
		if err != nil {
			g.t.Errorf("the sidecar returned %v", err)
		}
	case <-time.After(10 * time.Second):
		g.t.Error("the sidecar did not return on cancel")
	}
	g.stop = nil
}

func (g *rig) startServer() {
	g.t.Helper()
	if err := fleet.StartServer(context.Background(), g.sup, g.kind, string(g.kind), g.r); err != nil {
		g.t.Fatal(err)
	}
}

func (g *rig) stopServer() {
	g.t.Helper()
	if err := g.r.Proc.Stop(); err != nil {
		g.t.Fatal(err)
	}
}

// report reads the sidecar's /healthz.
func (g *rig) report() report {
	g.t.Helper()
	resp, err := g.http.Get("http://" + g.sidecarAddr + "/healthz")
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	var r report
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		g.t.Fatal(err)
	}
	return r
}

// ready reads the sidecar's /readyz.
func (g *rig) ready() (bool, string) {
	g.t.Helper()
	resp, err := g.http.Get("http://" + g.sidecarAddr + "/readyz")
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK, string(b)
}

// assertNoSecrets checks the sidecar's log, /healthz, /readyz and /metrics
// for key bytes.
func (g *rig) assertNoSecrets(keys ...keyring.Key) {
	g.t.Helper()
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := g.http.Get("http://" + g.sidecarAddr + path)
		if err != nil {
			g.t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assertNoSecrets(g.t, path, string(b), keys...)
	}
	assertNoSecrets(g.t, "the sidecar's log", g.logText(), keys...)
}

// metric reads one sample of the sidecar's /metrics, by its full name with
// labels as the text format writes them.
func (g *rig) metric(name string) string {
	g.t.Helper()
	resp, err := g.http.Get("http://" + g.sidecarAddr + "/metrics")
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return v
		}
	}
	return ""
}

// waitFor polls cond until it holds, failing the test after a minute.
func (g *rig) waitFor(what string, cond func() bool) {
	g.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			g.t.Fatalf("never %s; sidecar's /healthz: %+v", what, g.report())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitTaken waits until the server holds epoch, encrypting with active,
// and the sidecar says it is ready.
func (g *rig) waitTaken(epoch int64, active keyring.Key) {
	g.t.Helper()
	g.waitFor(fmt.Sprintf("ready with epoch %d, active key %s", epoch, active.ID), func() bool {
		r := g.report()
		ok, _ := g.ready()
		return ok && r.Ready && r.Epoch == epoch && r.ActiveKeyID == active.ID
	})
}

// encryptsWith reports whether a ticket the server issues now is under k.
func (g *rig) encryptsWith(k keyring.Key) bool {
	g.t.Helper()
	name, err := (&prober{addr: g.r.Addr, serverName: fleet.ServerName}).keyName(context.Background())
	if err != nil {
		g.t.Fatal(err)
	}
	format := map[fleet.ServerKind]keyring.Format{fleet.Nginx: keyring.FormatNginx, fleet.HAProxy: keyring.FormatHAProxy}[g.kind]
	d, err := keyring.DeriveKey(k.Secret, format)
	if err != nil {
		g.t.Fatal(err)
	}
	return string(name) == string(d[:keyNameSize])
}

// client returns a TLS client of version that trusts the rig's server and
// keeps the sessions it is given in cache.
func (g *rig) client(version uint16, cache tls.ClientSessionCache) *tls.Config {
	return &tls.Config{ServerName: fleet.ServerName, RootCAs: g.pki.Roots, MinVersion: version, MaxVersion: version,
		ClientSessionCache: cache, NextProtos: []string{"http/1.1"}}
}

// resumes connects with cfg, asks for / and reports whether the handshake
// resumed. A failed connection fails the test: an unknown ticket costs a
// full handshake, never the connection.
func (g *rig) resumes(cfg *tls.Config) bool {
	g.t.Helper()
	s := fleet.Connect(context.Background(), g.r.Addr, cfg, 5*time.Second)
	if s.Err != "" {
		g.t.Fatalf("connection failed: %s", s.Err)
	}
	return s.Resumed
}

// checkResumes checks, over TLS 1.2 and TLS 1.3, that a new session's
// ticket resumes on the server.
func (g *rig) checkResumes() {
	g.t.Helper()
	for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		c := g.client(version, tls.NewLRUClientSessionCache(1))
		if g.resumes(c) || !g.resumes(c) {
			g.t.Errorf("%s: a ticket from %s does not resume on it", tls.VersionName(version), g.kind)
		}
	}
}

// keyAt returns a key whose secret derives from label, with its times.
func keyAt(label string, activeFrom, retireAt, expiresAt time.Time) keyring.Key {
	k := keyring.NewKey(keyring.Secret(sha256.Sum256([]byte(label))))
	k.ActiveFrom, k.RetireAt, k.ExpiresAt = activeFrom, retireAt, expiresAt
	return k
}

// ringOf is epoch of ring shop/web, keys newest first.
func ringOf(epoch int64, keys ...keyring.Key) keyring.Ring {
	return keyring.Ring{Name: "shop/web", Epoch: epoch, IssuedAt: time.Now().Truncate(time.Second), Keys: keys}
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
}

// assertNoSecrets fails if text shows any of keys' bytes: raw, hex or
// base64, of the ring's secret or of a server's derived key.
func assertNoSecrets(t *testing.T, where, text string, keys ...keyring.Key) {
	t.Helper()
	for _, k := range keys {
		forms := [][]byte{k.Secret[:]}
		for _, f := range []keyring.Format{keyring.FormatNginx, keyring.FormatHAProxy, keyring.FormatEnvoy} {
			d, _ := keyring.DeriveKey(k.Secret, f)
			forms = append(forms, d[:])
		}
		for _, b := range forms {
			for _, enc := range []string{string(b[:16]), hex.EncodeToString(b[:16]), base64.StdEncoding.EncodeToString(b)[:20]} {
				if strings.Contains(text, enc) {
					t.Errorf("%s shows bytes of key %s", where, k.ID)
				}
			}
		}
	}
}
