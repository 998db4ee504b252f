// Command ringmaster-agent is a sidecar that keeps a TLS server not written
// in Go (nginx, HAProxy, Envoy) on the session ticket key ring that
// ringmaster projects into its pod.
//
// It reads ticketkeys.json from the projected volume through pkg/agent, so
// it refuses, pins and destroys keys exactly as a Go server embedding the
// agent does. At every new epoch, at every key's activeFrom and expiresAt,
// and every --interval, it writes the server's files into a directory the
// two containers share (an emptyDir), each file written under a temporary
// name and renamed, in the order the server needs at that instant, and has
// the server take them:
//
//	nginx    nginx.<id>.key files and nginx-ticket-keys.conf, an include of
//	         one ssl_session_ticket_key per key, active first; then a
//	         graceful reload (SIGHUP to the master named by its pid file,
//	         seen through shareProcessNamespace), after reading the files
//	         back and running --check-command. Taken once the master has
//	         started workers with the new configuration.
//	haproxy  haproxy.keys, the 3 keys HAProxy holds, read when it starts;
//	         then "set ssl tls-key" over its runtime API (--haproxy-socket),
//	         no reload. Taken once "show tls-keys" lists the keys wanted.
//	envoy    envoy-ticket-keys.json, a file-based SDS Secret of
//	         session_ticket_keys, which Envoy reloads by itself with a
//	         watched_directory on the shared directory. Untested: no Envoy
//	         build was available.
//
// With --probe-addr, a change counts as taken only once a new session
// ticket from the server is under the active key.
//
// It serves, on --listen:
//
//	GET /metrics  ringmaster_agent_* (what it read) and ringmaster_sidecar_*
//	              (reloads, reload errors by cause, the epoch and active key
//	              age the server holds, readiness)
//	GET /healthz  JSON: what the server holds, and what the sidecar read
//	GET /ringmaster/v1/status  the same, where the operator asks what the
//	              pod holds before it promotes a staged key (spec.confirmation)
//	GET /readyz   200 once the server holds the keys the agent serves now,
//	              503 otherwise
//
// pkg/agent's Options.ClassicalResumption (X25519 alone for resumed TLS 1.3
// handshakes) does not apply here: the sidecar terminates no TLS, it only
// hands keys to the server, whose key exchange, resumed or not, is the
// server's own configuration (nginx's ssl_ecdh_curve, HAProxy's curves).
//
// It writes the server's files once before it serves, so that a startup
// probe on /healthz holds the server back until they exist. It prints
// "listening on <addr>" to stdout once it serves, so that --listen
// 127.0.0.1:0 can be used. Key bytes are never logged.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ringmaster-io/ringmaster/internal/version"
	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "ringmaster-agent:", err)
		os.Exit(1)
	}
}

const usageHead = `Usage: ringmaster-agent --server nginx|haproxy|envoy [flags]

Keeps nginx, HAProxy or Envoy on the ticket key ring ringmaster projects
into the pod: writes the server's key files into a directory shared with it
(an emptyDir) at every new epoch and at every key's activeFrom and
expiresAt, and has the server take them (nginx: graceful reload; HAProxy:
runtime API; Envoy: file-based SDS). /readyz answers 200 once the server
holds the keys served now.

There is no --classical-resumption (pkg/agent's ClassicalResumption): the
sidecar terminates no TLS, so the server's own settings choose its key
exchange. In FIPS 140-3 mode (GODEBUG=fips140=on) pkg/agent refuses that
option, since FIPS 140-3 does not allow X25519 alone.

Flags:
`

// config is the parsed command line.
type config struct {
	server, dir, ring, outDir, serverDir string
	nginxPIDFile, check                  string
	haproxySocket, envoySecret           string
	probeAddr, probeServerName           string
	listen                               string
	interval, timeout, reloadWindow      time.Duration
	version                              bool
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("ringmaster-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageHead)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.server, "server", "", "the server to feed: nginx, haproxy or envoy (required)")
	fs.StringVar(&c.dir, "dir", "/var/run/ringmaster", "the projected volume holding ticketkeys.json (mounted without subPath)")
	fs.StringVar(&c.ring, "ring", "", "the ring to serve, <namespace>/<name> (<name> for a ClusterTicketKeyRing); empty: the first ring read, pinned")
	fs.StringVar(&c.outDir, "out-dir", "/var/run/ringmaster-server", "the directory shared with the server (an emptyDir, medium Memory), where its files are written")
	fs.StringVar(&c.serverDir, "server-dir", "", "--out-dir as the server's container mounts it, for the paths in nginx's include (default --out-dir)")
	fs.StringVar(&c.nginxPIDFile, "nginx-pid-file", "", "nginx's pid file, whose master is reloaded (default <out-dir>/nginx.pid)")
	fs.StringVar(&c.check, "check-command", "", "a command run before each nginx reload, split on spaces, e.g. \"nginx -t -q\" where the sidecar can run nginx; a failure skips the reload")
	fs.StringVar(&c.haproxySocket, "haproxy-socket", "", "HAProxy's runtime API socket, a stats socket of level admin (default <out-dir>/haproxy.sock)")
	fs.StringVar(&c.envoySecret, "envoy-secret", "ringmaster-ticket-keys", "the name of the SDS Secret written for Envoy")
	fs.StringVar(&c.probeAddr, "probe-addr", "", "the server's TLS address, host:port; when set, new keys count as taken only once a new ticket from the server is under the active key")
	fs.StringVar(&c.probeServerName, "probe-server-name", "", "the server name (SNI) the probe asks for")
	fs.StringVar(&c.listen, "listen", ":9090", "address of /metrics, /healthz and /readyz")
	fs.DurationVar(&c.interval, "interval", 10*time.Second, "how often to check that the server still holds the keys served, and catch a restarted server")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "how long the server has to take new keys before the attempt counts as failed")
	fs.DurationVar(&c.reloadWindow, "reload-window", 5*time.Second, "nginx: how long a new staged key may wait to be taken with the next reload, and how early a key that expires within it goes with one; 0 reloads at every change")
	fs.BoolVar(&c.version, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.version {
		return c, nil
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch c.server {
	case "nginx", "haproxy", "envoy":
	case "":
		return c, errors.New("--server is required: nginx, haproxy or envoy")
	default:
		return c, fmt.Errorf("--server %q: want nginx, haproxy or envoy", c.server)
	}
	if c.interval <= 0 || c.timeout <= 0 {
		return c, errors.New("--interval and --timeout must be positive")
	}
	if c.reloadWindow < 0 || c.reloadWindow > time.Minute {
		return c, errors.New("--reload-window must be between 0s and 1m: a staged key waits that long to reach nginx, out of activationDelay")
	}
	if c.serverDir == "" {
		c.serverDir = c.outDir
	}
	// It is written into nginx's configuration as a bare word.
	if strings.ContainsAny(c.serverDir, " \t\n;{}\"'#$\\") || !filepath.IsAbs(c.serverDir) {
		return c, fmt.Errorf("--server-dir %q: want an absolute path without blanks or any of ;{}\"'#$\\", c.serverDir)
	}
	if c.nginxPIDFile == "" {
		c.nginxPIDFile = filepath.Join(c.outDir, "nginx.pid")
	}
	if c.haproxySocket == "" {
		c.haproxySocket = filepath.Join(c.outDir, "haproxy.sock")
	}
	return c, nil
}

// newServer returns the server c names.
func newServer(c config) server {
	var probe *prober
	if c.probeAddr != "" {
		probe = &prober{addr: c.probeAddr, serverName: c.probeServerName}
	}
	switch c.server {
	case "nginx":
		return &nginx{dir: c.outDir, serverDir: c.serverDir, pidFile: c.nginxPIDFile, check: strings.Fields(c.check), probe: probe, window: c.reloadWindow}
	case "haproxy":
		return &haproxy{dir: c.outDir, socket: c.haproxySocket, probe: probe}
	default:
		return &envoy{dir: c.outDir, secret: c.envoySecret, probe: probe}
	}
}

// run is main without the process around it: it serves until ctx ends.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if c.version {
		fmt.Fprintln(stdout, version.String("ringmaster-agent"))
		return nil
	}
	if fi, err := os.Stat(c.outDir); err != nil {
		return fmt.Errorf("--out-dir: %w", err)
	} else if !fi.IsDir() {
		return fmt.Errorf("--out-dir %s is not a directory", c.outDir)
	}
	logger := slog.New(slog.NewJSONHandler(stderr, nil))
	s := newSidecar(c.server, newServer(c), logger, c.interval, c.timeout)
	a, err := agent.New(agent.Options{Dir: c.dir, Require: agent.TicketKeys, Ring: c.ring, Logger: logger, OnSwap: s.onSwap})
	if err != nil {
		return err
	}
	s.agent = a
	// Once before serving, so that the server's files exist by the time
	// /healthz answers: a native sidecar's startupProbe then holds the
	// server back until they do (HAProxy refuses to start without its
	// tls-ticket-keys file). The server may not run yet: that error is
	// retried by the loop.
	_, _ = s.sync(ctx)

	reg := prometheus.NewRegistry()
	reg.MustRegister(a, collectors.NewGoCollector())
	reg.MustRegister(s.collectors()...)
	srv := &http.Server{Handler: s.handler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})), ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "listening on %s\n", ln.Addr())
	logger.Info("Started", "server", c.server, "dir", c.dir, "outDir", c.outDir, "ring", a.Status().Ring, "epoch", a.Status().Epoch)

	// Run until ctx ends or a part fails; then stop every part and wait.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var agentErr, serveErr error
	wg.Go(func() { agentErr = a.Start(ctx); cancel() })
	wg.Go(func() { serveErr = srv.Serve(ln); cancel() })
	wg.Go(func() { s.run(ctx) })
	<-ctx.Done()
	shutdown, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	shutdownErr := srv.Shutdown(shutdown)
	wg.Wait()
	return errors.Join(agentErr, ignoreClosed(serveErr), shutdownErr)
}

func ignoreClosed(err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
