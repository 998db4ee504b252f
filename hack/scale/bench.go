package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/controller"
	"github.com/ringmaster-io/ringmaster/internal/operator"
	"github.com/ringmaster-io/ringmaster/internal/testing/apiaudit"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
)

// probeNamespace holds the probe rings, apart from the bulk's, so that the
// audit log tells their requests apart; with -probe-namespaces above 1,
// it is the prefix of the probe namespaces.
const probeNamespace = "scale-probe"

// isProbe reports whether ns holds probe rings.
func isProbe(ns string) bool { return strings.HasPrefix(ns, probeNamespace) }

// probeNamespaceOf is where the i-th probe ring goes: the probe namespace,
// or one of -probe-namespaces in turn.
func (b *bench) probeNamespaceOf(i int) string {
	if b.cfg.probeNamespaces <= 1 {
		return probeNamespace
	}
	return fmt.Sprintf("%s-%03d", probeNamespace, i%b.cfg.probeNamespaces)
}

// bench is a running bench: the control plane, the operator, the watch of
// every ring and the monitor of the operator.
type bench struct {
	cfg     config
	env     *fleet.Env
	client  client.Client // admin, at -client-qps
	track   *tracker
	mon     *monitor
	root    string
	stop    context.CancelFunc
	wg      sync.WaitGroup
	probeID atomic.Int64
	// stand is the operator's stand-in under -floor, nil otherwise.
	stand *standIn
}

// phase is what one phase measured.
type phase struct {
	name string
	// rings is how many rings the phase acted on in bulk; bulk is how
	// many of those are outside the probe namespace, the rings its
	// requests are divided by.
	rings, bulk int
	// issued is when the bench had sent the last of the bulk's requests,
	// done when the last of the bulk's rings reached the phase's state, and
	// idle when the operator went idle after, all since the phase began.
	issued, done, idle time.Duration
	// cpu is the operator's processor time over the phase, until idle.
	cpu time.Duration
	// requests are the operator's requests on the bulk's rings (all but
	// the probe namespace), probeRequests on the probe rings; leases
	// counts its Lease's requests. clientRequests are its own count by
	// method (rest_client_requests_total, the Lease's included).
	requests, probeRequests apiaudit.Counts
	leases                  int
	clientRequests          map[string]float64
	// mem holds the peaks of the phase.
	mem reading
	// atIdle is the reading that found the operator idle.
	atIdle reading
	// err is why the phase did not finish.
	err error

	mu     sync.Mutex
	probes []time.Duration // create-to-Ready of each probe ring created
	// stamped is each probe ring's Ready lastTransitionTime less its
	// creationTimestamp: the same wait by the API server's and the
	// operator's clocks, to the second, without the bench's own create
	// call and watch.
	stamped []time.Duration
	// probesCreated counts the probe rings created during the phase.
	probesCreated int
}

func newPhase(name string) *phase {
	return &phase{name: name, requests: apiaudit.Counts{}, probeRequests: apiaudit.Counts{}}
}

func (p *phase) probeDone(d, stamped time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probes = append(p.probes, d)
	p.stamped = append(p.stamped, stamped)
}

func setup(ctx context.Context, cfg config) (*bench, error) {
	metricsAddr, err := fleet.FreePort()
	if err != nil {
		return nil, err
	}
	pprofAddr, err := fleet.FreePort()
	if err != nil {
		return nil, err
	}
	args := []string{"--metrics-bind-address", metricsAddr, "--metrics-insecure", "--pprof-bind-address", pprofAddr, "--zap-log-level", "info"}
	if cfg.ringWorkers > 0 {
		args = append(args, fmt.Sprintf("--ring-workers=%d", cfg.ringWorkers))
	}
	var env []string
	if cfg.memoryLimit > 0 {
		env = append(env, fmt.Sprintf("%s=%d", operator.MemoryLimitEnv, cfg.memoryLimit))
	}
	if cfg.goMemLimit != "" {
		env = append(env, "GOMEMLIMIT="+cfg.goMemLimit)
	}
	if cfg.memProfileRate > 0 {
		env = append(env, fmt.Sprintf("GODEBUG=memprofilerate=%d", cfg.memProfileRate))
	}
	e, err := fleet.Setup(ctx, fleet.Options{
		Progress: os.Stderr, KeepWork: cfg.keep, Shipped: true, AsServiceAccount: true, Audit: true, LeaderElect: true,
		OperatorArgs: args, OperatorEnv: env,
	})
	if err != nil {
		return nil, err
	}
	b := &bench{cfg: cfg, env: e, track: newTracker()}
	if b.root, err = fleet.ModuleRoot(ctx); err != nil {
		return nil, errors.Join(err, b.close())
	}
	rc := rest.CopyConfig(e.Cluster.Config)
	rc.QPS, rc.Burst = float32(cfg.clientQPS), int(2*cfg.clientQPS)
	if b.client, err = client.New(rc, client.Options{Scheme: e.Cluster.Client.Scheme()}); err != nil {
		return nil, errors.Join(err, b.close())
	}
	b.mon = &monitor{pid: e.Operator.PID, metrics: "http://" + metricsAddr + "/metrics", pprof: "http://" + pprofAddr,
		// Uncompressed: on loopback a gzipped scrape only costs the
		// operator the compression, 4% of its processor at 10,000 rings.
		http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableCompression: true}}, audit: apiaudit.NewReader(e.AuditLog),
		quiet: cfg.quiet, scrapeEv: cfg.scrapeEvery}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b.stop = cancel
	if err := b.track.start(bg, rc, b.client); err != nil {
		return nil, errors.Join(err, b.close())
	}
	if cfg.floor {
		if err := e.KillOperator(); err != nil {
			return nil, errors.Join(err, b.close())
		}
		if b.stand, err = newStandIn(bg, filepath.Join(e.Work, "operator.kubeconfig"), e.Cluster.Client.Scheme()); err != nil {
			return nil, errors.Join(err, b.close())
		}
		fmt.Fprintf(os.Stderr, "The operator is stopped: a stand-in makes its requests, as %s/%s, %d at a time\n",
			fleet.OperatorNamespace, fleet.OperatorServiceAccount, controller.DefaultRingWorkers)
		return b, nil
	}
	b.wg.Go(func() { b.mon.run(bg) })
	wait, cancelWait := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelWait()
	if err := b.mon.waitLeader(wait, e.Operator); err != nil {
		return nil, errors.Join(err, b.close())
	}
	fmt.Fprintf(os.Stderr, "The operator (pid %d, log %s) leads, as %s/%s, metrics on %s, pprof on %s, %s\n",
		e.Operator.PID, e.Operator.Log, fleet.OperatorNamespace, fleet.OperatorServiceAccount, metricsAddr, pprofAddr, memoryLimits(cfg))
	return b, nil
}

func (b *bench) close() error {
	if b.stop != nil {
		b.stop()
		b.wg.Wait()
	}
	if b.stand != nil {
		b.stand.close()
	}
	err := b.env.Close()
	if b.cfg.keep {
		fmt.Fprintf(os.Stderr, "Logs, the audit log and kubeconfigs kept in %s\n", b.env.Work)
	}
	return err
}

// bulkNamespace names the namespace of bulk ring i.
func (b *bench) bulkKey(i int) types.NamespacedName {
	return types.NamespacedName{Namespace: fmt.Sprintf("scale-%03d", i%b.cfg.namespaces), Name: fmt.Sprintf("ring-%05d", i)}
}

func (b *bench) ringObject(key types.NamespacedName) *v1alpha1.TicketKeyRing {
	return fleet.RingSpec{Namespace: key.Namespace, Name: key.Name, RotationInterval: b.cfg.rotation,
		ActivationDelay: b.cfg.activation, RetainedKeys: int32(b.cfg.retained)}.Object() //nolint:gosec // bounded by the API: 0-16
}

// create is the bulk: every ring created at once, -creators requests at a
// time, while probe rings are created one every -probe-every; it ends
// when every ring is Ready and the operator idle.
func (b *bench) create(ctx context.Context) (*phase, error) {
	p := newPhase("create")
	p.rings, p.bulk = b.cfg.rings, b.cfg.rings
	for i := range b.cfg.namespaces {
		if err := b.env.Cluster.CreateNamespace(ctx, b.bulkKey(i).Namespace); err != nil {
			return p, err
		}
	}
	for i := range max(b.cfg.probeNamespaces, 1) {
		if err := b.env.Cluster.CreateNamespace(ctx, b.probeNamespaceOf(i)); err != nil {
			return p, err
		}
	}
	probes := "no probe ring"
	if b.cfg.probeEvery > 0 {
		probes = fmt.Sprintf("a probe ring every %s in %d namespace(s) of their own, in turn", b.cfg.probeEvery, max(b.cfg.probeNamespaces, 1))
	}
	fmt.Fprintf(os.Stderr, "Creating %d rings in %d namespaces, %d at a time, and %s\n", b.cfg.rings, b.cfg.namespaces, b.cfg.creators, probes)
	return p, b.runPhase(ctx, p, func(ctx context.Context) error {
		return parallel(ctx, b.cfg.rings, b.cfg.creators, func(i int) error {
			key := b.bulkKey(i)
			b.track.add(key, p, false)
			ring := b.ringObject(key)
			if err := b.client.Create(ctx, ring); err != nil {
				return fmt.Errorf("create TicketKeyRing %s: %w", key, err)
			}
			if b.stand != nil {
				b.stand.work <- standInWork{ring: ring}
			}
			return nil
		})
	}, func() (bool, string) {
		ready := b.track.readyOf(p, false).n
		return ready == b.cfg.rings, fmt.Sprintf("%d of %d rings Ready", ready, b.cfg.rings)
	}, func() time.Time { return b.track.readyOf(p, false).last })
}

// request is a rotate-now or a revoke of every ring at once: each
// annotated with one value, -creators requests at a time, while probe
// rings are created; it ends when every ring's status echoes the value and
// the operator is idle.
func (b *bench) request(ctx context.Context, name, what string) (*phase, error) {
	p := newPhase(name)
	value := time.Now().UTC().Format(time.RFC3339Nano)
	annotation, rotate, revoke := v1alpha1.RotateRequestedAtAnnotation, value, ""
	if name == "revoke" {
		annotation, rotate, revoke = v1alpha1.RevokeRequestedAtAnnotation, "", value
	}
	if name == "fleet" {
		return b.fleetRequest(ctx, p, what)
	}
	keys := b.track.ask(rotate, revoke, "")
	p.rings = len(keys)
	for _, k := range keys {
		if !isProbe(k.Namespace) {
			p.bulk++
		}
	}
	fmt.Fprintf(os.Stderr, "Requesting a %s of all %d rings (%s=%s), %d at a time\n", what, len(keys), annotation, value, b.cfg.creators)
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, annotation, value))
	return p, b.runPhase(ctx, p, func(ctx context.Context) error {
		return parallel(ctx, len(keys), b.cfg.creators, func(i int) error {
			r := &v1alpha1.TicketKeyRing{}
			r.Namespace, r.Name = keys[i].Namespace, keys[i].Name
			if err := b.client.Patch(ctx, r, patch); err != nil {
				return fmt.Errorf("annotate TicketKeyRing %s: %w", keys[i], err)
			}
			if b.stand != nil {
				b.stand.work <- standInWork{key: keys[i], rotate: rotate}
			}
			return nil
		})
	}, func() (bool, string) {
		done := b.track.echoed().n
		return done == len(keys), fmt.Sprintf("%d of %d rings echo the %s", done, len(keys), what)
	}, func() time.Time { return b.track.echoed().last })
}

// fleetRequest is a rotate-now of every ring at once through one
// FleetRequest selecting them all: one create, rather than an annotation
// per ring; it ends when every ring's status records the request and the
// operator is idle.
func (b *bench) fleetRequest(ctx context.Context, p *phase, what string) (*phase, error) {
	name := fmt.Sprintf("scale-%d", time.Now().Unix())
	keys := b.track.ask("", "", name)
	p.rings = len(keys)
	for _, k := range keys {
		if !isProbe(k.Namespace) {
			p.bulk++
		}
	}
	fmt.Fprintf(os.Stderr, "Requesting a %s of all %d rings (FleetRequest %s)\n", what, len(keys), name)
	return p, b.runPhase(ctx, p, func(ctx context.Context) error {
		fr := &v1alpha1.FleetRequest{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.FleetRequestSpec{Action: v1alpha1.FleetRotate}}
		if err := b.client.Create(ctx, fr); err != nil {
			return fmt.Errorf("create FleetRequest %s: %w", name, err)
		}
		if b.stand != nil {
			for _, k := range keys {
				b.stand.work <- standInWork{key: k, rotate: "fleet", fleet: fr}
			}
		}
		return nil
	}, func() (bool, string) {
		done := b.track.echoed().n
		return done == len(keys), fmt.Sprintf("%d of %d rings record the FleetRequest", done, len(keys))
	}, func() time.Time { return b.track.echoed().last })
}

// runPhase runs a phase: bulk sends its requests while probe rings are
// created, until done holds and every probe ring is Ready; then it waits
// for the operator to go idle. last is when the bulk's last ring reached
// the phase's state.
func (b *bench) runPhase(ctx context.Context, p *phase, bulk func(context.Context) error, done func() (bool, string), last func() time.Time) (err error) {
	defer func() { p.err = err }()
	ctx, cancel := context.WithTimeout(ctx, b.cfg.timeout)
	defer cancel()
	if b.stand != nil {
		return b.runFloorPhase(ctx, p, bulk, done, last)
	}
	cpu0, _ := b.env.Operator.CPU()
	before, _ := b.mon.read(ctx)
	b.mon.begin(p)
	start := time.Now()

	probing, stopProbes := context.WithCancel(ctx)
	var probes sync.WaitGroup
	probeErr := make(chan error, 1)
	if b.cfg.probeEvery > 0 {
		probes.Go(func() { probeErr <- b.probe(probing, p) })
	}
	err = bulk(ctx)
	p.issued = time.Since(start)
	if err == nil {
		err = b.track.wait(ctx, p.name, done)
	}
	stopProbes()
	probes.Wait()
	if b.cfg.probeEvery > 0 {
		if perr := <-probeErr; perr != nil && !errors.Is(perr, context.Canceled) {
			err = errors.Join(err, perr)
		}
	}
	if err != nil {
		return err
	}
	p.done = last().Sub(start)
	if err := b.track.wait(ctx, "the probe rings", func() (bool, string) {
		ready := b.track.readyOf(p, true).n
		p.mu.Lock()
		created := p.probesCreated
		p.mu.Unlock()
		return ready >= created, fmt.Sprintf("%d of %d probe rings Ready", ready, created)
	}); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "Phase %s: %d rings done %.1f s after its start; waiting for the operator to go idle\n", p.name, p.rings, p.done.Seconds())
	at, err := b.mon.waitIdle(ctx)
	if err != nil {
		return err
	}
	p.idle, p.atIdle = time.Since(start), at
	b.mon.withPhase(func(p *phase) {
		p.mem.rss, p.mem.anon = max(p.mem.rss, at.rss), max(p.mem.anon, at.anon)
		p.mem.heap, p.mem.goroutines = max(p.mem.heap, at.heap), max(p.mem.goroutines, at.goroutines)
	})
	cpu1, _ := b.env.Operator.CPU()
	p.cpu = cpu1 - cpu0
	p.clientRequests = map[string]float64{}
	for m, v := range at.requests {
		p.clientRequests[m] = v - before.requests[m]
	}
	// Let the tail count what arrived up to now, then stop counting.
	time.Sleep(300 * time.Millisecond)
	b.mon.begin(nil)
	return b.env.OperatorAlive()
}

// probe creates a probe ring every -probe-every until ctx ends.
func (b *bench) probe(ctx context.Context, p *phase) error {
	t := time.NewTicker(b.cfg.probeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		id := b.probeID.Add(1)
		key := types.NamespacedName{Namespace: b.probeNamespaceOf(int(id)), Name: fmt.Sprintf("probe-%05d", id)}
		b.track.add(key, p, true)
		if err := b.client.Create(ctx, b.ringObject(key)); err != nil {
			if ctx.Err() != nil {
				b.track.forget(key)
				return ctx.Err()
			}
			return fmt.Errorf("create probe TicketKeyRing %s: %w", key, err)
		}
		p.mu.Lock()
		p.probesCreated++
		p.mu.Unlock()
	}
}

// baseline is the operator's state before the first ring: idle once it
// leads, its RSS and heap, and its heap profile, which the settled one is
// compared with.
type baseline struct {
	reading
	profile string
	live    float64 // the profile's in-use bytes
}

func (b *bench) baseline(ctx context.Context) (*baseline, error) {
	wait, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	r, err := b.mon.waitIdle(wait)
	if err != nil {
		return nil, err
	}
	bl := &baseline{reading: r}
	_, bl.profile = b.cfg.heapProfilePath(b.root)
	if err := os.MkdirAll(filepath.Dir(bl.profile), 0o755); err != nil {
		return nil, err
	}
	if err := b.mon.heapProfile(ctx, bl.profile); err != nil {
		return nil, err
	}
	_, bl.live, err = pprofTop(ctx, bl.profile, "")
	return bl, err
}

// settled is the operator's state once idle for -settle after the bulk:
// its RSS and heap, then its heap profile taken after a garbage
// collection, compared with the baseline's, and its RSS after.
type settled struct {
	idleFor       time.Duration
	before, after reading
	profile, top  string
	// live is the heap profile's in-use bytes: what the collection left;
	// grown is how much more that is than the baseline's.
	live, grown    float64
	rings          int
	profileFailure error
}

func (b *bench) settle(ctx context.Context, bl *baseline) (*settled, error) {
	s := &settled{idleFor: b.cfg.settle}
	s.rings = b.track.size()
	fmt.Fprintf(os.Stderr, "Letting the operator settle for %s\n", b.cfg.settle)
	select {
	case <-ctx.Done():
		return s, ctx.Err()
	case <-time.After(b.cfg.settle):
	}
	var err error
	if s.before, err = b.mon.read(ctx); err != nil {
		return s, err
	}
	s.profile, _ = b.cfg.heapProfilePath(b.root)
	if s.profileFailure = b.mon.heapProfile(ctx, s.profile); s.profileFailure == nil {
		if _, s.live, s.profileFailure = pprofTop(ctx, s.profile, ""); s.profileFailure == nil {
			s.grown = s.live - bl.live
			s.top, _, s.profileFailure = pprofTop(ctx, s.profile, bl.profile)
		}
	}
	if s.after, err = b.mon.read(ctx); err != nil {
		return s, err
	}
	return s, b.env.OperatorAlive()
}

// pprofTop is go tool pprof's table of the profile's in-use bytes by
// function, the 20 largest, and the total; with a base profile, the table
// of what grew since the base (its total is then the base's).
func pprofTop(ctx context.Context, profile, base string) (string, float64, error) {
	args := []string{"tool", "pprof", "-top", "-nodecount=20", "-sample_index=inuse_space", "-unit=B"}
	if base != "" {
		args = append(args, "-diff_base="+base)
	}
	out, err := exec.CommandContext(ctx, "go", append(args, profile)...).CombinedOutput()
	if err != nil {
		return "", 0, fmt.Errorf("go tool pprof: %w: %s", err, strings.TrimSpace(string(out)))
	}
	// "Showing nodes accounting for 9484096B, 100% of 9484096B total"
	var total float64
	for line := range strings.Lines(string(out)) {
		if _, rest, ok := strings.Cut(line, "% of "); ok {
			if v, _, ok := strings.Cut(rest, "B total"); ok {
				total, _ = strconv.ParseFloat(v, 64)
			}
		}
	}
	if total == 0 {
		return "", 0, fmt.Errorf("go tool pprof printed no total:\n%s", out)
	}
	return string(out), total, nil
}

// parallel calls f for 0..n-1, workers at a time, and returns the first
// error, after which it starts no more.
func parallel(ctx context.Context, n, workers int, f func(int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					cancel(err)
				}
			}
		})
	}
send:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break send
		}
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}
