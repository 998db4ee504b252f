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
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
)

// The measurements (label measure) are not in make test: they take most of
// an hour with the kubelet's default syncFrequency. make measure-cluster
// runs them, once with the suite's kubelet (SYNC_FREQUENCY 10s: label revoke
// only) and once with the default (1m), and they print their figures. Each
// measurement runs twice in one run, side by side: with the chart's
// defaults (nudge.enabled: the operator patches each pod's annotation after
// every new epoch, so that its kubelet re-mounts the Secret at once), then
// after helm upgrade --set nudge.enabled=false (pods take each epoch on
// their kubelet's own sync). They run alone (make measure-cluster filters on
// the label): they install the chart and use the shop namespace, as the
// install specs do.
const (
	// measureServers is the fleet: examples/server pods behind a Service.
	measureServers = 6
	// measureRotations are paced by rotate-now requests: each takes the
	// API's default activationDelay (3m) from the staged key's publication.
	measureRotations = 3
	// revokes are emergency revokes, one after the other.
	revokes = 10
	// confirmRotations are rotations under spec.confirmation, each waiting
	// for every pod to hold its staged key.
	confirmRotations = 3
	// confirmActivationDelay is the ring's activationDelay under
	// spec.confirmation: shorter than the prober's lead (30 s), so that the
	// pods are asked from the staged key's publication on and the figure
	// is the fleet's, not the prober's schedule.
	confirmActivationDelay = 10 * time.Second
)

// nudgeModes are the two sides of each measurement, in the order they run.
var nudgeModes = []string{"on", "off"}

// measured are one mode's figures, printed side by side at the end.
type measured struct {
	lags                      []time.Duration
	lagLoad                   fleet.Summary
	windows, firsts           []time.Duration
	revokeLoad, revokeRunLoad fleet.Summary
	confirms                  []time.Duration
}

// ContinueOnFailure: a measurement that fails leaves the others to run
// and print their figures.
var _ = Describe("measurements with the kubelet's syncFrequency", Label("measure"), Ordered, ContinueOnFailure, func() {
	var (
		pki      *fleet.PKI
		addrs    []string
		lb       string
		health   *http.Client
		syncFreq = os.Getenv("SYNC_FREQUENCY")
		figures  = map[string]*measured{}
	)
	if syncFreq == "" {
		syncFreq = "10s"
	}
	for _, m := range nudgeModes {
		figures[m] = &measured{}
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

	AfterAll(func() {
		on, off := figures["on"], figures["off"]
		row := func(what, a, b string) { GinkgoWriter.Printf("MEASURE summary | %-72s | %-44s | %s\n", what, a, b) }
		GinkgoWriter.Printf("MEASURE summary: kubelet syncFrequency %s, %d pods, side by side in one run\n", syncFreq, measureServers)
		row("", "nudging on", "nudging off")
		if len(on.lags)+len(off.lags) > 0 {
			row(fmt.Sprintf("delivery lag, projection written -> pod's agent serving it (%d, %d)", len(on.lags), len(off.lags)), quantiles(on.lags), quantiles(off.lags))
			row("resumption through the Service across the rotations", resumption(on.lagLoad), resumption(off.lagLoad))
		}
		if len(on.windows)+len(off.windows) > 0 {
			row(fmt.Sprintf("revoke, request -> no pod accepts an older ticket (%d, %d revokes)", len(on.windows), len(off.windows)), percentiles(on.windows), percentiles(off.windows))
			row("revoke, request -> first pod refusing an older ticket", percentiles(on.firsts), percentiles(off.firsts))
			row("resumption through the Service within the revoke windows", resumption(on.revokeLoad), resumption(off.revokeLoad))
		}
		if len(on.confirms)+len(off.confirms) > 0 {
			row(fmt.Sprintf("confirmation, staged key published -> every voter holds it (%d, %d)", len(on.confirms), len(off.confirms)), quantiles(on.confirms), quantiles(off.confirms))
		}
	})

	for _, mode := range nudgeModes {
		if mode == "off" {
			It("turns nudging off: helm upgrade --set nudge.enabled=false, after which the chart grants the operator no pod write and installs no pods' guard",
				Label("lag", "revoke", "confirm"), func(ctx SpecContext) { nudgeOff(ctx) }, NodeTimeout(6*time.Minute))
		}

		It("delivers rotations under the API's default activationDelay: the refresh lag of each pod, and resumption through the Service; nudging "+mode, Label("lag"), func(ctx SpecContext) {
			rec := startRecorder(ctx)
			defer rec.stop()
			watcher := startHealthWatch(ctx, health, addrs)
			defer watcher.stop()
			ring, err := cl.GetRing(ctx, shopNS, ringName)
			Expect(err).NotTo(HaveOccurred())
			waitServingWithin(ctx, watcher, addrs, fleet.ActiveKey(ring), ring.Status.Epoch, 3*time.Minute)
			annotations := podAnnotations(ctx)

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
			f := figures[mode]
			f.lags, f.lagLoad = lags, sum
			GinkgoWriter.Printf("MEASURE lag: kubelet syncFrequency %s, nudging %s, %d pods, %d rotations, activationDelay 3m: projection written -> pod's agent serving it, %d deliveries: %s; %d over 60 s\n",
				syncFreq, mode, measureServers, measureRotations, len(lags), quantiles(lags), over)
			GinkgoWriter.Printf("MEASURE resumption: nudging %s, %d connections through Service %s, %d reconnects (%d to another pod), %d resumed (%.2f%%), %d full, %d failed\n",
				mode, sum.Conns, lb, sum.Reconnects, sum.Moved, sum.Resumed, 100*sum.ResumptionRate(), sum.Full, sum.Failures)
			Expect(rec.twice()).To(BeEmpty())
			Expect(len(lags)).To(BeNumerically(">=", measureRotations*measureServers))
			Expect(res.ActiveKeys()).To(ContainElements(keys), "the load ran under every key")
			Expect(sum.Failures).To(BeZero(), "failed connections: %v", res.Errors())
			Expect(sum.Full).To(BeZero(), "%d of %d reconnects paid a full handshake under the defaults", sum.Full, sum.Reconnects)
			checkNudged(ctx, mode, annotations)
		}, NodeTimeout(25*time.Minute))

		It("revokes: how long after the request each pod still accepts a ticket issued before it, and what resumption does meanwhile; nudging "+mode, Label("revoke"), func(ctx SpecContext) {
			watcher := startHealthWatch(ctx, health, addrs)
			defer watcher.stop()
			annotations := podAnnotations(ctx)
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
					time.Sleep(100 * time.Millisecond)
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
			f := figures[mode]
			f.windows, f.firsts, f.revokeLoad, f.revokeRunLoad = windows, firsts, in, all
			GinkgoWriter.Printf("MEASURE revoke: kubelet syncFrequency %s, nudging %s, %d pods, %d revokes: request -> no pod accepts a ticket issued before it: %s (min %s); first pod to refuse: %s\n",
				syncFreq, mode, measureServers, revokes, percentiles(windows), windows[0].Round(100*time.Millisecond), percentiles(firsts))
			GinkgoWriter.Printf("MEASURE revoke resumption: nudging %s, within the windows %d reconnects, %d resumed (%.2f%%), %d full, %d failed; whole run %d reconnects, %.2f%% resumed, %d failed\n",
				mode, in.Reconnects, in.Resumed, 100*in.ResumptionRate(), in.Full, in.Failures, all.Reconnects, 100*all.ResumptionRate(), all.Failures)
			Expect(all.Failures).To(BeZero(), "failed connections: %v", res.Errors())
			checkNudged(ctx, mode, annotations)
		}, NodeTimeout(50*time.Minute))

		It("confirms under spec.confirmation: how long after a staged key's publication every voter holds it; nudging "+mode, Label("confirm"), func(ctx SpecContext) {
			rec := startRecorder(ctx)
			defer rec.stop()
			confirming(ctx)
			// A staged key is asked of the voters only once it falls due
			// (from 30 s before): a rotate-now makes the key staged by the
			// previous one due activationDelay after its publication, so each
			// round rotates twice, and times the second's key.
			rot, err := cl.Rotate(ctx, shopNS, ringName)
			Expect(err).NotTo(HaveOccurred())
			var took []time.Duration
			for i := range confirmRotations {
				staged, epoch := rot.Staged, rot.Epoch
				start := time.Now()
				requested, err := cl.RequestRotation(ctx, shopNS, ringName)
				Expect(err).NotTo(HaveOccurred())
				var confirmed time.Time
				Eventually(func(g Gomega) {
					r, err := cl.GetRing(ctx, shopNS, ringName)
					g.Expect(err).NotTo(HaveOccurred())
					c := r.Status.Confirmation
					held := c != nil && c.StagedKey == staged && c.Pods == measureServers && c.Holding == c.Pods
					// Promoted: every voter held it, perhaps between two polls.
					promoted := r.Status.LastRotateRequestedAt == requested && fleet.ActiveKey(r) == staged
					g.Expect(held || promoted).To(BeTrue(), "staged key %s confirmed: %+v", staged, c)
					confirmed = time.Now()
				}).WithContext(ctx).WithTimeout(4 * time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
				after, err := cl.WaitRing(ctx, shopNS, ringName, "rotated to "+staged, func(r *v1alpha1.TicketKeyRing) bool {
					return r.Status.LastRotateRequestedAt == requested && fleet.ActiveKey(r) == staged &&
						fleet.StagedKey(r) != "" && fleet.StagedKey(r) != staged && fleet.Ready(r)
				})
				Expect(err).NotTo(HaveOccurred())
				published, ok := rec.published()[epoch]
				Expect(ok).To(BeTrue(), "the projection of epoch %d was seen", epoch)
				took = append(took, confirmed.Sub(published))
				GinkgoWriter.Printf("Confirmed rotation %d: %s -> %s in %s (the promotion waited for every pod); staged %s (epoch %d) held by every voter %s after its publication\n",
					i+1, rot.To, staged, time.Since(start).Round(100*time.Millisecond), staged, epoch, took[i].Round(100*time.Millisecond))
				rot = fleet.Rotation{Requested: requested, From: rot.To, To: staged, Staged: fleet.StagedKey(after), Epoch: after.Status.Epoch}
			}
			slices.Sort(took)
			figures[mode].confirms = took
			GinkgoWriter.Printf("MEASURE confirmation: kubelet syncFrequency %s, nudging %s, %d pods, activationDelay %s: staged key published -> every voter holds it (status.confirmation), %d rotations: %s\n",
				syncFreq, mode, measureServers, confirmActivationDelay, confirmRotations, quantiles(took))
		}, NodeTimeout(15*time.Minute))
	}
})

// nudgeOff upgrades the release to nudge.enabled=false and waits until the
// new operator pods lead; it checks that the chart then grants no pod
// write, and installs no pods' admission guard.
func nudgeOff(ctx context.Context) {
	_, err := helm(ctx, "upgrade", release, chartRef, "--version", chartVersion, "--plain-http", "--namespace", releaseNS, "--reuse-values",
		"--set", "nudge.enabled=false", "--wait", "--timeout", "3m")
	Expect(err).NotTo(HaveOccurred())
	dep := &appsv1.Deployment{}
	Eventually(func(g Gomega) {
		g.Expect(cl.Client.Get(ctx, key(releaseNS, release), dep)).To(Succeed())
		g.Expect(dep.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--nudge=false"))
		g.Expect(dep.Status.UpdatedReplicas).To(Equal(int32(2)))
		g.Expect(dep.Status.ReadyReplicas).To(Equal(int32(2)))
		g.Expect(dep.Status.Replicas).To(Equal(int32(2)))
	}).WithContext(ctx).WithTimeout(3 * time.Minute).Should(Succeed())
	GinkgoWriter.Printf("Nudging off; %s leads\n", waitLeaderAmong(ctx, operatorPods(ctx)))

	sa := "system:serviceaccount:" + releaseNS + ":" + release
	for _, verb := range []string{"patch", "update", "create", "delete"} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: sa, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + releaseNS, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: shopNS, Verb: verb, Resource: "pods"},
		}}
		Expect(cl.Client.Create(ctx, sar)).To(Succeed())
		Expect(sar.Status.Allowed).To(BeFalse(), "nudging off, the chart lets the operator %s pods", verb)
	}
	err = cl.Client.Get(ctx, key("", release+"-pods"), &admissionregistrationv1.ValidatingAdmissionPolicy{})
	Expect(apierrors.IsNotFound(err)).To(BeTrue(), "nudging off, the pods' guard is not installed: %v", err)
}

// confirming puts the ring under spec.confirmation (its fleet's pods, on
// their status port) with confirmActivationDelay, until the spec ends.
func confirming(ctx context.Context) {
	ring := &v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: shopNS, Name: ringName}}
	set := fmt.Sprintf(`{"spec":{"activationDelay":%q,"confirmation":{"podSelector":{"matchLabels":{"app":"server"}},"port":"status","timeout":"5m","onTimeout":"Wait","maxDelay":"10m"}}}`,
		confirmActivationDelay.String())
	Expect(cl.Client.Patch(ctx, ring, client.RawPatch(types.MergePatchType, []byte(set)))).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		Expect(cl.Client.Patch(ctx, ring.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"activationDelay":"3m","confirmation":null}}`)))).To(Succeed())
		_, err := cl.WaitRing(ctx, shopNS, ringName, "Ready", fleet.Ready)
		Expect(err).NotTo(HaveOccurred())
	})
}

// podAnnotations are the fleet's pods' nudge annotations, by pod name.
func podAnnotations(ctx context.Context) map[string]string {
	pods := &corev1.PodList{}
	Expect(cl.Client.List(ctx, pods, inNamespace(shopNS), matchingLabels(map[string]string{"app": "server"}))).To(Succeed())
	out := map[string]string{}
	for _, p := range pods.Items {
		out[p.Name] = p.Annotations[v1alpha1.DeliveredAnnotation]
	}
	return out
}

// checkNudged checks that the mode was what it says: with nudging on,
// every pod of the fleet comes to carry the annotation of the ring's
// newest epoch; off, no pod's annotation changed.
func checkNudged(ctx context.Context, mode string, before map[string]string) {
	GinkgoHelper()
	if mode == "off" {
		Expect(podAnnotations(ctx)).To(Equal(before), "nudging off, no pod's annotation %s changed", v1alpha1.DeliveredAnnotation)
		return
	}
	Eventually(func(g Gomega) {
		r, err := cl.GetRing(ctx, shopNS, ringName)
		g.Expect(err).NotTo(HaveOccurred())
		for pod, v := range podAnnotations(ctx) {
			g.Expect(v).To(Equal(fmt.Sprintf("%s=%d", keysSecret, r.Status.Epoch)), "pod %s nudged with the newest epoch", pod)
		}
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
}

// resumption describes a load's reconnects.
func resumption(s fleet.Summary) string {
	if s.Reconnects == 0 {
		return "none"
	}
	return fmt.Sprintf("%.2f%% of %d resumed, %d failed", 100*s.ResumptionRate(), s.Reconnects, s.Failures)
}

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

// quantile is the q-quantile of a sorted distribution (nearest rank).
func quantile(l []time.Duration, q float64) time.Duration {
	return l[max(0, min(len(l)-1, int(math.Ceil(q*float64(len(l))))-1))].Round(100 * time.Millisecond)
}

// quantiles describes a sorted distribution: min, median, p99, max.
func quantiles(l []time.Duration) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join([]string{
		"min " + l[0].Round(100*time.Millisecond).String(),
		"median " + l[len(l)/2].Round(100*time.Millisecond).String(),
		"p99 " + quantile(l, 0.99).String(),
		"max " + l[len(l)-1].Round(100*time.Millisecond).String(),
	}, ", ")
}

// percentiles describes a sorted distribution: p50, p99, max.
func percentiles(l []time.Duration) string {
	if len(l) == 0 {
		return "none"
	}
	return fmt.Sprintf("p50 %s, p99 %s, max %s", quantile(l, 0.5), quantile(l, 0.99), l[len(l)-1].Round(100*time.Millisecond))
}
