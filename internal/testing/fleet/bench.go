package fleet

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

// BenchConfig shapes make bench-fleet.
type BenchConfig struct {
	// Replicas is N, the size of each fleet.
	Replicas int
	// Clients reconnect concurrently, each every Interval on average.
	Clients  int
	Interval time.Duration
	// Duration is how long each variant is under load per TLS version, in
	// Rounds windows. The load is bounded by count: Duration/Interval
	// connections per client in all.
	Duration time.Duration
	Rounds   int
	// MaxDelay is the slowest replica's delivery delay; the others spread
	// evenly from 0.
	MaxDelay time.Duration
	// RotateEvery is the rotation period of the variants that rotate.
	RotateEvery time.Duration
	// Versions are the TLS versions to run, in order.
	Versions []uint16
	// Nginx adds the nginx fleets: with the ringmaster-agent sidecar on a
	// staged ring, and with nginx's own per-process keys.
	Nginx bool
}

// Variant names one way of keying a fleet.
type Variant int

// The variants make bench-fleet compares.
const (
	// Staged is ringmaster: one shared ring, each key staged for
	// activationDelay (above the slowest delivery) before it encrypts.
	Staged Variant = iota
	// PerReplica is Go's default: each replica's crypto/tls keeps keys of
	// its own.
	PerReplica
	// Unstaged shares keys without staging: a new key encrypts at once.
	Unstaged
	// NginxStaged is nginx fed ringmaster's staged ring by the
	// ringmaster-agent sidecar.
	NginxStaged
	// NginxOwn is nginx's default: each replica keeps the ticket keys
	// OpenSSL made when it loaded its configuration.
	NginxOwn
	// StagedClassical is Staged with agent.Options.ClassicalResumption:
	// resumed TLS 1.3 handshakes use X25519 alone. It runs under TLS 1.3
	// only, where the option applies.
	StagedClassical
)

var (
	goVariants    = []Variant{Staged, StagedClassical, PerReplica, Unstaged}
	nginxVariants = []Variant{NginxStaged, NginxOwn}
)

func (v Variant) String() string {
	return [...]string{"(i) ringmaster, shared staged ring", "(ii) Go default, per-replica keys", "(iii) shared keys, no staging",
		"(iv) nginx + ringmaster-agent, staged ring", "(v) nginx default, per-process keys",
		"(vi) ringmaster, staged ring, X25519 resumption"}[v]
}

func (v Variant) short() string { return [...]string{"(i)", "(ii)", "(iii)", "(iv)", "(v)", "(vi)"}[v] }

// runs reports whether v runs under TLS version ver.
func (v Variant) runs(ver uint16) bool {
	return v != StagedClassical || ver == tls.VersionTLS13
}

// ClassicalTarget is what issue 17 asks of (vi) under TLS 1.3: server CPU
// per reconnect at most this fraction of per-replica keys', with every
// reconnect resumed.
const ClassicalTarget = 0.8

// BenchRow is one variant's figures under one TLS version, over every round.
type BenchRow struct {
	Variant Variant
	Version uint16
	// Summary counts every round's connections together.
	Summary Summary
	// Rotations counts the rotations that happened while the variant was
	// under load.
	Rotations int
	// CPUPer1k is the replicas' processor time (user plus system, summed
	// over the replica processes) per 1,000 reconnects: the median of the
	// rounds, which damps the noise of other work on the machine.
	CPUPer1k float64
	// CPU is the replicas' processor time over every round.
	CPU time.Duration
	// SidecarCPU is the sidecars' processor time over every round: not in
	// CPU, which counts the servers.
	SidecarCPU time.Duration
	// Groups counts the connections by key exchange (Result.Groups).
	Groups map[string]int
}

// benchFleet is a fleet under test and, for the variants that rotate, its
// rotator's record.
type benchFleet struct {
	variant Variant
	fleet   *Fleet
	rotate  func(context.Context) error

	mu        sync.Mutex
	rotations []time.Time
	rotErr    error
}

func (b *benchFleet) rotationsIn(from, to time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, t := range b.rotations {
		if !t.Before(from) && t.Before(to) {
			n++
		}
	}
	return n
}

// Bench starts one fleet per variant and puts each under the same load in
// turn, Rounds times per TLS version, the variants' order shifting from round
// to round, so that a change in the machine's other work weighs on every
// variant alike. The rotating fleets rotate every RotateEvery throughout. It
// writes one table per TLS version to out, and progress to progress.
func (e *Env) Bench(ctx context.Context, cfg BenchConfig, out, progress io.Writer) ([]BenchRow, error) {
	if cfg.Rounds < 1 {
		cfg.Rounds = 1
	}
	delays := Spread(cfg.Replicas, cfg.MaxDelay)
	activation := cfg.MaxDelay + time.Second
	if cfg.RotateEvery < activation+2*time.Second {
		return nil, fmt.Errorf("a rotation every %s is too short: ringmaster's rotate-now takes activationDelay %s and a second", cfg.RotateEvery, activation)
	}
	variants := goVariants
	if cfg.Nginx {
		variants = append(slices.Clone(variants), nginxVariants...)
	}
	var fleets []*benchFleet
	defer func() {
		for _, b := range fleets {
			_ = b.fleet.Stop() // stopping is best effort here; Env.Close checks no process is left
		}
	}()
	for _, v := range variants {
		fmt.Fprintf(progress, "Starting %d replicas for %s\n", cfg.Replicas, v)
		b, err := e.startBenchFleet(ctx, v, delays, activation)
		if err != nil {
			return nil, err
		}
		fleets = append(fleets, b)
	}
	rotCtx, stopRotating := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopRotating(); wg.Wait() }()
	for _, b := range fleets {
		if b.rotate != nil {
			wg.Go(func() { b.rotateEvery(rotCtx, cfg.RotateEvery) })
		}
	}

	window := cfg.Duration / time.Duration(cfg.Rounds)
	conns := max(1, int(window/cfg.Interval))
	var rows []BenchRow
	for _, ver := range cfg.Versions {
		perRound := map[Variant][]float64{}
		merged := map[Variant]*BenchRow{}
		results := map[Variant]*Result{}
		for round := range cfg.Rounds {
			for k := range variants {
				b := fleets[(round+k)%len(fleets)]
				if !b.variant.runs(ver) {
					continue
				}
				m, err := b.measure(ctx, b.fleet.LoadConfig(ver, cfg.Clients, conns, cfg.Interval))
				if err != nil {
					return nil, err
				}
				res, before, after, sidecarBefore, sidecarAfter, start := m.res, m.before, m.after, m.sidecarBefore, m.sidecarAfter, m.start
				s := res.Summary()
				if s.Reconnects == 0 {
					return nil, fmt.Errorf("%s: the load made no reconnect: %v", b.variant, res.Errors())
				}
				row := merged[b.variant]
				if row == nil {
					row = &BenchRow{Variant: b.variant, Version: ver}
					merged[b.variant], results[b.variant] = row, &Result{}
				}
				results[b.variant].Samples = append(results[b.variant].Samples, res.Samples...)
				rots := b.rotationsIn(start, time.Now())
				row.Rotations += rots
				row.CPU += after - before
				row.SidecarCPU += sidecarAfter - sidecarBefore
				perRound[b.variant] = append(perRound[b.variant], (after-before).Seconds()*1000/float64(s.Reconnects))
				fmt.Fprintf(progress, "  %s round %d/%d %-48s %5d reconnects, %5.1f%% resumed, %d rotations, %.2f CPU s\n",
					versionName(ver), round+1, cfg.Rounds, b.variant, s.Reconnects, 100*s.ResumptionRate(), rots, (after - before).Seconds())
			}
		}
		for _, v := range variants {
			row := merged[v]
			if row == nil {
				continue // not run under ver
			}
			row.Summary = results[v].Summary()
			row.Groups = results[v].Groups()
			row.CPUPer1k = median(perRound[v])
			rows = append(rows, *row)
		}
	}
	for _, ver := range cfg.Versions {
		writeTable(out, cfg, activation, ver, variants, rows)
	}
	return rows, nil
}

// measurement is one fleet's load in one round, with the CPU its servers
// and sidecars took.
type measurement struct {
	res                                        Result
	start                                      time.Time
	before, after, sidecarBefore, sidecarAfter time.Duration
}

// measure runs the load lc against the fleet, reading its CPU before and
// after; it fails when the fleet's rotations failed meanwhile.
func (b *benchFleet) measure(ctx context.Context, lc LoadConfig) (measurement, error) {
	m := measurement{start: time.Now()}
	var err error
	if m.before, err = b.fleet.CPU(); err != nil {
		return m, err
	}
	if m.sidecarBefore, err = b.fleet.SidecarCPU(); err != nil {
		return m, err
	}
	m.res = StartLoad(ctx, lc).Wait()
	if m.after, err = b.fleet.CPU(); err != nil {
		return m, err
	}
	if m.sidecarAfter, err = b.fleet.SidecarCPU(); err != nil {
		return m, err
	}
	if err := ctx.Err(); err != nil {
		return m, err
	}
	if err := b.err(); err != nil {
		return m, fmt.Errorf("%s: rotate: %w", b.variant, err)
	}
	return m, nil
}

func (b *benchFleet) err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rotErr
}

// rotateEvery rotates the fleet's keys every period until ctx ends.
func (b *benchFleet) rotateEvery(ctx context.Context, period time.Duration) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		err := b.rotate(ctx)
		b.mu.Lock()
		if err != nil {
			if ctx.Err() == nil {
				b.rotErr = err
			}
			b.mu.Unlock()
			return
		}
		b.rotations = append(b.rotations, time.Now())
		b.mu.Unlock()
	}
}

// startBenchFleet starts the fleet of variant v with its way of rotating
// (none for per-replica keys, which crypto/tls rotates daily on its own).
func (e *Env) startBenchFleet(ctx context.Context, v Variant, delays []time.Duration, activation time.Duration) (*benchFleet, error) {
	b := &benchFleet{variant: v}
	var err error
	switch v {
	case Staged, StagedClassical:
		ns := "bench-staged"
		if v == StagedClassical {
			ns = "bench-staged-x25519"
		}
		ring, cerr := e.Cluster.CreateRing(ctx, RingSpec{Namespace: ns, Name: "web", RotationInterval: time.Hour, ActivationDelay: activation, RetainedKeys: 3})
		if cerr != nil {
			return nil, cerr
		}
		b.fleet, err = e.StartFleet(ctx, Config{Name: ns, Delays: delays, Namespace: ns, Secret: ring.ProjectionSecretName(),
			ClassicalResumption: v == StagedClassical})
		b.rotate = func(ctx context.Context) error {
			_, err := e.Cluster.Rotate(ctx, ns, "web")
			return err
		}
	case PerReplica:
		b.fleet, err = e.StartFleet(ctx, Config{Name: "bench-per-replica", Delays: delays})
	case NginxStaged:
		const ns = "bench-nginx"
		ring, cerr := e.Cluster.CreateRing(ctx, RingSpec{Namespace: ns, Name: "web", RotationInterval: time.Hour, ActivationDelay: activation, RetainedKeys: 3,
			Formats: []v1alpha1.KeyFormat{"go", "nginx"}})
		if cerr != nil {
			return nil, cerr
		}
		b.fleet, err = e.StartFleet(ctx, Config{Name: ns, Delays: delays, Namespace: ns, Secret: ring.ProjectionSecretName(), Ring: ns + "/web", Server: Nginx})
		b.rotate = func(ctx context.Context) error {
			_, err := e.Cluster.Rotate(ctx, ns, "web")
			return err
		}
	case NginxOwn:
		b.fleet, err = e.StartFleet(ctx, Config{Name: "bench-nginx-own", Delays: delays, Server: Nginx})
	case Unstaged:
		const ns, secret = "bench-unstaged", "shared-ticket-keys"
		pub := NewUnstagedPublisher(e.Cluster, ns, secret, 4)
		if _, perr := pub.Rotate(ctx); perr != nil {
			return nil, perr
		}
		b.fleet, err = e.StartFleet(ctx, Config{Name: ns, Delays: delays, Namespace: ns, Secret: secret})
		b.rotate = func(ctx context.Context) error {
			_, err := pub.Rotate(ctx)
			return err
		}
	}
	if err != nil {
		return nil, err
	}
	return b, nil
}

func writeTable(out io.Writer, cfg BenchConfig, activation time.Duration, ver uint16, variants []Variant, rows []BenchRow) {
	byVariant := map[Variant]BenchRow{}
	for _, r := range rows {
		if r.Version == ver {
			byVariant[r.Variant] = r
		}
	}
	fmt.Fprintf(out, "\n%s, N=%d replicas, %d clients, %d rounds of %s per variant; delivery delays 0-%s, a rotation every %s, ringmaster activationDelay %s\n\n",
		versionName(ver), cfg.Replicas, cfg.Clients, cfg.Rounds, cfg.Duration/time.Duration(cfg.Rounds), cfg.MaxDelay, cfg.RotateEvery, activation)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "variant\treconnects\tresumed\tfull handshakes\tfailed\tHelloRetryRequests\trotations\tserver CPU s / 1k reconnects\tp50 latency\tp99 latency\t")
	for _, v := range variants {
		r, ok := byVariant[v]
		if !ok {
			continue
		}
		s := r.Summary
		fmt.Fprintf(w, "%s\t%d\t%.1f%%\t%d\t%d\t%d\t%d\t%.3f\t%s\t%s\t\n", v, s.Reconnects, 100*s.ResumptionRate(), s.Full, s.Failures, s.Retried, r.Rotations,
			r.CPUPer1k, s.P50.Round(10*time.Microsecond), s.P99.Round(10*time.Microsecond))
	}
	w.Flush()
	for _, pair := range [][2]Variant{{Staged, PerReplica}, {StagedClassical, PerReplica}, {StagedClassical, Staged}, {Staged, Unstaged}, {NginxStaged, NginxOwn}} {
		i, ok1 := byVariant[pair[0]]
		o, ok2 := byVariant[pair[1]]
		if !ok1 || !ok2 {
			continue
		}
		fmt.Fprintf(out, "  %s/%s: resumption rate %s, full handshakes %s, server CPU per reconnect %s\n", pair[0].short(), pair[1].short(),
			ratio(i.Summary.ResumptionRate(), o.Summary.ResumptionRate()),
			ratio(float64(i.Summary.Full), float64(o.Summary.Full)),
			ratio(i.CPUPer1k, o.CPUPer1k))
	}
	var groups []string
	for _, v := range variants {
		if r, ok := byVariant[v]; ok {
			groups = append(groups, fmt.Sprintf("%s %s", v.short(), describeGroups(r.Groups)))
		}
	}
	fmt.Fprintf(out, "  key exchanges: %s\n", strings.Join(groups, "; "))
	if c, ok1 := byVariant[StagedClassical]; ok1 {
		if p, ok2 := byVariant[PerReplica]; ok2 && p.CPUPer1k > 0 {
			r := c.CPUPer1k / p.CPUPer1k
			verdict := "met"
			if r > ClassicalTarget || c.Summary.Full > 0 || c.Summary.Failures > 0 {
				verdict = "NOT met"
			}
			fmt.Fprintf(out, "  target (vi)/(ii) server CPU per reconnect <= %.2f with every reconnect resumed: x%.2f, %.1f%% resumed: %s\n",
				ClassicalTarget, r, 100*c.Summary.ResumptionRate(), verdict)
		}
	}
	if r, ok := byVariant[NginxStaged]; ok && r.Summary.Reconnects > 0 {
		fmt.Fprintf(out, "  (iv)'s sidecars used %.3f CPU s / 1k reconnects more, not counted above\n",
			r.SidecarCPU.Seconds()*1000/float64(r.Summary.Reconnects))
	}
}

// describeGroups renders Result.Groups briefly, most frequent first.
func describeGroups(g map[string]int) string {
	keys := slices.Collect(maps.Keys(g))
	slices.SortFunc(keys, func(a, b string) int {
		if g[a] != g[b] {
			return g[b] - g[a]
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, g[k])
	}
	return strings.Join(parts, ", ")
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ratio(a, b float64) string {
	if b == 0 {
		return "n/a (divisor 0)"
	}
	return fmt.Sprintf("x%.2f", a/b)
}

func versionName(v uint16) string {
	switch v {
	case tls.VersionTLS13:
		return "TLS 1.3"
	case tls.VersionTLS12:
		return "TLS 1.2"
	}
	return fmt.Sprintf("TLS %#x", v)
}
