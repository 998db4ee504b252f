//go:build e2e

package e2e_test

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
	"github.com/ringmaster-io/ringmaster/internal/testing/knot"
)

// Encrypted Client Hello through rotations: Debian's knotd is the
// authoritative server, updated by the operator binary with TSIG; a fleet
// of examples/server serves the ECHKeyRing's projection, which the
// stand-in kubelet delivers to each replica after its own delay, the last
// one far behind the ring's deliveryDelay; clients look the HTTPS record up
// from knotd, cache it for its TTL, and connect with its ECHConfigList.
var _ = Describe("A fleet serving Encrypted Client Hello", Ordered, func() {
	const (
		ns, ringName  = "ech", "web"
		rivalNS       = "ech-rival"
		ttl           = 3 * time.Second
		margin        = 3 * time.Second
		interval      = 10 * time.Second
		lag           = 5 * time.Second
		wantRotations = 5
		echClients    = 6
	)
	var (
		f   *fleet.Fleet
		srv *knot.Server
	)
	dumpOnFailure(&f)

	getRing := func(ctx context.Context) *v1alpha1.ECHKeyRing {
		GinkgoHelper()
		r := &v1alpha1.ECHKeyRing{}
		Expect(env.Cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ringName}, r)).To(Succeed())
		return r
	}

	BeforeAll(func(ctx SpecContext) {
		srv = knot.Run(GinkgoT(), "example.test.", knot.Key{})
		Expect(env.Cluster.CreateNamespace(ctx, ns)).To(Succeed())
		c := env.Cluster.Client
		createZone(ctx, srv, ns, rivalNS)
		Expect(c.Create(ctx, &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ringName}, Spec: v1alpha1.ECHKeyRingSpec{
			PublicName:       fleet.ServerName,
			RotationInterval: metav1.Duration{Duration: interval},
			DeliveryDelay:    metav1.Duration{Duration: 2 * time.Second},
			RetirementMargin: metav1.Duration{Duration: margin},
			RetainedConfigs:  1,
			Confirmation: v1alpha1.Confirmation{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"fleet": ns}},
				Port:        intstr.FromString(fleet.StatusPort),
				Timeout:     metav1.Duration{Duration: 30 * time.Second},
			},
			DNS: v1alpha1.ECHDNS{ZoneRef: v1alpha1.DNSZoneReference{Name: "example-test"}, Name: "www.example.test", TTL: int32(ttl / time.Second)},
		}})).To(Succeed())
		Eventually(func() int64 { return getRing(ctx).Status.Epoch }, time.Minute, 100*time.Millisecond).Should(BeNumerically(">=", 1))

		var err error
		f, err = env.StartFleet(ctx, fleet.Config{Name: ns, Delays: []time.Duration{0, 200 * time.Millisecond, 500 * time.Millisecond, lag},
			Namespace: ns, Secret: ringName + "-ech-keys", ECH: true})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(f.Stop)
		Expect(f.RegisterPods(ctx, env.Cluster, ns, map[string]string{"fleet": ns})).To(Succeed())
	}, NodeTimeout(2*time.Minute))

	It("accepts every client whose config is no older than the TTL through 5 rotations, publishes only what the lagging replica holds, and waits out a DNS outage", func(ctx SpecContext) {
		By("waiting for the first config in DNS")
		var first []byte
		Eventually(func() []byte { first, _ = lookupECH(ctx, srv); return first }, time.Minute, 200*time.Millisecond).ShouldNot(BeEmpty())

		// The lagging replica's first sight of each config id.
		lagging := f.Replicas[len(f.Replicas)-1]
		seenByLagging := sync.Map{}
		watchCtx, stopWatch := context.WithCancel(ctx)
		defer stopWatch()
		// Each config's staging and publication, as the ring's status
		// shows them while the config lives.
		var timesMu sync.Mutex
		staged, publishedAt := map[int32]time.Time{}, map[int32]time.Time{}
		go func() {
			for watchCtx.Err() == nil {
				r := &v1alpha1.ECHKeyRing{}
				if env.Cluster.Client.Get(watchCtx, client.ObjectKey{Namespace: ns, Name: ringName}, r) == nil {
					timesMu.Lock()
					for _, c := range r.Status.Configs {
						staged[c.ID] = c.CreatedAt.Time
						if c.PublishedAt != nil {
							publishedAt[c.ID] = c.PublishedAt.Time
						}
					}
					timesMu.Unlock()
				}
				time.Sleep(250 * time.Millisecond)
			}
		}()
		go func() {
			for watchCtx.Err() == nil {
				if st, err := fleet.ReadHealth(watchCtx, statusClient, lagging.StatusAddr); err == nil && st.ECH != nil {
					for _, c := range st.ECH.Configs {
						seenByLagging.LoadOrStore(c.ID, time.Now())
					}
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()

		By("running clients through rotations, while a ring of another namespace claims the same name")
		load := startECHLoad(ctx, f, srv, echClients, ttl)
		defer load.stop()
		Expect(env.Cluster.CreateNamespace(ctx, rivalNS)).To(Succeed())
		rival := &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: rivalNS, Name: ringName}, Spec: *getRing(ctx).Spec.DeepCopy()}
		rival.Spec.DNS.TTL = 5 // another TTL: the record's stays the owner's
		Expect(env.Cluster.Client.Create(ctx, rival)).To(Succeed())
		getRival := func() *v1alpha1.ECHKeyRing {
			r := &v1alpha1.ECHKeyRing{}
			Expect(env.Cluster.Client.Get(ctx, client.ObjectKeyFromObject(rival), r)).To(Succeed())
			return r
		}
		Eventually(func() string {
			c := meta.FindStatusCondition(getRival().Status.Conditions, v1alpha1.ConditionReady)
			if c == nil {
				return ""
			}
			return c.Reason
		}, 30*time.Second, 200*time.Millisecond).Should(Equal(v1alpha1.ReasonDNSNameClaimed))
		start := getRing(ctx)
		startPublished := *start.Status.PublishedConfig
		Eventually(func() int {
			return publications(getRing(ctx), startPublished)
		}, 3*time.Minute, 250*time.Millisecond).Should(BeNumerically(">=", wantRotations))
		ring := getRing(ctx)

		By("the rival published nothing, and the record's TTL is the owner's")
		Expect(getRival().Status.PublishedConfig).To(BeNil())
		Expect(getRival().Status.Epoch).To(BeZero(), "the rival staged nothing")
		rrs, err := srv.Query(ctx, "www.example.test.", dns.TypeHTTPS)
		Expect(err).NotTo(HaveOccurred())
		Expect(rrs).NotTo(BeEmpty())
		Expect(rrs[0].Header().Ttl).To(BeEquivalentTo(ttl / time.Second))

		By("checking that each config reached DNS only after the lagging replica held it")
		for _, c := range ring.Status.Configs {
			if c.PublishedAt == nil || c.State == v1alpha1.ECHConfigState("staged") {
				continue
			}
			if seen, ok := seenByLagging.Load(uint8(c.ID)); ok && c.ID != startPublished {
				Expect(c.PublishedAt.Time).To(BeTemporally(">=", seen.(time.Time).Truncate(time.Second)), "config %d reached DNS before the lagging replica held it", c.ID)
			}
		}

		By("a client holding an expired config is rejected with retry configs, and succeeds with them")
		rejected := connectECH(ctx, f.Replicas[0].Addr, first)
		var rej *tls.ECHRejectionError
		Expect(errors.As(rejected.err, &rej)).To(BeTrue(), "the first config, long destroyed, was accepted or failed otherwise: %v", rejected.err)
		Expect(rej.RetryConfigList).NotTo(BeEmpty(), "no retry configs sent")
		retried := connectECH(ctx, f.Replicas[0].Addr, rej.RetryConfigList)
		Expect(retried.err).NotTo(HaveOccurred())
		Expect(retried.accepted).To(BeTrue())

		By("stopping knotd: nothing new is published, nothing destroyed before its time, and the ring says why")
		Expect(srv.Stop()).To(Succeed())
		Eventually(func() string {
			c := meta.FindStatusCondition(getRing(ctx).Status.Conditions, v1alpha1.ConditionReady)
			if c == nil {
				return ""
			}
			return c.Reason
		}, 30*time.Second, 200*time.Millisecond).Should(Equal(v1alpha1.ReasonDNSUnavailable))
		published := *getRing(ctx).Status.PublishedConfig
		// Watch the ring over a rotation and more: the published config
		// stays, a staged one stays staged, no config goes before its
		// expiresAt.
		deadline := time.Now().Add(interval + 5*time.Second)
		prev := getRing(ctx).Status.Configs
		for time.Now().Before(deadline) {
			cur := getRing(ctx)
			Expect(*cur.Status.PublishedConfig).To(Equal(published), "a config was published while DNS was down")
			for _, c := range prev {
				if c.ExpiresAt == nil || time.Now().Before(c.ExpiresAt.Add(-time.Second)) {
					Expect(cur.Status.Configs).To(ContainElement(HaveField("ID", c.ID)), "config %d was destroyed before its expiresAt", c.ID)
				}
			}
			prev = cur.Status.Configs
			time.Sleep(250 * time.Millisecond)
		}
		Expect(getRing(ctx).Status.Configs[0].State).To(BeEquivalentTo("staged"), "the next config waits, staged")

		By("restarting knotd: the waiting config is published")
		Expect(srv.Restart(ctx)).To(Succeed())
		Eventually(func() int32 { return *getRing(ctx).Status.PublishedConfig }, 45*time.Second, 200*time.Millisecond).ShouldNot(Equal(published))

		res := load.stop()
		stopWatch()
		timesMu.Lock()
		var toDNS []time.Duration
		for id, p := range publishedAt {
			if id != startPublished {
				toDNS = append(toDNS, p.Sub(staged[id]))
			}
		}
		timesMu.Unlock()
		sort.Slice(toDNS, func(i, j int) bool { return toDNS[i] < toDNS[j] })
		GinkgoWriter.Printf("ECH load: %d connections, %d accepted; of those with a config at most the TTL old, %d accepted and %d rejected (%.3f%% accepted); %d with an older config (DNS down) rejected with retry configs, %d of them then accepted; %d other failures; %d publications; staging to DNS %v (the lagging replica receives each epoch %s late)\n",
			res.conns, res.accepted, res.freshAccepted, res.freshRejected, 100*float64(res.freshAccepted)/float64(max(res.freshAccepted+res.freshRejected, 1)),
			res.staleRejected, res.retriedOK, res.failures, publications(getRing(ctx), startPublished), toDNS, lag)
		Expect(res.conns).To(BeNumerically(">=", 500))
		Expect(res.freshRejected).To(BeZero(), "a client with a config no older than the TTL was rejected: %v", res.errors)
		Expect(res.failures).To(BeZero(), "connections failed: %v", res.errors)
		Expect(res.retriedOK).To(Equal(res.staleRejected), "a rejected client did not succeed on retry")
	}, NodeTimeout(4*time.Minute))
})

var statusClient = &http.Client{Timeout: 2 * time.Second}

// createZone has the operator update srv's zone with TSIG, for rings of
// namespaces at the name www in it.
func createZone(ctx context.Context, srv *knot.Server, namespaces ...string) {
	GinkgoHelper()
	zone := strings.TrimSuffix(srv.Zone, ".")
	name := strings.ReplaceAll(zone, ".", "-")
	c := env.Cluster.Client
	tsig := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: fleet.OperatorNamespace, Name: name + "-tsig"}, Data: map[string][]byte{
		"name": []byte(srv.Key.Name), "algorithm": []byte(srv.Key.Algorithm), "secret": []byte(base64.StdEncoding.EncodeToString(srv.Key.Secret)),
	}}
	Expect(c.Create(ctx, tsig)).To(Succeed())
	Expect(c.Create(ctx, &v1alpha1.ClusterDNSZone{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.ClusterDNSZoneSpec{
		Zone: zone, Primary: srv.Addr, TSIGSecretRef: &v1alpha1.SecretReference{Name: tsig.Name},
		NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: namespaces}}},
		AllowedNames: []string{"www." + zone},
	}})).To(Succeed())
}

// publications counts the configs published after the one published at
// the start: each is a rotation.
func publications(r *v1alpha1.ECHKeyRing, start int32) int {
	n := 0
	for _, c := range r.Status.Configs {
		if c.PublishedAt != nil && c.ID != start {
			n++
		}
	}
	// Configs leave the status once destroyed: count by the id's distance
	// from the first, ids grow by one per config.
	if r.Status.PublishedConfig != nil {
		n = max(n, int(uint8(*r.Status.PublishedConfig-start)))
	}
	return n
}

// lookupECH asks the server, as a client's resolver would, for the HTTPS
// record of www in its zone and returns its ech parameter.
func lookupECH(ctx context.Context, srv *knot.Server) ([]byte, error) {
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	rrs, err := srv.Query(qctx, "www."+srv.Zone, dns.TypeHTTPS)
	if err != nil {
		return nil, err
	}
	for _, rr := range rrs {
		if h, ok := rr.(*dns.HTTPS); ok {
			for _, kv := range h.Value {
				if e, ok := kv.(*dns.SVCBECHConfig); ok {
					return e.ECH, nil
				}
			}
		}
	}
	return nil, nil
}

type echConn struct {
	accepted bool
	err      error
}

// connectECH connects to addr with list as the client's ECHConfigList.
func connectECH(ctx context.Context, addr string, list []byte) echConn {
	d := &tls.Dialer{Config: &tls.Config{ServerName: fleet.ServerName, RootCAs: env.PKI.Roots, MinVersion: tls.VersionTLS13,
		EncryptedClientHelloConfigList: list, NextProtos: []string{"http/1.1"}}}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return echConn{err: err}
	}
	defer c.Close()
	return echConn{accepted: c.(*tls.Conn).ConnectionState().ECHAccepted}
}

type echResult struct {
	conns, accepted, freshAccepted, freshRejected, staleRejected, retriedOK, failures int
	errors                                                                            []string
}

type echLoad struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	res    echResult
	done   atomic.Bool
}

// startECHLoad runs clients that each look the record up once its TTL has
// passed since their last lookup (keeping what they have while DNS does not
// answer), and connect to the replicas in turn every 20ms with it.
func startECHLoad(ctx context.Context, f *fleet.Fleet, srv *knot.Server, clients int, ttl time.Duration) *echLoad {
	lctx, cancel := context.WithCancel(ctx)
	l := &echLoad{cancel: cancel}
	for i := range clients {
		l.wg.Go(func() {
			var list []byte
			var fetched time.Time
			for n := i; lctx.Err() == nil; n++ {
				if time.Since(fetched) >= ttl {
					if got, err := lookupECH(lctx, srv); err == nil && len(got) > 0 {
						list, fetched = got, time.Now()
					}
				}
				age := time.Since(fetched)
				c := connectECH(lctx, f.Replicas[n%len(f.Replicas)].Addr, list)
				if lctx.Err() != nil {
					return
				}
				l.note(lctx, f, n, c, age <= ttl)
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	return l
}

func (l *echLoad) note(ctx context.Context, f *fleet.Fleet, n int, c echConn, fresh bool) {
	var rej *tls.ECHRejectionError
	retried := false
	if errors.As(c.err, &rej) && !fresh {
		r := connectECH(ctx, f.Replicas[n%len(f.Replicas)].Addr, rej.RetryConfigList)
		retried = r.err == nil && r.accepted
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.res.conns++
	switch {
	case c.err == nil && c.accepted:
		l.res.accepted++
		if fresh {
			l.res.freshAccepted++
		}
	case errors.As(c.err, &rej) && fresh:
		l.res.freshRejected++
		l.res.errors = append(l.res.errors, fmt.Sprintf("replica %d: %v", n%len(f.Replicas), c.err))
	case errors.As(c.err, &rej):
		l.res.staleRejected++
		if retried {
			l.res.retriedOK++
		}
	default:
		l.res.failures++
		if len(l.res.errors) < 10 {
			l.res.errors = append(l.res.errors, fmt.Sprintf("replica %d: accepted %v, %v", n%len(f.Replicas), c.accepted, c.err))
		}
	}
}

func (l *echLoad) stop() echResult {
	if l.done.CompareAndSwap(false, true) {
		l.cancel()
		l.wg.Wait()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.res
}
