//go:build cluster

package cluster_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
	"github.com/ringmaster-io/ringmaster/internal/testing/invariants"
)

// The fault specs' fleet: its own namespace and ring, rotating by the
// clock every minute, so that each fault lands in a rotation within a
// minute or two.
const (
	faultsNS = "faults"
	// faultsRing is the ring's name as its pods report it.
	faultsRing     = faultsNS + "/" + ringName
	faultsInterval = time.Minute
	// pollEvery is how often the pods' status is read; with the time a
	// read takes, it is the checker's slack.
	pollEvery   = 250 * time.Millisecond
	faultsSlack = time.Second
	// publishLag is what the checker allows between the operator's plan
	// and its publication reaching the suite: before ringplan.Replan, a
	// new leader's first publication was seen 3.6 s after the instant its
	// plan counted activationDelay from (each fault's shortest staged time
	// is printed).
	publishLag = 5 * time.Second
)

// faultFleet is the fault specs' fleet, made by the first of them and kept
// by the others.
type faultFleet struct {
	pki    *fleet.PKI
	lb     string
	health *http.Client
}

var (
	theFaultFleet *faultFleet
	faultRows     []faultRow
)

// faultRow is one fault's line in the table the fault specs print.
type faultRow struct {
	fault  string
	report invariants.Report
	note   string
}

// ensureInstalled installs the chart unless the release is there: the
// fault specs run alone too (make test-faults), without the spec that
// installs it.
func ensureInstalled(ctx context.Context) {
	if _, err := helm(ctx, "status", release, "--namespace", releaseNS); err == nil {
		return
	}
	installFromRegistry(ctx)
	waitLeader(ctx, "")
}

// getFaultFleet makes the fleet on first use: a ring rotating every
// faultsInterval with the suite's activationDelay, and servers pods
// behind a Service.
func getFaultFleet(ctx context.Context) *faultFleet {
	if theFaultFleet != nil {
		return theFaultFleet
	}
	ensureInstalled(ctx)
	pki, err := fleet.NewPKI(fleet.ECDSAP256)
	Expect(err).NotTo(HaveOccurred())
	Expect(cl.CreateNamespace(ctx, faultsNS)).To(Succeed())
	Expect(cl.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: faultsNS, Name: tlsSecret},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": pki.CertPEM, "tls.key": pki.KeyPEM},
	})).To(Succeed())
	Expect(cl.Client.Create(ctx, &v1alpha1.TicketKeyRing{
		ObjectMeta: metav1.ObjectMeta{Namespace: faultsNS, Name: ringName},
		Spec: v1alpha1.TicketKeyRingSpec{
			RotationInterval: metav1.Duration{Duration: faultsInterval},
			RetainedKeys:     2,
			ActivationDelay:  metav1.Duration{Duration: activationDelay},
			Distribution:     v1alpha1.Distribution{SecretName: keysSecret, Formats: []v1alpha1.KeyFormat{"go"}},
		},
	})).To(Succeed())
	_, err = cl.WaitRing(ctx, faultsNS, ringName, "Ready", fleet.Ready)
	Expect(err).NotTo(HaveOccurred())
	dep, svc := serverDeployment(), serverService()
	dep.Namespace, svc.Namespace = faultsNS, faultsNS
	Expect(cl.Client.Create(ctx, dep)).To(Succeed())
	Expect(cl.Client.Create(ctx, svc)).To(Succeed())
	addrs := fleetAddrs(ctx)
	Expect(cl.Client.Get(ctx, key(faultsNS, "server"), svc)).To(Succeed())
	f := &faultFleet{pki: pki, lb: net.JoinHostPort(svc.Spec.ClusterIP, "443"), health: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: dialer.DialContext, DisableKeepAlives: true,
	}}}
	waitService(ctx, f.lb, pki, addrs)
	theFaultFleet = f
	return f
}

// fleetAddrs waits until every server pod of the fault fleet is Ready and
// returns their addresses.
func fleetAddrs(ctx context.Context) []string {
	var addrs []string
	Eventually(func(g Gomega) {
		pods := &corev1.PodList{}
		g.Expect(cl.Client.List(ctx, pods, inNamespace(faultsNS), matchingLabels(map[string]string{"app": "server"}))).To(Succeed())
		pods.Items = slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
		g.Expect(pods.Items).To(HaveLen(servers))
		addrs = nil
		for _, p := range pods.Items {
			g.Expect(podReady(p)).To(BeTrue(), "pod %s", p.Name)
			addrs = append(addrs, net.JoinHostPort(p.Status.PodIP, "8443"))
		}
	}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
	slices.Sort(addrs)
	return addrs
}

// waitFleetServing waits until the fault fleet's pods are Ready and each
// answers at the address the API gives it (after a restart of the node,
// the API shows the old addresses for a while), and returns the
// addresses.
func waitFleetServing(ctx context.Context, health *http.Client) []string {
	var addrs []string
	Eventually(func(g Gomega) {
		pods := &corev1.PodList{}
		g.Expect(cl.Client.List(ctx, pods, inNamespace(faultsNS), matchingLabels(map[string]string{"app": "server"}))).To(Succeed())
		pods.Items = slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
		g.Expect(pods.Items).To(HaveLen(servers))
		addrs = nil
		for _, p := range pods.Items {
			g.Expect(podReady(p)).To(BeTrue(), "pod %s", p.Name)
			a := net.JoinHostPort(p.Status.PodIP, "8443")
			_, err := fleet.ReadHealth(ctx, health, statusAddr(a))
			g.Expect(err).NotTo(HaveOccurred(), "pod %s", p.Name)
			addrs = append(addrs, a)
		}
	}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
	slices.Sort(addrs)
	return addrs
}

// faultRun is one fault spec's observation of the fleet: the ring's
// Secrets and the pods' status fed to an invariants checker, and a load
// through the Service, from before the fault until after it.
type faultRun struct {
	f       *faultFleet
	checker *invariants.Checker
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	load    *fleet.Load

	mu       sync.Mutex
	podOf    map[string]string    // pod IP -> pod name
	restarts map[string]int32     // pod -> its containers' restart count when first listed
	observed map[string]int32     // pod -> restarts told to the checker
	swaps    map[string]uint64    // pod -> its server's last Swaps
	epochAt  map[int64]time.Time  // projection epoch -> when first seen
	windows  [][2]time.Time       // restarts of the whole fleet, the load's failures in them expected
	served   map[string]time.Time // pod -> last status read
	stopped  bool
	result   fleet.Result
	notes    []string
}

// startFaultRun starts watching and loading the fleet.
func startFaultRun(ctx context.Context, f *faultFleet) *faultRun {
	return startFaultRunLag(ctx, f, publishLag)
}

// startFaultRunLag is startFaultRun with the checker allowing lag between
// the operator's plan and its publication.
func startFaultRunLag(ctx context.Context, f *faultFleet, lag time.Duration) *faultRun {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &faultRun{
		f: f, cancel: cancel,
		checker: invariants.New(invariants.Config{ActivationDelay: activationDelay, Slack: faultsSlack, PublishLag: lag}),
		podOf:   map[string]string{}, restarts: map[string]int32{}, observed: map[string]int32{}, swaps: map[string]uint64{}, epochAt: map[int64]time.Time{},
		served: map[string]time.Time{},
	}
	r.watchSecrets(rctx)
	r.wg.Go(func() { r.pollPods(rctx) })
	r.load = fleet.StartLoad(rctx, fleet.LoadConfig{
		Addr: f.lb, Roots: f.pki.Roots, Version: tls.VersionTLS13, Dial: dialer.DialContext,
		Clients: 6, ConnsPerClient: connsPerClient, Interval: 150 * time.Millisecond,
	})
	return r
}

// watchSecrets feeds the checker every version of the ring's projection
// and every snapshot Secret an informer sees (it lists again after the API
// server comes back).
func (r *faultRun) watchSecrets(ctx context.Context) {
	inf := informers.NewSharedInformerFactoryWithOptions(cl.Clientset, 0, informers.WithNamespace(faultsNS),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = v1alpha1.RingLabel + "=" + ringName })).Core().V1().Secrets().Informer()
	// A key staged in the first list was staged before the run began, since
	// when the run cannot tell: the pods' first status marks it so.
	var synced atomic.Bool
	on := func(obj any) {
		s, ok := obj.(*corev1.Secret)
		if !ok {
			return
		}
		at := time.Now()
		switch s.Labels[v1alpha1.ComponentLabel] {
		case v1alpha1.ComponentSnapshot:
			e, err := strconv.ParseInt(s.Labels[v1alpha1.EpochLabel], 10, 64)
			if err == nil {
				r.checker.ObserveSnapshotSecret(faultsRing, e, string(s.UID))
			}
		case v1alpha1.ComponentProjection:
			ring, err := keyring.Decode(s.Data[keyring.FileName])
			if err != nil {
				return
			}
			var content []string
			for _, k := range ring.Keys {
				content = append(content, fmt.Sprintf("%s %d-%d", k.ID, k.ActiveFrom.UnixMilli(), k.ExpiresAt.UnixMilli()))
				if k.ActiveFrom.After(at) && synced.Load() {
					r.checker.ObserveStaged(faultsRing, k.ID, at)
				}
			}
			r.checker.ObserveSnapshot(faultsRing, ring.Epoch, strings.Join(content, ", "), at)
			r.mu.Lock()
			if _, ok := r.epochAt[ring.Epoch]; !ok {
				r.epochAt[ring.Epoch] = at
			}
			r.mu.Unlock()
		}
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: on, UpdateFunc: func(_, o any) { on(o) }})
	Expect(err).NotTo(HaveOccurred())
	r.wg.Go(func() { inf.RunWithContext(ctx) })
	Eventually(reg.HasSynced).WithContext(ctx).WithTimeout(30 * time.Second).Should(BeTrue())
	synced.Store(true)
}

// pollPods reads every server pod's status every pollEvery, from inside
// the cluster's network, and the pods themselves (names, addresses,
// restart counts) from the API once a second, keeping the last list while
// the API server is away.
func (r *faultRun) pollPods(ctx context.Context) {
	var pods []corev1.Pod
	lastList := time.Time{}
	for ctx.Err() == nil {
		if time.Since(lastList) >= time.Second {
			lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			list := &corev1.PodList{}
			if err := cl.Client.List(lctx, list, inNamespace(faultsNS), matchingLabels(map[string]string{"app": "server"})); err == nil {
				pods = list.Items
				r.notePods(pods)
			}
			cancel()
			lastList = time.Now()
		}
		var wg sync.WaitGroup
		for _, p := range pods {
			if p.Status.PodIP == "" || p.DeletionTimestamp != nil {
				continue
			}
			wg.Go(func() {
				st, err := fleet.ReadHealth(ctx, r.f.health, net.JoinHostPort(p.Status.PodIP, "9090"))
				at := time.Now()
				if err != nil {
					return
				}
				r.mu.Lock()
				restarted := st.Swaps < r.swaps[p.Name]
				r.swaps[p.Name] = st.Swaps
				r.served[p.Name] = at
				if restarted {
					r.observed[p.Name]++
				}
				r.mu.Unlock()
				if restarted {
					r.checker.ObserveRestart(p.Name, at)
				}
				r.checker.ObservePod(p.Name, st, at)
			})
		}
		wg.Wait()
		select {
		case <-ctx.Done():
		case <-time.After(pollEvery):
		}
	}
}

// notePods records the pods' addresses, and their containers' restarts
// the status's Swaps did not already show.
func (r *faultRun) notePods(pods []corev1.Pod) {
	var restarted []string
	r.mu.Lock()
	for _, p := range pods {
		if p.Status.PodIP != "" {
			r.podOf[p.Status.PodIP] = p.Name
		}
		var n int32
		for _, c := range p.Status.ContainerStatuses {
			n += c.RestartCount
		}
		base, ok := r.restarts[p.Name]
		if !ok {
			r.restarts[p.Name] = n
			continue
		}
		for ; n-base > r.observed[p.Name]; r.observed[p.Name]++ {
			restarted = append(restarted, p.Name)
		}
	}
	r.mu.Unlock()
	for _, p := range restarted {
		r.checker.ObserveRestart(p, time.Now())
	}
}

// restartWindow marks [from, to] as a restart of the whole fleet: the
// load's failures and full handshakes then are counted apart.
func (r *faultRun) restartWindow(from, to time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.windows = append(r.windows, [2]time.Time{from, to})
}

func (r *faultRun) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
	GinkgoWriter.Printf(format+"\n", args...)
}

// ring returns the ring now.
func (r *faultRun) ring(ctx context.Context) *v1alpha1.TicketKeyRing {
	var ring *v1alpha1.TicketKeyRing
	Eventually(func() error {
		var err error
		ring, err = cl.GetRing(ctx, faultsNS, ringName)
		return err
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	return ring
}

// nextDue waits until the ring's next rotation is at least lead away, and
// returns it.
func (r *faultRun) nextDue(ctx context.Context, lead time.Duration) time.Time {
	for {
		ring := r.ring(ctx)
		if ring.Status.NextRotation != nil && fleet.Ready(ring) {
			if due := ring.Status.NextRotation.Time; time.Until(due) >= lead {
				return due
			}
		}
		sleepCtx(ctx, time.Second)
	}
}

// sleepUntil sleeps until t (or ctx ends).
func sleepUntil(ctx context.Context, t time.Time) { sleepCtx(ctx, time.Until(t)) }

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// waitEpochAfter waits until the projection holds an epoch above e, and
// returns it and when it was first seen.
func (r *faultRun) waitEpochAfter(ctx context.Context, e int64, timeout time.Duration) (int64, time.Time) {
	var got int64
	var at time.Time
	Eventually(func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for ep, t := range r.epochAt {
			if ep > e && (got == 0 || ep < got) {
				got, at = ep, t
			}
		}
		return got > 0
	}).WithContext(ctx).WithTimeout(timeout).WithPolling(50*time.Millisecond).Should(BeTrue(), "no epoch after %d published", e)
	return got, at
}

// latestEpoch is the newest projection epoch seen.
func (r *faultRun) latestEpoch() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var m int64
	for e := range r.epochAt {
		m = max(m, e)
	}
	return m
}

// settle waits, after a fault, for rotations more rotations: each a
// new key active at every pod, served by every pod.
func (r *faultRun) settle(ctx context.Context, rotations int) {
	for range rotations {
		// A ring whose key source was away has no staged key until it is
		// back: wait for one.
		var from *v1alpha1.TicketKeyRing
		Eventually(func(g Gomega) {
			from = r.ring(ctx)
			g.Expect(from.Status.NextRotation).NotTo(BeNil(), "the ring's next rotation")
			g.Expect(fleet.Ready(from)).To(BeTrue(), "the ring Ready")
		}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
		due := from.Status.NextRotation
		Eventually(func(g Gomega) {
			ring, err := cl.GetRing(ctx, faultsNS, ringName)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(fleet.ActiveKey(ring)).NotTo(Equal(fleet.ActiveKey(from)))
			g.Expect(fleet.Ready(ring)).To(BeTrue())
			g.Expect(ring.Status.NextRotation).NotTo(BeNil())
		}).WithContext(ctx).WithTimeout(time.Until(due.Time) + 2*time.Minute).WithPolling(time.Second).Should(Succeed())
	}
	ring := r.ring(ctx)
	Eventually(func(g Gomega) {
		for _, a := range fleetAddrs(ctx) {
			st, err := fleet.ReadHealth(ctx, r.f.health, statusAddr(a))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(st.Epoch).To(BeNumerically(">=", ring.Status.Epoch), "pod %s", a)
		}
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
	sleepCtx(ctx, 3*time.Second)
}

// stop ends the run: the load, the watches; feeds the load's connections
// to the checker.
func (r *faultRun) stop() {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	r.stopped = true
	r.mu.Unlock()
	r.result = r.load.Stop()
	r.cancel()
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.result.Samples {
		inWindow := slices.ContainsFunc(r.windows, func(w [2]time.Time) bool {
			return !s.Start.Before(w[0]) && !s.Start.After(w[1])
		})
		host, _, _ := net.SplitHostPort(s.Backend)
		pod := r.podOf[host]
		if pod == "" {
			pod = s.Backend
		}
		switch {
		case s.Err != "":
			r.checker.ObserveConn(pod, false, errors.New(s.Err), inWindow)
		case s.Seq > 0:
			r.checker.ObserveConn(pod, s.Resumed, nil, inWindow)
		}
	}
}

// finish stops the run, prints the fault's figures and the table so far,
// and checks the invariants.
func (r *faultRun) finish(fault string, minRotations int) {
	r.stop()
	rep := r.checker.Report()
	sum := r.result.Summary()
	row := faultRow{fault: fault, report: rep, note: strings.Join(r.notes, "; ")}
	faultRows = append(faultRows, row)
	GinkgoWriter.Printf("Fault %q: %s; load %d connections, %d reconnects (%d moved), p50 %s, p99 %s\n",
		fault, rep, sum.Conns, sum.Reconnects, sum.Moved, sum.P50.Round(time.Millisecond), sum.P99.Round(time.Millisecond))
	printFaultTable()
	Expect(r.checker.Violations()).To(BeEmpty(), "invariants broken under %q", fault)
	Expect(rep.Rotations).To(BeNumerically(">=", minRotations), "rotations seen under %q", fault)
	Expect(rep.Reconnects).To(BeNumerically(">=", 100), "the load ran under %q", fault)
}

func printFaultTable() {
	var b strings.Builder
	fmt.Fprintf(&b, "%-58s %9s %10s %8s %6s %9s %8s  %s\n", "fault", "rotations", "reconnects", "resumed", "full", "restarts", "failures", "notes")
	for _, row := range faultRows {
		r := row.report
		fmt.Fprintf(&b, "%-58s %9d %10d %7.2f%% %6s %9d %8s  %s\n", row.fault, r.Rotations, r.Reconnects, 100*r.ResumptionRate(),
			fmt.Sprintf("%d+%d", r.Full, r.RestartFull), r.Restarts, fmt.Sprintf("%d+%d", r.Failures, r.RestartFailures), row.note)
	}
	GinkgoWriter.Printf("Faults during rotation (full and failures: none a restart explains + those it does):\n%s", b.String())
}

// component stops, starts or restarts one process of the cluster
// (hack/cluster/component.sh).
func component(ctx context.Context, action, name string) {
	_, err := run(ctx, filepath.Join(root, "hack/cluster/component.sh"), action, name)
	Expect(err).NotTo(HaveOccurred())
}

// waitAPI waits until kube-apiserver answers again.
func waitAPI(ctx context.Context) {
	Eventually(func() error {
		_, err := cl.Clientset.Discovery().ServerVersion()
		return err
	}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
}

// podProcesses returns the host pids of a pod's processes other than its
// sandbox's pause: those in the pod's cgroup.
func podProcesses(ctx context.Context, ns, name string) []int {
	p := &corev1.Pod{}
	Expect(cl.Client.Get(ctx, key(ns, name), p)).To(Succeed())
	mark := "pod" + string(p.UID)
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cg, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil || !strings.Contains(string(cg), mark) {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.HasPrefix(string(cmd), "/pause") {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// sigkillPod kills every process of a pod but its sandbox with SIGKILL, as
// the kernel's OOM killer or a crash would: the kubelet restarts the
// container. It returns how many it killed.
func sigkillPod(ctx context.Context, ns, name string) int {
	pids := podProcesses(ctx, ns, name)
	Expect(pids).NotTo(BeEmpty(), "no process of pod %s/%s found", ns, name)
	for _, pid := range pids {
		Expect(sigkill(pid)).To(Succeed())
	}
	return len(pids)
}

func sigkill(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

// ctr runs the cluster's containerd client in namespace k8s.io.
func ctr(ctx context.Context, args ...string) string {
	out, err := run(ctx, filepath.Join(root, "bin/cluster-bin/ctr"), append([]string{"--address", "/run/" + clusterName + "/containerd.sock", "-n", "k8s.io"}, args...)...)
	Expect(err).NotTo(HaveOccurred())
	return out
}
