//go:build integration

package probe_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/plugin"
	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/probe"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/testing/atomicdir"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

// TestCrossScopeNginxAndAgent runs kubectl ringmaster probe's cross-scope
// mode against one ring served three ways: a real nginx and a real
// HAProxy (Debian's packages), each with three names on one port and fed
// the ring by a ringmaster-agent sidecar as the sample Deployments run it
// (a.test and b.test sharing one certificate, c.test with one of its
// own); and pkg/agent reading the same volume. nginx and HAProxy resume
// a.test's ticket at b.test, and at c.test too, whose certificate the
// resumed handshake skips; the agent refuses it, and resumes it at a.test.
func TestCrossScopeNginxAndAgent(t *testing.T) {
	if err := errors.Join(fleet.CheckServer(fleet.Nginx), fleet.CheckServer(fleet.HAProxy)); err != nil {
		t.Fatal(err) // never a silent skip: make test installs it
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	sidecar := buildSidecar(ctx, t, dir)

	ca, err := testpki.NewCA("cross-scope CA")
	if err != nil {
		t.Fatal(err)
	}
	// One certificate for a.test and b.test, as a SAN or wildcard
	// certificate serves several virtual hosts.
	leaf, err := ca.Issue(testpki.Leaf{DNSNames: []string{"a.test", "b.test"}})
	if err != nil {
		t.Fatal(err)
	}
	r := &fleet.Replica{Dir: filepath.Join(dir, "volume"), Shared: filepath.Join(dir, "shared"), Conf: filepath.Join(dir, "conf")}
	for _, d := range []string{r.Dir, r.Shared, r.Conf} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if r.Addr, err = fleet.FreePort(); err != nil {
		t.Fatal(err)
	}
	_, ring := oneKeyRing(t)
	vol, err := atomicdir.NewWriter(r.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := vol.Write(map[string]atomicdir.File{
		keyring.FileName: {Data: ring}, "tls.crt": {Data: leaf.CertPEM}, "tls.key": {Data: leaf.KeyPEM, Mode: 0o600},
		"tls.crt.key": {Data: leaf.KeyPEM, Mode: 0o600}, // HAProxy's name for the key of tls.crt
	}); err != nil {
		t.Fatal(err)
	}
	// c.test has a certificate of its own, beside the volume's.
	own, err := ca.Issue(testpki.Leaf{DNSNames: []string{"c.test"}})
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"c.crt": own.CertPEM, "c.key": own.KeyPEM, "c.crt.key": own.KeyPEM} {
		if err := os.WriteFile(filepath.Join(r.Conf, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	server := func(name, certDir, crt, key string) string {
		return fmt.Sprintf(`    server {
        listen %s ssl;
        server_name %s;
        ssl_certificate %s/%s;
        ssl_certificate_key %s/%s;
        ssl_protocols TLSv1.2 TLSv1.3;
        include %s/*.conf;
        location / { return 200 "%s\n"; }
    }
`, r.Addr, name, certDir, crt, certDir, key, r.Shared, name)
	}
	conf := fmt.Sprintf(`master_process on;
worker_processes 1;
pid %s/nginx.pid;
error_log %s/error.log notice;
events { worker_connections 64; }
http {
    access_log off;
%s%s%s}
`, r.Shared, r.Conf, server("a.test", r.Dir, "tls.crt", "tls.key"), server("b.test", r.Dir, "tls.crt", "tls.key"), server("c.test", r.Conf, "c.crt", "c.key"))
	if err := os.WriteFile(r.ConfFile(fleet.Nginx), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}

	sup := fleet.NewSupervisor(dir)
	t.Cleanup(func() {
		if err := sup.StopAll(); err != nil {
			t.Error(err)
		}
		if left := sup.Leftovers(); len(left) > 0 {
			t.Errorf("left running: %v", left)
		}
	})
	startWithSidecar := func(kind fleet.ServerKind, r *fleet.Replica, keysFile string, extra ...string) {
		t.Helper()
		sc, err := sup.Start(string(kind)+"-sidecar", sidecar, append([]string{
			"--server", string(kind), "--dir", r.Dir, "--ring", "shop/web", "--out-dir", r.Shared,
			"--listen", "127.0.0.1:0", "--interval", "1s", "--probe-addr", r.Addr, "--probe-server-name", "a.test",
		}, extra...))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sc.WaitLine(ctx, "listening on "); err != nil {
			t.Fatal(err)
		}
		if err := fleet.WaitFile(ctx, filepath.Join(r.Shared, keysFile), sc); err != nil {
			t.Fatal(err)
		}
		if err := fleet.StartServer(ctx, sup, kind, string(kind), r); err != nil {
			t.Fatal(err)
		}
	}
	startWithSidecar(fleet.Nginx, r, "nginx-ticket-keys.conf", "--check-command", fleet.NginxCheckCommand(r))

	// HAProxy, fed the same ring by a sidecar of its own: one frontend,
	// the volume's certificate (a.test, b.test) and c.test's, chosen by SNI.
	hr := &fleet.Replica{Dir: r.Dir, Shared: filepath.Join(dir, "haproxy-shared"), Conf: filepath.Join(dir, "haproxy-conf")}
	for _, d := range []string{hr.Shared, hr.Conf} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if hr.Addr, err = fleet.FreePort(); err != nil {
		t.Fatal(err)
	}
	hconf := fmt.Sprintf(`global
    stats socket %[1]s/haproxy.sock mode 600 level admin
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend tls
    bind %[2]s ssl crt %[3]s/tls.crt crt %[4]s/c.crt tls-ticket-keys %[1]s/haproxy.keys alpn http/1.1
    http-request return status 200 content-type text/plain lf-string "hello\n"
`, hr.Shared, hr.Addr, r.Dir, r.Conf)
	if err := os.WriteFile(hr.ConfFile(fleet.HAProxy), []byte(hconf), 0o600); err != nil {
		t.Fatal(err)
	}
	startWithSidecar(fleet.HAProxy, hr, "haproxy.keys")

	// The agent, on the same volume: the same ring, the same certificate.
	a, err := agent.New(agent.Options{Dir: r.Dir, Require: agent.TicketKeys | agent.Certificate, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	agentAddr := crossServer(t, a.TLSConfig(&tls.Config{NextProtos: []string{"http/1.1"}}))

	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, addr, to string
		outcome        string
		crossed        bool
	}{
		{"nginx through the sidecar", r.Addr, "b.test", probe.CrossResumed, true},
		{"nginx through the sidecar, a name with a certificate of its own", r.Addr, "c.test", probe.CrossResumed, true},
		{"HAProxy through the sidecar", hr.Addr, "b.test", probe.CrossResumed, true},
		{"HAProxy through the sidecar, a name with a certificate of its own", hr.Addr, "c.test", probe.CrossResumed, true},
		{"pkg/agent", agentAddr, "b.test", probe.CrossRefused, false},
	} {
		args := []string{"probe", tc.addr, "--sni", "a.test", "--cross-sni", tc.to, "--ca-file", caFile, "--connections", "3"}
		text := runPlugin(t, args...)
		t.Logf("%s: kubectl ringmaster %s\n%s", tc.name, strings.Join(args, " "), text)
		var res probe.CrossResult
		if err := json.Unmarshal([]byte(runPlugin(t, append(args, "-o", "json")...)), &res); err != nil {
			t.Fatal(err)
		}
		if res.Crossed != tc.crossed || len(res.Versions) != 2 {
			t.Errorf("%s: crossed %v, %d versions; want %v, 2", tc.name, res.Crossed, len(res.Versions), tc.crossed)
		}
		for _, v := range res.Versions {
			if v.Outcome != tc.outcome || v.Control.Resumed != 3 || v.Cross.Failed != 0 {
				t.Errorf("%s, %s: %+v; want %s, the control resumed 3 of 3, no failure", tc.name, v.Version, v, tc.outcome)
			}
		}
		if want := strings.ToUpper(tc.outcome); strings.Count(text, want) != 2 {
			t.Errorf("%s: the text does not say %s for both versions:\n%s", tc.name, want, text)
		}
	}
	if got := scopeRefusals(t, a); got == 0 {
		t.Error("the agent counted no refused ticket")
	}
}

// buildSidecar builds cmd/ringmaster-agent into dir.
func buildSidecar(ctx context.Context, t *testing.T, dir string) string {
	t.Helper()
	root, err := fleet.ModuleRoot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "ringmaster-agent")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/ringmaster-agent")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/ringmaster-agent: %v\n%s", err, out)
	}
	return bin
}

func runPlugin(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := plugin.Main(args, genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut}); code != 0 {
		t.Fatalf("kubectl ringmaster %v: exit %d: %s", args, code, errOut.String())
	}
	return out.String()
}

// scopeRefusals reads ringmaster_agent_ticket_scope_refusals_total
// {reason="other_scope"} from a.
func scopeRefusals(t *testing.T, a *agent.Agent) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(a)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "ringmaster_agent_ticket_scope_refusals_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == "other_scope" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
