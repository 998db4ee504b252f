//go:build cluster

package cluster_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/fleet"
)

// The measurements (label measure) are not in make test: they take half an
// hour with the kubelet's default syncFrequency. make measure-cluster runs
// them, once with the suite's kubelet (SYNC_FREQUENCY 10s: label revoke
// only) and once with the default (1m), and they print their figures. They
// run alone (make measure-cluster filters on the label): they install the
// chart and use the shop namespace, as the install specs do.
const (
	// measureServers is the fleet: examples/server pods behind a Service.
	measureServers = 6
	// measureRotations are paced by rotate-now requests: each takes the
	// API's default activationDelay (3m) from the staged key's publication.
	measureRotations = 3
	// revokes are emergency revokes, one after the other.
	revokes = 10
)

var _ = Describe("measurements with the kubelet's syncFrequency", Label("measure"), Ordered, func() {
	var (
		pki      *fleet.PKI
		addrs    []string
		lb       string
		health   *http.Client
		syncFreq = os.Getenv("SYNC_FREQUENCY")
	)
	if syncFreq == "" {
		syncFreq = "10s"
	}

	BeforeAll(func(ctx SpecContext) {
		DeferCleanup(func(ctx SpecContext) {
			if CurrentSpecReport().Failed() {
				dumpCluster(ctx)
			}
		})
		installFromRegistry(ctx)
		waitLeader(ctx, "")

		var err error
		pki, err = fleet.NewPKI(fleet.ECDSAP256)
		Expect(err).NotTo(HaveOccurred())
		Expect(cl.CreateNamespace(ctx, shopNS)).To(Succeed())
		Expect(cl.Client.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: shopNS, Name: tlsSecret},
			Type:       corev1.SecretTypeTLS,
			Data:       map[string][]byte{"tls.crt": pki.CertPEM, "tls.key": pki.KeyPEM},
		})).To(Succeed())
		// The API's defaults: the ring as a user writes it, without
		// rotationInterval, retainedKeys or activationDelay (the Go type
		// would send zeros).
		Expect(cl.Client.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": v1alpha1.GroupVersion.String(), "kind": "TicketKeyRing",
			"metadata": map[string]any{"namespace": shopNS, "name": ringName},
			"spec":     map[string]any{"distribution": map[string]any{"secretName": keysSecret}},
		}})).To(Succeed())
		ring, err := cl.WaitRing(ctx, shopNS, ringName, "Ready", fleet.Ready)
		Expect(err).NotTo(HaveOccurred())
		Expect(ring.Spec.ActivationDelay.Duration).To(Equal(3*time.Minute), "the API's default activationDelay")
		Expect(ring.Spec.RotationInterval.Duration).To(Equal(time.Hour), "the API's default rotationInterval")
		Expect(ring.Spec.Distribution.Formats).To(Equal([]v1alpha1.KeyFormat{"go"}))

		d := serverDeployment()
		d.Spec.Replicas = ptr.To(int32(measureServers))
		Expect(cl.Client.Create(ctx, d)).To(Succeed())
		Expect(cl.Client.Create(ctx, serverService())).To(Succeed())
		addrs = waitFleet(ctx, measureServers)
		svc := &corev1.Service{}
		Expect(cl.Client.Get(ctx, key(shopNS, "server"), svc)).To(Succeed())
		lb = net.JoinHostPort(svc.Spec.ClusterIP, "443")
		health = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			DialContext:       dialer.DialContext,
			TLSClientConfig:   &tls.Config{RootCAs: pki.Roots, ServerName: fleet.ServerName},
			DisableKeepAlives: true,
		}}
		waitService(ctx, lb, pki, addrs)
	}, NodeTimeout(8*time.Minute))

	It("delivers rotations under the API's default activationDelay: the refresh lag of each pod, and resumption through the Service", Label("lag"), func(ctx SpecContext) {
		rec := startRecorder(ctx)
		defer rec.stop()
		watcher := startHealthWatch(ctx, health, addrs)
		defer watcher.stop()
		ring, err := cl.GetRing(ctx, shopNS, ringName)
		Expect(err).NotTo(HaveOccurred())
		waitServingWithin(ctx, watcher, addrs, fleet.ActiveKey(ring), ring.Status.Epoch, 3*time.Minute)

		load := startMeasureLoad(ctx, lb, pki)
		defer load.Stop()
		keys := []string{fleet.ActiveKey(ring)}
		for i := range measureRotations {
			start := time.Now()
			rot, err := cl.Rotate(ctx, shopNS, ringName)
			Expect(err).NotTo(HaveOccurred())
			GinkgoWriter.Printf("Rotation %d: %s -> %s (epoch %d) in %s, %s staged\n", i+1, rot.From, rot.To, rot.Epoch, time.Since(start).Round(time.Second), rot.Staged)
			keys = append(keys, rot.To)
			waitServingWithin(ctx, watcher, addrs, rot.To, rot.Epoch, 3*time.Minute)
		}
		time.Sleep(5 * time.Second)
		res := load.Stop()
		sum := res.Summary()

		lags := watcher.lags(rec.published())
		over := 0
		for _, l := range lags {
			if l > time.Minute {
				over++
			}
		}
		GinkgoWriter.Printf("MEASURE lag: kubelet syncFrequency %s, %d pods, %d rotations, activationDelay 3m: projection written -> pod's agent serving it, %d deliveries: %s; %d over 60 s\n",
			syncFreq, measureServers, measureRotations, len(lags), quantiles(lags), over)
		GinkgoWriter.Printf("MEASURE resumption: %d connections through Service %s, %d reconnects (%d to another pod), %d resumed (%.2f%%), %d full, %d failed\n",
			sum.Conns, lb, sum.Reconnects, sum.Moved, sum.Resumed, 100*sum.ResumptionRate(), sum.Full, sum.Failures)
		Expect(rec.twice()).To(BeEmpty())
		Expect(len(lags)).To(BeNumerically(">=", measureRotations*measureServers))
		Expect(res.ActiveKeys()).To(ContainElements(keys), "the load ran under every key")
		Expect(sum.Failures).To(BeZero(), "failed connections: %v", res.Errors())
		Expect(sum.Full).To(BeZero(), "%d of %d reconnects paid a full handshake under the defaults", sum.Full, sum.Reconnects)
	}, NodeTimeout(25*time.Minute))

	It("revokes: how long after the request each pod still accepts a ticket issued before it, and what resumption does meanwhile", Label("revoke"), func(ctx SpecContext) {
		watcher := startHealthWatch(ctx, health, addrs)
		defer watcher.stop()
		load := startMeasureLoad(ctx, lb, pki)
		defer load.Stop()

		var windows, firsts []time.Duration
		var spans [][2]time.Time
		for i := range revokes {
			ring, err := cl.WaitRing(ctx, shopNS, ringName, "Ready", fleet.Ready)
			Expect(err).NotTo(HaveOccurred())
			waitServingWithin(ctx, watcher, addrs, fleet.ActiveKey(ring), ring.Status.Epoch, 3*time.Minute)
			tickets := make(map[string]*fleet.FirstTicket, len(addrs))
			for _, a := range addrs {
				tickets[a] = ticketFrom(ctx, a, pki)
			}

			requested := time.Now()
			value := requested.UTC().Format(time.RFC3339Nano)
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.RevokeRequestedAtAnnotation, value)
			Expect(cl.Client.Patch(ctx, &v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: shopNS, Name: ringName}},
				client.RawPatch(types.MergePatchType, []byte(patch)))).To(Succeed())

			refused := map[string]time.Duration{}
			var handled time.Duration
			deadline := time.Now().Add(4 * time.Minute)
			for (len(refused) < len(addrs) || handled == 0) && time.Now().Before(deadline) {
				if handled == 0 {
					if r, err := cl.GetRing(ctx, shopNS, ringName); err == nil && r.Status.LastRevokeRequestedAt == value {
						handled = time.Since(requested)
					}
				}
				for _, a := range addrs {
					if _, ok := refused[a]; ok {
						continue
					}
					if s := probeTicket(ctx, a, pki, tickets[a]); s.Err == "" && !s.Resumed {
						refused[a] = time.Since(requested)
					}
				}
				time.Sleep(250 * time.Millisecond)
			}
			Expect(handled).NotTo(BeZero(), "revoke %d never carried out", i+1)
			Expect(refused).To(HaveLen(len(addrs)), "revoke %d: pods still accepting a ticket issued before it after 4 minutes", i+1)
			var per []time.Duration
			for _, d := range refused {
				per = append(per, d)
			}
			slices.Sort(per)
			windows = append(windows, per[len(per)-1])
			firsts = append(firsts, per[0])
			spans = append(spans, [2]time.Time{requested, requested.Add(per[len(per)-1])})
			GinkgoWriter.Printf("Revoke %d: carried out in %s; pods refused the old ticket after %s (first) to %s (last)\n",
				i+1, handled.Round(100*time.Millisecond), per[0].Round(100*time.Millisecond), per[len(per)-1].Round(100*time.Millisecond))
		}
		res := load.Stop()
		var during fleet.Result
		for _, x := range res.Samples {
			if slices.ContainsFunc(spans, func(s [2]time.Time) bool { return !x.Start.Before(s[0]) && x.Start.Before(s[1]) }) {
				during.Samples = append(during.Samples, x)
			}
		}
		all, in := res.Summary(), during.Summary()
		slices.Sort(windows)
		slices.Sort(firsts)
		GinkgoWriter.Printf("MEASURE revoke: kubelet syncFrequency %s, %d pods, %d revokes: request -> no pod accepts a ticket issued before it: p50 %s, max %s (min %s); first pod to refuse: p50 %s\n",
			syncFreq, measureServers, revokes, windows[len(windows)/2].Round(100*time.Millisecond), windows[len(windows)-1].Round(100*time.Millisecond),
			windows[0].Round(100*time.Millisecond), firsts[len(firsts)/2].Round(100*time.Millisecond))
		GinkgoWriter.Printf("MEASURE revoke resumption: within the windows %d reconnects, %d resumed (%.2f%%), %d full, %d failed; whole run %d reconnects, %.2f%% resumed, %d failed\n",
			in.Reconnects, in.Resumed, 100*in.ResumptionRate(), in.Full, in.Failures, all.Reconnects, 100*all.ResumptionRate(), all.Failures)
		Expect(all.Failures).To(BeZero(), "failed connections: %v", res.Errors())
	}, NodeTimeout(50*time.Minute))
})

// startMeasureLoad starts the suite's load through the Service at lb.
func startMeasureLoad(ctx context.Context, lb string, pki *fleet.PKI) *fleet.Load {
	return fleet.StartLoad(ctx, fleet.LoadConfig{
		Addr: lb, Roots: pki.Roots, Version: tls.VersionTLS13, Dial: dialer.DialContext,
		Clients: clients, ConnsPerClient: connsPerClient, Interval: interval,
	})
}

// waitFleet waits until n server pods are Ready and returns their
// addresses, pod IP:8443.
func waitFleet(ctx context.Context, n int) []string {
	var addrs []string
	Eventually(func(g Gomega) {
		pods := &corev1.PodList{}
		g.Expect(cl.Client.List(ctx, pods, inNamespace(shopNS), matchingLabels(map[string]string{"app": "server"}))).To(Succeed())
		g.Expect(pods.Items).To(HaveLen(n))
		addrs = nil
		for _, p := range pods.Items {
			g.Expect(podReady(p)).To(BeTrue(), "pod %s", p.Name)
			addrs = append(addrs, net.JoinHostPort(p.Status.PodIP, "8443"))
		}
	}).WithContext(ctx).WithTimeout(4 * time.Minute).WithPolling(time.Second).Should(Succeed())
	slices.Sort(addrs)
	return addrs
}

// waitServingWithin is waitServing with a longer bound, for a kubelet
// that refreshes volumes up to 90 s after a change.
func waitServingWithin(ctx context.Context, w *healthWatch, addrs []string, id string, epoch int64, bound time.Duration) {
	Eventually(func(g Gomega) {
		for _, a := range addrs {
			st := w.last(a)
			g.Expect(st.ActiveKeyID).To(Equal(id), "pod %s", a)
			g.Expect(st.Epoch).To(BeNumerically(">=", epoch), "pod %s", a)
		}
	}).WithContext(ctx).WithTimeout(bound).WithPolling(200 * time.Millisecond).Should(Succeed())
}

// ticketFrom connects to the pod at addr and returns a session cache that
// holds the ticket it issued, once a second connection resumed with it.
func ticketFrom(ctx context.Context, addr string, pki *fleet.PKI) *fleet.FirstTicket {
	var t *fleet.FirstTicket
	Eventually(func(g Gomega) {
		t = &fleet.FirstTicket{}
		s := probeTicket(ctx, addr, pki, t)
		g.Expect(s.Err).To(BeEmpty())
		g.Expect(t.Held()).To(BeTrue(), "pod %s issued no ticket", addr)
		s = probeTicket(ctx, addr, pki, t)
		g.Expect(s.Err).To(BeEmpty())
		g.Expect(s.Resumed).To(BeTrue(), "pod %s does not resume its own ticket", addr)
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
	return t
}

// probeTicket connects to the pod at addr directly, from inside the
// cluster's network, presenting the ticket t holds (if any).
func probeTicket(ctx context.Context, addr string, pki *fleet.PKI, t *fleet.FirstTicket) fleet.Sample {
	tc := &tls.Config{RootCAs: pki.Roots, ServerName: fleet.ServerName, MinVersion: tls.VersionTLS13, ClientSessionCache: t}
	return fleet.ConnectVia(ctx, dialer.DialContext, addr, tc, 5*time.Second)
}

// quantiles describes a sorted distribution: min, median, p99, max.
func quantiles(l []time.Duration) string {
	if len(l) == 0 {
		return "none"
	}
	at := func(q float64) time.Duration {
		return l[min(len(l)-1, int(math.Ceil(q*float64(len(l))))-1)].Round(100 * time.Millisecond)
	}
	return strings.Join([]string{
		"min " + l[0].Round(100*time.Millisecond).String(),
		"median " + l[len(l)/2].Round(100*time.Millisecond).String(),
		"p99 " + at(0.99).String(),
		"max " + l[len(l)-1].Round(100*time.Millisecond).String(),
	}, ", ")
}
