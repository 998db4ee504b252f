package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

const (
	demoNS   = "shop"
	demoRing = "web"
)

// demo holds what the story has started.
type demo struct {
	env     *fleet.Env
	fleet   *fleet.Fleet
	load    *fleet.Load
	started time.Time
	// lastLive is when the last live line was printed, and lastRes what the
	// load had seen then, for the rate over the last interval.
	lastLive time.Time
	lastRes  fleet.Result

	replicas  int
	clients   int
	delay     time.Duration
	maxDelay  time.Duration
	rotations int
	bold      func(string) string
}

func demoMain(ctx context.Context, args []string) (err error) {
	fs := flag.NewFlagSet("demo", flag.ExitOnError)
	d := &demo{}
	fs.IntVar(&d.replicas, "n", 4, "replicas in the fleet")
	fs.IntVar(&d.clients, "clients", 8, "clients reconnecting through the load balancer")
	fs.DurationVar(&d.maxDelay, "max-delay", 3*time.Second, "delivery delay of the slowest replica (its stand-in kubelet's lag)")
	fs.DurationVar(&d.delay, "activation-delay", 5*time.Second, "the ring's activationDelay; keep it above -max-delay")
	fs.IntVar(&d.rotations, "rotations", 3, "rotations to drive")
	pids := fs.String("pids", "", "write the pid and name of every process started to this file, for a check with ps afterwards")
	keep := fs.Bool("keep", false, "keep the work directory (logs of every process, replica volumes, kubeconfig)")
	_ = fs.Parse(args)
	d.bold = func(s string) string { return s }
	if fi, err := os.Stdout.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		d.bold = func(s string) string { return "\033[1m" + s + "\033[0m" }
	}

	d.step("Setting up: nothing here is faked but the kubelet")
	d.env, err = fleet.Setup(ctx, fleet.Options{LeaderElect: true, Progress: indent{os.Stdout}, PIDFile: *pids, KeepWork: *keep})
	if err != nil {
		return err
	}
	defer func() {
		if d.load != nil {
			d.load.Stop()
		}
		d.step("Stopping everything, each process by its own pid")
		closeErr := d.env.Close()
		tracked := d.env.Sup.Tracked()
		names := make([]string, len(tracked))
		for i, p := range tracked {
			names[i] = p.String()
		}
		fmt.Printf("  stopped %s\n", strings.Join(names, ", "))
		if closeErr == nil {
			fmt.Println("  none of them is running any more (checked by pid and start time)")
		}
		if *keep {
			fmt.Printf("  logs, volumes and kubeconfig kept in %s\n", d.env.Work)
		}
		err = errors.Join(err, closeErr)
	}()

	if err := d.createRing(ctx); err != nil {
		return err
	}
	if err := d.startFleet(ctx); err != nil {
		return err
	}
	for i := 1; i <= d.rotations; i++ {
		if err := d.rotate(ctx, i); err != nil {
			return err
		}
	}
	shared := d.load.Stop()
	d.load = nil
	if err := d.fleet.Stop(); err != nil {
		return err
	}
	perReplica, err := d.contrast(ctx)
	if err != nil {
		return err
	}
	d.summary(shared, perReplica)
	return nil
}

func (d *demo) step(s string) { fmt.Printf("\n%s\n", d.bold("==> "+s)) }

// kubectl runs kubectl against the demo's cluster and shows the command and
// its output, indented.
func (d *demo) kubectl(ctx context.Context, args ...string) error {
	fmt.Printf("  $ kubectl %s\n", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, d.env.Cluster.Kubectl, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+d.env.Cluster.Kubeconfig)
	out, err := cmd.CombinedOutput()
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		fmt.Printf("    %s\n", line)
	}
	if err != nil {
		return fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

func (d *demo) createRing(ctx context.Context) error {
	d.step("Creating a TicketKeyRing: the operator mints an active key and a staged one")
	manifest := fmt.Sprintf(`apiVersion: ringmaster.io/v1alpha1
kind: TicketKeyRing
metadata:
  name: %s
  namespace: %s
spec:
  rotationInterval: 10m   # each key encrypts for 10 minutes
  retainedKeys: 2         # then decrypts for 20 more, then is destroyed
  activationDelay: %s     # a new key reaches every replica this long before it encrypts
`, demoRing, demoNS, d.delay)
	path := filepath.Join(d.env.Work, "ring.yaml")
	if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
		return err
	}
	for _, line := range strings.Split(strings.TrimSpace(manifest), "\n") {
		fmt.Printf("    %s\n", line)
	}
	if err := d.kubectl(ctx, "create", "namespace", demoNS); err != nil {
		return err
	}
	if err := d.kubectl(ctx, "apply", "-f", path); err != nil {
		return err
	}
	if err := d.kubectl(ctx, "wait", "--for", "condition=Ready", "--timeout", "60s", "-n", demoNS, "tkr/"+demoRing); err != nil {
		return err
	}
	return d.kubectl(ctx, "get", "tkr", "-n", demoNS)
}

func (d *demo) startFleet(ctx context.Context) error {
	ring, err := d.env.Cluster.WaitRing(ctx, demoNS, demoRing, "Ready", fleet.Ready)
	if err != nil {
		return err
	}
	delays := fleet.Spread(d.replicas, d.maxDelay)
	d.step(fmt.Sprintf("Starting %d replicas of examples/server, each embedding pkg/agent", d.replicas))
	fmt.Printf("  No kubelet runs here. A stand-in (internal/testing/fleet.Syncer) watches Secret %s/%s through the\n", demoNS, ring.ProjectionSecretName())
	fmt.Printf("  API server and writes it into each replica's volume the kubelet's way, replica i after its own delay.\n")
	d.fleet, err = d.env.StartFleet(ctx, fleet.Config{Name: "demo", Delays: delays, Namespace: demoNS, Secret: ring.ProjectionSecretName()})
	if err != nil {
		return err
	}
	sts, err := d.fleet.WaitServing(ctx, "serving the first epoch", fleet.ServingKey(fleet.ActiveKey(ring), ring.Status.Epoch))
	if err != nil {
		return err
	}
	d.showFleet(sts)

	d.step(fmt.Sprintf("Load: %d clients reconnect through a round-robin load balancer on %s", d.clients, d.fleet.LB.Addr()))
	fmt.Printf("  Each client keeps a TLS session cache and makes about 10 connections a second, one request each.\n")
	fmt.Printf("  Round robin sends most reconnects to another replica than the last: they resume only if that\n")
	fmt.Printf("  replica can decrypt the ticket another one issued.\n")
	d.load = fleet.StartLoad(context.WithoutCancel(ctx), d.fleet.LoadConfig(tls.VersionTLS13, d.clients, 100000, 100*time.Millisecond))
	d.started, d.lastLive = time.Now(), time.Now()
	return d.waitFor(ctx, 6*time.Second, "", nil)
}

// waitFor polls cond until it holds, printing a live line of the load every
// two seconds, and fails once limit has passed. A nil cond just lets the load
// run for limit.
func (d *demo) waitFor(ctx context.Context, limit time.Duration, what string, cond func(context.Context) (bool, error)) error {
	deadline := time.Now().Add(limit)
	for {
		if cond != nil {
			ok, err := cond(ctx)
			if err != nil || ok {
				return err
			}
		}
		if time.Since(d.lastLive) >= 2*time.Second {
			d.live()
		}
		if time.Now().After(deadline) {
			if cond == nil {
				return nil
			}
			return fmt.Errorf("%s did not happen within %s", what, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// live prints the load's resumption rate so far and over the last interval.
func (d *demo) live() {
	res := d.load.Result()
	all := res.Summary()
	recent := fleet.Result{Samples: res.Samples[len(d.lastRes.Samples):]}.Summary()
	fmt.Printf("  t+%-4s %6d connections  resumed %6.2f%% (last %ds: %6.2f%%)  full handshakes %d  failed %d\n",
		time.Since(d.started).Round(time.Second), all.Conns, 100*all.ResumptionRate(),
		int(time.Since(d.lastLive).Round(time.Second).Seconds()), 100*recent.ResumptionRate(), all.Full, all.Failures)
	d.lastRes, d.lastLive = res, time.Now()
}

func (d *demo) showFleet(sts []agent.Status) {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "  REPLICA\tADDRESS\tDELIVERY DELAY\tPID\tEPOCH\tACTIVE KEY\tKEYS (from /healthz)")
	for i, st := range sts {
		r := d.fleet.Replicas[i]
		var keys []string
		for _, k := range st.Keys {
			keys = append(keys, k.ID+" "+k.State)
		}
		fmt.Fprintf(w, "  %d\t%s\t%s\t%d\t%d\t%s\t%s\n", i, r.Addr, r.Delay.Round(time.Millisecond), r.Proc.PID, st.Epoch, st.ActiveKeyID, strings.Join(keys, ", "))
	}
	w.Flush()
}

func (d *demo) rotate(ctx context.Context, n int) error {
	before, err := d.env.Cluster.WaitRing(ctx, demoNS, demoRing, "Ready", fleet.Ready)
	if err != nil {
		return err
	}
	from, to := fleet.ActiveKey(before), fleet.StagedKey(before)
	d.step(fmt.Sprintf("Rotation %d of %d: promote the staged key %s now", n, d.rotations, to))
	value := time.Now().UTC().Format(time.RFC3339)
	if err := d.kubectl(ctx, "annotate", "tkr", demoRing, "-n", demoNS, "--overwrite", v1alpha1.RotateRequestedAtAnnotation+"="+value); err != nil {
		return err
	}
	fmt.Printf("  The operator promotes %s once it has been delivered for activationDelay (%s), and stages a new key.\n", to, d.delay)
	var after *v1alpha1.TicketKeyRing
	err = d.waitFor(ctx, time.Minute, "the rotation", func(ctx context.Context) (bool, error) {
		r, err := d.env.Cluster.GetRing(ctx, demoNS, demoRing)
		if err != nil {
			return false, err
		}
		if r.Status.LastRotateRequestedAt == value && fleet.ActiveKey(r) == to && fleet.StagedKey(r) != to && fleet.Ready(r) {
			after = r
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	fmt.Printf("  Epoch %d: %s encrypts, %s is decrypt-only, %s is staged.\n", after.Status.Epoch, to, from, fleet.StagedKey(after))
	var sts []agent.Status
	err = d.waitFor(ctx, time.Minute, "the delivery to every replica", func(ctx context.Context) (bool, error) {
		h, err := d.fleet.Health(ctx)
		if err != nil {
			return false, err
		}
		for _, st := range h {
			if !fleet.ServingKey(to, after.Status.Epoch)(st) {
				return false, nil
			}
		}
		sts = h
		return true, nil
	})
	if err != nil {
		return err
	}
	fmt.Printf("  Every replica serves epoch %d; the stand-in kubelet delivered it %s.\n", after.Status.Epoch, d.deliveryTimes(after.Status.Epoch))
	d.showFleet(sts)
	return d.kubectl(ctx, "get", "tkr", "-n", demoNS)
}

// deliveryTimes says when each replica received an epoch, relative to the
// API server's report of it.
func (d *demo) deliveryTimes(epoch int64) string {
	var parts []string
	for i := range d.fleet.Replicas {
		for _, dl := range d.fleet.Syncer.Deliveries(i) {
			if dl.Epoch == fmt.Sprint(epoch) {
				parts = append(parts, fmt.Sprintf("replica %d +%.1fs", i, dl.Written.Sub(dl.Seen).Seconds()))
			}
		}
	}
	return strings.Join(parts, ", ")
}

// contrast runs the same load against replicas with Go's default keys.
func (d *demo) contrast(ctx context.Context) (fleet.Result, error) {
	d.step(fmt.Sprintf("For contrast: the same load against %d replicas with Go's default per-replica keys", d.replicas))
	fmt.Printf("  They run with -require cert and no ring, so each one's crypto/tls mints ticket keys of its own: a ticket\n")
	fmt.Printf("  resumes only on the replica that issued it, and round robin lands there about 1 time in %d.\n", d.replicas)
	f, err := d.env.StartFleet(ctx, fleet.Config{Name: "demo-per-replica", Delays: make([]time.Duration, d.replicas)})
	if err != nil {
		return fleet.Result{}, err
	}
	d.fleet = f
	d.load = fleet.StartLoad(context.WithoutCancel(ctx), f.LoadConfig(tls.VersionTLS13, d.clients, 100000, 100*time.Millisecond))
	d.started, d.lastLive, d.lastRes = time.Now(), time.Now(), fleet.Result{}
	if err := d.waitFor(ctx, 8*time.Second, "", nil); err != nil {
		return fleet.Result{}, err
	}
	res := d.load.Stop()
	d.load = nil
	return res, f.Stop()
}

func (d *demo) summary(shared, perReplica fleet.Result) {
	s, p := shared.Summary(), perReplica.Summary()
	d.step("What happened")
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "  \treconnects\tto another replica\tresumed\tfull handshakes\tfailed")
	fmt.Fprintf(w, "  shared staged ring, %d rotations\t%d\t%d\t%.2f%%\t%d\t%d\n", d.rotations, s.Reconnects, s.Moved, 100*s.ResumptionRate(), s.Full, s.Failures)
	fmt.Fprintf(w, "  per-replica keys (Go's default)\t%d\t%d\t%.2f%%\t%d\t%d\n", p.Reconnects, p.Moved, 100*p.ResumptionRate(), p.Full, p.Failures)
	w.Flush()
	fmt.Printf("  make bench-fleet measures what the difference costs in server CPU, for TLS 1.3 and 1.2.\n")
}

// indent writes each line it is given indented, for Setup's progress.
type indent struct{ w io.Writer }

func (i indent) Write(p []byte) (int, error) {
	_, err := fmt.Fprintf(i.w, "  %s", p)
	return len(p), err
}
