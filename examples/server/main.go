// Command server is a small HTTPS server that hot-swaps its certificate and
// session ticket keys with pkg/agent: the program the fleet end-to-end test
// runs replicas of, and an example of embedding the agent.
//
//	server -dir /var/run/ringmaster -ring shop/web -listen 127.0.0.1:8443 -status-listen 127.0.0.1:9090
//
// It serves Encrypted Client Hello whenever -dir holds echkeys.json (an
// ECHKeyRing's projection): nothing to turn on; -require ech makes the file
// required. Its certificate must then cover the configs' public name too,
// which a client rejected by ECH verifies before it retries.
//
// With -classical-resumption, resumed TLS 1.3 handshakes use X25519 alone
// for their key exchange (agent.Options.ClassicalResumption, whose doc
// comment says what that trades).
//
// With -http3, it also serves HTTP/3 on the UDP port of the same number,
// through quic-go's http3.Server with the agent's config: the wiring
// docs/agent.md gives for HTTP/3 (a QUICConfig without 0-RTT).
//
// On -listen, its TLS port, it serves only
//
//	GET /         a greeting naming the replica: "hello from 10.0.0.7:8443".
//
// What the agent holds (the ring's epoch, its key ids and when each
// activates) tells whoever reaches the port when keys rotate and which one
// encrypts: it is served apart, on -status-listen over plain HTTP, a port
// for the operator and Prometheus alone (the README has a NetworkPolicy
// that admits only them):
//
//	GET /healthz  the agent's Status as JSON (epoch, active key id, keys, ...);
//	GET /metrics  Prometheus metrics;
//	GET /ringmaster/v1/status  what the agent holds (agent.StatusHandler):
//	              the operator asks it before it promotes a staged key
//	              (spec.confirmation).
//
// An empty -status-listen serves none of them. -greeting-names-keys adds the
// epoch and active key id to the greeting, for the end-to-end tests that
// attribute each connection to a key: never in production.
//
// On start it prints one line per listener to stdout, with the bound
// address, so that -listen 127.0.0.1:0 can be used:
//
//	https listening on 127.0.0.1:43121
//	http3 listening on 127.0.0.1:43121
//	status listening on 127.0.0.1:40411
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends. It is main without the process around it, so
// that tests can run it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "/var/run/ringmaster", "directory holding ticketkeys.json, tls.crt and tls.key when -require names cert, and echkeys.json when ECH is served")
	listen := fs.String("listen", "127.0.0.1:8443", "HTTPS address; port 0 picks a free port, printed on start")
	statusListen := fs.String("status-listen", "127.0.0.1:9090", "plain-HTTP address for /healthz, /metrics and "+agent.StatusPath+", apart from the TLS port; empty serves none of them")
	greetKeys := fs.Bool("greeting-names-keys", false, "name the epoch and active key id in the greeting on the TLS port, for tests: whoever reaches the port then learns them")
	require := fs.String("require", "keys,cert", "material required in -dir, comma-separated: keys, cert, ech (echkeys.json is served whenever present; ech makes it required)")
	ring := fs.String("ring", "", "the ring served, <namespace>/<name> (or <name> for a ClusterTicketKeyRing); empty: the first ring read")
	resync := fs.Duration("resync", 0, "period of the fallback re-read of -dir (0: the agent's default)")
	h3 := fs.Bool("http3", false, "also serve HTTP/3 (QUIC) on the UDP port of -listen's number, with the agent's config")
	classical := fs.Bool("classical-resumption", false, "resume TLS 1.3 sessions with X25519 alone for the key exchange (agent.Options.ClassicalResumption): less server CPU per resumption, but no post-quantum forward secrecy should a ticket key leak; see docs/agent.md. Refused in FIPS 140-3 mode (GODEBUG=fips140=on), which does not allow X25519 alone")
	if err := fs.Parse(args); err != nil {
		return err
	}
	files, err := parseRequire(*require)
	if err != nil {
		return err
	}

	logger := slog.New(slog.NewJSONHandler(stderr, nil))
	a, err := agent.New(agent.Options{Dir: *dir, Require: files, Ring: *ring, Logger: logger, ResyncPeriod: *resync,
		ClassicalResumption: *classical})
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(a, collectors.NewGoCollector())
	metricsHandler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})

	// The TLS port: the greeting alone. Nothing the agent holds is served
	// here, where every client of the service reaches.
	mux := greeting(a, *greetKeys)

	// The agent supplies the certificate and ticket keys; the base holds
	// everything else. NextProtos belongs here: net/http adds "h2" only to
	// the outer config, which the per-handshake config does not inherit.
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	srv := &http.Server{Handler: mux, TLSConfig: a.TLSConfig(base), ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "https listening on %s\n", ln.Addr())

	// HTTP/3: the agent's config as it is, whose GetConfigForClient
	// http3.Server keeps when it clones the config at start (keys set
	// with SetSessionTicketKeys afterwards would never reach it); and a
	// QUICConfig of its own, since http3.Server's default allows 0-RTT,
	// which the agent's tickets refuse (agent.Options.EarlyData).
	var h3Srv *http3.Server
	var h3Conn net.PacketConn
	if *h3 {
		if h3Conn, err = net.ListenPacket("udp", ln.Addr().String()); err != nil {
			ln.Close()
			return err
		}
		h3Srv = &http3.Server{Handler: mux, TLSConfig: a.TLSConfig(&tls.Config{MinVersion: tls.VersionTLS13}), QUICConfig: &quic.Config{}}
		fmt.Fprintf(stdout, "http3 listening on %s\n", h3Conn.LocalAddr())
	}

	// The status port: what the agent holds, for the operator and
	// Prometheus.
	var statusSrv *http.Server
	var statusLn net.Listener
	if *statusListen != "" {
		if statusLn, err = net.Listen("tcp", *statusListen); err != nil {
			ln.Close()
			return err
		}
		statusSrv = &http.Server{Handler: statusMux(a, metricsHandler), ReadHeaderTimeout: 10 * time.Second}
		fmt.Fprintf(stdout, "status listening on %s\n", statusLn.Addr())
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 4)
	go func() { errc <- a.Start(ctx) }()
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	running := 2
	if statusSrv != nil {
		go func() { errc <- statusSrv.Serve(statusLn) }()
		running++
	}
	if h3Srv != nil {
		go func() { errc <- h3Srv.Serve(h3Conn) }()
		running++
	}

	// Run until ctx ends or any part fails; then stop every part and wait.
	var first error
	select {
	case <-ctx.Done():
	case first = <-errc:
		running--
	}
	cancel()
	shutdown, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	errs := []error{ignoreClosed(first), ignoreClosed(srv.Shutdown(shutdown))}
	if statusSrv != nil {
		errs = append(errs, ignoreClosed(statusSrv.Shutdown(shutdown)))
	}
	if h3Srv != nil {
		errs = append(errs, ignoreClosed(h3Srv.Close()), ignoreClosed(h3Conn.Close()))
	}
	for ; running > 0; running-- {
		errs = append(errs, ignoreClosed(<-errc))
	}
	return errors.Join(errs...)
}

// greeting serves the TLS port: the greeting alone, naming the epoch and
// active key when greetKeys is set.
func greeting(a *agent.Agent, greetKeys bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		if !greetKeys {
			fmt.Fprintf(w, "hello from %s\n", r.Context().Value(http.LocalAddrContextKey))
			return
		}
		st := a.Status()
		fmt.Fprintf(w, "hello from %s: epoch %d, active key %s, resumed %v\n", r.Context().Value(http.LocalAddrContextKey), st.Epoch, st.ActiveKeyID, r.TLS.DidResume)
	})
	return mux
}

// statusMux serves the status port: /metrics, the agent's status and
// /healthz.
func statusMux(a *agent.Agent, metrics http.Handler) *http.ServeMux {
	m := http.NewServeMux()
	m.Handle("GET /metrics", metrics)
	m.Handle(agent.StatusPath, a.StatusHandler())
	m.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(a.Status())
	})
	return m
}

func ignoreClosed(err error) error {
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, quic.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

func parseRequire(s string) (agent.Files, error) {
	var f agent.Files
	for part := range strings.SplitSeq(s, ",") {
		switch strings.TrimSpace(part) {
		case "keys":
			f |= agent.TicketKeys
		case "cert":
			f |= agent.Certificate
		case "ech":
			f |= agent.ECHKeys
		default:
			return 0, fmt.Errorf("-require %q: want keys, cert or ech, comma-separated", s)
		}
	}
	return f, nil
}
