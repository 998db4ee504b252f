package plugin

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/probe"
)

type probeOptions struct {
	streams genericiooptions.IOStreams

	connections int
	version     string
	sni         string
	caFile      string
	insecure    bool
	timeout     time.Duration
	ticketWait  time.Duration
	crossSNI    string
	crossAddr   string
	out         output
}

func newProbeCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &probeOptions{streams: streams}
	cmd := &cobra.Command{
		Use:   "probe HOST:PORT",
		Short: "Tell whether the TLS servers behind an address share their session ticket keys",
		Long: `Probe connects to HOST:PORT (a Service, a load balancer, whatever is listening)
and tells whether the servers behind it share their session ticket keys: run
it before and after adopting ringmaster. It makes two runs of --connections
TLS connections, one after the other, and only handshakes (no request):

  - sessions: as a client with a session cache, each connection offering the
    ticket of the one before. This is the resumption rate clients see.
  - one ticket: the first connection's ticket offered on every new
    connection. The balancer spreads them over the servers, and a server
    resumes the ticket only if it holds the key that sealed it: if all
    resume, the servers share their ticket keys; if about 1 in K does, about
    K groups of servers each hold keys of their own.

It reports resumptions and full handshakes of each run and says plainly
whether the servers share their keys. A server that accepts each ticket only
once (0-RTT anti-replay) looks like one that does not share. It needs no
access to the cluster.

Cross-scope mode (--cross-sni, --cross-addr) audits ticket scope instead: it
takes a ticket from HOST:PORT under --sni and offers it, --connections times,
to --cross-addr (default HOST:PORT) under --cross-sni (default --sni), and
back to HOST:PORT as a control, for TLS 1.3 and 1.2 (or --tls-version). A
ticket that resumes across means a session begun under one name skips the
other's certificate: the two share a ticket scope, which is right only if
they are one trust scope. The offers to the second target skip certificate
verification: an attacker's client would not check either.`,
		Example: `  # A public endpoint, verified against the system roots
  kubectl ringmaster probe shop.example.com:443

  # A Service reached through a port-forward, with its CA and name, TLS 1.2
  kubectl ringmaster probe 127.0.0.1:8443 --sni web.shop.svc --ca-file ca.crt --tls-version 1.2

  # More connections, as JSON
  kubectl ringmaster probe 10.0.0.12:443 --insecure --connections 100 -o json

  # Does a ticket for shop.example.com resume at api.example.com (one gateway)?
  kubectl ringmaster probe gw.example.com:443 --sni shop.example.com --cross-sni api.example.com`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd.Context(), args[0]) },
	}
	cmd.Flags().IntVar(&o.connections, "connections", 20, "Connections of each run.")
	cmd.Flags().StringVar(&o.version, "tls-version", "", "The one TLS version to offer: 1.2 or 1.3; empty offers both.")
	cmd.Flags().StringVar(&o.sni, "sni", "", "Server name to send and verify; default HOST unless it is an IP address.")
	cmd.Flags().StringVar(&o.caFile, "ca-file", "", "PEM file of the certificate authorities that verify the servers; default the system roots.")
	cmd.Flags().BoolVar(&o.insecure, "insecure", false, "Do not verify the servers' certificates.")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 10*time.Second, "Bound on each connection's dial and handshake.")
	cmd.Flags().DurationVar(&o.ticketWait, "ticket-wait", time.Second, "How long to wait after a handshake for the server's session ticket.")
	cmd.Flags().StringVar(&o.crossSNI, "cross-sni", "", "Cross-scope mode: the server name to offer the ticket under; default --sni.")
	cmd.Flags().StringVar(&o.crossAddr, "cross-addr", "", "Cross-scope mode: the HOST:PORT to offer the ticket to; default HOST:PORT.")
	addOutputFlag(cmd, &o.out, false)
	return cmd
}

func (o *probeOptions) run(ctx context.Context, addr string) error {
	if err := o.out.validate(); err != nil {
		return err
	}
	opts := probe.Options{
		Addr: addr, ServerName: o.sni, Insecure: o.insecure,
		Connections: o.connections, Timeout: o.timeout, TicketWait: o.ticketWait,
	}
	switch o.version {
	case "":
	case "1.2":
		opts.Version = tls.VersionTLS12
	case "1.3":
		opts.Version = tls.VersionTLS13
	default:
		return fmt.Errorf("--tls-version %q: want 1.2 or 1.3", o.version)
	}
	if o.caFile != "" {
		pem, err := os.ReadFile(o.caFile)
		if err != nil {
			return fmt.Errorf("--ca-file: %w", err)
		}
		opts.RootCAs = x509.NewCertPool()
		if !opts.RootCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--ca-file %s holds no PEM certificate", o.caFile)
		}
	}
	if o.crossSNI != "" || o.crossAddr != "" {
		return o.runCross(ctx, opts)
	}
	res, err := probe.Probe(ctx, opts)
	if err != nil {
		return err
	}
	if o.out.structured() {
		return printReport(o.streams.Out, o.out.format, "ProbeReport", res)
	}
	printProbe(o.streams.Out, res)
	return nil
}

func printProbe(w io.Writer, r probe.Result) {
	name := ""
	if r.ServerName != "" {
		name = ", server name " + r.ServerName
	}
	fmt.Fprintf(w, "Probed %s%s: %s\n", r.Addr, name, orDash(r.Version))
	printRun(w, "Sessions, each connection offering the ticket of the one before", r.Sessions)
	if r.TicketsIssued {
		printRun(w, "One ticket, the first connection's, offered on every new connection", r.OneTicket)
	}
	fmt.Fprintln(w, r.Verdict)
}

func printRun(w io.Writer, title string, r probe.Run) {
	fmt.Fprintf(w, "  %s:\n", title)
	fmt.Fprintf(w, "    %d connections: %d resumed, %d full handshake(s), %d failed", r.Connections, r.Resumed, r.Full, r.Failed)
	if r.Attempts > 0 {
		fmt.Fprintf(w, "; %d of %d offering a ticket resumed (%.1f%%)", r.Resumed, r.Attempts, 100*r.Rate())
	}
	fmt.Fprintln(w)
	for msg, n := range r.Errors {
		fmt.Fprintf(w, "    %d failed: %s\n", n, msg)
	}
}

// runCross runs the cross-scope probe from opts' target.
func (o *probeOptions) runCross(ctx context.Context, opts probe.Options) error {
	to := probe.Target{Addr: o.crossAddr, ServerName: o.crossSNI}
	if to.Addr == "" {
		to.Addr = opts.Addr
	}
	if to.ServerName == "" {
		to.ServerName = opts.ServerName
	}
	co := probe.CrossOptions{
		From: probe.Target{Addr: opts.Addr, ServerName: opts.ServerName}, To: to,
		RootCAs: opts.RootCAs, Insecure: opts.Insecure, Offers: opts.Connections,
		Timeout: opts.Timeout, TicketWait: opts.TicketWait,
	}
	if opts.Version != 0 {
		co.Versions = []uint16{opts.Version}
	}
	res, err := probe.CrossScope(ctx, co)
	if err != nil {
		return err
	}
	if o.out.structured() {
		return printReport(o.streams.Out, o.out.format, "CrossScopeProbeReport", res)
	}
	printCross(o.streams.Out, res)
	return nil
}

func printCross(w io.Writer, r probe.CrossResult) {
	fmt.Fprintf(w, "Cross-scope probe: a ticket from %s, offered to %s\n", r.From, r.To)
	for _, v := range r.Versions {
		fmt.Fprintf(w, "  %s: %s\n", v.Version, strings.ToUpper(v.Outcome))
		if v.Outcome == probe.CrossNoTicket {
			continue
		}
		fmt.Fprintf(w, "    back at the issuer (control): %d of %d resumed, %d failed\n", v.Control.Resumed, v.Control.Connections, v.Control.Failed)
		fmt.Fprintf(w, "    at the other scope: %d of %d resumed, %d failed\n", v.Cross.Resumed, v.Cross.Connections, v.Cross.Failed)
		for msg, n := range v.Cross.Errors {
			fmt.Fprintf(w, "    %d failed: %s\n", n, msg)
		}
	}
	fmt.Fprintln(w, r.Verdict)
}
