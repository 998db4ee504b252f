//go:build integration

package certificatepolicy_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
)

// scaleSecrets is how many TLS Secrets the scale spec creates:
// $RINGMASTER_SCALE_SECRETS, or 5,000.
func scaleSecrets() int {
	if n, err := strconv.Atoi(os.Getenv("RINGMASTER_SCALE_SECRETS")); err == nil {
		return n
	}
	return 5000
}

var _ = Describe("CertificatePolicy at scale", Label("scale"), func() {
	// The Secrets stay until the control plane stops: deleting them would
	// only add a minute of API calls.
	It(fmt.Sprintf("judges %d TLS Secrets under one policy, and one Secret's change with one evaluation", scaleSecrets()), func() {
		ctx := context.Background()
		n := scaleSecrets()
		if n <= 0 {
			Skip("RINGMASTER_SCALE_SECRETS=0")
		}
		ns := newNamespace(ctx, nil)
		heap0 := liveHeap()
		start := time.Now()
		createSecrets(ctx, ns, n)
		created := time.Since(start)
		if reconciler.WatchingSecrets() {
			// Another spec's policy started the TLS Secret cache: every
			// Secret is observed before this policy exists. Otherwise the
			// policy starts the cache and is judged once it has observed
			// them all.
			Eventually(func() error {
				list := &corev1.SecretList{}
				if err := reconciler.SecretCache.List(ctx, list, client.InNamespace(ns)); err != nil {
					return err
				}
				if len(list.Items) != n {
					return fmt.Errorf("%d of %d cached", len(list.Items), n)
				}
				return nil
			}, 2*time.Minute, poll).Should(Succeed())
			Eventually(func() int { return seriesIn("ringmaster_certificate_not_after_timestamp_seconds", ns) }, time.Minute, poll).Should(Equal(n),
				"every Secret observed before the policy exists")
		}
		observed := time.Since(start)

		By("a new policy: one full evaluation")
		evals, writes := evaluations(), statusWrites()
		start = time.Now()
		policy := createPolicy(ctx, "scale-"+ns, v1alpha1.CertificatePolicySpec{
			Selector: v1alpha1.CertificateSelector{NamespaceSelector: onlyNamespace(ns)},
			Rules:    v1alpha1.CertificateRules{MaxValidity: dur(90 * day), MaxKeyAge: dur(90 * day)},
		})
		waitCounts(ctx, policy.Name, counts{Evaluated: int32(n), Compliant: int32(n - n/10), Violating: int32(n / 10)})
		full := time.Since(start)
		Expect(evaluations() - evals).To(BeEquivalentTo(n))
		Expect(statusWrites() - writes).To(BeEquivalentTo(1))
		st := getPolicy(ctx, policy.Name).Status
		Expect(st.Violations).To(HaveLen(50))
		Expect(st.ViolationsOmitted).To(BeEquivalentTo(n/10 - 50))

		By("a changed policy: evaluated afresh")
		start = time.Now()
		patchPolicy(ctx, policy.Name, func(p *v1alpha1.CertificatePolicy) { p.Spec.Rules.MaxValidity = dur(400 * day) })
		waitCounts(ctx, policy.Name, counts{Evaluated: int32(n), Compliant: int32(n)})
		again := time.Since(start)

		By("one Secret changed: one evaluation")
		evals = evaluations()
		start = time.Now()
		updateSecret(ctx, ns, "s-00001", func(s *corev1.Secret) {
			s.Data[corev1.TLSCertKey] = []byte("garbage")
		})
		waitCounts(ctx, policy.Name, counts{Evaluated: int32(n), Compliant: int32(n - 1), Violating: 1})
		one := time.Since(start)
		Expect(evaluations() - evals).To(BeEquivalentTo(1))

		heap := liveHeap()
		perSecret := float64(heap-heap0) / float64(n)
		report := fmt.Sprintf("%d TLS Secrets: created in %v, all observed after %v; new policy judged and status written in %v; changed policy in %v; one Secret's change reflected in %v (1 evaluation, includes the %v aggregation delay); live heap grew %.1f MiB (%.0f bytes per Secret: cache, facts, verdicts)",
			n, created.Round(time.Millisecond), observed.Round(time.Millisecond), full.Round(time.Millisecond), again.Round(time.Millisecond), one.Round(time.Millisecond), time.Second,
			float64(heap-heap0)/(1<<20), perSecret)
		AddReportEntry("scale", report)
		GinkgoWriter.Println(report)
		fmt.Fprintln(os.Stderr, "scale:", report)
	})
})

// liveHeap is the heap in use after a collection: what the process retains.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// createSecrets creates n TLS Secrets s-00000... with fresh P-256 keys and
// certificates signed by one CA; one in ten is valid for 397 days, which a
// 90-day maxValidity forbids.
func createSecrets(ctx context.Context, ns string, n int) {
	GinkgoHelper()
	ca, err := testpki.NewCA("scale CA")
	Expect(err).NotTo(HaveOccurred())
	fast := rest.CopyConfig(env.Config)
	fast.QPS, fast.Burst = 2000, 4000
	c, err := client.New(fast, client.Options{Scheme: k8s.Scheme()})
	Expect(err).NotTo(HaveOccurred())

	const workers = 8
	var (
		wg   sync.WaitGroup
		errs = make(chan error, workers)
		jobs = make(chan int)
	)
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				if err := createOne(ctx, c, ns, i, ca); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	close(errs)
	Expect(<-errs).NotTo(HaveOccurred())
}

func createOne(ctx context.Context, c client.Client, ns string, i int, ca *testpki.CA) error {
	validity := 60 * day
	if i%10 == 0 {
		validity = 397 * day
	}
	now := fakeClock.Now()
	leaf, err := ca.Issue(testpki.Leaf{DNSNames: []string{fmt.Sprintf("s%d.example.com", i)}, NotBefore: now.Add(-day), NotAfter: now.Add(validity - day)})
	if err != nil {
		return err
	}
	return c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("s-%05d", i)},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			corev1.TLSCertKey:       leaf.CertPEM,
			corev1.TLSPrivateKeyKey: leaf.KeyPEM,
		},
	})
}

// seriesIn counts the series of a metric in one namespace.
func seriesIn(name, ns string) int {
	GinkgoHelper()
	n, err := testenv.Series(registry, name, map[string]string{"namespace": ns})
	Expect(err).NotTo(HaveOccurred())
	return n
}
