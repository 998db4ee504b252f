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
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/controller"
	"github.com/ringmaster-io/ringmaster/internal/operator"
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

	It("still serves the rings of the listed namespaces, as that ServiceAccount with the chart's flags", func() {
		token, err := env.Token(ctx, sa, nil)
		Expect(err).NotTo(HaveOccurred())
		cfg := &rest.Config{Host: env.Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: env.Config.CAData}, BearerToken: token}

		stopManager()
		DeferCleanup(startManager)
		op, stop, err := testenv.RunOperator(cfg, operator.Options{
			MetricsAddr: "0", ProbeAddr: "0", LeaderElection: true,
			LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: time.Second,
			SkipNameValidation: true, WatchNamespaces: []string{rings},
			Options: controller.Options{Namespace: testenv.Namespace, ServiceAccount: sa, Clock: fakeClock, MintTimeout: mintTimeout,
				Registry: prometheus.NewRegistry(), NoCertificatePolicy: true},
		})
		Expect(err).NotTo(HaveOccurred(), "the operator starts and leads with the narrow RBAC")
		DeferCleanup(func() { Expect(stop()).To(Succeed()) })
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
