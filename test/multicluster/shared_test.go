//go:build e2e

package multicluster_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	vault "github.com/hashicorp/vault/api"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/sharedring"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
	"github.com/ringmaster-io/ringmaster/internal/testing/vaulttest"
	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

// policy is the whole Vault policy of both operators: random bytes, and the
// shared rings under ringmaster/e2e, nothing else.
const policy = `
path "sys/tools/random/*"              { capabilities = ["update"] }
path "secret/data/ringmaster/e2e/*"     { capabilities = ["create", "read", "update"] }
path "secret/metadata/ringmaster/e2e/*" { capabilities = ["read", "update"] }
path "secret/destroy/ringmaster/e2e/*"  { capabilities = ["update"] }
`

const (
	ns        = "shop"
	local     = "local" // a namespace the key source does not share
	web       = "web"   // the fleets' ring
	race      = "race"  // a ring without fleet, raced for
	split     = "split" // a ring whose spec differs between the clusters
	source    = "shared"
	replicas  = 3
	maxDelay  = 500 * time.Millisecond
	races     = 20
	rotations = 3
	// activation covers the operators' reads of the entry (every 1.5s), the
	// stand-in kubelet's delivery (up to maxDelay) and a loaded machine.
	activation = 6 * time.Second
)

var _ = Describe("A ring shared by two clusters through Vault", Ordered, func() {
	var (
		a, b    *fleet.Env
		srv     *vaulttest.Server
		proxy   *fleet.Balancer
		vaultAt string
		fa, fb  *fleet.Fleet
		lb      *fleet.Balancer
		seen    = versions{}
	)
	clusters := func() []*fleet.Env { return []*fleet.Env{a, b} }
	name := func(e *fleet.Env) string {
		if e == a {
			return "A"
		}
		return "B"
	}
	// observe records what each cluster serves for its shared version, and
	// fails should two clusters serve different keys for one version.
	observe := func(ctx context.Context, ring string) {
		GinkgoHelper()
		for _, e := range clusters() {
			r, err := e.Cluster.GetRing(ctx, ns, ring)
			Expect(err).NotTo(HaveOccurred())
			Expect(seen.add(ring, name(e), r)).To(Succeed())
		}
	}
	// agree waits until both clusters serve the same version of ring, Ready,
	// and returns it.
	agree := func(ctx context.Context, ring string, cond func(r *v1alpha1.TicketKeyRing) bool) int64 {
		GinkgoHelper()
		var version int64
		Eventually(ctx, func(g Gomega) {
			var got []*v1alpha1.TicketKeyRing
			for _, e := range clusters() {
				r, err := e.Cluster.GetRing(ctx, ns, ring)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(fleet.Ready(r)).To(BeTrue(), "cluster %s: %s", name(e), readyOf(r))
				g.Expect(r.Status.Shared).NotTo(BeNil())
				g.Expect(cond(r)).To(BeTrue())
				got = append(got, r)
			}
			g.Expect(got[0].Status.Shared.Version).To(Equal(got[1].Status.Shared.Version))
			g.Expect(keysOf(got[0])).To(Equal(keysOf(got[1])))
			version = got[0].Status.Shared.Version
		}).WithPolling(100 * time.Millisecond).WithTimeout(time.Minute).Should(Succeed())
		observe(ctx, ring)
		return version
	}
	anyState := func(*v1alpha1.TicketKeyRing) bool { return true }

	BeforeAll(func(ctx SpecContext) {
		var err error
		srv, err = vaulttest.Start(GinkgoT().TempDir(), func(c *vault.Client) error { return c.Sys().PutPolicy("ringmaster", policy) })
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(srv.Stop)
		tok, err := srv.Root.Auth().Token().Create(&vault.TokenCreateRequest{Policies: []string{"ringmaster"}, TTL: "2h"})
		Expect(err).NotTo(HaveOccurred())
		vaultAt = strings.TrimPrefix(srv.Addr, "https://")
		proxy, err = fleet.StartBalancer([]string{vaultAt})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _ = proxy.Close() })

		a, err = fleet.Setup(ctx, fleet.Options{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(a.Close)
		b, err = a.AddCluster(ctx, "cluster-b")
		Expect(err).NotTo(HaveOccurred())
		GinkgoWriter.Printf("Clusters A and B: operators pid %d and %d, work in %s\n", a.Operator.PID, b.Operator.PID, a.Work)

		spec := fleet.RingSpec{Namespace: ns, Name: web, RotationInterval: 5 * time.Minute, ActivationDelay: activation, RetainedKeys: 1, SourceRef: source}
		for _, e := range clusters() {
			Expect(createKeySource(ctx, e.Cluster, "https://"+proxy.Addr(), srv.CA, tok.Auth.ClientToken)).To(Succeed())
			_, err := e.Cluster.CreateRing(ctx, spec)
			Expect(err).NotTo(HaveOccurred(), "cluster %s", name(e))
		}
		agree(ctx, web, anyState)

		ringA, err := a.Cluster.GetRing(ctx, ns, web)
		Expect(err).NotTo(HaveOccurred())
		active := fleet.ActiveKey(ringA)
		for i, e := range clusters() {
			f, err := e.StartFleet(ctx, fleet.Config{Name: strings.ToLower(name(e)), Delays: fleet.Spread(replicas, maxDelay), Namespace: ns, Secret: ringA.ProjectionSecretName()})
			Expect(err).NotTo(HaveOccurred())
			_, err = f.WaitServing(ctx, "serving "+active, fleet.ServingKey(active, 0))
			Expect(err).NotTo(HaveOccurred())
			if i == 0 {
				fa = f
			} else {
				fb = f
			}
		}
		// One balancer over both fleets, alternating clusters: a client's
		// next connection lands in the other cluster about half the time.
		var backends []string
		for i := range replicas {
			backends = append(backends, fa.Replicas[i].Addr, fb.Replicas[i].Addr)
		}
		lb, err = fleet.StartBalancer(backends)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(lb.Close)
	}, NodeTimeout(5*time.Minute))

	AfterEach(func() {
		if !CurrentSpecReport().Failed() {
			return
		}
		for _, e := range clusters() {
			GinkgoWriter.Printf("--- operator %s log (%s):\n%s\n", name(e), e.Operator.Log, e.Operator.LogTail(30))
		}
	})

	It("resumes sessions across clusters through three rotations requested in either", func(ctx SpecContext) {
		load := fleet.StartLoad(ctx, fleet.LoadConfig{Addr: lb.Addr(), Roots: a.PKI.Roots, Version: tls.VersionTLS13,
			Clients: 8, ConnsPerClient: 5000, Interval: 50 * time.Millisecond})
		defer load.Stop()
		var delays, reached []time.Duration
		var last fleet.Rotation
		for i := range rotations {
			by, other := clusters()[i%2], clusters()[(i+1)%2]
			rot, err := by.Cluster.Rotate(ctx, ns, web)
			Expect(err).NotTo(HaveOccurred())
			rotated := time.Now()
			otherFleet := map[*fleet.Env]*fleet.Fleet{a: fa, b: fb}[other]
			_, err = otherFleet.WaitServing(ctx, "holding "+rot.Staged, func(st agent.Status) bool { return fleet.Holds(st, rot.Staged) })
			Expect(err).NotTo(HaveOccurred())
			reached = append(reached, time.Since(rotated))
			GinkgoWriter.Printf("Cluster %s rotated %s -> %s, staged %s; every replica of cluster %s held %s %s later\n",
				name(by), rot.From, rot.To, rot.Staged, name(other), rot.Staged, time.Since(rotated).Round(time.Millisecond))
			mine, err := by.Cluster.GetRing(ctx, ns, web)
			Expect(err).NotTo(HaveOccurred())
			v := agree(ctx, web, func(r *v1alpha1.TicketKeyRing) bool {
				return r.Status.Shared.Version >= mine.Status.Shared.Version && fleet.StagedKey(r) == rot.Staged
			})
			// The cluster that did not write the version adopted it: how
			// long after Vault recorded it did it publish it?
			for _, e := range clusters() {
				r, err := e.Cluster.GetRing(ctx, ns, web)
				Expect(err).NotTo(HaveOccurred())
				if st := r.Status.Shared; st.Writer == "Adopted" && st.PropagationDelay != nil {
					delays = append(delays, st.PropagationDelay.Duration)
					GinkgoWriter.Printf("Both clusters serve version %d; cluster %s published it %s after the other wrote it to Vault\n",
						v, name(e), st.PropagationDelay.Duration)
				}
			}
			last = rot
		}
		for _, f := range []*fleet.Fleet{fa, fb} {
			_, err := f.WaitServing(ctx, "serving "+last.To, fleet.ServingKey(last.To, 0))
			Expect(err).NotTo(HaveOccurred())
		}
		awaitMore(ctx, load, time.Now(), 5)
		res := load.Stop()

		sum := res.Summary()
		across, acrossResumed := crossings(res, fa)
		GinkgoWriter.Printf("%d connections, %d reconnects, %d resumed (%.2f%%), %d full, %d failed; %d reconnects to the other cluster, %d resumed (%.2f%%); Vault to the other cluster's operator %v, rotation to the other cluster's replicas %v\n",
			sum.Conns, sum.Reconnects, sum.Resumed, 100*sum.ResumptionRate(), sum.Full, sum.Failures, across, acrossResumed,
			100*float64(acrossResumed)/float64(max(across, 1)), delays, reached)
		Expect(sum.Failures).To(BeZero(), "failed connections: %v", res.Errors())
		Expect(across).To(BeNumerically(">=", 300))
		Expect(sum.ResumptionRate()).To(BeNumerically(">=", 0.995))
		Expect(float64(acrossResumed)/float64(across)).To(BeNumerically(">=", 0.995),
			"of %d reconnects to the other cluster, %d resumed", across, acrossResumed)
	}, NodeTimeout(4*time.Minute))

	It("writes exactly one version per shared epoch, however often both operators race for it", func(ctx SpecContext) {
		spec := fleet.RingSpec{Namespace: ns, Name: race, RotationInterval: time.Minute, ActivationDelay: 2 * time.Second, RetainedKeys: 0, SourceRef: source}
		for _, e := range clusters() {
			_, err := e.Cluster.CreateRing(ctx, spec)
			Expect(err).NotTo(HaveOccurred())
		}
		first := agree(ctx, race, anyState)
		for i := range races {
			before, err := a.Cluster.GetRing(ctx, ns, race)
			Expect(err).NotTo(HaveOccurred())
			staged := fleet.StagedKey(before)
			value := time.Now().UTC().Add(time.Duration(i) * time.Microsecond).Format(time.RFC3339Nano)
			var wg sync.WaitGroup
			for _, e := range clusters() {
				wg.Go(func() {
					defer GinkgoRecover()
					Expect(requestRotation(ctx, e.Cluster, race, value)).To(Succeed())
				})
			}
			wg.Wait()
			// Carried out: the staged key encrypts, and its successor,
			// minted when it activated (a race of its own), is staged.
			agree(ctx, race, func(r *v1alpha1.TicketKeyRing) bool {
				return r.Status.LastRotateRequestedAt == value && fleet.ActiveKey(r) == staged && fleet.StagedKey(r) != staged
			})
		}
		last := agree(ctx, race, anyState)

		entry := "ringmaster/e2e/namespaces/" + ns + "/" + race
		meta, err := srv.Root.KVv2("secret").GetMetadata(ctx, entry)
		Expect(err).NotTo(HaveOccurred())
		Expect(int64(meta.CurrentVersion)).To(Equal(last))
		won, lost := writes(clusters(), "secret/"+entry)
		total := 0
		for _, vs := range won {
			total += len(vs)
		}
		GinkgoWriter.Printf("%d rotate-now requests given to both clusters at once: versions %d to %d written; wins A %d, B %d; lost races A %d, B %d\n",
			races, first, last, len(won["A"]), len(won["B"]), lost["A"], lost["B"])
		Expect(duplicates(won)).To(BeEmpty(), "a version written by both operators")
		Expect(int64(total)).To(Equal(last), "every version of the entry was written once, by one operator")
		Expect(last-first).To(BeNumerically(">=", races), "each request moved the ring on")

		By("destroying, in Vault, every version that holds a key past its expiresAt")
		// retainedKeys 0: each key expired the moment its successor took
		// over, and left the ring.
		ringA, err := a.Cluster.GetRing(ctx, ns, race)
		Expect(err).NotTo(HaveOccurred())
		gone := seen.dropped(race, ringA)
		Expect(len(gone)).To(BeNumerically(">=", races))
		Eventually(ctx, func(g Gomega) {
			g.Expect(holding(ctx, srv.Root.KVv2("secret"), entry, ns+"/"+race, gone)).To(BeEmpty())
		}).WithTimeout(30 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())
	}, NodeTimeout(4*time.Minute))

	It("shares no ring of a namespace the key source does not select: each cluster keeps its own keys, and no entry is written", func(ctx SpecContext) {
		spec := fleet.RingSpec{Namespace: local, Name: web, RotationInterval: 5 * time.Minute, ActivationDelay: activation, RetainedKeys: 1, SourceRef: source}
		var rings []*v1alpha1.TicketKeyRing
		for _, e := range clusters() {
			r, err := e.Cluster.CreateRing(ctx, spec)
			Expect(err).NotTo(HaveOccurred(), "cluster %s", name(e))
			Expect(r.Status.Shared).To(BeNil(), "cluster %s", name(e))
			rings = append(rings, r)
		}
		Expect(fleet.ActiveKey(rings[0])).NotTo(Equal(fleet.ActiveKey(rings[1])))
		Expect(keysOf(rings[0])).NotTo(ContainElement(HavePrefix(fleet.StagedKey(rings[1]))))
		rot, err := a.Cluster.Rotate(ctx, local, web)
		Expect(err).NotTo(HaveOccurred())
		r, err := b.Cluster.GetRing(ctx, local, web)
		Expect(err).NotTo(HaveOccurred())
		Expect(keysOf(r)).To(Equal(keysOf(rings[1])), "a rotation in cluster A (%s -> %s) reached cluster B", rot.From, rot.To)
		_, err = srv.Root.KVv2("secret").Get(ctx, "ringmaster/e2e/namespaces/"+local+"/"+web)
		Expect(err).To(MatchError(vault.ErrSecretNotFound))
		GinkgoWriter.Printf("Ring %s/%s, not selected by sharedRings: cluster A serves %s, cluster B %s; no entry in Vault\n", local, web, rot.To, fleet.ActiveKey(r))
	}, NodeTimeout(2*time.Minute))

	It("has a cluster whose spec differs from the entry's write nothing and say so, leaving at most one version per real rotation", func(ctx SpecContext) {
		specA := fleet.RingSpec{Namespace: ns, Name: split, RotationInterval: time.Minute, ActivationDelay: 2 * time.Second, RetainedKeys: 1, SourceRef: source}
		specB := specA
		specB.RotationInterval, specB.RetainedKeys = 2*time.Minute, 2
		entry := "ringmaster/e2e/namespaces/" + ns + "/" + split
		kv := srv.Root.KVv2("secret")
		_, err := a.Cluster.CreateRing(ctx, specA)
		Expect(err).NotTo(HaveOccurred())
		start := time.Now()
		first, err := kv.GetMetadata(ctx, entry)
		Expect(err).NotTo(HaveOccurred())
		Expect(b.Cluster.Client.Create(ctx, specB.Object())).To(Succeed())

		ringB := func() *v1alpha1.TicketKeyRing {
			r, err := b.Cluster.GetRing(ctx, ns, split)
			Expect(err).NotTo(HaveOccurred())
			return r
		}
		Eventually(ctx, func() string { return readyOf(ringB()) }).WithTimeout(30 * time.Second).
			Should(HavePrefix("False " + v1alpha1.ReasonSharedRingPolicyMismatch))
		Expect(readyOf(ringB())).To(And(ContainSubstring("rotationInterval is 2m0s here and 1m0s in the entry"),
			ContainSubstring("retainedKeys is 2 here and 1 in the entry"), Not(ContainSubstring("activationDelay is"))))

		By("running both clusters for three of the entry's rotation intervals")
		for time.Since(start) < 3*specA.RotationInterval+10*time.Second {
			Expect(readyOf(ringB())).To(HavePrefix("False "+v1alpha1.ReasonSharedRingPolicyMismatch), "cluster B")
			Expect(ringB().Status.Epoch).To(BeZero(), "cluster B published nothing")
			r, err := a.Cluster.GetRing(ctx, ns, split)
			Expect(err).NotTo(HaveOccurred())
			Expect(fleet.Ready(r)).To(BeTrue(), "cluster A: %s", readyOf(r))
			select {
			case <-ctx.Done():
				Fail("timed out")
			case <-time.After(5 * time.Second):
			}
		}
		elapsed := time.Since(start)
		last, err := kv.GetMetadata(ctx, entry)
		Expect(err).NotTo(HaveOccurred())
		written := last.CurrentVersion - first.CurrentVersion
		rotations := int(elapsed / specA.RotationInterval)
		won, lost := writes(clusters(), "secret/"+entry)
		GinkgoWriter.Printf("Ring %s/%s with a %s interval in cluster A and %s in cluster B: %d versions written in %s (%d rotations due); wins A %d, B %d; lost races A %d, B %d\n",
			ns, split, specA.RotationInterval, specB.RotationInterval, written, elapsed.Round(time.Second), rotations, len(won["A"]), len(won["B"]), lost["A"], lost["B"])
		Expect(won["B"]).To(BeEmpty(), "the cluster whose spec differs wrote to the entry")
		Expect(written).To(BeNumerically("<=", rotations), "more versions than rotations")
		Expect(written).To(BeNumerically(">=", rotations-1), "the entry's own cluster kept rotating")
		Expect(last.CurrentVersion).To(Equal(len(won["A"])))
	}, NodeTimeout(6*time.Minute))

	It("keeps rotating in one cluster while the other's operator is down, and the other catches up without a second key for any version", func(ctx SpecContext) {
		Expect(a.KillOperator()).To(Succeed())
		var last fleet.Rotation
		for range 2 {
			rot, err := b.Cluster.Rotate(ctx, ns, web)
			Expect(err).NotTo(HaveOccurred())
			last = rot
		}
		_, err := fb.WaitServing(ctx, "serving "+last.To, fleet.ServingKey(last.To, 0))
		Expect(err).NotTo(HaveOccurred())
		Expect(a.StartOperator(ctx)).To(Succeed())
		v := agree(ctx, web, func(r *v1alpha1.TicketKeyRing) bool { return fleet.ActiveKey(r) == last.To })
		_, err = fa.WaitServing(ctx, "serving "+last.To, fleet.ServingKey(last.To, 0))
		Expect(err).NotTo(HaveOccurred())
		won, _ := writes(clusters(), "secret/ringmaster/e2e/namespaces/"+ns+"/"+web)
		Expect(duplicates(won)).To(BeEmpty())
		GinkgoWriter.Printf("Cluster A caught up to version %d after its operator's restart\n", v)
	}, NodeTimeout(3*time.Minute))

	It("fails closed in both clusters while Vault is down, keeps serving, and recovers", func(ctx SpecContext) {
		before := agree(ctx, web, anyState)
		ringA, err := a.Cluster.GetRing(ctx, ns, web)
		Expect(err).NotTo(HaveOccurred())
		active := fleet.ActiveKey(ringA)
		Expect(proxy.Close()).To(Succeed())
		for _, e := range clusters() {
			Eventually(ctx, func() string {
				r, err := e.Cluster.GetRing(ctx, ns, web)
				if err != nil {
					return err.Error()
				}
				return readyOf(r)
			}).WithTimeout(30*time.Second).Should(HavePrefix("False "+v1alpha1.ReasonVaultUnavailable), "cluster %s", name(e))
		}
		requested, err := requestRotationNow(ctx, a.Cluster, web)
		Expect(err).NotTo(HaveOccurred())
		Consistently(ctx, func() string {
			r, err := a.Cluster.GetRing(ctx, ns, web)
			Expect(err).NotTo(HaveOccurred())
			return r.Status.LastRotateRequestedAt
		}).WithTimeout(3*time.Second).ShouldNot(Equal(requested), "a rotation was carried out without Vault")
		for _, f := range []*fleet.Fleet{fa, fb} {
			_, err := f.WaitServing(ctx, "still serving "+active, fleet.ServingKey(active, 0))
			Expect(err).NotTo(HaveOccurred())
		}

		proxy, err = fleet.ListenBalancer(proxy.Addr(), []string{vaultAt})
		Expect(err).NotTo(HaveOccurred())
		By("carrying out the request held up by the outage, in both clusters")
		Eventually(ctx, func() string {
			r, err := a.Cluster.GetRing(ctx, ns, web)
			Expect(err).NotTo(HaveOccurred())
			return r.Status.LastRotateRequestedAt
		}).WithTimeout(30 * time.Second).Should(Equal(requested))
		ringA, err = a.Cluster.GetRing(ctx, ns, web)
		Expect(err).NotTo(HaveOccurred())
		after := agree(ctx, web, func(r *v1alpha1.TicketKeyRing) bool { return r.Status.Shared.Version >= ringA.Status.Shared.Version })
		Expect(after).To(BeNumerically(">", before))
	}, NodeTimeout(3*time.Minute))
})

// createKeySource creates, in the operator's namespace of c, a Secret with
// the token and Vault's CA, and the ClusterKeySource that shares the rings
// of namespace shop (and of no other) under ringmaster/e2e.
func createKeySource(ctx context.Context, c *fleet.Cluster, addr string, ca []byte, token string) error {
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: fleet.OperatorNamespace, Name: "vault"},
		Data:       map[string][]byte{"token": []byte(token), "ca.crt": ca},
	}
	if err := c.Client.Create(ctx, sec); err != nil {
		return err
	}
	return c.Client.Create(ctx, &v1alpha1.ClusterKeySource{
		ObjectMeta: metav1.ObjectMeta{Name: source},
		Spec: v1alpha1.ClusterKeySourceSpec{NamespaceSelector: &metav1.LabelSelector{}, Vault: &v1alpha1.VaultSource{
			Address:  addr,
			Auth:     v1alpha1.VaultAuth{TokenSecretRef: &v1alpha1.KeyRef{Name: "vault", Key: "token"}},
			CABundle: &v1alpha1.CABundleSource{SecretKeyRef: &v1alpha1.KeyRef{Name: "vault", Key: "ca.crt"}},
			SharedRings: &v1alpha1.VaultSharedRings{Path: "ringmaster/e2e", NamespaceSelector: &metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{ns}}},
			}},
		}},
	})
}

// requestRotation sets the rotate-now annotation of ring to value.
func requestRotation(ctx context.Context, c *fleet.Cluster, ring, value string) error {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.RotateRequestedAtAnnotation, value)
	r := &v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ring}}
	return c.Client.Patch(ctx, r, client.RawPatch(types.MergePatchType, []byte(patch)))
}

func requestRotationNow(ctx context.Context, c *fleet.Cluster, ring string) (string, error) {
	value := time.Now().UTC().Format(time.RFC3339Nano)
	return value, requestRotation(ctx, c, ring, value)
}

func readyOf(r *v1alpha1.TicketKeyRing) string {
	c := apimeta.FindStatusCondition(r.Status.Conditions, v1alpha1.ConditionReady)
	if c == nil {
		return "no Ready condition"
	}
	return string(c.Status) + " " + c.Reason + ": " + c.Message
}

// keysOf is what a ring's status says it serves: each key's id and times.
func keysOf(r *v1alpha1.TicketKeyRing) []string {
	out := make([]string, len(r.Status.Keys))
	for i, k := range r.Status.Keys {
		out[i] = fmt.Sprintf("%s %s %s %s", k.ID, k.ActiveFrom.UTC().Format(time.RFC3339), k.RetireAt.UTC().Format(time.RFC3339), k.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return out
}

// versions remembers, per ring and shared version, the keys the clusters
// served for it, and each key's expiry.
type versions map[string]map[int64]seenVersion

type seenVersion struct {
	keys []string
	by   string
}

func (v versions) add(ring, cluster string, r *v1alpha1.TicketKeyRing) error {
	if r.Status.Shared == nil || r.Status.Shared.Version == 0 {
		return nil
	}
	if v[ring] == nil {
		v[ring] = map[int64]seenVersion{}
	}
	keys := keysOf(r)
	if prev, ok := v[ring][r.Status.Shared.Version]; ok && !slices.Equal(prev.keys, keys) {
		return fmt.Errorf("ring %s version %d: cluster %s serves %v, cluster %s served %v", ring, r.Status.Shared.Version, cluster, keys, prev.by, prev.keys)
	}
	v[ring][r.Status.Shared.Version] = seenVersion{keys: keys, by: cluster}
	return nil
}

// dropped lists the ids of the keys of ring seen in any version and no
// longer in r's.
func (v versions) dropped(ring string, r *v1alpha1.TicketKeyRing) []string {
	var current, out []string
	for _, k := range r.Status.Keys {
		current = append(current, k.ID)
	}
	for _, sv := range v[ring] {
		for _, k := range sv.keys {
			id := strings.Fields(k)[0]
			if !slices.Contains(current, id) && !slices.Contains(out, id) {
				out = append(out, id)
			}
		}
	}
	return out
}

// holding returns the versions of the entry still readable in Vault that
// hold one of the given keys.
func holding(ctx context.Context, kv *vault.KVv2, entry, ring string, keys []string) []string {
	GinkgoHelper()
	meta, err := kv.GetMetadata(ctx, entry)
	Expect(err).NotTo(HaveOccurred())
	var out []string
	for n, vm := range meta.Versions {
		if vm.Destroyed {
			continue
		}
		num, _ := strconv.Atoi(n)
		got, err := kv.GetVersion(ctx, entry, num)
		Expect(err).NotTo(HaveOccurred())
		if got.Data == nil {
			out = append(out, n+" (deleted, not destroyed)")
			continue
		}
		rec, err := sharedring.Decode(got.Data, ring)
		Expect(err).NotTo(HaveOccurred())
		for _, k := range rec.Ring.Keys {
			if slices.Contains(keys, k.ID) {
				out = append(out, fmt.Sprintf("version %s holds dropped key %s", n, k.ID))
			}
		}
	}
	sort.Strings(out)
	return out
}

var wroteLine = regexp.MustCompile(`"entry": ?"([^"]+)", ?"version": ?(\d+)`)

// writes reads every log the clusters' operators wrote (a restarted
// operator's too) and returns, per cluster, the versions of entry each won,
// and how many races each lost.
func writes(clusters []*fleet.Env, entry string) (won map[string][]int64, lost map[string]int) {
	GinkgoHelper()
	won, lost = map[string][]int64{}, map[string]int{}
	for i, e := range clusters {
		name := string(rune('A' + i))
		for _, path := range e.OperatorLogs() {
			data, err := os.ReadFile(path)
			Expect(err).NotTo(HaveOccurred())
			for _, line := range strings.Split(string(data), "\n") {
				m := wroteLine.FindStringSubmatch(line)
				if m == nil || m[1] != entry {
					continue
				}
				switch {
				case strings.Contains(line, "Wrote shared ring version"):
					n, _ := strconv.ParseInt(m[2], 10, 64)
					won[name] = append(won[name], n)
				case strings.Contains(line, "Lost the race"):
					lost[name]++
				}
			}
		}
	}
	return won, lost
}

func duplicates(won map[string][]int64) []int64 {
	count := map[int64]int{}
	for _, vs := range won {
		for _, v := range vs {
			count[v]++
		}
	}
	var out []int64
	for v, n := range count {
		if n > 1 {
			out = append(out, v)
		}
	}
	return out
}

// crossings counts the reconnects that landed in the other cluster than the
// client's previous connection, and how many of them resumed.
func crossings(res fleet.Result, fa *fleet.Fleet) (across, resumed int) {
	inA := map[string]bool{}
	for _, r := range fa.Replicas {
		inA[r.Addr] = true
	}
	prev := map[int]string{}
	for _, s := range res.Samples {
		if s.Err != "" {
			continue
		}
		if p, ok := prev[s.Client]; ok && s.Seq > 0 && inA[p] != inA[s.Backend] {
			across++
			if s.Resumed {
				resumed++
			}
		}
		prev[s.Client] = s.Backend
	}
	return across, resumed
}

// awaitMore waits until every client of the load has made n more
// successful connections since t.
func awaitMore(ctx context.Context, load *fleet.Load, t time.Time, n int) {
	GinkgoHelper()
	Expect(load.WaitEach(ctx, 8, t, n)).To(Succeed())
}
