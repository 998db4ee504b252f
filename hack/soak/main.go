// Command soak runs make soak: the operator for a long while with a few
// hundred rings rotating every minute, a fleet of examples/server replicas
// under load on some of them, and the invariants checker fed by a watch of
// every ring's snapshots, the replicas' statuses and every connection. It
// samples the memory and goroutines of the operator and of each replica as
// it goes, and reports at the end: rotations done, invariant violations,
// those samples with a verdict on whether each series levels off, API
// requests per rotation, and resumption. It exits non-zero on any violation
// or failed connection.
//
// It needs KUBEBUILDER_ASSETS (make envtest prints it) and runs from inside
// the module, which it builds. Every process it starts is stopped by its own
// pid on the way out, also on Ctrl-C.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/agentstatus"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
	"github.com/ringmaster-io/ringmaster/internal/testing/invariants"
)

type config struct {
	duration, sampleEvery         time.Duration
	rings, namespaces             int
	fleets, replicas, clients     int
	interval, maxDelay            time.Duration
	rotation, activation, pollPod time.Duration
	retained                      int
	leaderElect, keep             bool
}

func main() {
	cfg := config{}
	flag.DurationVar(&cfg.duration, "duration", 5*time.Minute, "how long to soak, from the moment every ring is ready and the fleets serve")
	flag.DurationVar(&cfg.sampleEvery, "sample-every", 0, "how often to sample memory, goroutines and API requests (default: duration/60, at least 5s); the report's table shows about 12 of the samples, its verdicts use all")
	flag.IntVar(&cfg.rings, "rings", 300, "TicketKeyRings, spread over -namespaces namespaces")
	flag.IntVar(&cfg.namespaces, "namespaces", 10, "namespaces the rings are spread over")
	flag.IntVar(&cfg.fleets, "fleets", 1, "fleets of examples/server replicas, each on a ring of its own (at most -rings)")
	flag.IntVar(&cfg.replicas, "replicas", 4, "replicas in each fleet")
	flag.IntVar(&cfg.clients, "clients", 8, "clients reconnecting through each fleet's balancer, each with its own session cache")
	flag.DurationVar(&cfg.interval, "interval", 250*time.Millisecond, "mean time between one client's connections")
	flag.DurationVar(&cfg.maxDelay, "max-delay", 3*time.Second, "delivery delay of each fleet's slowest replica (its stand-in kubelet's lag)")
	flag.DurationVar(&cfg.rotation, "rotation-interval", time.Minute, "every ring's rotationInterval")
	flag.DurationVar(&cfg.activation, "activation-delay", 10*time.Second, "every ring's activationDelay; keep it above -max-delay")
	flag.IntVar(&cfg.retained, "retained-keys", 3, "every ring's retainedKeys")
	flag.DurationVar(&cfg.pollPod, "poll", time.Second, "how often each replica's status is read into the checker")
	flag.BoolVar(&cfg.leaderElect, "leader-elect", true, "run the operator with leader election, as deployed (its Lease renewals count among the API requests)")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the work directory (logs of every process, replica volumes, kubeconfig)")
	flag.Parse()
	if cfg.sampleEvery == 0 {
		cfg.sampleEvery = max(5*time.Second, cfg.duration/60)
	}
	if cfg.rings < 1 || cfg.namespaces < 1 || cfg.fleets < 0 || cfg.fleets > cfg.rings || cfg.replicas < 2 || cfg.clients < 1 ||
		cfg.interval <= 0 || cfg.activation <= cfg.maxDelay || cfg.activation >= cfg.rotation {
		fmt.Fprintln(os.Stderr, "soak: want -rings >= 1, -namespaces >= 1, 0 <= -fleets <= -rings, -replicas >= 2, -clients >= 1, -interval > 0 and -max-delay < -activation-delay < -rotation-interval")
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctrllog.SetLogger(logr.Discard())
	failed, err := run(ctx, cfg, os.Stdout)
	switch {
	case err != nil && ctx.Err() != nil:
		fmt.Fprintln(os.Stderr, "soak: interrupted")
		os.Exit(130)
	case err != nil:
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	case failed:
		fmt.Fprintln(os.Stderr, "soak: FAILED (see the report)")
		os.Exit(1)
	}
}

// soak is a running soak.
type soak struct {
	cfg     config
	env     *fleet.Env
	check   *invariants.Checker
	metrics string // the operator's metrics URL
	http    *http.Client
	fleets  []*fleet.Fleet
	loads   []*fleet.StreamLoad
	start   time.Time

	mu       sync.Mutex
	conns    connCounts
	epochs   int // new epochs the snapshot watch saw after each ring's first
	firstSee map[string]bool
	// statusErrs counts the replicas' status reads that failed, by error.
	statusErrs map[string]int
	samples    []sample
}

type connCounts struct {
	conns, failures, first, reconnects, resumed, full int
	errs                                              map[string]int
}

// sample is one reading of every process and of the operator's counters.
type sample struct {
	at        time.Duration
	rotations float64 // the operator's ringmaster_ticketkeyring_rotations_total
	requests  float64 // its rest_client_requests_total
	byMethod  map[string]float64
	epochs    int
	procs     []procSample // the operator first, then each replica
}

type procSample struct {
	name                  string
	rss, heap, goroutines float64
	err                   error
}

func run(ctx context.Context, cfg config, out io.Writer) (failed bool, err error) {
	s := &soak{cfg: cfg, http: &http.Client{Timeout: 10 * time.Second}, firstSee: map[string]bool{}, statusErrs: map[string]int{}, conns: connCounts{errs: map[string]int{}}}
	// Slack: a replica's status is read every -poll, and the watch reports
	// a snapshot a moment after it is written.
	s.check = invariants.New(invariants.Config{ActivationDelay: cfg.activation, Slack: cfg.pollPod})
	fmt.Fprintf(out, "Soak: %d rings in %d namespaces, rotationInterval %s, activationDelay %s, retainedKeys %d; %d fleet(s) of %d replicas (delivery 0-%s), %d clients each every %s; for %s\n",
		cfg.rings, cfg.namespaces, cfg.rotation, cfg.activation, cfg.retained, cfg.fleets, cfg.replicas, cfg.maxDelay, cfg.clients, cfg.interval, cfg.duration)

	s.env, err = fleet.Setup(ctx, fleet.Options{Progress: os.Stderr, KeepWork: cfg.keep})
	if err != nil {
		return false, err
	}
	defer func() {
		for _, l := range s.loads {
			l.Stop()
		}
		err = errors.Join(err, s.env.Close())
		if cfg.keep {
			fmt.Fprintf(os.Stderr, "Logs, volumes and kubeconfig kept in %s\n", s.env.Work)
		}
	}()
	addr, err := fleet.FreePort()
	if err != nil {
		return false, err
	}
	s.metrics = "http://" + addr + "/metrics"
	s.env.Cluster.OperatorArgs = []string{"--metrics-bind-address", addr, "--metrics-insecure", fmt.Sprintf("--leader-elect=%t", cfg.leaderElect)}
	if err := s.env.RestartOperator(ctx); err != nil {
		return false, err
	}
	fmt.Fprintf(os.Stderr, "Restarted the operator with its metrics on %s (pid %d, log %s)\n", addr, s.env.Operator.PID, s.env.Operator.Log)

	bg, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	wg.Go(func() { fleet.WatchSnapshots(bg, s.env.Cluster.Clientset, s.snapshot) })

	if err := s.createRings(ctx); err != nil {
		return false, err
	}
	if err := s.startFleets(ctx); err != nil {
		return false, err
	}
	for _, f := range s.fleets {
		wg.Go(func() { s.pollPods(bg, f) })
	}

	s.start = time.Now()
	fmt.Fprintf(out, "\nSoaking from %s; a line per sample (operator, then the replicas' sums)\n", s.start.UTC().Format(time.RFC3339))
	s.sampleNow(ctx, out)
	end := s.start.Add(cfg.duration)
	tick := time.NewTicker(cfg.sampleEvery)
	defer tick.Stop()
	for time.Now().Before(end) {
		wait := time.Until(end)
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-tick.C:
			s.sampleNow(ctx, out)
		case <-time.After(wait):
		}
		if err := s.env.OperatorAlive(); err != nil {
			return false, err
		}
	}
	s.sampleNow(ctx, out)
	for _, l := range s.loads {
		l.Stop()
	}
	s.loads = nil
	return s.report(out), nil
}

// ringName names ring i and its namespace.
func (s *soak) ringName(i int) (ns, name string) {
	return fmt.Sprintf("soak-%02d", i%s.cfg.namespaces), fmt.Sprintf("ring-%03d", i)
}

// createRings creates the rings spread over one rotation interval, so that
// their rotations are spread over each minute as independent rings' would
// be, and waits until every one is ready.
func (s *soak) createRings(ctx context.Context) error {
	c := s.env.Cluster
	for i := range s.cfg.namespaces {
		ns, _ := s.ringName(i)
		if err := c.CreateNamespace(ctx, ns); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "Creating %d rings over %s\n", s.cfg.rings, s.cfg.rotation)
	gap := s.cfg.rotation / time.Duration(s.cfg.rings)
	next := time.Now()
	for i := range s.cfg.rings {
		ns, name := s.ringName(i)
		spec := fleet.RingSpec{Namespace: ns, Name: name, RotationInterval: s.cfg.rotation, ActivationDelay: s.cfg.activation, RetainedKeys: int32(s.cfg.retained)} //nolint:gosec // bounded by the API: 0-16
		if err := c.Client.Create(ctx, spec.Object()); err != nil {
			return fmt.Errorf("create TicketKeyRing %s/%s: %w", ns, name, err)
		}
		next = next.Add(gap)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(next)):
		}
	}
	wait, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		var list v1alpha1.TicketKeyRingList
		if err := c.Client.List(wait, &list); err != nil {
			return err
		}
		ready := 0
		for i := range list.Items {
			if fleet.Ready(&list.Items[i]) {
				ready++
			}
		}
		if ready == s.cfg.rings {
			fmt.Fprintf(os.Stderr, "All %d rings are ready\n", ready)
			return nil
		}
		select {
		case <-wait.Done():
			return fmt.Errorf("only %d of %d rings became ready: %w", ready, s.cfg.rings, wait.Err())
		case <-time.After(2 * time.Second):
		}
	}
}

// startFleets starts a fleet on each of the first -fleets rings, and its
// load.
func (s *soak) startFleets(ctx context.Context) error {
	for i := range s.cfg.fleets {
		ns, name := s.ringName(i)
		ring, err := s.env.Cluster.GetRing(ctx, ns, name)
		if err != nil {
			return err
		}
		f, err := s.env.StartFleet(ctx, fleet.Config{Name: fmt.Sprintf("fleet-%d", i), Delays: fleet.Spread(s.cfg.replicas, s.cfg.maxDelay), Namespace: ns, Secret: ring.ProjectionSecretName()})
		if err != nil {
			return err
		}
		if _, err := f.WaitServing(ctx, "serving the ring", func(st agentstatus.Status) bool { return st.ActiveKeyID != "" }); err != nil {
			return err
		}
		s.fleets = append(s.fleets, f)
		fmt.Fprintf(os.Stderr, "Fleet %s: %d replicas on %s/%s behind %s\n", f.Name, len(f.Replicas), ns, name, f.LB.Addr())
		lc := f.LoadConfig(tls.VersionTLS13, s.cfg.clients, 0, s.cfg.interval)
		seen := make([]bool, s.cfg.clients) // whether each client has a session to resume
		s.loads = append(s.loads, fleet.StartStreamLoad(context.WithoutCancel(ctx), lc, func(x fleet.Sample) { s.conn(f, seen, x) }))
	}
	return nil
}

// conn counts one connection and hands it to the checker. A client's
// connection after a successful one is a reconnect, which must resume.
func (s *soak) conn(f *fleet.Fleet, seen []bool, x fleet.Sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conns.conns++
	pod := fmt.Sprintf("%s/replica-%d", f.Name, f.ReplicaOf(x.Backend))
	if x.Err != "" {
		s.conns.failures++
		s.conns.errs[x.Err]++
		s.check.ObserveConn("", false, errors.New(x.Err), false)
		return
	}
	if !seen[x.Client] {
		seen[x.Client] = true
		s.conns.first++
		return
	}
	s.conns.reconnects++
	if x.Resumed {
		s.conns.resumed++
	} else {
		s.conns.full++
	}
	s.check.ObserveConn(pod, x.Resumed, nil, false)
}

// snapshot hands a snapshot the watch saw to the checker.
func (s *soak) snapshot(x fleet.SnapshotSeen) {
	s.check.ObserveSnapshot(x.Ring, x.Epoch, x.Digest, x.At)
	for _, id := range x.Staged {
		s.check.ObserveStaged(x.Ring, id, x.At)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.firstSee[x.Ring] {
		s.epochs++
	}
	s.firstSee[x.Ring] = true
}

// pollPods reads each replica's status into the checker until ctx ends.
func (s *soak) pollPods(ctx context.Context, f *fleet.Fleet) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.cfg.pollPod):
		}
		for _, r := range f.Replicas {
			st, err := fleet.ReadHealth(ctx, s.http, r.StatusAddr)
			if err != nil {
				if ctx.Err() == nil {
					s.mu.Lock()
					s.statusErrs[fmt.Sprintf("%s/replica-%d: %v", f.Name, r.Index, err)]++
					s.mu.Unlock()
				}
				continue
			}
			s.check.ObservePod(fmt.Sprintf("%s/replica-%d", f.Name, r.Index), st, time.Now())
		}
	}
}

// sampleNow reads every process and the operator's counters, keeps them,
// and prints a line.
func (s *soak) sampleNow(ctx context.Context, out io.Writer) {
	smp := sample{at: time.Since(s.start).Round(time.Second)}
	op := s.readProc(ctx, "operator", s.env.Operator.PID, s.metrics)
	if exp, err := fleet.Scrape(ctx, s.http, s.metrics); err == nil {
		smp.rotations, _ = fleet.SumMetric(exp, "ringmaster_ticketkeyring_rotations_total")
		smp.requests, _ = fleet.SumMetric(exp, "rest_client_requests_total")
		smp.byMethod = fleet.SumMetricBy(exp, "rest_client_requests_total", "method")
	}
	smp.procs = append(smp.procs, op)
	var sum procSample
	for _, f := range s.fleets {
		for _, r := range f.Replicas {
			p := s.readProc(ctx, fmt.Sprintf("%s/replica-%d", f.Name, r.Index), r.Proc.PID, "http://"+r.StatusAddr+"/metrics")
			smp.procs = append(smp.procs, p)
			sum.rss, sum.heap, sum.goroutines = sum.rss+p.rss, sum.heap+p.heap, sum.goroutines+p.goroutines
		}
	}
	s.mu.Lock()
	smp.epochs = s.epochs
	c := s.conns
	s.samples = append(s.samples, smp)
	s.mu.Unlock()
	fmt.Fprintf(out, "t+%-6s rotations %6.0f  API requests %8.0f  operator rss %s heap %s goroutines %4.0f  replicas rss %s heap %s goroutines %4.0f  conns %d failed %d resumed %s  violations %d\n",
		smp.at, smp.rotations, smp.requests, mib(op.rss), mib(op.heap), op.goroutines, mib(sum.rss), mib(sum.heap), sum.goroutines,
		c.conns, c.failures, pct(c.resumed, c.reconnects), len(s.check.Violations()))
}

func (s *soak) readProc(ctx context.Context, name string, pid int, url string) procSample {
	p := procSample{name: name}
	rss, err := fleet.ProcRSS(pid)
	p.rss = float64(rss)
	exp, serr := fleet.Scrape(ctx, s.http, url)
	var herr, gerr error
	if serr == nil {
		p.heap, herr = fleet.SumMetric(exp, "go_memstats_heap_inuse_bytes")
		p.goroutines, gerr = fleet.SumMetric(exp, "go_goroutines")
	}
	p.err = errors.Join(err, serr, herr, gerr)
	return p
}

// report prints the end report and says whether the soak failed.
func (s *soak) report(out io.Writer) (failed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	first, last := s.samples[0], s.samples[len(s.samples)-1]
	rotations := last.rotations - first.rotations
	requests := last.requests - first.requests
	violations := s.check.Violations()
	fmt.Fprintf(out, "\n==== Soak report: %s, %d rings (rotationInterval %s, activationDelay %s), %d fleet(s) of %d replicas, %d clients each\n",
		last.at, s.cfg.rings, s.cfg.rotation, s.cfg.activation, s.cfg.fleets, s.cfg.replicas, s.cfg.clients)
	expect := float64(s.cfg.rings) * last.at.Seconds() / s.cfg.rotation.Seconds()
	fmt.Fprintf(out, "Rotations done:        %.0f (the operator's ringmaster_ticketkeyring_rotations_total; %.0f expected of %d rings every %s); %d new epochs seen by the snapshot watch\n",
		rotations, expect, s.cfg.rings, s.cfg.rotation, last.epochs-first.epochs)
	fmt.Fprintf(out, "Invariant violations:  %d\n", len(violations))
	for i, v := range violations {
		if i == 20 {
			fmt.Fprintf(out, "  ... and %d more\n", len(violations)-20)
			break
		}
		fmt.Fprintf(out, "  %s\n", v)
	}
	if rotations > 0 {
		fmt.Fprintf(out, "API requests/rotation: %.1f (%.0f requests of the operator's rest_client_requests_total over %.0f rotations, Lease renewals included: leader election %t)\n",
			requests/rotations, requests, rotations, s.cfg.leaderElect)
		var parts []string
		for _, m := range slices.Sorted(maps.Keys(last.byMethod)) {
			if d := last.byMethod[m] - first.byMethod[m]; d > 0 {
				parts = append(parts, fmt.Sprintf("%s %.2f", m, d/rotations))
			}
		}
		fmt.Fprintf(out, "  per rotation by method: %s\n", strings.Join(parts, ", "))
	}
	c := s.conns
	fmt.Fprintf(out, "Resumption:            %s of %d reconnects resumed, %d full handshakes; %d connections in all, %d failed, %d first connections (no session yet)\n",
		pct(c.resumed, c.reconnects), c.reconnects, c.full, c.conns, c.failures, c.first)
	for e, n := range c.errs {
		fmt.Fprintf(out, "  failed %d x: %s\n", n, e)
	}
	for e, n := range s.statusErrs {
		fmt.Fprintf(out, "  status read failed %d x: %s\n", n, e)
	}
	fmt.Fprintf(out, "Checker's count:       %s (rotations: keys seen beginning to encrypt at the fleets' pods)\n", s.check.Report())

	fmt.Fprintf(out, "\nMemory and goroutines, per process (RSS from /proc, heap = go_memstats_heap_inuse_bytes, go_goroutines), at each sample; slopes per hour over the first and last third\n")
	grows := false
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	// About 12 columns: every step-th sample, and the last.
	step := max(1, (len(s.samples)+10)/11)
	shown := func(i int) bool { return i%step == 0 || i == len(s.samples)-1 }
	header := "process\tseries\t"
	for i, smp := range s.samples {
		if shown(i) {
			header += fmt.Sprintf("t+%s\t", smp.at)
		}
	}
	fmt.Fprintln(tw, header+"first/h\tlast/h\t±\tlevels off\t")
	for i := range first.procs {
		for _, series := range []struct {
			name string
			get  func(procSample) float64
			unit func(float64) string
		}{
			{"rss", func(p procSample) float64 { return p.rss }, mib},
			{"heap", func(p procSample) float64 { return p.heap }, mib},
			{"goroutines", func(p procSample) float64 { return p.goroutines }, func(v float64) string { return fmt.Sprintf("%.0f", v) }},
		} {
			var rs []fleet.Reading
			row := first.procs[i].name + "\t" + series.name + "\t"
			for j, smp := range s.samples {
				v := series.get(smp.procs[i])
				rs = append(rs, fleet.Reading{At: smp.at, Value: v})
				if shown(j) {
					row += series.unit(v) + "\t"
				}
			}
			g := fleet.GrowthOf(rs, last.at)
			verdict := "yes"
			if !g.LevelsOff {
				verdict, grows = "NO", true
			}
			row += fmt.Sprintf("%s\t%s\t%s\t%s\t", signed(series.unit, g.First), signed(series.unit, g.Last), series.unit(g.LastErr), verdict)
			fmt.Fprintln(tw, row)
		}
	}
	_ = tw.Flush()
	var readErrs []string
	for _, smp := range s.samples {
		for _, p := range smp.procs {
			if p.err != nil {
				readErrs = append(readErrs, fmt.Sprintf("t+%s %s: %v", smp.at, p.name, p.err))
			}
		}
	}
	if len(readErrs) > 0 {
		fmt.Fprintf(out, "Readings that failed (shown as 0): %s\n", strings.Join(readErrs, "; "))
	}
	fmt.Fprintf(out, "\n%d samples, every %s. A series levels off when its slope over the last third (± its standard error) is not above zero by more than two standard errors, or is at most half its slope over the first third, or is less than %.0f%% of its median per hour.\n",
		len(s.samples), s.cfg.sampleEvery, 100*fleet.FlatShare)
	if grows {
		fmt.Fprintln(out, "Growth that does not level off: NO in the table above.")
	}
	failed = len(violations) > 0 || c.failures > 0 || len(s.statusErrs) > 0 || rotations == 0
	if failed {
		fmt.Fprintln(out, "RESULT: FAILED")
	} else {
		fmt.Fprintln(out, "RESULT: passed (0 violations, 0 failed connections, 0 failed status reads)")
	}
	return failed
}

func mib(v float64) string { return fmt.Sprintf("%.1fMiB", v/(1<<20)) }

func signed(unit func(float64) string, v float64) string {
	if v >= 0 {
		return "+" + unit(v)
	}
	return "-" + unit(-v)
}

func pct(n, of int) string {
	if of == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f%%", 100*float64(n)/float64(of))
}
