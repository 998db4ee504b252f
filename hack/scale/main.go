// Command scale runs make bench-scale: many TicketKeyRings on one operator.
// On the loopback control plane (a real etcd and kube-apiserver, as make
// soak and the e2e suite start them), with the operator built as the
// images are, running as its own service account with config/rbac's roles,
// leader election and the chart's memory limit (the operator's soft
// limit is its --memory-limit-ratio of it), it
//
//   - creates -rings rings over -namespaces namespaces at once and measures
//     the time until every one is Ready, from the first create;
//   - meanwhile creates a probe ring every -probe-every in a namespace of
//     its own, and reports the p50, p99 and max of their create-to-Ready
//     latency: what a new ring waits behind a bulk;
//   - requests a rotate-now of every ring at once (the
//     ringmaster.io/rotate-requested-at annotation), then one through a
//     single FleetRequest (-phases fleet), then a revoke
//     (ringmaster.io/revoke-requested-at), and measures the time until
//     every ring's status echoes each, probing new rings meanwhile too;
//   - counts the operator's API requests per ring in each phase, by verb
//     and resource, from kube-apiserver's audit log of its service account
//     (internal/testing/apiaudit), leaving out its Lease renewals and watches;
//   - reads the operator's RSS (/proc) and Go heap in use (its metrics) at
//     their peak in each phase, and, once it has been idle for -settle
//     after the bulk, the settled figures and a heap profile (pprof, after
//     a garbage collection), shown per ring.
//
// With -floor it measures the control plane instead: the operator stops
// once it leads, and a stand-in makes, for each ring created or asked a
// rotate-now, only the requests the operator makes (standIn). The times of
// its phases are what this machine's control plane takes to serve the
// bench and the fewest requests the operator can make: no operator gets
// under them here.
//
// It needs KUBEBUILDER_ASSETS (make envtest prints it) and runs from inside
// the module, which it builds. Every process it starts is stopped by its own
// pid on the way out, also on Ctrl-C.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// config is the bench's flags.
type config struct {
	rings, namespaces int
	rotate, revoke    bool
	// fleet is the phase that rotates every ring with one FleetRequest.
	fleet           bool
	probeEvery      time.Duration
	probeNamespaces int
	creators        int
	clientQPS       float64
	rotation        time.Duration
	activation      time.Duration
	retained        int
	goMemLimit      string
	memoryLimit     int64
	ringWorkers     int
	settle, quiet   time.Duration
	timeout         time.Duration
	scrapeEvery     time.Duration
	profile         string
	memProfileRate  int
	keep            bool
	// floor replaces the operator with a stand-in (standIn).
	floor bool
}

func main() {
	cfg := config{}
	var phases string
	flag.IntVar(&cfg.rings, "rings", 1000, "TicketKeyRings created at once, spread over -namespaces namespaces")
	flag.IntVar(&cfg.namespaces, "namespaces", 10, "namespaces the rings are spread over")
	flag.StringVar(&phases, "phases", "create,rotate,revoke", "phases to run, in this order: create (always), rotate (a rotate-now of every ring at once, one annotation per ring), fleet (a rotate-now of every ring through one FleetRequest), revoke (a revoke of every ring at once)")
	flag.DurationVar(&cfg.probeEvery, "probe-every", time.Second, "create a probe ring this often while a phase's bulk is handled, and report their create-to-Ready latency; 0: none")
	flag.IntVar(&cfg.probeNamespaces, "probe-namespaces", 1, "spread the probe rings over this many namespaces, in turn: with 1, a namespace creating a ring every -probe-every, which the fair queue serves at its share (one namespace's) of the operator; with more, tenants that each create a ring now and then")
	flag.IntVar(&cfg.creators, "creators", 8, "concurrent requests that create or annotate the rings")
	flag.Float64Var(&cfg.clientQPS, "client-qps", 500, "the bench's own request rate limit (burst twice as many); the operator's is its own")
	flag.DurationVar(&cfg.rotation, "rotation-interval", time.Hour, "every ring's rotationInterval: long, so that no ring rotates by the clock during the bench")
	flag.DurationVar(&cfg.activation, "activation-delay", 10*time.Second, "every ring's activationDelay: a rotate-now promotes a staged key only once it is this old")
	flag.IntVar(&cfg.retained, "retained-keys", 3, "every ring's retainedKeys")
	flag.Int64Var(&cfg.memoryLimit, "memory-limit", 256<<20, "the container memory limit the operator is told, in bytes ($RINGMASTER_MEMORY_LIMIT, as the chart sets it from its 256Mi): its Go soft limit is --memory-limit-ratio of it; 0: none")
	flag.StringVar(&cfg.goMemLimit, "gomemlimit", "", "the operator's GOMEMLIMIT, which wins over -memory-limit; empty: none")
	flag.IntVar(&cfg.ringWorkers, "ring-workers", 0, "the operator's --ring-workers; 0: its default")
	flag.DurationVar(&cfg.settle, "settle", 30*time.Second, "how long the operator stays idle after the bulk before the settled memory reading and heap profile")
	flag.DurationVar(&cfg.quiet, "quiet", 3*time.Second, "how long without a request of the operator (its Lease's aside), its queues empty, counts as idle")
	flag.DurationVar(&cfg.timeout, "timeout", 90*time.Minute, "how long each phase may take, its probe rings' and the operator's return to idle included")
	flag.DurationVar(&cfg.scrapeEvery, "scrape-every", time.Minute, "how often the operator's metrics are read for its heap's peak: by default as often as the chart's ServiceMonitor scrapes them (metrics.serviceMonitor.interval), for each scrape costs the operator (10,000 rings export some 40,000 series)")
	flag.StringVar(&cfg.profile, "heap-profile", "", "where to write the operator's settled heap profile (default: bin/scale/heap-RINGS.pb.gz in the module)")
	flag.IntVar(&cfg.memProfileRate, "memprofilerate", 64<<10, "the operator's GODEBUG=memprofilerate: a heap profile samples one allocation per this many bytes (the Go runtime's default, 512 KiB, gives too few samples to break 20 MiB down); 0: the runtime's default")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the work directory (logs, the audit log, kubeconfigs)")
	flag.BoolVar(&cfg.floor, "floor", false, "measure the control plane's floor instead of the operator: the operator is stopped once it leads, and a stand-in makes, for each ring, only the requests the operator makes, with its number of workers; no probes, no memory figures")
	flag.Parse()
	for p := range strings.SplitSeq(phases, ",") {
		switch strings.TrimSpace(p) {
		case "create", "":
		case "rotate":
			cfg.rotate = true
		case "revoke":
			cfg.revoke = true
		case "fleet":
			cfg.fleet = true
		default:
			fmt.Fprintf(os.Stderr, "scale: unknown phase %q in -phases: want create, rotate, fleet, revoke\n", p)
			os.Exit(2)
		}
	}
	if cfg.rings < 1 || cfg.namespaces < 1 || cfg.namespaces > cfg.rings || cfg.creators < 1 || cfg.probeEvery < 0 || cfg.probeNamespaces < 1 ||
		cfg.activation < 0 || cfg.activation >= cfg.rotation || cfg.settle < 0 || cfg.quiet <= 0 || cfg.scrapeEvery <= 0 || cfg.memProfileRate < 0 {
		fmt.Fprintln(os.Stderr, "scale: want -rings >= -namespaces >= 1, -creators >= 1, -probe-every >= 0, -probe-namespaces >= 1, 0 <= -activation-delay < -rotation-interval, -settle >= 0, -quiet and -scrape-every > 0, -memprofilerate >= 0")
		os.Exit(2)
	}

	if cfg.floor {
		cfg.probeEvery, cfg.revoke = 0, false
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctrllog.SetLogger(logr.Discard())
	if err := run(ctx, cfg); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "scale: interrupted:", err)
			os.Exit(130)
		}
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config) (err error) {
	b, err := setup(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		err = errors.Join(err, b.close())
	}()
	if cfg.floor {
		return runFloor(ctx, b)
	}
	report := &report{cfg: cfg, started: time.Now(), load: []string{loadAverage()}}
	defer func() {
		if len(report.phases) > 0 {
			report.load = append(report.load, loadAverage())
			report.print(os.Stdout, b)
		}
	}()

	if report.baseline, err = b.baseline(ctx); err != nil {
		return err
	}
	create, err := b.create(ctx)
	report.phases = append(report.phases, create)
	if err != nil {
		return err
	}
	if report.settled, err = b.settle(ctx, report.baseline); err != nil {
		return err
	}
	for _, ph := range []struct {
		on         bool
		name, note string
	}{{cfg.rotate, "rotate", "rotate-now"}, {cfg.fleet, "fleet", "rotate-now through one FleetRequest"}, {cfg.revoke, "revoke", "revoke"}} {
		if !ph.on {
			continue
		}
		p, err := b.request(ctx, ph.name, ph.note)
		report.phases = append(report.phases, p)
		if err != nil {
			return err
		}
	}
	return nil
}

// loadAverage is the first three fields of /proc/loadavg.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// heapProfilePath is where the settled heap profile goes, and the
// baseline's beside it.
func (cfg config) heapProfilePath(root string) (settled, baseline string) {
	settled = cfg.profile
	if settled == "" {
		settled = filepath.Join(root, "bin", "scale", fmt.Sprintf("heap-%d.pb.gz", cfg.rings))
	}
	return settled, strings.TrimSuffix(settled, ".pb.gz") + "-baseline.pb.gz"
}

// percentile is the nearest-rank percentile q (0-1) of ds, which it sorts.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(q*float64(len(ds))+0.999999) - 1
	return ds[max(0, min(i, len(ds)-1))]
}
