//go:build e2e

package e2e_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

const (
	// replicas and maxDelay shape every fleet of the suite: replica 0
	// receives each change at once, replica 3 two seconds later.
	replicas = 4
	maxDelay = 2 * time.Second

	// The load: each client reconnects 20 times a second at most. The
	// connection cap only bounds a run that would hang; the specs stop the
	// load long before.
	clients        = 8
	connsPerClient = 5000
	interval       = 50 * time.Millisecond

	rotations = 3
)

var _ = Describe("A fleet sharing a staged ring", Ordered, func() {
	const ns, ringName = "staged", "web"
	var f *fleet.Fleet
	dumpOnFailure(&f)

	BeforeAll(func(ctx SpecContext) {
		f = stagedFleet(ctx, ns, ringName, false)
	}, NodeTimeout(2*time.Minute))

	It("resumes every reconnect, on whichever replica, through three rotations", func(ctx SpecContext) {
		first, err := env.Cluster.GetRing(ctx, ns, ringName)
		Expect(err).NotTo(HaveOccurred())
		rots, res := rotateUnderLoad(ctx, f, ns, ringName)
		sum := res.Summary()
		GinkgoWriter.Printf("%d connections, %d reconnects (%d to another replica), %d resumed (%.2f%%), %d full, %d failed; active keys seen %v\n",
			sum.Conns, sum.Reconnects, sum.Moved, sum.Resumed, 100*sum.ResumptionRate(), sum.Full, sum.Failures, res.ActiveKeys())
		expectResumedAcross(f, res)
		// Go's default key exchange, resumed or not.
		Expect(res.Groups()).To(HaveKeyWithValue("resumed X25519MLKEM768", sum.Resumed))
		Expect(sum.Retried).To(BeZero())

		// The load ran through every key: each encrypted tickets that the
		// other replicas then resumed.
		keys := []string{fleet.ActiveKey(first)}
		for _, r := range rots {
			keys = append(keys, r.To)
		}
		Expect(res.ActiveKeys()).To(ContainElements(keys))
		for i, r := range f.Replicas {
			Expect(res.ByBackend()[r.Addr].Resumed).To(BeNumerically(">", 0), "replica %d resumed nothing", i)
		}
	}, NodeTimeout(2*time.Minute))

	It("no longer resumes a ticket on any replica once its key has expired", func(ctx SpecContext) {
		ring, err := env.Cluster.WaitRing(ctx, ns, ringName, "Ready", fleet.Ready)
		Expect(err).NotTo(HaveOccurred())
		old := fleet.ActiveKey(ring)
		_, err = f.WaitServing(ctx, "serving "+old, fleet.ServingKey(old, ring.Status.Epoch))
		Expect(err).NotTo(HaveOccurred())

		By("capturing a ticket issued under the active key " + old)
		kept := &fleet.FirstTicket{}
		first := fleet.Connect(ctx, f.Replicas[0].Addr, clientConfig(kept), 5*time.Second)
		Expect(first.Err).To(BeEmpty())
		Expect(first.ActiveKey).To(Equal(old))
		Expect(kept.Held()).To(BeTrue())
		Expect(resumesOn(ctx, f, kept)).To(HaveEach(true), "a fresh ticket resumes everywhere")

		By("retiring " + old + ": it stays on every replica, decrypt-only")
		rot, err := env.Cluster.Rotate(ctx, ns, ringName)
		Expect(err).NotTo(HaveOccurred())
		Expect(rot.From).To(Equal(old))
		_, err = f.WaitServing(ctx, "serving "+rot.To, fleet.ServingKey(rot.To, rot.Epoch))
		Expect(err).NotTo(HaveOccurred())
		Expect(resumesOn(ctx, f, kept)).To(HaveEach(true), "a retained key still decrypts")

		By("expiring " + old + ": retainedKeys 0 expires every retired key at once")
		ring, err = env.Cluster.SetRetainedKeys(ctx, ns, ringName, 0)
		Expect(err).NotTo(HaveOccurred())
		for _, k := range ring.Status.Keys {
			Expect(k.ID).NotTo(Equal(old), "status still lists the expired key")
		}
		sts, err := f.WaitServing(ctx, "without "+old, func(st agent.Status) bool {
			return st.Epoch >= ring.Status.Epoch && !fleet.Holds(st, old)
		})
		Expect(err).NotTo(HaveOccurred())
		GinkgoWriter.Printf("After expiry:\n%s", fleet.DescribeHealth(sts))
		Expect(resumesOn(ctx, f, kept)).To(HaveEach(false), "a ticket under an expired key resumed")

		By("checking that resumption itself still works on every replica")
		fresh := &fleet.FirstTicket{}
		Expect(fleet.Connect(ctx, f.Replicas[0].Addr, clientConfig(fresh), 5*time.Second).Err).To(BeEmpty())
		Expect(resumesOn(ctx, f, fresh)).To(HaveEach(true))
	}, NodeTimeout(time.Minute))
})

// agent.Options.ClassicalResumption (examples/server -classical-resumption):
// resumed TLS 1.3 handshakes use X25519 alone, full ones keep the hybrid.
var _ = Describe("A fleet resuming TLS 1.3 with X25519 alone", Ordered, func() {
	const ns, ringName = "classical", "web"
	var f *fleet.Fleet
	dumpOnFailure(&f)

	BeforeAll(func(ctx SpecContext) {
		f = stagedFleet(ctx, ns, ringName, true)
	}, NodeTimeout(2*time.Minute))

	It("keeps the hybrid group for a full handshake, and resumes with X25519 on every replica", func(ctx SpecContext) {
		for i, r := range f.Replicas {
			s := fleet.Connect(ctx, r.Addr, clientConfig(nil), 5*time.Second)
			Expect(s.Err).To(BeEmpty())
			Expect([]any{s.Resumed, s.Group, s.Retried}).To(Equal([]any{false, tls.X25519MLKEM768, false}), "replica %d, no ticket", i)
		}
		kept := &fleet.FirstTicket{}
		Expect(fleet.Connect(ctx, f.Replicas[0].Addr, clientConfig(kept), 5*time.Second).Err).To(BeEmpty())
		for i, r := range f.Replicas {
			s := fleet.Connect(ctx, r.Addr, clientConfig(kept), 5*time.Second)
			Expect(s.Err).To(BeEmpty())
			Expect([]any{s.Resumed, s.Group, s.Retried}).To(Equal([]any{true, tls.X25519, false}), "replica %d, a ticket from replica 0", i)
		}
	})

	It("resumes every reconnect with X25519, on whichever replica, through three rotations, without a HelloRetryRequest", func(ctx SpecContext) {
		_, res := rotateUnderLoad(ctx, f, ns, ringName)
		sum := res.Summary()
		groups := res.Groups()
		GinkgoWriter.Printf("%d connections, %d reconnects (%d to another replica), %d resumed (%.2f%%), %d full, %d failed, %d HelloRetryRequests; key exchanges %v\n",
			sum.Conns, sum.Reconnects, sum.Moved, sum.Resumed, 100*sum.ResumptionRate(), sum.Full, sum.Failures, sum.Retried, groups)
		expectResumedAcross(f, res)

		// The group, case by case: a client's first connection offers no
		// ticket and keeps the hybrid; every resumption uses X25519; a
		// reconnect whose ticket no replica could use (none, with staged
		// keys) would get X25519 alone, which the servers count.
		Expect(groups).To(HaveKeyWithValue("first X25519MLKEM768", sum.FirstFull))
		Expect(groups).To(HaveKeyWithValue("resumed X25519", sum.Resumed))
		Expect(groups["full X25519"]).To(Equal(sum.Full))
		Expect(sum.Retried).To(BeZero(), "Go clients got a HelloRetryRequest")

		retries, err := f.Metric(ctx, "ringmaster_agent_hello_retry_requests_total")
		Expect(err).NotTo(HaveOccurred())
		Expect(retries).To(HaveEach(0.0), "a replica sent a HelloRetryRequest")
		resumed, err := f.Metric(ctx, `ringmaster_agent_handshakes_total{resumed="true"}`)
		Expect(err).NotTo(HaveOccurred())
		Expect(resumed).To(HaveEach(BeNumerically(">", 0)), "a replica resumed nothing")
		classicalFull, err := f.Metric(ctx, "ringmaster_agent_classical_full_handshakes_total")
		Expect(err).NotTo(HaveOccurred())
		total := 0.0
		for _, v := range classicalFull {
			total += v
		}
		// Connections the load's end cut short are counted by the servers,
		// not in the samples: at most one per client.
		Expect(total).To(BeNumerically(">=", sum.Full))
		Expect(total).To(BeNumerically("<=", sum.Full+clients))
	}, NodeTimeout(2*time.Minute))
})

var _ = Describe("A fleet whose activationDelay is below its delivery delay", Ordered, func() {
	const ns, ringName = "unstaged", "web"
	var f *fleet.Fleet
	dumpOnFailure(&f)

	BeforeAll(func(ctx SpecContext) {
		ring, err := env.Cluster.CreateRing(ctx, fleet.RingSpec{
			Namespace: ns, Name: ringName,
			RotationInterval: 5 * time.Minute, // no scheduled rotation during the suite: only rotate-now
			// Below the slower replicas' delays: a key can encrypt on the
			// first replica before the last one has it.
			ActivationDelay: 0,
			RetainedKeys:    3,
		})
		Expect(err).NotTo(HaveOccurred())
		f, err = env.StartFleet(ctx, fleet.Config{
			Name: "unstaged", Delays: fleet.Spread(replicas, maxDelay),
			Namespace: ns, Secret: ring.ProjectionSecretName(),
		})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(f.Stop)
		_, err = f.WaitServing(ctx, "serving the ring's first epoch", fleet.ServingKey(fleet.ActiveKey(ring), ring.Status.Epoch))
		Expect(err).NotTo(HaveOccurred())
	}, NodeTimeout(2*time.Minute))

	It("fails resumptions on the replicas a new key has not reached, and on no other", func(ctx SpecContext) {
		load := fleet.StartLoad(ctx, f.LoadConfig(tls.VersionTLS13, clients, connsPerClient, interval))
		defer load.Stop()

		rots := rotateBackToBack(ctx, ns, ringName, rotations)
		last := rots[len(rots)-1]
		_, err := f.WaitServing(ctx, "serving "+last.To, fleet.ServingKey(last.To, last.Epoch))
		Expect(err).NotTo(HaveOccurred())
		awaitMore(ctx, load, time.Now(), 5)
		res := load.Stop()

		sum := res.Summary()
		GinkgoWriter.Printf("%d connections, %d reconnects (%d to another replica), %d resumed (%.2f%%), %d full, %d failed; by replica: %v\n",
			sum.Conns, sum.Reconnects, sum.Moved, sum.Resumed, 100*sum.ResumptionRate(), sum.Full, sum.Failures, byReplica(f, res))
		Expect(sum.Failures).To(BeZero(), "a failed resumption falls back to a full handshake; it never fails one: %v", res.Errors())
		Expect(sum.Full).To(BeNumerically(">", 0), "no resumption failed although keys encrypted before they were delivered")
		// Replica 0 receives each key first, so it holds every key any
		// replica encrypts with: the failures are the delivery lag's.
		Expect(res.ByBackend()[f.Replicas[0].Addr].Full).To(BeZero(), "the replica without delivery delay failed a resumption")
	}, NodeTimeout(2*time.Minute))
})

// One replica receives each change far later than the ring's
// activationDelay, as a pod on a slow node would. By the clock alone, keys
// encrypt before it holds them and resumptions fail there; confirmed by the
// fleet (spec.confirmation), every staged key waits for it.
var _ = Describe("A fleet with one replica far behind activationDelay", Ordered, func() {
	const lag = 10 * time.Second
	delays := []time.Duration{0, 500 * time.Millisecond, time.Second, lag}

	run := func(ctx context.Context, ns string, confirm bool) (fleet.Summary, string) {
		GinkgoHelper()
		spec := fleet.RingSpec{Namespace: ns, Name: "web", RotationInterval: 5 * time.Minute, ActivationDelay: 2 * time.Second, RetainedKeys: 3}
		if confirm {
			spec.Confirmation = &v1alpha1.Confirmation{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"fleet": ns}},
				Port:        intstr.FromString(fleet.StatusPort),
				Timeout:     metav1.Duration{Duration: time.Minute},
				OnTimeout:   v1alpha1.ConfirmationWait,
			}
		}
		ring, err := env.Cluster.CreateRing(ctx, spec)
		Expect(err).NotTo(HaveOccurred())
		f, err := env.StartFleet(ctx, fleet.Config{Name: ns, Delays: delays, Namespace: ns, Secret: ring.ProjectionSecretName()})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(f.Stop)
		Expect(f.RegisterPods(ctx, env.Cluster, ns, map[string]string{"fleet": ns})).To(Succeed())
		_, err = f.WaitServing(ctx, "serving the ring's first epoch", fleet.ServingKey(fleet.ActiveKey(ring), ring.Status.Epoch))
		Expect(err).NotTo(HaveOccurred())

		_, res := rotateUnderLoad(ctx, f, ns, "web")
		sum := res.Summary()
		GinkgoWriter.Printf("confirmation %v: %d reconnects (%d moved), %d resumed (%.2f%%), %d full, %d failed; by replica: %v\n",
			confirm, sum.Reconnects, sum.Moved, sum.Resumed, 100*sum.ResumptionRate(), sum.Full, sum.Failures, byReplica(f, res))
		Expect(sum.Failures).To(BeZero(), "failed connections: %v", res.Errors())
		Expect(sum.Reconnects).To(BeNumerically(">=", 1000))
		return sum, byReplica(f, res)
	}

	It("resumes through rotations when the fleet confirms each key", func(ctx SpecContext) {
		sum, by := run(ctx, "confirmed", true)
		Expect(sum.ResumptionRate()).To(BeNumerically(">=", 0.995), "%d of %d reconnects paid a full handshake; %s", sum.Full, sum.Reconnects, by)
	}, NodeTimeout(3*time.Minute))

	It("fails resumptions on the late replica when keys activate by the clock alone", func(ctx SpecContext) {
		sum, by := run(ctx, "clock-only", false)
		Expect(sum.ResumptionRate()).To(BeNumerically("<", 0.995), "the late replica held every key in time after all; %s", by)
	}, NodeTimeout(3*time.Minute))
})

// stagedFleet creates a ring in namespace ns that only rotate-now rotates,
// with an activationDelay above the largest delivery delay (every replica
// holds a key before any replica encrypts with it), and a fleet serving it,
// resuming TLS 1.3 on X25519 alone when classical is set; it waits until
// every replica serves the first epoch.
func stagedFleet(ctx context.Context, ns, name string, classical bool) *fleet.Fleet {
	GinkgoHelper()
	ring, err := env.Cluster.CreateRing(ctx, fleet.RingSpec{
		Namespace: ns, Name: name,
		RotationInterval: 5 * time.Minute, // no scheduled rotation during the suite: only rotate-now
		ActivationDelay:  2 * maxDelay,
		RetainedKeys:     3,
	})
	Expect(err).NotTo(HaveOccurred())
	f, err := env.StartFleet(ctx, fleet.Config{
		Name: ns, Delays: fleet.Spread(replicas, maxDelay),
		Namespace: ns, Secret: ring.ProjectionSecretName(),
		ClassicalResumption: classical,
	})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(f.Stop)
	_, err = f.WaitServing(ctx, "serving the ring's first epoch", fleet.ServingKey(fleet.ActiveKey(ring), ring.Status.Epoch))
	Expect(err).NotTo(HaveOccurred())
	return f
}

// expectResumedAcross checks a load through rotations: no connection
// failed, at least 1,000 reconnects, most of them to another replica than
// the one that issued the client's ticket (round robin under jittered
// clients), and at least 99.5 % resumed, overall and across replicas.
func expectResumedAcross(f *fleet.Fleet, res fleet.Result) {
	GinkgoHelper()
	sum := res.Summary()
	Expect(sum.Failures).To(BeZero(), "failed connections: %v", res.Errors())
	Expect(sum.Reconnects).To(BeNumerically(">=", 1000))
	Expect(sum.Moved).To(BeNumerically(">=", sum.Reconnects/2))
	Expect(sum.ResumptionRate()).To(BeNumerically(">=", 0.995),
		"%d of %d reconnects paid a full handshake; by replica: %v", sum.Full, sum.Reconnects, byReplica(f, res))
	Expect(float64(sum.MovedResumed)/float64(sum.Moved)).To(BeNumerically(">=", 0.995),
		"of %d reconnects to another replica, %d resumed", sum.Moved, sum.MovedResumed)
}

// rotateUnderLoad rotates the ring back to back while the suite's load runs
// against the fleet, and stops the load once every replica serves the last
// key and every client has connected a few more times.
func rotateUnderLoad(ctx context.Context, f *fleet.Fleet, ns, name string) ([]fleet.Rotation, fleet.Result) {
	GinkgoHelper()
	load := fleet.StartLoad(ctx, f.LoadConfig(tls.VersionTLS13, clients, connsPerClient, interval))
	defer load.Stop()
	rots := rotateBackToBack(ctx, ns, name, rotations)
	last := rots[len(rots)-1]
	_, err := f.WaitServing(ctx, "serving "+last.To, fleet.ServingKey(last.To, last.Epoch))
	Expect(err).NotTo(HaveOccurred())
	awaitMore(ctx, load, time.Now(), 5)
	return rots, load.Stop()
}

// rotateBackToBack requests n rotations, each as soon as the operator has
// handled the previous one (the staged key promoted, a new one staged): as
// fast as the ring's activationDelay lets them go, without waiting for the
// fleet. Delivery is the operator's schedule's problem, not the caller's.
func rotateBackToBack(ctx context.Context, ns, name string, n int) []fleet.Rotation {
	GinkgoHelper()
	var rots []fleet.Rotation
	for range n {
		rot, err := env.Cluster.Rotate(ctx, ns, name)
		Expect(err).NotTo(HaveOccurred())
		GinkgoWriter.Printf("Rotated %s/%s at epoch %d: %s -> %s, staged %s\n", ns, name, rot.Epoch, rot.From, rot.To, rot.Staged)
		rots = append(rots, rot)
	}
	return rots
}

// awaitMore waits until every client of the load has made n more successful
// connections since t, so that the load covers the fleet's final state too.
func awaitMore(ctx context.Context, load *fleet.Load, t time.Time, n int) {
	GinkgoHelper()
	awaitMoreOf(ctx, load, clients, t, n)
}

// awaitMoreOf is awaitMore for a load of a given number of clients.
func awaitMoreOf(ctx context.Context, load *fleet.Load, clients int, t time.Time, n int) {
	GinkgoHelper()
	Expect(load.WaitEach(ctx, clients, t, n)).To(Succeed())
}

// byReplica renders full handshakes and reconnects per replica.
func byReplica(f *fleet.Fleet, res fleet.Result) string {
	out := ""
	for i, r := range f.Replicas {
		s := res.ByBackend()[r.Addr]
		out += fmt.Sprintf("[replica %d (+%s): %d full of %d] ", i, r.Delay, s.Full, s.Reconnects)
	}
	return out
}

// resumesOn connects to each replica directly with cache and reports, per
// replica, whether the handshake resumed. A failed connection fails the
// spec: a ticket a replica cannot decrypt must cost a full handshake, never
// the connection.
func resumesOn(ctx context.Context, f *fleet.Fleet, cache tls.ClientSessionCache) []bool {
	GinkgoHelper()
	out := make([]bool, len(f.Replicas))
	for i, r := range f.Replicas {
		s := fleet.Connect(ctx, r.Addr, clientConfig(cache), 5*time.Second)
		Expect(s.Err).To(BeEmpty(), "replica %d", i)
		out[i] = s.Resumed
	}
	return out
}

func clientConfig(cache tls.ClientSessionCache) *tls.Config {
	return &tls.Config{
		ServerName: fleet.ServerName, RootCAs: env.PKI.Roots,
		MinVersion: tls.VersionTLS13, ClientSessionCache: cache,
		NextProtos: []string{"http/1.1"},
	}
}
