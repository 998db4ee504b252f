// Command fleet runs the end-to-end harness of internal/testing/fleet by hand:
//
//	fleet demo   the story make demo tells: a control plane, the operator, a
//	             TicketKeyRing, four replicas of examples/server behind a
//	             round-robin load balancer, clients resuming their TLS
//	             sessions through three rotations; then everything stopped.
//	fleet bench  make bench-fleet: resumption, full handshakes and server CPU
//	             of ringmaster's staged ring against per-replica keys and
//	             against shared keys without staging, for TLS 1.3 and 1.2;
//	             of the staged ring with resumed TLS 1.3 handshakes on X25519
//	             alone (agent.Options.ClassicalResumption); and of nginx fed
//	             the ring by ringmaster-agent against nginx's own
//	             per-process keys.
//	fleet bench-http3  make bench-http3: resumption and server CPU per
//	             reconnect of examples/server replicas over HTTP/3 (quic-go)
//	             and over HTTPS, on one rotating ring against per-replica
//	             keys. It starts no control plane: it writes the ring
//	             into the replicas' volumes itself.
//
// demo and bench need KUBEBUILDER_ASSETS (make envtest prints it) and run from inside
// the module, which they build. Every process they start is stopped by its
// own pid on the way out, also on Ctrl-C.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The harness's API clients log through controller-runtime; their
	// errors surface as returned errors, so their log goes nowhere.
	ctrllog.SetLogger(logr.Discard())
	var err error
	switch os.Args[1] {
	case "demo":
		err = demoMain(ctx, os.Args[2:])
	case "bench":
		err = benchMain(ctx, os.Args[2:])
	case "bench-http3":
		err = benchHTTP3Main(ctx, os.Args[2:])
	default:
		usage()
	}
	if err != nil && ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "fleet: interrupted")
		os.Exit(130)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: fleet demo|bench|bench-http3 [flags]; fleet demo -h, fleet bench -h or fleet bench-http3 -h for the flags")
	os.Exit(2)
}

func benchMain(ctx context.Context, args []string) (err error) {
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	cfg := fleet.BenchConfig{}
	fs.IntVar(&cfg.Replicas, "n", 4, "replicas in the fleet (N)")
	fs.IntVar(&cfg.Clients, "clients", 16, "concurrent clients, each with its own TLS session cache")
	fs.DurationVar(&cfg.Interval, "interval", 50*time.Millisecond, "mean time between one client's connections")
	fs.DurationVar(&cfg.Duration, "duration", 24*time.Second, "load per variant and TLS version (bounds the connections per client: duration/interval)")
	fs.IntVar(&cfg.Rounds, "rounds", 3, "windows the duration is split into; the variants take turns, and CPU is the median over rounds")
	fs.DurationVar(&cfg.MaxDelay, "max-delay", 2*time.Second, "delivery delay of the slowest replica; the others spread evenly from 0")
	fs.DurationVar(&cfg.RotateEvery, "rotate-every", 5*time.Second, "rotation period of the variants that rotate")
	versions := fs.String("tls", "1.3,1.2", "TLS versions to run, in order")
	cert := fs.String("cert", string(fleet.ECDSAP256), "replicas' certificate key: ecdsa-p256 or rsa-2048")
	keep := fs.Bool("keep", false, "keep the work directory (logs, volumes)")
	fs.BoolVar(&cfg.Nginx, "nginx", true, "also run nginx fleets (Debian's nginx): with the ringmaster-agent sidecar, and with nginx's own keys")
	_ = fs.Parse(args)
	for v := range strings.SplitSeq(*versions, ",") {
		switch strings.TrimSpace(v) {
		case "1.3":
			cfg.Versions = append(cfg.Versions, tls.VersionTLS13)
		case "1.2":
			cfg.Versions = append(cfg.Versions, tls.VersionTLS12)
		default:
			return fmt.Errorf("-tls %q: want 1.3, 1.2 or both", *versions)
		}
	}
	if cfg.Replicas < 2 || cfg.Clients < 1 || cfg.Interval <= 0 || cfg.Rounds < 1 || cfg.Duration < time.Duration(cfg.Rounds)*cfg.Interval {
		return errors.New("want -n >= 2, -clients >= 1, -interval > 0, -rounds >= 1 and -duration >= rounds x interval")
	}

	env, err := fleet.Setup(ctx, fleet.Options{KeyType: fleet.KeyType(*cert), KeepWork: *keep, Progress: os.Stderr})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, env.Close()) }()
	fmt.Fprintf(os.Stderr, "Certificate key %s; every figure below is measured in this run\n", *cert)
	_, err = env.Bench(ctx, cfg, os.Stdout, os.Stderr)
	return err
}
