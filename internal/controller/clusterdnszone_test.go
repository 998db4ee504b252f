//go:build integration

package controller_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
)

// A ClusterDNSZone's Ready says whether its TSIG Secret, in the operator's
// namespace and nowhere else, holds a key the operator can sign with.
var _ = Describe("ClusterDNSZone", func() {
	ctx := context.Background()

	zoneReady := func(name string, generation int64) func() string {
		return func() string {
			z := &v1alpha1.ClusterDNSZone{}
			Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, z)).To(Succeed())
			c := meta.FindStatusCondition(z.Status.Conditions, v1alpha1.ConditionReady)
			if c == nil || c.ObservedGeneration != generation || z.Status.ObservedGeneration != generation {
				return ""
			}
			return string(c.Status) + " " + c.Reason + ": " + c.Message
		}
	}
	secret := func(ns, name string, data map[string]string) {
		GinkgoHelper()
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: data}
		Expect(k8s.Create(ctx, s)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(context.Background(), s) })
	}
	refer := func(name, secretName string) {
		GinkgoHelper()
		Expect(testenv.Update(ctx, k8s, &v1alpha1.ClusterDNSZone{ObjectMeta: metav1.ObjectMeta{Name: name}}, func(z *v1alpha1.ClusterDNSZone) {
			z.Spec.TSIGSecretRef.Name = secretName
		})).To(Succeed())
	}

	It("is Ready once its TSIG Secret in the operator's namespace holds a well-formed key", func() {
		n := time.Now().UnixNano()
		name, missing, bad, good := fmt.Sprintf("zone-%d", n), fmt.Sprintf("tsig-missing-%d", n), fmt.Sprintf("tsig-bad-%d", n), fmt.Sprintf("tsig-%d", n)
		key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
		// A Secret of that name outside the operator's namespace is not read.
		secret("default", missing, map[string]string{"name": "ringmaster.", "secret": key})
		z := &v1alpha1.ClusterDNSZone{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.ClusterDNSZoneSpec{
			Zone: "example.test", Primary: "127.0.0.1:53", TSIGSecretRef: &v1alpha1.SecretReference{Name: missing},
			NamespaceSelector: &metav1.LabelSelector{}, AllowedNames: []string{"www.example.test"},
		}}
		Expect(k8s.Create(ctx, z)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(context.Background(), z) })
		Eventually(zoneReady(name, 1), timeout, poll).Should(Equal(
			"False " + v1alpha1.ReasonTSIGSecretNotFound + ": Secret " + testenv.Namespace + "/" + missing + " named by spec.tsigSecretRef does not exist"))
		Eventually(func() []string {
			var notes []string
			for _, e := range warnings(ctx, "default", v1alpha1.ReasonTSIGSecretNotFound)() {
				if e.Regarding.Name == name {
					notes = append(notes, e.Note)
				}
			}
			return notes
		}, timeout, poll).Should(HaveLen(1))

		secret(testenv.Namespace, bad, map[string]string{"name": "ringmaster.", "secret": "hunter2 is no key"})
		refer(name, bad)
		Eventually(zoneReady(name, 2), timeout, poll).Should(Equal(
			"False " + v1alpha1.ReasonTSIGSecretInvalid + ": Secret " + testenv.Namespace + "/" + bad + ": the TSIG Secret's secret is not base64 text (as tsig-keygen or keymgr print it)"))

		secret(testenv.Namespace, good, map[string]string{"name": "ringmaster.", "algorithm": "hmac-sha512", "secret": key})
		refer(name, good)
		Eventually(zoneReady(name, 3), timeout, poll).Should(Equal(
			"True " + v1alpha1.ReasonZoneReady + ": updates to 127.0.0.1:53 are signed with TSIG key ringmaster. (hmac-sha512)"))
	})

	It("is Ready in verify-only mode without a TSIG Secret", func() {
		name := fmt.Sprintf("zone-verify-%d", time.Now().UnixNano())
		z := &v1alpha1.ClusterDNSZone{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.ClusterDNSZoneSpec{
			Zone: "example.test", Servers: []string{"127.0.0.1:53"}, AllowedNames: []string{"*.example.test"},
		}}
		Expect(k8s.Create(ctx, z)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(context.Background(), z) })
		Eventually(zoneReady(name, 1), timeout, poll).Should(Equal(
			"True " + v1alpha1.ReasonZoneReady + ": verify-only: the operator checks the record and writes nothing"))
	})
})
