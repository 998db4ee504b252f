//go:build e2e

package e2e_test

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/fleet"
	"github.com/ringmaster-io/ringmaster/internal/operator"
)

// What the operator holds grows with the number of objects it serves, not
// with their size (issue 33). Before, the prober listed a probing ring's
// pods whole, through the API, every round: 80 Pending pods of 1 MiB took
// the operator's resident set from 60 MB to 525 MB. Now pods come from a
// cache that keeps only what voting needs of each. The bound is generous
// (a whole list of the pods is 80 MiB, twice that decoded from JSON); what
// is measured is the most the operator's heap and resident set have ever
// been (heap_sys, which the Go runtime never shrinks, and VmHWM), so no
// timing decides the outcome. make bench-attack reports the figures.
var _ = Describe("The operator's memory under a tenant's large pods", func() {
	const (
		ns    = "memory"
		pods  = 80
		size  = 1 << 20
		bound = 64 << 20
		// chartLimit is the chart's resources.limits.memory, which the
		// chart passes to the operator as $RINGMASTER_MEMORY_LIMIT.
		chartLimit = 256 << 20
	)

	It("grows by less than 64 MiB while a ring probes 80 Pending pods of 1 MiB every round", func(ctx SpecContext) {
		c := env.Cluster.Client
		Expect(env.Cluster.CreateNamespace(ctx, ns)).To(Succeed())

		By("a ring under confirmation, and a voter that accepts every connection and closes it at once")
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(ln.Close)
		var asked atomic.Int64
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				asked.Add(1)
				_ = conn.Close()
			}
		}()
		_, p, _ := net.SplitHostPort(ln.Addr().String())
		port, _ := strconv.Atoi(p)
		ring := fleet.ProbedRing(ns, "probed")
		Expect(c.Create(ctx, ring)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			Expect(c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(0))).To(Succeed())
			Expect(c.DeleteAllOf(ctx, &v1alpha1.TicketKeyRing{}, client.InNamespace(ns))).To(Succeed())
		})
		secret := ring.ProjectionSecretName()
		voter := fleet.LargePod(ns, "voter", 2<<10, secret, int32(port))
		Expect(c.Create(ctx, voter)).To(Succeed())
		Expect(fleet.MarkReady(ctx, c, voter, "127.0.0.1")).To(Succeed())
		Eventually(func() int64 {
			Expect(c.Get(ctx, client.ObjectKeyFromObject(ring), ring)).To(Succeed())
			return ring.Status.Epoch
		}, time.Minute, 200*time.Millisecond).Should(BeEquivalentTo(1))

		By(fmt.Sprintf("%d Pending pods of %d MiB each, labelled for the ring and mounting its projection", pods, size>>20))
		for i := range pods {
			Expect(c.Create(ctx, fleet.LargePod(ns, fmt.Sprintf("pending-%02d", i), size, secret, int32(port)))).To(Succeed())
		}

		By("the operator again, a fresh process serving its metrics, told the chart's memory limit as the chart tells it; what it holds before the ring probes")
		metricsAddr := freeAddr()
		args, environ := env.Cluster.OperatorArgs, env.Cluster.OperatorEnv
		env.Cluster.OperatorArgs = append(args, "--metrics-bind-address", metricsAddr, "--metrics-insecure")
		env.Cluster.OperatorEnv = append(slices.Clone(environ), fmt.Sprintf("%s=%d", operator.MemoryLimitEnv, chartLimit))
		Expect(env.RestartOperator(ctx)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			env.Cluster.OperatorArgs, env.Cluster.OperatorEnv = args, environ
			Expect(env.RestartOperator(ctx)).To(Succeed())
		})
		url := "http://" + metricsAddr + "/metrics"
		heapSys := func() float64 {
			expo, err := fleet.Scrape(ctx, http.DefaultClient, url)
			if err != nil {
				return 0
			}
			v, _ := fleet.SumMetric(expo, "go_memstats_heap_sys_bytes")
			return v
		}
		Eventually(heapSys, time.Minute, 200*time.Millisecond).Should(BeNumerically(">", 0), "the operator serves its metrics")
		// It has read what it watches: the ring is ready again.
		Eventually(func() bool {
			Expect(c.Get(ctx, client.ObjectKeyFromObject(ring), ring)).To(Succeed())
			return fleet.Ready(ring)
		}, time.Minute, 200*time.Millisecond).Should(BeTrue())
		expo, err := fleet.Scrape(ctx, http.DefaultClient, url)
		Expect(err).NotTo(HaveOccurred())
		Expect(fleet.SumMetric(expo, "go_gc_gomemlimit_bytes")).To(BeEquivalentTo(chartLimit*3/4),
			"the Go soft limit is --memory-limit-ratio (0.75) of the container's limit")
		Expect(fleet.SumMetric(expo, "go_gc_gogc_percent")).To(BeEquivalentTo(operator.DefaultGCPercent),
			"the garbage collector's target is --gc-percent's default")
		heapBefore := heapSys()
		rssBefore, err := fleet.ProcPeakRSS(env.Operator.PID)
		Expect(err).NotTo(HaveOccurred())

		By("rotate now: the staged key falls due and waits for the voter, which the prober asks round after round")
		Expect(fleet.RequestRotation(ctx, c, ring)).To(Succeed())
		Eventually(asked.Load, time.Minute, 100*time.Millisecond).Should(BeNumerically(">=", 3), "three rounds asked the voter")
		Eventually(func() *v1alpha1.ConfirmationStatus {
			Expect(c.Get(ctx, client.ObjectKeyFromObject(ring), ring)).To(Succeed())
			return ring.Status.Confirmation
		}, time.Minute, 200*time.Millisecond).Should(And(Not(BeNil()), HaveField("Pods", BeEquivalentTo(1)), HaveField("Holding", BeZero())),
			"the staged key waits for its one voter")

		heapAfter := heapSys()
		rssAfter, err := fleet.ProcPeakRSS(env.Operator.PID)
		Expect(err).NotTo(HaveOccurred())
		Expect(env.OperatorAlive()).To(Succeed())
		report := fmt.Sprintf("heap_sys %.1f -> %.1f MiB, peak RSS %.1f -> %.1f MiB over %d rounds",
			heapBefore/(1<<20), heapAfter/(1<<20), float64(rssBefore)/(1<<20), float64(rssAfter)/(1<<20), asked.Load())
		AddReportEntry("operator memory under 80 pods of 1 MiB", report)
		GinkgoWriter.Println(report)
		Expect(heapAfter-heapBefore).To(BeNumerically("<", bound), "the heap's growth: "+report)
		Expect(rssAfter-rssBefore).To(BeNumerically("<", int64(bound)), "the resident set's growth: "+report)
	})
})
