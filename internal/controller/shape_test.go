//go:build integration

package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/shape"
	"github.com/ringmaster-io/ringmaster/internal/testing/maximal"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
)

// maxKept is what the operator's caches may keep of any one object, as
// JSON, whatever its author made it (shape_test.go in internal/shape holds
// the same bound for the shapes alone).
const maxKept = 4 << 10

var _ = Describe("The operator's caches", func() {
	It("make no informer without a shape, and keep of a maximal object of every kind they hold a few KiB", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		seed := ns
		By("making every cache the operator starts on demand run: the pods', the TLS Secrets'")
		ca, err := testpki.NewCA("maximal objects")
		Expect(err).NotTo(HaveOccurred())
		leaf, err := ca.Issue(testpki.Leaf{DNSNames: []string{"web.example.com"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)})
		Expect(err).NotTo(HaveOccurred())
		small := createRing(ctx, ns, "small", nil)
		waitEpoch(ctx, small, 1)

		By("storing a maximal object of each kind")
		var objs []client.Object
		for _, o := range maximal.Objects(ns, testenv.Namespace, "maximal-"+ns, seed, true, small.ProjectionSecretName(), leaf.CertPEM, leaf.KeyPEM) {
			err := k8s.Create(ctx, o)
			if _, ring := o.(*corev1.Secret); ring && o.(*corev1.Secret).Type != corev1.SecretTypeTLS && err != nil {
				// The admission guard, where a suite installs it, lets no
				// one but the operator write ringmaster's Secrets.
				GinkgoWriter.Printf("ringmaster's Secret refused: %v\n", err)
				continue
			}
			Expect(err).NotTo(HaveOccurred(), "create %T", o)
			objs = append(objs, o)
			DeferCleanup(func(ctx context.Context) {
				// Its finalizers first, or it would stay.
				o.SetFinalizers(nil)
				_ = client.IgnoreNotFound(k8s.Update(ctx, o))
				_ = client.IgnoreNotFound(k8s.Delete(ctx, o))
			})
		}
		_, err = suite.Operator.Pods.Mounting(ctx, ns, small.ProjectionSecretName())
		Expect(err).NotTo(HaveOccurred())
		Eventually(suite.Operator.CertificatePolicy.WatchingSecrets, timeout, poll).Should(BeTrue())

		By("reading each back from the cache that holds it")
		scheme := suite.Operator.GetScheme()
		kept := map[schema.GroupKind][]int{}
		for _, o := range objs {
			gvk, err := apiutil.GVKForObject(o, scheme)
			Expect(err).NotTo(HaveOccurred())
			got := cached(ctx, o)
			data, err := json.Marshal(got)
			Expect(err).NotTo(HaveOccurred())
			GinkgoWriter.Printf("%s %s: %d bytes kept\n", gvk.Kind, o.GetName(), len(data))
			Expect(len(data)).To(BeNumerically("<=", maxKept), "what the cache keeps of a maximal %s", gvk.Kind)
			kept[gvk.GroupKind()] = append(kept[gvk.GroupKind()], len(data))
		}
		// The operator's own Secrets are kept whole: a snapshot, a
		// projection's digest.
		for _, name := range []string{small.ProjectionSecretName(), "small-e1"} {
			s := &corev1.Secret{}
			Expect(operatorCache.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s)).To(Succeed())
			Expect(s.Data).NotTo(BeEmpty(), "the operator's own Secret %s is kept", name)
			if name == "small-e1" {
				Expect(decode(s).Keys).NotTo(BeEmpty(), "a snapshot is kept whole")
			}
			kept[schema.GroupKind{Kind: "Secret"}] = append(kept[schema.GroupKind{Kind: "Secret"}], 0)
		}

		By("walking every informer the operator's caches made: each has a shape, and its kind was measured")
		made := suite.Operator.Shapes.Informers()
		Expect(made).NotTo(BeEmpty())
		for _, gvk := range made {
			_, ok := suite.Operator.Shapes.Shape(gvk.GroupKind())
			Expect(ok).To(BeTrue(), "an informer of %s has no shape", gvk)
			Expect(kept).To(HaveKey(gvk.GroupKind()), "no maximal %s was measured: give internal/testing/maximal one", gvk.GroupKind())
		}

		By("a ring whose selectors were not kept says so, and mints nothing")
		tkr := &v1alpha1.TicketKeyRing{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "maximal-" + ns}, tkr)).To(Succeed())
			ready := meta.FindStatusCondition(tkr.Status.Conditions, v1alpha1.ConditionReady)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(ready.Reason).To(Equal(v1alpha1.ReasonInvalidSpec))
			g.Expect(ready.Message).To(ContainSubstring(shape.CutPodSelector))
		}, timeout, poll).Should(Succeed())
		Expect(tkr.Status.Keys).To(BeEmpty())
	})
})

// cached is what the operator's caches hold of o: the manager's cache,
// the TLS Secret cache, or the pod cache.
func cached(ctx context.Context, o client.Object) client.Object {
	GinkgoHelper()
	key := client.ObjectKeyFromObject(o)
	var out client.Object
	Eventually(func(g Gomega) {
		switch x := o.(type) {
		case *corev1.Pod:
			pods, err := suite.Operator.Pods.Mounting(ctx, x.Namespace, x.Spec.Volumes[0].Secret.SecretName)
			g.Expect(err).NotTo(HaveOccurred())
			var found *corev1.Pod
			for i := range pods {
				if pods[i].Name == x.Name {
					found = &pods[i]
				}
			}
			g.Expect(found).NotTo(BeNil(), "pod %s in the pod cache", key)
			out = found
		case *corev1.Secret:
			s := &corev1.Secret{}
			c := operatorCache
			if x.Type == corev1.SecretTypeTLS {
				c = suite.Operator.CertificatePolicy.SecretCache
			}
			g.Expect(c.Get(ctx, key, s)).To(Succeed())
			out = s
		default:
			fresh := o.DeepCopyObject().(client.Object)
			g.Expect(operatorCache.Get(ctx, key, fresh)).To(Succeed())
			out = fresh
		}
	}, timeout, poll).Should(Succeed(), fmt.Sprintf("%T %s in the operator's caches", o, key))
	return out
}
