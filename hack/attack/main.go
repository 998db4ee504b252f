// Command attack runs make bench-attack: it measures the operator's memory
// under what any tenant can create, made large (issues 33 and 45), for two
// builds of the operator side by side: this tree's, and a git revision's
// (-before, the last release tag by default).
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
//   - tkr, ech, ctkr: the tenant's own rings, 80 of each kind, with as much
//     metadata as the API server takes (2,900 labels of the longest keys
//     and values, and a 250 KB annotation: 1.3 MiB stored): the
//     TicketKeyRings and ECHKeyRings in the tenant's namespace, the
//     ECHKeyRings naming a ClusterDNSZone that does not exist, and the
//     ClusterTicketKeyRings selecting no namespace, so that the operator
//     does nothing else for them; rings: the three kinds at once;
//
// each also with small objects of the same number (-small), to show what
// size does, and all at once (all: pods, tls, annotations and rings). Every
// object's large values are its own: the operator's cache holds equal
// strings once, so that values repeated across objects would measure less
// than a tenant can make.
//
// For each scenario and build it starts the operator binary as shipped
// (GOMEMLIMIT the chart's 256Mi limit, for both builds alike: the one
// before may know no --memory-limit-ratio), waits until it serves its
// metrics, creates the scenario's objects under it, lets it run for
// -window, then kills it (SIGKILL, as the kernel kills a container over its
// limit) and starts it again with the objects present, for -restart-window
// and until its work queues have drained (its caches filled, every object
// gone through once). It samples the resident set (VmRSS) and Go heap in
// use (go_memstats_heap_inuse_bytes) every -sample, and reports the peaks
// (VmHWM for the resident set) and the end of the run, and the restart's
// peaks, against the chart's limit. It reports figures; it asserts nothing
// about them.
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
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
)

type config struct {
	before                string
	pods, podSize         int
	secrets, sans         int
	rings, annotationSize int
	// ringObjects of each ring kind, each with ringLabels labels and an
	// annotation of ringAnnotationSize bytes.
	ringObjects, ringLabels, ringAnnotationSize int
	window, restartWindow, sample               time.Duration
	memLimit                                    int64
	scenarios                                   string
	keep                                        bool
}

// chartLimit is the chart's resources.limits.memory, which both builds
// are given as GOMEMLIMIT (the operator now sets its soft limit to a
// share of it; a build before may not).
const chartLimit = 256 << 20

// scenarios are those -scenarios takes, in the order of the default run.
var scenarios = []string{"idle", "pods-small", "pods", "tls-small", "tls", "annotations",
	"tkr-small", "tkr", "ech-small", "ech", "ctkr-small", "ctkr", "rings-small", "rings", "all"}

func main() {
	cfg := config{}
	flag.StringVar(&cfg.before, "before", lastTag(), "git revision or tag of the operator to compare with (built from git archive); by default the last release tag (git describe --tags --abbrev=0); empty: this tree's only")
	flag.IntVar(&cfg.pods, "pods", 80, "Pending pods labelled for the probed ring")
	flag.IntVar(&cfg.podSize, "pod-size", 1<<20, "bytes of each large pod (one env value)")
	flag.IntVar(&cfg.secrets, "secrets", 80, "kubernetes.io/tls Secrets under the CertificatePolicy")
	flag.IntVar(&cfg.sans, "sans", 15500, "DNS SANs of each large certificate")
	flag.IntVar(&cfg.rings, "rings", 20, "TicketKeyRings with an oversized rotate-now or revoke annotation (scenario annotations)")
	flag.IntVar(&cfg.annotationSize, "annotation-size", 200<<10, "bytes of each oversized rotate-now or revoke annotation value")
	flag.IntVar(&cfg.ringObjects, "ring-objects", 80, "rings of each kind in the scenarios tkr, ech, ctkr and rings (and their -small twins)")
	flag.IntVar(&cfg.ringLabels, "ring-labels", fleet.RingLabels, fmt.Sprintf("labels of each large ring (keys of %d bytes, values of %d)", fleet.LabelKeySize, fleet.LabelValueSize))
	flag.IntVar(&cfg.ringAnnotationSize, "ring-annotation-size", fleet.RingAnnotationSize, "bytes of each large ring's one annotation")
	flag.DurationVar(&cfg.window, "window", 30*time.Second, "how long each operator runs once a scenario's objects are created")
	flag.DurationVar(&cfg.restartWindow, "restart-window", 20*time.Second, "how long at least the operator, killed and started again with the objects present, is sampled (and until its queues have drained, up to 5 minutes); 0: no restart")
	flag.DurationVar(&cfg.sample, "sample", 250*time.Millisecond, "how often its memory is sampled")
	flag.Int64Var(&cfg.memLimit, "gomemlimit", chartLimit, "the operator's GOMEMLIMIT in bytes (the chart's: its memory limit); 0: none")
	flag.StringVar(&cfg.scenarios, "scenarios", strings.Join(scenarios, ","), "scenarios to run, in order")
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

// lastTag is the newest tag reachable from HEAD, the last release; empty
// when there is none (or no git): then this tree's operator runs alone.
func lastTag() string {
	out, err := exec.Command("git", "describe", "--tags", "--abbrev=0").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// build is one operator binary under measure.
type build struct {
	name, bin string
}

// memory is what the samples of one operator process showed.
type memory struct {
	peakRSS, endRSS   int64
	peakHeap, endHeap float64
	samples           int
}

// result is one build's run under one scenario, and its restart.
type result struct {
	run, restart memory
	restarted    bool
	created      time.Duration // how long the scenario's objects took to create
	evidence     string        // what shows the attack reached the operator
}

// bench is a running benchmark.
type bench struct {
	cfg     config
	work    string
	sup     *fleet.Supervisor
	cluster *fleet.Cluster
	http    *http.Client
	certs   [][]byte // the large certificates (one per TLS Secret) and their keys
	keys    [][]byte
	small   [][]byte // one-SAN certificates and their keys
	smallK  [][]byte
}

const ns = "attack"

func run(ctx context.Context, cfg config, out io.Writer) (err error) {
	todo := strings.Split(cfg.scenarios, ",")
	for _, sc := range todo {
		if !slices.Contains(scenarios, sc) {
			return fmt.Errorf("unknown scenario %q; known: %s", sc, strings.Join(scenarios, ", "))
		}
	}
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
	if slices.ContainsFunc(todo, func(sc string) bool { return strings.HasPrefix(sc, "tls") || sc == "all" }) {
		fmt.Fprintf(os.Stderr, "Issuing %d certificates of %d DNS SANs, and as many of one\n", cfg.secrets, cfg.sans)
		if b.certs, b.keys, err = certificates(cfg.secrets, cfg.sans); err != nil {
			return err
		}
		if b.small, b.smallK, err = certificates(cfg.secrets, 1); err != nil {
			return err
		}
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
	for _, sc := range todo {
		r := row{scenario: sc}
		for i, bu := range builds {
			fmt.Fprintf(os.Stderr, "Scenario %s: the operator %s, its objects created under it, then %s\n", sc, bu.name, cfg.window)
			res, objects, err := b.measure(ctx, bu, fmt.Sprintf("operator-%s-%d", sc, i), sc)
			if err != nil {
				return fmt.Errorf("scenario %s, %s: %w", sc, bu.name, err)
			}
			r.objects = objects
			fmt.Fprintf(os.Stderr, "  %s, created in %s; peak RSS %s, peak heap %s, end RSS %s; restart: peak RSS %s, peak heap %s; %s\n",
				objects, res.created.Round(100*time.Millisecond), mib(float64(res.run.peakRSS)), mib(res.run.peakHeap), mib(float64(res.run.endRSS)),
				restartRSS(res), restartHeap(res), orDash(strings.TrimPrefix(res.evidence, "; ")))
			r.results = append(r.results, res)
			if err := b.teardown(ctx); err != nil {
				return fmt.Errorf("scenario %s: clean up: %w", sc, err)
			}
		}
		rows = append(rows, r)
	}

	fmt.Fprintf(out, "\n==== Operator memory under a tenant's large objects: each operator run while a scenario's objects are created and for %s after, then killed and started again with them for %s; GOMEMLIMIT %s, sampled every %s\n",
		cfg.window, cfg.restartWindow, limitString(cfg.memLimit), cfg.sample)
	fmt.Fprintf(out, "peak RSS is VmHWM; heap is go_memstats_heap_inuse_bytes (peak of the samples); end is the run's last sample; restart is the new process's first %s, or longer until its queues drained. (!) marks a peak over the chart's memory limit, 256Mi: the container would be OOM-killed.\n\n", cfg.restartWindow)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tobjects\toperator\tpeak RSS\tpeak heap\tend RSS\tend heap\trestart: peak RSS\tpeak heap\t")
	for _, r := range rows {
		for i, res := range r.results {
			scenario, objects := r.scenario, r.objects
			if i > 0 {
				scenario, objects = "", ""
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", scenario, objects, builds[i].name,
				mibMarked(res.run.peakRSS), mib(res.run.peakHeap), mib(float64(res.run.endRSS)), mib(res.run.endHeap),
				restartRSS(res), restartHeap(res))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nWhat each operator showed of the attack:")
	for _, r := range rows {
		for i, res := range r.results {
			fmt.Fprintf(out, "  %-12s %-22s %s\n", r.scenario, builds[i].name, orDash(strings.TrimPrefix(res.evidence, "; ")))
		}
	}
	return nil
}

// certificates issues n certificates of sans DNS names each, every one
// with names of its own.
func certificates(n, sans int) (certs, keys [][]byte, err error) {
	for i := range n {
		c, k, err := fleet.LargeCertificate(fmt.Sprintf("tenant-%03d-a-long-name", i), sans)
		if err != nil {
			return nil, nil, err
		}
		certs, keys = append(certs, c), append(keys, k)
	}
	return certs, keys, nil
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

// ringKinds are the ring kinds of the scenarios tkr, ech and ctkr.
var ringKinds = []string{"tkr", "ech", "ctkr"}

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
	tls := func(certs, keys [][]byte, sans int) error {
		for i := range cfg.secrets {
			if err := c.Create(ctx, fleet.TLSSecret(ns, fmt.Sprintf("tls-%03d", i), certs[i], keys[i])); err != nil {
				return fmt.Errorf("create TLS Secret %d: %w", i, err)
			}
		}
		policy := &v1alpha1.CertificatePolicy{ObjectMeta: metav1.ObjectMeta{Name: "attack"},
			Spec: v1alpha1.CertificatePolicySpec{Rules: v1alpha1.CertificateRules{
				AllowedDNSNames:  []string{"**.example.com"},
				RequiredDNSNames: []string{fleet.LargeCertificateName},
			}}}
		if err := c.Create(ctx, policy); err != nil {
			return fmt.Errorf("create the CertificatePolicy: %w", err)
		}
		parts = append(parts, fmt.Sprintf("%d TLS Secrets of %d SAN(s) (%s)", cfg.secrets, sans, size2(len(certs[0]))))
		return nil
	}
	annotations := func() error {
		for i := range cfg.rings {
			ring := fleet.QuietTicketKeyRing(ns, fmt.Sprintf("annotated-%02d", i))
			key := v1alpha1.RotateRequestedAtAnnotation
			if i%2 == 1 {
				key = v1alpha1.RevokeRequestedAtAnnotation
			}
			ring.Annotations = map[string]string{key: fleet.Filler(ring.Name, cfg.annotationSize)}
			if err := c.Create(ctx, ring); err != nil {
				return fmt.Errorf("create ring %d: %w", i, err)
			}
		}
		parts = append(parts, fmt.Sprintf("%d rings with a %s rotate or revoke annotation", cfg.rings, size2(cfg.annotationSize)))
		return nil
	}
	rings := func(large bool, kinds ...string) error {
		desc, err := b.createRings(ctx, large, kinds)
		parts = append(parts, desc)
		return err
	}
	kind, small := strings.CutSuffix(scenario, "-small")
	var err error
	switch {
	case scenario == "idle":
		parts = append(parts, "none")
	case kind == "pods" && small:
		err = pods(2 << 10)
	case kind == "pods":
		err = pods(cfg.podSize)
	case kind == "tls" && small:
		err = tls(b.small, b.smallK, 1)
	case kind == "tls":
		err = tls(b.certs, b.keys, cfg.sans)
	case scenario == "annotations":
		err = annotations()
	case slices.Contains(ringKinds, kind):
		err = rings(!small, kind)
	case kind == "rings":
		err = rings(!small, ringKinds...)
	case scenario == "all":
		err = errors.Join(pods(cfg.podSize), tls(b.certs, b.keys, cfg.sans), annotations(), rings(true, ringKinds...))
	default:
		err = fmt.Errorf("unknown scenario %q", scenario)
	}
	return strings.Join(parts, "; "), err
}

// createRings creates cfg.ringObjects rings of each kind, large (the most
// metadata the API server takes, every value its own) or small (none),
// and describes them with the size of one as stored, managed fields
// included.
func (b *bench) createRings(ctx context.Context, large bool, kinds []string) (string, error) {
	c := b.cluster.Client
	n := b.cfg.ringObjects
	what := map[string]string{"tkr": "TicketKeyRings", "ech": "ECHKeyRings", "ctkr": "ClusterTicketKeyRings"}
	var names []string
	stored := 0
	for _, kind := range kinds {
		for i := range n {
			var obj client.Object
			switch kind {
			case "tkr":
				obj = fleet.QuietTicketKeyRing(ns, fmt.Sprintf("tkr-%03d", i))
			case "ech":
				obj = fleet.QuietECHKeyRing(ns, fmt.Sprintf("ech-%03d", i))
			case "ctkr":
				obj = fleet.QuietClusterTicketKeyRing(fmt.Sprintf("attack-ctkr-%03d", i))
			}
			if large {
				fleet.Enlarge(obj, b.cfg.ringLabels, b.cfg.ringAnnotationSize)
			}
			if err := c.Create(ctx, obj); err != nil {
				return "", fmt.Errorf("create %s %s: %w", what[kind], obj.GetName(), errorHead(err))
			}
			if i == 0 {
				size, err := jsonSize(obj) // as the API server returned it
				if err != nil {
					return "", err
				}
				stored = max(stored, size)
			}
		}
		names = append(names, what[kind])
	}
	each := "no label or annotation"
	if large {
		each = fmt.Sprintf("%d labels and a %s annotation, %s stored", b.cfg.ringLabels, size2(b.cfg.ringAnnotationSize), size2(stored))
	}
	return fmt.Sprintf("%d %s (%s)", n, strings.Join(names, ", "), each), nil
}

// errorHead shortens an API error that quotes the object it refused.
func errorHead(err error) error {
	if s := err.Error(); len(s) > 300 {
		return errors.New(s[:300] + "...")
	}
	return err
}

// teardown deletes every object a scenario created, while no operator
// runs. Unscheduled pods go at once; nothing collects the rings' Secrets
// on this control plane (no garbage collector), so every Secret of the
// namespace, and of the operator's (the ClusterTicketKeyRings'), is
// deleted too.
func (b *bench) teardown(ctx context.Context) error {
	c := b.cluster.Client
	errs := []error{
		c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(0)),
		c.DeleteAllOf(ctx, &v1alpha1.TicketKeyRing{}, client.InNamespace(ns)),
		c.DeleteAllOf(ctx, &v1alpha1.ECHKeyRing{}, client.InNamespace(ns)),
		c.DeleteAllOf(ctx, &v1alpha1.ClusterTicketKeyRing{}),
		c.DeleteAllOf(ctx, &corev1.Secret{}, client.InNamespace(ns)),
		c.DeleteAllOf(ctx, &corev1.Secret{}, client.InNamespace(fleet.OperatorNamespace)),
		client.IgnoreNotFound(c.Delete(ctx, &v1alpha1.CertificatePolicy{ObjectMeta: metav1.ObjectMeta{Name: "attack"}})),
	}
	if err := errors.Join(errs...); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		left, err := b.left(wait)
		if err != nil {
			return err
		}
		if left == "" {
			return nil
		}
		select {
		case <-wait.Done():
			return fmt.Errorf("%s left: %w", left, wait.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// left says which of a scenario's objects still exist.
func (b *bench) left(ctx context.Context) (string, error) {
	c := b.cluster.Client
	var out []string
	for _, l := range []struct {
		what string
		list client.ObjectList
		opts []client.ListOption
	}{
		{"pods", &corev1.PodList{}, []client.ListOption{client.InNamespace(ns)}},
		{"TicketKeyRings", &v1alpha1.TicketKeyRingList{}, []client.ListOption{client.InNamespace(ns)}},
		{"ECHKeyRings", &v1alpha1.ECHKeyRingList{}, []client.ListOption{client.InNamespace(ns)}},
		{"ClusterTicketKeyRings", &v1alpha1.ClusterTicketKeyRingList{}, nil},
	} {
		// Names only: a list of large rings would be as large as they.
		meta := &metav1.PartialObjectMetadataList{}
		gvk, err := c.GroupVersionKindFor(l.list)
		if err != nil {
			return "", err
		}
		meta.SetGroupVersionKind(gvk)
		if err := c.List(ctx, meta, l.opts...); err != nil {
			return "", err
		}
		if n := len(meta.Items); n > 0 {
			out = append(out, fmt.Sprintf("%d %s", n, l.what))
		}
	}
	return strings.Join(out, ", "), nil
}

// measure runs one operator build while the scenario's objects are created
// and for the window after, then kills it and runs it again with the
// objects present for the restart window. It returns what the samples of
// each process showed, and the objects' description.
func (b *bench) measure(ctx context.Context, bu build, name, scenario string) (res result, objects string, err error) {
	p, url, err := b.start(bu, name)
	if err != nil {
		return res, "", err
	}
	defer func() {
		// An operator that does not stop on SIGTERM in time is killed
		// and noted: a finding, not a failure of the bench.
		if stopErr := p.Stop(); stopErr != nil {
			res.evidence += "; stopped: " + firstLine(stopErr.Error())
		}
	}()
	s := b.sample(ctx, p, url)
	if err := s.serving(ctx, time.Minute); err != nil {
		return res, "", err
	}
	began := time.Now()
	if objects, err = b.setup(ctx, scenario); err != nil {
		_, _ = s.end()
		return res, objects, err
	}
	res.created = time.Since(began)
	probing := !hasPods(scenario)
	end := time.Now().Add(b.cfg.window)
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			_, _ = s.end()
			return res, objects, ctx.Err()
		case <-time.After(b.cfg.sample):
		}
		if !probing {
			if probing, err = b.probe(ctx); err != nil {
				_, _ = s.end()
				return res, objects, err
			}
		}
	}
	if res.run, err = s.end(); err != nil {
		return res, objects, err
	}
	res.evidence = b.evidence(ctx, scenario)
	if b.cfg.restartWindow <= 0 {
		return res, objects, nil
	}

	// As the kernel kills a container over its memory limit: no chance to
	// tidy up. Its successor reads everything again, the objects'
	// Secrets and statuses too.
	if err := p.Kill(); err != nil {
		return res, objects, err
	}
	again, url, err := b.start(bu, name+"-restarted")
	if err != nil {
		return res, objects, err
	}
	p = again // stopped on return
	s = b.sample(ctx, p, url)
	// The restart's window lasts until its controllers have been through
	// every object once (their queues filled and drained), and at least
	// -restart-window: among large objects its caches may take longer to
	// fill than the window, and the peak comes with them.
	began = time.Now()
	settled := scenario == "idle" // no object: nothing to go through
	for !settled || time.Since(began) < b.cfg.restartWindow {
		if time.Since(began) > restartCeiling {
			res.evidence += fmt.Sprintf("; restart: its queues not drained in %s", restartCeiling)
			break
		}
		select {
		case <-ctx.Done():
			_, _ = s.end()
			return res, objects, ctx.Err()
		case <-time.After(b.cfg.sample):
		}
		if !settled && b.settled(ctx, url) {
			settled = true
			res.evidence += fmt.Sprintf("; restart: queues drained in %s", time.Since(began).Round(100*time.Millisecond))
		}
	}
	res.restart, err = s.end()
	res.restarted = err == nil
	return res, objects, err
}

// restartCeiling bounds a restart's window.
const restartCeiling = 5 * time.Minute

// settled says whether the operator serving its metrics at url has
// enqueued work and has none waiting.
func (b *bench) settled(ctx context.Context, url string) bool {
	expo, err := fleet.Scrape(ctx, b.http, url)
	if err != nil {
		return false
	}
	adds, err := fleet.SumMetric(expo, "workqueue_adds_total")
	if err != nil || adds == 0 {
		return false
	}
	depth, err := fleet.SumMetric(expo, "workqueue_depth")
	return err == nil && depth == 0
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// start starts an operator build serving its metrics on a port of its own.
func (b *bench) start(bu build, name string) (*fleet.Proc, string, error) {
	addr, err := fleet.FreePort()
	if err != nil {
		return nil, "", err
	}
	args := []string{"--metrics-bind-address", addr, "--metrics-insecure", "--health-probe-bind-address", "127.0.0.1:0",
		"--leader-elect=false", "--cluster-resource-namespace", fleet.OperatorNamespace}
	env := []string{"KUBECONFIG=" + b.cluster.Kubeconfig}
	if b.cfg.memLimit > 0 {
		env = append(env, fmt.Sprintf("GOMEMLIMIT=%d", b.cfg.memLimit))
	}
	p, err := b.sup.Start(name, bu.bin, args, env...)
	return p, "http://" + addr + "/metrics", err
}

// sampler samples one operator process's memory until ended.
type sampler struct {
	p       *fleet.Proc
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	mem     memory
	err     error
	started time.Time
}

// sample starts sampling p's resident set and its heap, from its metrics
// at url, every cfg.sample.
func (b *bench) sample(ctx context.Context, p *fleet.Proc, url string) *sampler {
	s := &sampler{p: p, stop: make(chan struct{}), done: make(chan struct{}), started: time.Now()}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(b.cfg.sample)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.stop:
				return
			case <-tick.C:
			}
			if exited, why := p.Exited(); exited {
				s.mu.Lock()
				s.err = fmt.Errorf("the operator exited: %v\n%s", why, p.LogTail(20)) //nolint:errorlint // why is nil for exit 0: shown, not wrapped
				s.mu.Unlock()
				return
			}
			rss, rssErr := fleet.ProcRSS(p.PID)
			peak, peakErr := fleet.ProcPeakRSS(p.PID)
			var heap float64
			expo, err := fleet.Scrape(ctx, b.http, url)
			if err == nil {
				heap, err = fleet.SumMetric(expo, "go_memstats_heap_inuse_bytes")
			}
			s.mu.Lock()
			if rssErr == nil {
				s.mem.endRSS = rss
			}
			if peakErr == nil {
				s.mem.peakRSS = peak
			}
			if err == nil { // else not serving yet
				s.mem.endHeap = heap
				s.mem.peakHeap = max(s.mem.peakHeap, heap)
				s.mem.samples++
			}
			s.mu.Unlock()
		}
	}()
	return s
}

// serving waits until the operator serves its metrics: what it holds
// before the scenario's objects exist.
func (s *sampler) serving(ctx context.Context, timeout time.Duration) error {
	wait, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		s.mu.Lock()
		n, err := s.mem.samples, s.err
		s.mu.Unlock()
		if err != nil || n > 0 {
			return err
		}
		select {
		case <-wait.Done():
			return fmt.Errorf("the operator served no metrics in %s:\n%s", timeout, s.p.LogTail(20))
		case <-s.done:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// end stops sampling and returns what the samples showed, the resident
// set's peak read once more, while the process still runs.
func (s *sampler) end() (memory, error) {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	if peak, err := fleet.ProcPeakRSS(s.p.PID); err == nil && s.err == nil {
		s.mem.peakRSS = peak
	}
	if s.err == nil && s.mem.samples == 0 {
		s.err = fmt.Errorf("no sample of the operator's metrics in %s:\n%s", time.Since(s.started).Round(time.Second), s.p.LogTail(20))
	}
	return s.mem, s.err
}

func hasPods(scenario string) bool {
	return scenario == "pods" || scenario == "pods-small" || scenario == "all"
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
// annotations and the rings.
func (b *bench) evidence(ctx context.Context, scenario string) string {
	c := b.cluster.Client
	kind, _ := strings.CutSuffix(scenario, "-small")
	var out []string
	if hasPods(scenario) {
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
	if kind == "tls" || scenario == "all" {
		p := &v1alpha1.CertificatePolicy{}
		if err := c.Get(ctx, client.ObjectKey{Name: "attack"}, p); err != nil {
			out = append(out, "policy: "+err.Error())
		} else {
			out = append(out, fmt.Sprintf("policy: %d evaluated, %d violating", p.Status.Evaluated, p.Status.Violating))
		}
	}
	if scenario == "annotations" || scenario == "all" {
		biggest := 0
		err := eachPage(ctx, c, &v1alpha1.TicketKeyRingList{}, func(l client.ObjectList) {
			for _, r := range l.(*v1alpha1.TicketKeyRingList).Items {
				if strings.HasPrefix(r.Name, "annotated-") {
					st, _ := jsonSize(r.Status)
					biggest = max(biggest, st)
				}
			}
		}, client.InNamespace(ns))
		if err != nil {
			out = append(out, "rings: "+err.Error())
		} else {
			out = append(out, fmt.Sprintf("annotated rings: largest status %s", size2(biggest)))
		}
	}
	if slices.Contains(ringKinds, kind) || kind == "rings" || scenario == "all" {
		out = append(out, b.ringEvidence(ctx, kind))
	}
	return strings.Join(out, "; ")
}

// ringEvidence counts the scenario's rings the operator handled: a ticket
// ring with its first key, an ECH ring with a status (it may publish
// nowhere).
func (b *bench) ringEvidence(ctx context.Context, kind string) string {
	c := b.cluster.Client
	var out []string
	if kind == "tkr" || kind == "rings" || kind == "all" {
		keyed, all := 0, 0
		err := eachPage(ctx, c, &v1alpha1.TicketKeyRingList{}, func(l client.ObjectList) {
			for _, r := range l.(*v1alpha1.TicketKeyRingList).Items {
				if strings.HasPrefix(r.Name, "tkr-") {
					all++
					if r.Status.Epoch >= 1 {
						keyed++
					}
				}
			}
		}, client.InNamespace(ns))
		out = append(out, fmt.Sprintf("TicketKeyRings: %d of %d keyed%s", keyed, all, errSuffix(err)))
	}
	if kind == "ech" || kind == "rings" || kind == "all" {
		seen, all := 0, 0
		reason := ""
		err := eachPage(ctx, c, &v1alpha1.ECHKeyRingList{}, func(l client.ObjectList) {
			for _, r := range l.(*v1alpha1.ECHKeyRingList).Items {
				all++
				if ready := apimeta.FindStatusCondition(r.Status.Conditions, "Ready"); ready != nil && ready.ObservedGeneration == r.Generation {
					seen++
					reason = ready.Reason
				}
			}
		}, client.InNamespace(ns))
		out = append(out, fmt.Sprintf("ECHKeyRings: %d of %d with a status (%s)%s", seen, all, reason, errSuffix(err)))
	}
	if kind == "ctkr" || kind == "rings" || kind == "all" {
		keyed, all := 0, 0
		err := eachPage(ctx, c, &v1alpha1.ClusterTicketKeyRingList{}, func(l client.ObjectList) {
			for _, r := range l.(*v1alpha1.ClusterTicketKeyRingList).Items {
				all++
				if r.Status.Epoch >= 1 {
					keyed++
				}
			}
		})
		out = append(out, fmt.Sprintf("ClusterTicketKeyRings: %d of %d keyed%s", keyed, all, errSuffix(err)))
	}
	return strings.Join(out, ", ")
}

// eachPage lists objects ten at a time: the bench's own memory stays small
// under rings of a megabyte each.
func eachPage(ctx context.Context, c client.Client, list client.ObjectList, fn func(client.ObjectList), opts ...client.ListOption) error {
	cont := ""
	for range 10_000 {
		if err := c.List(ctx, list, append(slices.Clone(opts), client.Limit(10), client.Continue(cont))...); err != nil {
			return err
		}
		fn(list)
		if cont = list.GetContinue(); cont == "" {
			return nil
		}
	}
	return errors.New("more than 10,000 pages")
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return " (" + err.Error() + ")"
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

// mibMarked marks a peak over the chart's limit.
func mibMarked(b int64) string {
	if b > chartLimit {
		return mib(float64(b)) + " (!)"
	}
	return mib(float64(b))
}

func restartRSS(r result) string {
	if !r.restarted {
		return "-"
	}
	return mibMarked(r.restart.peakRSS)
}

func restartHeap(r result) string {
	if !r.restarted {
		return "-"
	}
	return mib(r.restart.peakHeap)
}

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
