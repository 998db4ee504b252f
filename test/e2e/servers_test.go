//go:build e2e

package e2e_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

// The servers' suite: real nginx and HAProxy from Debian's packages, two
// instances of each, each behind its own ringmaster-agent sidecar, fed by
// the stand-in kubelet (replica 0 at once, replica 1 maxDelay later), one
// ring for all four. Clients reconnect across the two instances of a
// server through a round-robin balancer, over TLS 1.3 and TLS 1.2 at once.
var _ = Describe("nginx and HAProxy behind ringmaster-agent", Ordered, func() {
	const ns, ringName = "servers", "web"
	const (
		// Each (server, TLS version) gets its own clients.
		serverClients = 4
		// Reconnects a load needs, at least, for its rate to mean anything.
		minReconnects = 300
	)
	kinds := []fleet.ServerKind{fleet.Nginx, fleet.HAProxy}
	versions := []uint16{tls.VersionTLS13, tls.VersionTLS12}
	fleets := map[fleet.ServerKind]*fleet.Fleet{}

	AfterEach(func(ctx SpecContext) {
		if !CurrentSpecReport().Failed() {
			return
		}
		for _, kind := range kinds {
			f := fleets[kind]
			if f == nil {
				continue
			}
			for _, r := range f.Replicas {
				if r.Sidecar != nil {
					GinkgoWriter.Printf("--- %s sidecar %d log (%s):\n%s\n", kind, r.Index, r.Sidecar.Log, r.Sidecar.LogTail(15))
				}
			}
			if sts, err := f.Health(ctx); err == nil {
				GinkgoWriter.Printf("--- %s health:\n%s", kind, fleet.DescribeHealth(sts))
			}
		}
	})

	BeforeAll(func(ctx SpecContext) {
		ring, err := env.Cluster.CreateRing(ctx, fleet.RingSpec{
			Namespace: ns, Name: ringName,
			RotationInterval: 5 * time.Minute, // only rotate-now during the suite
			ActivationDelay:  2 * maxDelay,
			RetainedKeys:     3,
			Formats:          []v1alpha1.KeyFormat{"go", "nginx", "haproxy"},
		})
		Expect(err).NotTo(HaveOccurred())

		By("the operator reporting that HAProxy keeps fewer decrypt-only keys than retained")
		limited := meta.FindStatusCondition(ring.Status.Conditions, v1alpha1.ConditionRetentionLimited)
		Expect(limited).NotTo(BeNil())
		Expect(limited.Status).To(Equal(metav1.ConditionTrue))
		Expect(limited.Message).To(ContainSubstring("haproxy keeps 1 decrypt-only key(s) of the 3 retained"))

		for _, kind := range kinds {
			f, err := env.StartFleet(ctx, fleet.Config{
				Name: "servers-" + string(kind), Delays: fleet.Spread(2, maxDelay), Server: kind,
				Namespace: ns, Secret: ring.ProjectionSecretName(), Ring: ns + "/" + ringName,
			})
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(f.Stop)
			fleets[kind] = f
			_, err = f.WaitServing(ctx, "serving the ring's first epoch", fleet.ServingKey(fleet.ActiveKey(ring), ring.Status.Epoch))
			Expect(err).NotTo(HaveOccurred())
		}
	}, NodeTimeout(2*time.Minute))

	// startLoads starts one load per server and TLS version.
	type loadKey struct {
		kind    fleet.ServerKind
		version uint16
	}
	startLoads := func(ctx context.Context) map[loadKey]*fleet.Load {
		loads := map[loadKey]*fleet.Load{}
		for _, kind := range kinds {
			for _, v := range versions {
				loads[loadKey{kind, v}] = fleet.StartLoad(ctx, fleets[kind].LoadConfig(v, serverClients, connsPerClient, interval))
			}
		}
		return loads
	}
	// finishLoads waits for a few more connections of every client, stops
	// the loads and checks each: no failure, at least 99.5% of reconnects
	// resumed, on whichever instance.
	finishLoads := func(ctx context.Context, loads map[loadKey]*fleet.Load) {
		GinkgoHelper()
		now := time.Now()
		for _, l := range loads {
			awaitMoreOf(ctx, l, serverClients, now, 5)
		}
		for _, kind := range kinds {
			for _, v := range versions {
				res := loads[loadKey{kind, v}].Stop()
				sum := res.Summary()
				f := fleets[kind]
				GinkgoWriter.Printf("%s %s: %d connections, %d reconnects (%d to the other instance), %d resumed (%.2f%%), %d full, %d failed; %s\n",
					kind, tls.VersionName(v), sum.Conns, sum.Reconnects, sum.Moved, sum.Resumed, 100*sum.ResumptionRate(), sum.Full, sum.Failures, byReplica(f, res))
				Expect(sum.Failures).To(BeZero(), "%s %s: failed connections: %v", kind, tls.VersionName(v), res.Errors())
				Expect(sum.Reconnects).To(BeNumerically(">=", minReconnects))
				Expect(sum.Moved).To(BeNumerically(">=", sum.Reconnects/4), "%s: round robin sends reconnects to the other instance", kind)
				Expect(sum.ResumptionRate()).To(BeNumerically(">=", 0.995), "%s %s: %d of %d reconnects paid a full handshake", kind, tls.VersionName(v), sum.Full, sum.Reconnects)
				Expect(float64(sum.MovedResumed)/float64(sum.Moved)).To(BeNumerically(">=", 0.995),
					"%s %s: of %d reconnects to the other instance, %d resumed", kind, tls.VersionName(v), sum.Moved, sum.MovedResumed)
				for i, r := range f.Replicas {
					Expect(res.ByBackend()[r.Addr].Resumed).To(BeNumerically(">", 0), "%s instance %d resumed nothing", kind, i)
				}
			}
		}
	}
	waitAll := func(ctx context.Context, what string, cond func(agent.Status) bool) {
		GinkgoHelper()
		for _, kind := range kinds {
			_, err := fleets[kind].WaitServing(ctx, what, cond)
			Expect(err).NotTo(HaveOccurred())
		}
	}

	// servingActive waits until every instance serves the ring's active key,
	// and returns it.
	servingActive := func(ctx context.Context) string {
		GinkgoHelper()
		ring, err := env.Cluster.WaitRing(ctx, ns, ringName, "Ready", fleet.Ready)
		Expect(err).NotTo(HaveOccurred())
		active := fleet.ActiveKey(ring)
		waitAll(ctx, "serving "+active, fleet.ServingKey(active, ring.Status.Epoch))
		return active
	}

	It("resumes across the two instances of each server, TLS 1.3 and 1.2, through three rotations", func(ctx SpecContext) {
		loads := startLoads(ctx)
		defer func() {
			for _, l := range loads {
				l.Stop()
			}
		}()
		rots := rotateBackToBack(ctx, ns, ringName, rotations)
		last := rots[len(rots)-1]
		waitAll(ctx, "serving "+last.To, fleet.ServingKey(last.To, last.Epoch))
		finishLoads(ctx, loads)
	}, NodeTimeout(3*time.Minute))

	It("resumes a ticket under an expired key nowhere, and no ticket of one server on the other", func(ctx SpecContext) {
		old := servingActive(ctx)

		By("capturing a ticket under " + old + " from instance 0 of each server, per TLS version")
		tickets := map[loadKey]*fleet.FirstTicket{}
		for _, kind := range kinds {
			for _, v := range versions {
				t := &fleet.FirstTicket{}
				s := fleet.Connect(ctx, fleets[kind].Replicas[0].Addr, serverClient(v, t), 5*time.Second)
				Expect(s.Err).To(BeEmpty())
				Expect(t.Held()).To(BeTrue(), "%s issued no ticket", kind)
				tickets[loadKey{kind, v}] = t
			}
		}
		resumes := func(kind fleet.ServerKind, k loadKey) []bool {
			GinkgoHelper()
			var out []bool
			for i, r := range fleets[kind].Replicas {
				s := fleet.Connect(ctx, r.Addr, serverClient(k.version, tickets[k]), 5*time.Second)
				Expect(s.Err).To(BeEmpty(), "%s instance %d: an unknown ticket must cost a full handshake, never the connection", kind, i)
				out = append(out, s.Resumed)
			}
			return out
		}
		for k := range tickets {
			Expect(resumes(k.kind, k)).To(HaveEach(true), "a fresh %s ticket (%s) resumes on both instances", k.kind, tls.VersionName(k.version))
			other := fleet.HAProxy
			if k.kind == fleet.HAProxy {
				other = fleet.Nginx
			}
			Expect(resumes(other, k)).To(HaveEach(false), "a %s ticket (%s) resumed on %s: the servers' keys are derived apart", k.kind, tls.VersionName(k.version), other)
		}

		By("retiring " + old + ": both servers keep it, decrypt-only")
		rot, err := env.Cluster.Rotate(ctx, ns, ringName)
		Expect(err).NotTo(HaveOccurred())
		Expect(rot.From).To(Equal(old))
		waitAll(ctx, "serving "+rot.To, fleet.ServingKey(rot.To, rot.Epoch))
		for k := range tickets {
			Expect(resumes(k.kind, k)).To(HaveEach(true), "a %s ticket under the retired key (%s)", k.kind, tls.VersionName(k.version))
		}

		By("expiring " + old + ": retainedKeys 0 expires every retired key at once")
		ring, err := env.Cluster.SetRetainedKeys(ctx, ns, ringName, 0)
		Expect(err).NotTo(HaveOccurred())
		waitAll(ctx, "without "+old, func(st agent.Status) bool { return st.Epoch >= ring.Status.Epoch && !fleet.Holds(st, old) })
		for k := range tickets {
			Expect(resumes(k.kind, k)).To(HaveEach(false), "a %s ticket under an expired key (%s) resumed", k.kind, tls.VersionName(k.version))
		}

		By("fresh tickets still resuming on both instances")
		for _, kind := range kinds {
			for _, v := range versions {
				k := loadKey{kind, v}
				tickets[k] = &fleet.FirstTicket{}
				Expect(fleet.Connect(ctx, fleets[kind].Replicas[0].Addr, serverClient(v, tickets[k]), 5*time.Second).Err).To(BeEmpty())
				Expect(resumes(kind, k)).To(HaveEach(true))
			}
		}
		_, err = env.Cluster.SetRetainedKeys(ctx, ns, ringName, 3)
		Expect(err).NotTo(HaveOccurred())
	}, NodeTimeout(2*time.Minute))

	It("loses nothing when a sidecar is killed and restarted, across a rotation", func(ctx SpecContext) {
		loads := startLoads(ctx)
		defer func() {
			for _, l := range loads {
				l.Stop()
			}
		}()
		By("killing instance 1's sidecar of each server (SIGKILL), and rotating meanwhile")
		for _, kind := range kinds {
			Expect(fleets[kind].KillSidecar(fleets[kind].Replicas[1])).To(Succeed())
		}
		rot, err := env.Cluster.Rotate(ctx, ns, ringName)
		Expect(err).NotTo(HaveOccurred())
		GinkgoWriter.Printf("Rotated at epoch %d while the sidecars were down: %s -> %s\n", rot.Epoch, rot.From, rot.To)

		By("restarting the sidecars: they bring their servers to the current epoch")
		for _, kind := range kinds {
			Expect(fleets[kind].StartSidecar(ctx, fleets[kind].Replicas[1])).To(Succeed())
		}
		waitAll(ctx, "serving "+rot.To, fleet.ServingKey(rot.To, rot.Epoch))
		rots := rotateBackToBack(ctx, ns, ringName, 1)
		waitAll(ctx, "serving "+rots[0].To, fleet.ServingKey(rots[0].To, rots[0].Epoch))
		finishLoads(ctx, loads)
	}, NodeTimeout(3*time.Minute))

	It("loses nothing when a server is stopped and started again", func(ctx SpecContext) {
		servingActive(ctx)
		for _, kind := range kinds {
			f := fleets[kind]
			r0, r1 := f.Replicas[0], f.Replicas[1]
			before := &fleet.FirstTicket{}
			Expect(fleet.Connect(ctx, r1.Addr, serverClient(tls.VersionTLS13, before), 5*time.Second).Err).To(BeEmpty())

			By(fmt.Sprintf("stopping %s instance 1: its sidecar turns unready", kind))
			Expect(f.StopServer(r1)).To(Succeed())
			Eventually(ctx, func() bool { ok, _, _ := f.Ready(ctx, r1); return ok }).WithPolling(100 * time.Millisecond).Should(BeFalse())
			_, why, err := f.Ready(ctx, r1)
			Expect(err).NotTo(HaveOccurred())
			GinkgoWriter.Printf("%s sidecar 1 while its server is down: %s\n", kind, why)

			By(fmt.Sprintf("starting %s instance 1 again, from the files its sidecar wrote", kind))
			Expect(f.StartServer(ctx, r1)).To(Succeed())
			after := &fleet.FirstTicket{}
			s := fleet.Connect(ctx, r1.Addr, serverClient(tls.VersionTLS13, after), 5*time.Second)
			Expect(s.Err).To(BeEmpty())
			Expect(fleet.Connect(ctx, r1.Addr, serverClient(tls.VersionTLS13, before), 5*time.Second).Resumed).To(BeTrue(),
				"%s: a ticket issued before the restart does not resume on the restarted instance", kind)
			Expect(fleet.Connect(ctx, r0.Addr, serverClient(tls.VersionTLS13, after), 5*time.Second).Resumed).To(BeTrue(),
				"%s: a ticket of the restarted instance does not resume on the other", kind)
			Eventually(ctx, func() bool { ok, _, _ := f.Ready(ctx, r1); return ok }).WithPolling(100*time.Millisecond).Should(BeTrue(), "%s sidecar 1 ready again", kind)
		}
	}, NodeTimeout(2*time.Minute))
})

func serverClient(version uint16, cache tls.ClientSessionCache) *tls.Config {
	return &tls.Config{
		ServerName: fleet.ServerName, RootCAs: env.PKI.Roots,
		MinVersion: version, MaxVersion: version, ClientSessionCache: cache,
		NextProtos: []string{"http/1.1"},
	}
}
