package main

import (
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/operator"
)

// report is what the bench prints at the end, also when a phase failed.
type report struct {
	cfg      config
	started  time.Time
	load     []string // /proc/loadavg at the start and the end
	phases   []*phase
	baseline *baseline
	settled  *settled
}

func (r *report) print(w io.Writer, b *bench) {
	cfg := r.cfg
	fmt.Fprintf(w, "\n==== Scale report: %d TicketKeyRings in %d namespaces (rotationInterval %s, activationDelay %s, retainedKeys %d), %s\n",
		cfg.rings, cfg.namespaces, cfg.rotation, cfg.activation, cfg.retained, r.started.UTC().Format(time.RFC3339))
	workers := "default"
	if cfg.ringWorkers > 0 {
		workers = strconv.Itoa(cfg.ringWorkers)
	}
	fmt.Fprintf(w, "Operator: built as the images are, as service account ringmaster-system/ringmaster with config/rbac's roles, leader election, %s, --ring-workers %s\n", memoryLimits(cfg), workers)
	fmt.Fprintf(w, "Machine: %d CPUs, load average %s at the start and %s at the end (shared: other work competes with the operator, the API server and the bench)\n",
		runtime.NumCPU(), r.load[0], r.load[len(r.load)-1])
	fmt.Fprintf(w, "Requests: the operator's, from kube-apiserver's audit log of its service account, watches and its Lease left out; per ring of the bulk (probe rings apart)\n")
	for _, p := range r.phases {
		r.printPhase(w, p)
	}
	if bl := r.baseline; bl != nil {
		fmt.Fprintf(w, "\nBaseline (idle, leading, before the first ring): RSS %s (anonymous %s), heap in use %s, goroutines %.0f; live heap %s (%s)\n",
			mb(bl.rss), mb(bl.anon), mb(bl.heap), bl.goroutines, mb(bl.live), bl.profile)
	}
	if s := r.settled; s != nil {
		fmt.Fprintf(w, "\nSettled (idle %s after the bulk, %d rings): RSS %s (anonymous %s), heap in use %s, goroutines %.0f; after the heap profile's garbage collection: RSS %s (anonymous %s)\n",
			s.idleFor, s.rings, mb(s.before.rss), mb(s.before.anon), mb(s.before.heap), s.before.goroutines, mb(s.after.rss), mb(s.after.anon))
		if s.profileFailure != nil {
			fmt.Fprintf(w, "Heap profile: %v\n", s.profileFailure)
		} else {
			fmt.Fprintf(w, "Heap profile: %s; live heap after a collection %s, %s more than the baseline's: %s per ring. What grew, by function, per ring (go tool pprof -top -sample_index=inuse_space -diff_base BASELINE SETTLED; memprofilerate %d):\n",
				s.profile, mb(s.live), mb(s.grown), kb(s.grown/float64(s.rings)), r.cfg.memProfileRate)
			fmt.Fprint(w, perRing(s.top, s.rings))
		}
	}
	fmt.Fprintf(w, "\nA row for docs/development.md's table:\n%s\n", r.row())
}

func (r *report) printPhase(w io.Writer, p *phase) {
	p.mu.Lock()
	probes, stamped := slices.Clone(p.probes), slices.Clone(p.stamped)
	created := p.probesCreated
	p.mu.Unlock()
	fmt.Fprintf(w, "\n-- %s: %d rings\n", p.name, p.rings)
	if p.err != nil {
		fmt.Fprintf(w, "NOT FINISHED:     %v\n", p.err)
	}
	switch {
	case p.done == 0:
	case p.name == "create":
		fmt.Fprintf(w, "All Ready:        %s after the first create (all created after %s)\n", secs(p.done), secs(p.issued))
	default:
		fmt.Fprintf(w, "All echoed:       %s after the first request (all requested after %s)\n", secs(p.done), secs(p.issued))
	}
	if p.idle > 0 {
		fmt.Fprintf(w, "Operator idle:    %s after the start; it used %s of CPU\n", secs(p.idle), secs(p.cpu))
	}
	if created > 0 {
		fmt.Fprintf(w, "Probe rings:      %d created, one every %s, while the bulk was handled: create to Ready p50 %s, p99 %s, max %s\n",
			created, r.cfg.probeEvery, secs(percentile(probes, 0.5)), secs(percentile(probes, 0.99)), secs(percentile(probes, 1)))
		fmt.Fprintf(w, "  as stamped:     Ready's lastTransitionTime less creationTimestamp (to the second; the bench's create call and watch left out) p50 %s, p99 %s, max %s\n",
			secs(percentile(stamped, 0.5)), secs(percentile(stamped, 0.99)), secs(percentile(stamped, 1)))
	}
	if p.bulk > 0 && p.requests.Total() > 0 {
		n := float64(p.bulk)
		fmt.Fprintf(w, "Requests/ring:    %.2f, writes %.2f (%d requests over %d rings)\n", float64(p.requests.Total())/n, float64(p.requests.Writes())/n, p.requests.Total(), p.bulk)
		fmt.Fprintf(w, "  by verb:        %s\n", p.requests.PerVerb(n))
		fmt.Fprintf(w, "  by request:     %s\n", p.requests.Per(n))
	}
	if t := p.probeRequests.Total(); t > 0 {
		fmt.Fprintf(w, "  probe rings:    %d requests (%s)\n", t, p.probeRequests.Per(0))
	}
	if len(p.clientRequests) > 0 {
		var parts []string
		for _, m := range slices.Sorted(maps.Keys(p.clientRequests)) {
			parts = append(parts, fmt.Sprintf("%s %.0f", m, p.clientRequests[m]))
		}
		fmt.Fprintf(w, "  operator's own count (rest_client_requests_total, the Lease included): %s; the Lease: %d requests\n", strings.Join(parts, ", "), p.leases)
	}
	fmt.Fprintf(w, "Memory (peak):    RSS %s (anonymous %s), heap in use %s, goroutines %.0f\n", mb(p.mem.rss), mb(p.mem.anon), mb(p.mem.heap), p.mem.goroutines)
	if p.idle > 0 {
		fmt.Fprintf(w, "  at idle:        RSS %s (anonymous %s), heap in use %s\n", mb(p.atIdle.rss), mb(p.atIdle.anon), mb(p.atIdle.heap))
	}
}

// row is the run as a row of the Markdown table in docs/development.md.
func (r *report) row() string {
	var create, rotate, revoke *phase
	for _, p := range r.phases {
		switch p.name {
		case "create":
			create = p
		case "rotate":
			rotate = p
		case "revoke":
			revoke = p
		}
	}
	cells := []string{fmt.Sprintf("%d in %d", r.cfg.rings, r.cfg.namespaces), "-", "-", "-", "-", "-", "-", "-", r.load[0]}
	if create != nil {
		cells[1] = doneCell(create)
		cells[2] = probeCell(create)
		cells[4] = perRingCell(create)
		cells[3] = "peak " + mb(create.mem.rss)
		if s := r.settled; s != nil {
			cells[3] = fmt.Sprintf("%s peak (%s anonymous), %s settled (%s); heap %s peak, %s settled; live %s, %s/ring",
				mb(create.mem.rss), mb(create.mem.anon), mb(s.before.rss), mb(s.before.anon), mb(create.mem.heap), mb(s.before.heap), mb(s.live), kb(s.grown/float64(s.rings)))
		}
	}
	if rotate != nil {
		cells[5] = fmt.Sprintf("%s (probes %s)", doneCell(rotate), probeCell(rotate))
		cells[6] = perRingCell(rotate)
	}
	if revoke != nil {
		cells[7] = fmt.Sprintf("%s (probes %s)", doneCell(revoke), probeCell(revoke))
	}
	return "| " + strings.Join(cells, " | ") + " |"
}

func doneCell(p *phase) string {
	if p.done == 0 {
		return "not finished"
	}
	return secs(p.done)
}

func probeCell(p *phase) string {
	p.mu.Lock()
	probes := slices.Clone(p.probes)
	p.mu.Unlock()
	if len(probes) == 0 {
		return "-"
	}
	return fmt.Sprintf("%s / %s", secs(percentile(probes, 0.5)), secs(percentile(probes, 0.99)))
}

func perRingCell(p *phase) string {
	if p.bulk == 0 {
		return "-"
	}
	n := float64(p.bulk)
	return fmt.Sprintf("%.1f (writes %.1f): %s", float64(p.requests.Total())/n, float64(p.requests.Writes())/n, p.requests.PerVerb(n))
}

// perRing rewrites go tool pprof -top -unit=B's table with each row's bytes
// divided by the number of rings.
func perRing(top string, rings int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %10s %10s  %s\n", "flat/ring", "cum/ring", "function")
	for line := range strings.Lines(top) {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.HasSuffix(f[0], "B") || !strings.HasSuffix(f[3], "B") {
			continue // the header, and the totals the caller shows
		}
		flat, err1 := strconv.ParseFloat(strings.TrimSuffix(f[0], "B"), 64)
		cum, err2 := strconv.ParseFloat(strings.TrimSuffix(f[3], "B"), 64)
		if err1 != nil || err2 != nil {
			continue
		}
		fmt.Fprintf(&b, "  %10s %10s  %s\n", bytesOf(flat/float64(rings)), bytesOf(cum/float64(rings)), strings.Join(f[5:], " "))
	}
	return b.String()
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

func mb(v float64) string { return fmt.Sprintf("%.0f MiB", v/(1<<20)) }

func kb(v float64) string { return fmt.Sprintf("%.1f KiB", v/(1<<10)) }

func bytesOf(v float64) string {
	if v >= 1<<10 {
		return kb(v)
	}
	return fmt.Sprintf("%.0f B", v)
}

// memoryLimits says what the operator is told of memory: the container's
// limit, from which it sets its soft limit, and GOMEMLIMIT, which wins.
func memoryLimits(cfg config) string {
	out := "no memory limit"
	if cfg.memoryLimit > 0 {
		out = fmt.Sprintf("memory limit %s (the Go soft limit %.0f%% of it)", mb(float64(cfg.memoryLimit)), operator.DefaultMemoryLimitRatio*100)
	}
	if cfg.goMemLimit != "" {
		out += ", GOMEMLIMIT " + cfg.goMemLimit
	}
	return out
}
