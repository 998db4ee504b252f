//go:build integration

package controller_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/controller"
	"github.com/ringmaster-io/ringmaster/internal/operator"
	"github.com/ringmaster-io/ringmaster/internal/testing/knot"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
)

// The chart installed without the CertificatePolicy audit and with its ring
// namespaces listed: its rendered RBAC, on the real API server, grants no
// Secret outside those namespaces, and an operator running as that
// ServiceAccount with the flags the chart passes still serves the rings
// there.
var _ = Describe("The chart without the CertificatePolicy audit, its ring namespaces listed", Ordered, func() {
	const sa = "narrow"
	var (
		ctx           context.Context
		rings, others string
	)
	user := "system:serviceaccount:" + testenv.Namespace + ":" + sa

	BeforeAll(func() {
		ctx = context.Background()
		rings, others = newNamespace(ctx), newNamespace(ctx)
		Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: testenv.Namespace, Name: sa}})).To(Succeed())
		for _, obj := range renderChartRBAC(sa, "--set", "certificatePolicy.enabled=false", "--set", "watchNamespaces={"+rings+"}") {
			Expect(k8s.Create(ctx, obj)).To(Succeed(), "%s %s", obj.GetKind(), obj.GetName())
		}
	})

	// can asks the API server's authorizer what the chart's ServiceAccount
	// may do, as kubectl auth can-i --as does.
	can := func(verb, resource, ns string) bool {
		group := ""
		if r, g, ok := strings.Cut(resource, "."); ok {
			resource, group = r, g
		}
		GinkgoHelper()
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               user,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + testenv.Namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Resource: resource},
		}}
		Expect(k8s.Create(ctx, sar)).To(Succeed())
		return sar.Status.Allowed
	}

	It("grants no Secret and no pod outside the listed namespaces and the release's", func() {
		for _, verb := range []string{"get", "list", "watch"} {
			Expect(can(verb, "secrets", others)).To(BeFalse(), "%s secrets in a namespace without rings", verb)
			Expect(can(verb, "secrets", "")).To(BeFalse(), "%s secrets cluster-wide", verb)
			Expect(can(verb, "secrets", rings)).To(BeTrue(), "%s secrets in the ring namespace", verb)
			Expect(can(verb, "secrets", testenv.Namespace)).To(BeTrue(), "%s secrets in the release namespace", verb)
		}
		Expect(can("list", "pods", others)).To(BeFalse())
		Expect(can("list", "pods", rings)).To(BeTrue())
		Expect(can("delete", "secrets", others)).To(BeFalse())
		Expect(can("list", "certificates.cert-manager.io", others)).To(BeFalse(), "nothing of the audit")
		Expect(can("list", "ticketkeyrings.ringmaster.io", "")).To(BeTrue(), "rings are read cluster-wide, as ever")
	})

	// runNarrow stops the suite's operator and runs one as that
	// ServiceAccount with the chart's flags until the spec ends, when the
	// suite's starts again.
	runNarrow := func() *operator.Operator {
		GinkgoHelper()
		token, err := env.Token(ctx, sa, nil)
		Expect(err).NotTo(HaveOccurred())
		cfg := &rest.Config{Host: env.Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: env.Config.CAData}, BearerToken: token}

		stopManager()
		DeferCleanup(startManager)
		op, stop, err := testenv.RunOperator(cfg, operator.Options{
			MetricsAddr: "0", ProbeAddr: "0", LeaderElection: true,
			LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: time.Second,
			SkipNameValidation: true, WatchNamespaces: []string{rings}, NoCertificatePolicy: true,
			Options: controller.Options{Namespace: testenv.Namespace, ServiceAccount: sa, Clock: fakeClock, MintTimeout: mintTimeout,
				Registry: prometheus.NewRegistry()},
		})
		Expect(err).NotTo(HaveOccurred(), "the operator starts and leads with the narrow RBAC")
		DeferCleanup(func() { Expect(stop()).To(Succeed()) })
		return op
	}

	It("still serves the rings of the listed namespaces, as that ServiceAccount with the chart's flags", func() {
		op := runNarrow()
		Expect(op.CertificatePolicy).To(BeNil(), "the audit is not started")

		served := createRing(ctx, rings, "web", nil)
		waitEpoch(ctx, served, 1)
		Expect(ringReason(ctx, served)()).To(Equal(v1alpha1.ReasonPublished))
		Expect(decode(getSecret(ctx, rings, "web-ticket-keys")).Keys).NotTo(BeEmpty())
		fakeClock.Step(time.Hour)
		poke(ctx, served)
		waitEpoch(ctx, served, 2)

		ignored := createRing(ctx, others, "web", nil)
		flushRing(ctx, served)
		Expect(getRing(ctx, ignored).Status.Epoch).To(BeZero(), "a ring outside the listed namespaces is not served")
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: others, Name: "web-e1"}, &corev1.Secret{}))).To(BeTrue())
	})
})

// A DNS name whose recorded owner is in a namespace the operator no longer
// watches blocks that name alone: its record is left as it is, and said so
// once, not retried for ever; the other names are served.
var _ = Describe("A DNS name owned outside the listed namespaces", Ordered, func() {
	const sa = "narrow-dns"
	var (
		ctx           context.Context
		rings, others string
	)

	BeforeAll(func() {
		ctx = context.Background()
		rings, others = newNamespace(ctx), newNamespace(ctx)
		Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: testenv.Namespace, Name: sa}})).To(Succeed())
		for _, obj := range renderChartRBAC(sa, "--set", "certificatePolicy.enabled=false", "--set", "watchNamespaces={"+rings+"}") {
			Expect(k8s.Create(ctx, obj)).To(Succeed(), "%s %s", obj.GetKind(), obj.GetName())
		}
	})

	It("is left as it is and reported once; the operator serves the other names", func() {
		srv := knot.Run(GinkgoT(), "example.test.", knot.Key{})
		z := sharedZone(ctx, "narrow-"+rings, srv.Addr, srv.Key, rings, others)
		Expect(testenv.Update(ctx, k8s, &v1alpha1.ClusterDNSZone{ObjectMeta: metav1.ObjectMeta{Name: z.Name}}, func(z *v1alpha1.ClusterDNSZone) {
			z.Spec.AllowedNames = []string{"*.example.test"}
		})).To(Succeed())

		By("a ring of a namespace not yet excluded takes www, as every namespace is watched")
		away := &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: others, Name: "web", Annotations: map[string]string{}}, Spec: echSpec(z.Name)}
		Expect(k8s.Create(ctx, away)).To(Succeed())
		Eventually(func() []coordinationv1.Lease { return dnsRecords(ctx, "www.example.test") }, timeout, poll).Should(ConsistOf(
			HaveField("Spec.HolderIdentity", HaveValue(Equal(others+"/web")))))
		record := dnsRecords(ctx, "www.example.test")[0]

		By("the operator now watching only the listed namespaces: a ring there naming www waits, and the record stays as it is")
		user := "system:serviceaccount:" + testenv.Namespace + ":" + sa
		token, err := env.Token(ctx, sa, nil)
		Expect(err).NotTo(HaveOccurred())
		cfg := &rest.Config{Host: env.Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: env.Config.CAData}, BearerToken: token}
		mark := len(operatorLog.String())
		stopManager()
		DeferCleanup(startManager)
		_, stop, err := testenv.RunOperator(cfg, operator.Options{
			MetricsAddr: "0", ProbeAddr: "0", LeaderElection: true,
			LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: time.Second,
			SkipNameValidation: true, WatchNamespaces: []string{rings}, NoCertificatePolicy: true,
			Options: controller.Options{Namespace: testenv.Namespace, ServiceAccount: sa, Clock: fakeClock, MintTimeout: mintTimeout,
				Registry: prometheus.NewRegistry()},
		})
		Expect(err).NotTo(HaveOccurred(), "the operator starts and leads as %s", user)
		DeferCleanup(func() { Expect(stop()).To(Succeed()) })
		here := &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: rings, Name: "web", Annotations: map[string]string{}}, Spec: echSpec(z.Name)}
		Expect(k8s.Create(ctx, here)).To(Succeed())
		Eventually(func() string { return readyReason(getECH(ctx, here).Status.Conditions) }, timeout, poll).Should(Equal(v1alpha1.ReasonDNSNameClaimed))
		notWatched := func() []eventsv1.Event {
			var out []eventsv1.Event
			for _, e := range warnings(ctx, "default", v1alpha1.ReasonDNSNameOwnerNotWatched)() {
				if e.Regarding.Name == z.Name {
					out = append(out, e)
				}
			}
			return out
		}
		Eventually(notWatched, timeout, poll).Should(ConsistOf(HaveField("Note", And(ContainSubstring("www.example.test"), ContainSubstring(others+"/web")))))

		By("the other names are served, however often the blocked one is looked at")
		api := &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: rings, Name: "api", Annotations: map[string]string{}}, Spec: echSpec(z.Name)}
		api.Spec.DNS.Name = "api.example.test"
		api.Spec.Distribution.SecretName = "api-ech-keys"
		Expect(k8s.Create(ctx, api)).To(Succeed())
		Eventually(func() []coordinationv1.Lease { return dnsRecords(ctx, "api.example.test") }, timeout, poll).Should(ConsistOf(
			HaveField("Spec.HolderIdentity", HaveValue(Equal(rings+"/api")))))
		Eventually(func() []string { return configStates(getECH(ctx, api)) }, timeout, poll).Should(Equal([]string{"1:staged"}))
		for range 5 {
			pokeECH(ctx, here)
			time.Sleep(200 * time.Millisecond)
		}
		Consistently(notWatched, 2*time.Second, poll).Should(HaveLen(1), "reported once")
		Expect(dnsRecords(ctx, "www.example.test")).To(ConsistOf(And(HaveField("ResourceVersion", record.ResourceVersion),
			HaveField("Spec.HolderIdentity", HaveValue(Equal(others+"/web"))))), "the record is left as it is")
		Expect(readyReason(getECH(ctx, here).Status.Conditions)).To(Equal(v1alpha1.ReasonDNSNameClaimed))
		Expect(operatorLog.String()[mark:]).NotTo(MatchRegexp(`Reconciler error.*"controller": "dnsname".*www\.example\.test`), "the blocked name is not retried with an error")
	})
})

// flushRing waits until the operator has handled a ring's events so far: a
// rotation requested now has been carried out.
func flushRing(ctx context.Context, ring *v1alpha1.TicketKeyRing) {
	GinkgoHelper()
	epoch := getRing(ctx, ring).Status.Epoch
	fakeClock.Step(time.Hour)
	poke(ctx, ring)
	waitEpoch(ctx, ring, epoch+1)
}

// renderChartRBAC renders the chart's RBAC (templates/rbac.yaml) with the
// given helm flags, for the release namespace of the suite's operator and
// the ServiceAccount sa, as helm install would create it.
func renderChartRBAC(sa string, flags ...string) []*unstructured.Unstructured {
	GinkgoHelper()
	helm := os.Getenv("RINGMASTER_HELM")
	if helm == "" {
		helm = filepath.Join(testenv.Root(), "bin", "helm")
	}
	_, err := os.Stat(helm)
	Expect(err).NotTo(HaveOccurred(), "Helm is missing: make helm builds it (make test-integration does)")
	args := append([]string{"template", sa, filepath.Join(testenv.Root(), "charts", "ringmaster"), "--namespace", testenv.Namespace,
		"--kube-version", "1.37.2", "--set", "fullnameOverride=" + sa, "--set", "serviceAccount.name=" + sa,
		"--show-only", "templates/rbac.yaml"}, flags...)
	var stderr bytes.Buffer
	cmd := exec.Command(helm, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	Expect(err).NotTo(HaveOccurred(), "helm template: %s", stderr.String())
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			Expect(err).NotTo(HaveOccurred())
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	Expect(objs).NotTo(BeEmpty())
	return objs
}
