// Command attack runs make bench-attack: it measures the operator's memory
// under what any tenant can create, made large (issue 33), for two builds of
// the operator side by side: this tree's, and a git revision's (-before).
//
// On the e2e harness's local control plane (a real etcd and kube-apiserver,
// no kubelet) it creates, scenario by scenario:
//   - pods: Pending pods of about 1 MiB each (one env value), labelled for a
//     TicketKeyRing under spec.confirmation and mounting its projection,
//     with one ready voter that refuses connections: the ring's staged key
//     is held back, and its pods are asked every round;
//   - tls: kubernetes.io/tls Secrets of 15,500 DNS SANs (about 1 MB each)
//     under a CertificatePolicy that reads their names;
//   - annotations: TicketKeyRings whose rotate-now or revoke annotation is
//     a 200 KiB value;
//
// each also with small objects of the same number (-small), to show what
// size does, and all at once. For each scenario and build it starts the
// operator binary as shipped (GOMEMLIMIT the chart's 256Mi limit, for
// both builds alike: the one before knows no --memory-limit-ratio), lets
// it run for -window, samples its resident set (VmRSS) and Go heap in use
// (go_memstats_heap_inuse_bytes) every -sample, and reports the peaks
// (VmHWM for the resident set) and the end, against the chart's limit. It
// reports figures; it asserts nothing about them.
//
// It needs KUBEBUILDER_ASSETS (make envtest prints it) and runs from inside
// the module, which it builds (and the -before revision, from git archive).
// Every process it starts is stopped by its own pid.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/fleet"
)

type config struct {
	before                string
	pods, podSize         int
	secrets, sans         int
	rings, annotationSize int
	window, sample        time.Duration
	memLimit              int64
	scenarios             string
	keep                  bool
}

// chartLimit is the chart's resources.limits.memory, which both builds
// are given as GOMEMLIMIT (d37b60f's chart set it so; the operator now
// sets its soft limit to a share of it).
const chartLimit = 256 << 20

func main() {
	cfg := config{}
	flag.StringVar(&cfg.before, "before", "d37b60f", "git revision of the operator to compare with (built from git archive); empty: this tree's only")
	flag.IntVar(&cfg.pods, "pods", 80, "Pending pods labelled for the probed ring")
	flag.IntVar(&cfg.podSize, "pod-size", 1<<20, "bytes of each large pod (one env value)")
	flag.IntVar(&cfg.secrets, "secrets", 80, "kubernetes.io/tls Secrets under the CertificatePolicy")
	flag.IntVar(&cfg.sans, "sans", 15500, "DNS SANs of each large certificate")
	flag.IntVar(&cfg.rings, "rings", 20, "TicketKeyRings with an oversized rotate-now or revoke annotation")
	flag.IntVar(&cfg.annotationSize, "annotation-size", 200<<10, "bytes of each oversized annotation value")
	flag.DurationVar(&cfg.window, "window", 30*time.Second, "how long each operator runs under each scenario")
	flag.DurationVar(&cfg.sample, "sample", 250*time.Millisecond, "how often its memory is sampled")
	flag.Int64Var(&cfg.memLimit, "gomemlimit", chartLimit, "the operator's GOMEMLIMIT in bytes (the chart's: its memory limit); 0: none")
	flag.StringVar(&cfg.scenarios, "scenarios", "idle,pods-small,pods,tls-small,tls,annotations,all", "scenarios to run, in order")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the work directory (binaries, every process's log, kubeconfig)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctrllog.SetLogger(logr.Discard())
	if err := run(ctx, cfg, os.Stdout); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "attack: interrupted")
			os.Exit(130)
		}
		fmt.Fprintln(os.Stderr, "attack:", err)
		os.Exit(1)
	}
}

// build is one operator binary under measure.
type build struct {
	name, bin string
}

// result is one operator's run under one scenario.
type result struct {
	peakRSS, endRSS   int64
	peakHeap, endHeap float64
	samples           int
	evidence          string // what shows the attack reached the operator
	exited            error
}

// bench is a running benchmark.
type bench struct {
	cfg     config
	work    string
	sup     *fleet.Supervisor
	cluster *fleet.Cluster
	http    *http.Client
	cert    []byte // the large certificate and its key
	key     []byte
	small   []byte // a one-SAN certificate and its key
	smallK  []byte
}

const ns = "attack"

func run(ctx context.Context, cfg config, out io.Writer) (err error) {
	work, err := os.MkdirTemp("", "ringmaster-attack-")
	if err != nil {
		return err
	}
	b := &bench{cfg: cfg, work: work, sup: fleet.NewSupervisor(work), http: &http.Client{Timeout: 5 * time.Second}}
	defer func() {
		err = errors.Join(err, b.sup.StopAll())
		if left := b.sup.Leftovers(); len(left) > 0 {
			err = errors.Join(err, fmt.Errorf("processes left running: %v", left))
		}
		if cfg.keep || err != nil {
			fmt.Fprintf(os.Stderr, "Work directory kept: %s\n", work)
		} else {
			err = errors.Join(err, os.RemoveAll(work))
		}
	}()

	fmt.Fprintf(os.Stderr, "Building the operator, hack/controlplane and the rest into %s\n", work)
	bins, err := fleet.Build(ctx, work, false)
	if err != nil {
		return err
	}
	builds := []build{{name: "after (this tree)", bin: bins.Operator}}
	if cfg.before != "" {
		fmt.Fprintf(os.Stderr, "Building the operator at %s\n", cfg.before)
		bin, err := buildAt(ctx, cfg.before, filepath.Join(work, "before"))
		if err != nil {
			return err
		}
		builds = append([]build{{name: "before (" + cfg.before + ")", bin: bin}}, builds...)
	}
	fmt.Fprintf(os.Stderr, "Issuing a certificate of %d DNS SANs\n", cfg.sans)
	if b.cert, b.key, err = fleet.LargeCertificate(cfg.sans); err != nil {
		return err
	}
	if b.small, b.smallK, err = fleet.LargeCertificate(1); err != nil {
		return err
	}

	fmt.Fprintln(os.Stderr, "Starting the control plane: etcd and kube-apiserver on loopback")
	if b.cluster, err = fleet.StartCluster(ctx, b.sup, bins, work); err != nil {
		return err
	}
	for _, n := range []string{fleet.OperatorNamespace, ns} {
		if err := b.cluster.CreateNamespace(ctx, n); err != nil {
			return err
		}
	}

	type row struct {
		scenario, objects string
		results           []result
	}
	var rows []row
	for _, sc := range strings.Split(cfg.scenarios, ",") {
		objects, err := b.setup(ctx, sc)
		if err != nil {
			return fmt.Errorf("scenario %s: %w", sc, err)
		}
		r := row{scenario: sc, objects: objects}
		for i, bu := range builds {
			fmt.Fprintf(os.Stderr, "Scenario %s (%s): the operator %s for %s\n", sc, objects, bu.name, cfg.window)
			res, err := b.measure(ctx, bu, fmt.Sprintf("operator-%s-%d", sc, i), sc)
			if err != nil {
				return fmt.Errorf("scenario %s, %s: %w", sc, bu.name, err)
			}
			fmt.Fprintf(os.Stderr, "  peak RSS %s, peak heap %s, end RSS %s; %s\n", mib(float64(res.peakRSS)), mib(res.peakHeap), mib(float64(res.endRSS)), res.evidence)
			r.results = append(r.results, res)
		}
		rows = append(rows, r)
		if err := b.teardown(ctx); err != nil {
			return fmt.Errorf("scenario %s: clean up: %w", sc, err)
		}
	}

	fmt.Fprintf(out, "\n==== Operator memory under a tenant's large objects: each operator run for %s per scenario, GOMEMLIMIT %s, sampled every %s\n", cfg.window, limitString(cfg.memLimit), cfg.sample)
	fmt.Fprintf(out, "peak RSS is VmHWM; heap is go_memstats_heap_inuse_bytes (peak of the samples); end is the last sample. (!) marks a peak over the chart's memory limit, 256Mi: the container would be OOM-killed.\n\n")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tobjects\toperator\tpeak RSS\tpeak heap\tend RSS\tend heap\t")
	for _, r := range rows {
		for i, res := range r.results {
			scenario, objects := r.scenario, r.objects
			if i > 0 {
				scenario, objects = "", ""
			}
			mark := ""
			if res.peakRSS > chartLimit {
				mark = " (!)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s%s\t%s\t%s\t%s\t\n", scenario, objects, builds[i].name,
				mib(float64(res.peakRSS)), mark, mib(res.peakHeap), mib(float64(res.endRSS)), mib(res.endHeap))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nWhat each operator showed of the attack:")
	for _, r := range rows {
		for i, res := range r.results {
			fmt.Fprintf(out, "  %-12s %-22s %s\n", r.scenario, builds[i].name, res.evidence)
		}
	}
	return nil
}

// buildAt builds the operator of a git revision of this module into dir.
func buildAt(ctx context.Context, rev, dir string) (string, error) {
	root, err := fleet.ModuleRoot(ctx)
	if err != nil {
		return "", err
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	archive := exec.CommandContext(ctx, "git", "-C", root, "archive", "--format=tar", rev)
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return "", err
	}
	var errs bytes.Buffer
	untar.Stdin, archive.Stderr, untar.Stderr = pipe, &errs, &errs
	if err := untar.Start(); err != nil {
		return "", err
	}
	if err := archive.Run(); err != nil {
		return "", fmt.Errorf("git archive %s: %w\n%s", rev, err, errs.String())
	}
	if err := untar.Wait(); err != nil {
		return "", fmt.Errorf("untar %s: %w\n%s", rev, err, errs.String())
	}
	bin := filepath.Join(dir, "ringmaster")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build at %s: %w\n%s", rev, err, out)
	}
	return bin, nil
}

// setup creates a scenario's objects and describes them.
func (b *bench) setup(ctx context.Context, scenario string) (string, error) {
	c := b.cluster.Client
	cfg := b.cfg
	var parts []string
	pods := func(size int) error {
		port, err := fleet.RefusingPort()
		if err != nil {
			return err
		}
		ring := fleet.ProbedRing(ns, "probed")
		if err := c.Create(ctx, ring); err != nil {
			return fmt.Errorf("create the probed ring: %w", err)
		}
		secret := ring.ProjectionSecretName()
		voter := fleet.LargePod(ns, "voter", 2<<10, secret, port)
		if err := c.Create(ctx, voter); err != nil {
			return fmt.Errorf("create the voter: %w", err)
		}
		if err := fleet.MarkReady(ctx, c, voter, "127.0.0.1"); err != nil {
			return err
		}
		for i := range cfg.pods {
			if err := c.Create(ctx, fleet.LargePod(ns, fmt.Sprintf("pending-%03d", i), size, secret, port)); err != nil {
				return fmt.Errorf("create pod %d: %w", i, err)
			}
		}
		parts = append(parts, fmt.Sprintf("%d Pending pods of %s + 1 silent voter", cfg.pods, size2(size)))
		return nil
	}
	tls := func(cert, key []byte, sans int) error {
		for i := range cfg.secrets {
			if err := c.Create(ctx, fleet.TLSSecret(ns, fmt.Sprintf("tls-%03d", i), cert, key)); err != nil {
				return fmt.Errorf("create TLS Secret %d: %w", i, err)
			}
		}
		policy := &v1alpha1.CertificatePolicy{ObjectMeta: metav1.ObjectMeta{Name: "attack"},
			Spec: v1alpha1.CertificatePolicySpec{Rules: v1alpha1.CertificateRules{
				AllowedDNSNames:  []string{"**.example.com"},
				RequiredDNSNames: []string{"host-00000.tenant-with-a-long-name.example.com"},
			}}}
		if err := c.Create(ctx, policy); err != nil {
			return fmt.Errorf("create the CertificatePolicy: %w", err)
		}
		parts = append(parts, fmt.Sprintf("%d TLS Secrets of %d SAN(s) (%s)", cfg.secrets, sans, size2(len(cert))))
		return nil
	}
	annotations := func() error {
		value := strings.Repeat("9", cfg.annotationSize)
		for i := range cfg.rings {
			ring := &v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("annotated-%02d", i)},
				Spec: v1alpha1.TicketKeyRingSpec{RotationInterval: metav1.Duration{Duration: time.Hour}, RetainedKeys: 3,
					ActivationDelay: metav1.Duration{Duration: 3 * time.Minute}}}
			key := v1alpha1.RotateRequestedAtAnnotation
			if i%2 == 1 {
				key = v1alpha1.RevokeRequestedAtAnnotation
			}
			ring.Annotations = map[string]string{key: value}
			if err := c.Create(ctx, ring); err != nil {
				return fmt.Errorf("create ring %d: %w", i, err)
			}
		}
		parts = append(parts, fmt.Sprintf("%d rings with a %s rotate or revoke annotation", cfg.rings, size2(cfg.annotationSize)))
		return nil
	}
	var err error
	switch scenario {
	case "idle":
		parts = append(parts, "none")
	case "pods-small":
		err = pods(2 << 10)
	case "pods":
		err = pods(cfg.podSize)
	case "tls-small":
		err = tls(b.small, b.smallK, 1)
	case "tls":
		err = tls(b.cert, b.key, cfg.sans)
	case "annotations":
		err = annotations()
	case "all":
		err = errors.Join(pods(cfg.podSize), tls(b.cert, b.key, cfg.sans), annotations())
		parts = []string{"pods, tls and annotations at once"}
	default:
		err = fmt.Errorf("unknown scenario %q", scenario)
	}
	return strings.Join(parts, "; "), err
}

// teardown deletes every object a scenario created. Unscheduled pods go at
// once; nothing collects the rings' Secrets on this control plane (no
// garbage collector), so every Secret of the namespace is deleted too.
func (b *bench) teardown(ctx context.Context) error {
	c := b.cluster.Client
	errs := []error{
		c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(0)),
		c.DeleteAllOf(ctx, &v1alpha1.TicketKeyRing{}, client.InNamespace(ns)),
		c.DeleteAllOf(ctx, &corev1.Secret{}, client.InNamespace(ns)),
		client.IgnoreNotFound(c.Delete(ctx, &v1alpha1.CertificatePolicy{ObjectMeta: metav1.ObjectMeta{Name: "attack"}})),
	}
	for _, s := range []string{fleet.OperatorNamespace} {
		errs = append(errs, c.DeleteAllOf(ctx, &corev1.Secret{}, client.InNamespace(s)))
	}
	if err := errors.Join(errs...); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		var pods corev1.PodList
		if err := c.List(wait, &pods, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			return nil
		}
		select {
		case <-wait.Done():
			return fmt.Errorf("%d pods left: %w", len(pods.Items), wait.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// measure runs one operator build under the scenario's objects for the
// window, sampling its memory, then stops it.
func (b *bench) measure(ctx context.Context, bu build, name, scenario string) (res result, err error) {
	addr, err := fleet.FreePort()
	if err != nil {
		return res, err
	}
	args := []string{"--metrics-bind-address", addr, "--metrics-insecure", "--health-probe-bind-address", "127.0.0.1:0",
		"--leader-elect=false", "--cluster-resource-namespace", fleet.OperatorNamespace}
	env := []string{"KUBECONFIG=" + b.cluster.Kubeconfig}
	if b.cfg.memLimit > 0 {
		env = append(env, fmt.Sprintf("GOMEMLIMIT=%d", b.cfg.memLimit))
	}
	p, err := b.sup.Start(name, bu.bin, args, env...)
	if err != nil {
		return res, err
	}
	defer func() {
		if stopErr := p.Stop(); stopErr != nil && res.exited == nil {
			err = errors.Join(err, stopErr)
		}
	}()
	url := "http://" + addr + "/metrics"
	probing := scenario != "pods" && scenario != "pods-small" && scenario != "all"
	end := time.Now().Add(b.cfg.window)
	tick := time.NewTicker(b.cfg.sample)
	defer tick.Stop()
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-tick.C:
		}
		if exited, why := p.Exited(); exited {
			res.exited = fmt.Errorf("the operator exited: %v\n%s", why, p.LogTail(20)) //nolint:errorlint // why is nil for exit 0: shown, not wrapped
			return res, res.exited
		}
		if rss, err := fleet.ProcRSS(p.PID); err == nil {
			res.endRSS = rss
		}
		if peak, err := fleet.ProcPeakRSS(p.PID); err == nil {
			res.peakRSS = peak
		}
		expo, err := fleet.Scrape(ctx, b.http, url)
		if err != nil {
			continue // not serving yet
		}
		if heap, err := fleet.SumMetric(expo, "go_memstats_heap_inuse_bytes"); err == nil {
			res.endHeap = heap
			res.peakHeap = max(res.peakHeap, heap)
			res.samples++
		}
		if !probing {
			probing, err = b.probe(ctx)
			if err != nil {
				return res, err
			}
		}
	}
	if res.samples == 0 {
		return res, fmt.Errorf("no sample of the operator's metrics in %s:\n%s", b.cfg.window, p.LogTail(20))
	}
	res.evidence = b.evidence(ctx, scenario)
	return res, nil
}

// probe has the probed ring rotate now, once it has its first key: its
// staged key falls due at once (activationDelay 0) and waits for the voter,
// which refuses every connection, so the prober asks its pods every round.
// Each operator run asks again, with a new value.
func (b *bench) probe(ctx context.Context) (bool, error) {
	ring := &v1alpha1.TicketKeyRing{}
	if err := b.cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "probed"}, ring); err != nil {
		return false, err
	}
	if ring.Status.Epoch < 1 {
		return false, nil
	}
	return true, fleet.RequestRotation(ctx, b.cluster.Client, ring)
}

// evidence says what the cluster shows of the operator's work under the
// scenario: that it probed the ring's pods, judged the Secrets, handled the
// annotations.
func (b *bench) evidence(ctx context.Context, scenario string) string {
	c := b.cluster.Client
	var out []string
	if scenario == "pods" || scenario == "pods-small" || scenario == "all" {
		ring := &v1alpha1.TicketKeyRing{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "probed"}, ring); err != nil {
			out = append(out, "probed ring: "+err.Error())
		} else if cf := ring.Status.Confirmation; cf == nil {
			out = append(out, "probed ring: no confirmation status (its pods not asked)")
		} else {
			reason := ""
			if len(cf.Missing) > 0 {
				reason = cf.Missing[0].Reason
				if len(reason) > 60 {
					reason = reason[:60] + "..."
				}
			}
			out = append(out, fmt.Sprintf("probed ring: %d voter(s), %d holding, at epoch %d (%s)", cf.Pods, cf.Holding, ring.Status.Epoch, reason))
		}
	}
	if scenario == "tls" || scenario == "tls-small" || scenario == "all" {
		p := &v1alpha1.CertificatePolicy{}
		if err := c.Get(ctx, client.ObjectKey{Name: "attack"}, p); err != nil {
			out = append(out, "policy: "+err.Error())
		} else {
			out = append(out, fmt.Sprintf("policy: %d evaluated, %d violating", p.Status.Evaluated, p.Status.Violating))
		}
	}
	if scenario == "annotations" || scenario == "all" {
		var rings v1alpha1.TicketKeyRingList
		if err := c.List(ctx, &rings, client.InNamespace(ns)); err != nil {
			out = append(out, "rings: "+err.Error())
		} else {
			biggest := 0
			for _, r := range rings.Items {
				if strings.HasPrefix(r.Name, "annotated-") {
					st, _ := jsonSize(r.Status)
					biggest = max(biggest, st)
				}
			}
			out = append(out, fmt.Sprintf("annotated rings: largest status %s", size2(biggest)))
		}
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, "; ")
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

func size2(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func limitString(n int64) string {
	if n <= 0 {
		return "unset"
	}
	return size2(int(n))
}

// jsonSize is the size of v as JSON.
func jsonSize(v any) (int, error) {
	b, err := json.Marshal(v)
	return len(b), err
}
