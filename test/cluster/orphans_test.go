//go:build cluster

package cluster_test

import (
	"bytes"
	"encoding/base64"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
)

// orphansDestroyed deletes two rings with kubectl delete --cascade=orphan,
// so that kube-controller-manager's garbage collector strips their
// Secrets' owner references and keeps them: one is left alone, and every
// Secret it left is gone by the expiry of the first key it holds, after
// which no Secret of the namespace holds a byte of any key expired; the
// other is created again at once, and serves without a SecretConflict. The
// rings rotate every minute with no decrypt-only key, so that their first
// key expires about a minute after they publish.
func orphansDestroyed(ctx SpecContext) {
	const ns = "orphans"
	start := time.Now()
	spec := func(name string) fleet.RingSpec {
		return fleet.RingSpec{Namespace: ns, Name: name, RotationInterval: time.Minute, ActivationDelay: 10 * time.Second, RetainedKeys: 0}
	}
	type left struct {
		uid    types.UID
		expiry time.Time
		keys   []keyring.Key
	}
	secretsOf := func(ring string) []corev1.Secret {
		GinkgoHelper()
		list := &corev1.SecretList{}
		Expect(cl.Client.List(ctx, list, inNamespace(ns), matchingLabels(map[string]string{v1alpha1.RingLabel: ring}))).To(Succeed())
		return list.Items
	}
	for _, name := range []string{"left", "again"} {
		_, err := cl.CreateRing(ctx, spec(name))
		Expect(err).NotTo(HaveOccurred())
	}
	_, err := run(ctx, cl.Kubectl, "delete", "ticketkeyrings", "left", "again", "-n", ns, "--cascade=orphan", "--wait", "--timeout=60s")
	Expect(err).NotTo(HaveOccurred())

	By("the garbage collector orphaning the rings' Secrets")
	orphans := map[string]left{}
	Eventually(func(g Gomega) {
		for _, ring := range []string{"left", "again"} {
			secrets := secretsOf(ring)
			g.Expect(secrets).NotTo(BeEmpty())
			for _, s := range secrets {
				g.Expect(s.OwnerReferences).To(BeEmpty(), "%s stripped by the collector", s.Name)
			}
		}
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
	for _, ring := range []string{"left", "again"} {
		for _, s := range secretsOf(ring) {
			r, err := keyring.Decode(s.Data[keyring.FileName])
			Expect(err).NotTo(HaveOccurred())
			expiry, ok := distribute.AnnotatedExpiry(&s)
			Expect(ok).To(BeTrue(), "%s carries its first key's expiry", s.Name)
			orphans[ring+"/"+s.Name] = left{uid: s.UID, expiry: expiry, keys: r.Keys}
		}
	}

	By("a ring created again under a name taking its place at once")
	again, err := cl.CreateRing(ctx, spec("again"))
	Expect(err).NotTo(HaveOccurred())
	Expect(again.Status.Conditions).NotTo(ContainElement(HaveField("Reason", v1alpha1.ReasonSecretConflict)))
	owner := distribute.OwnerOf(again)
	Eventually(func(g Gomega) {
		for _, s := range secretsOf("again") {
			g.Expect(owner.Owns(&s)).To(BeTrue(), "%s is the new ring's", s.Name)
		}
	}).WithContext(ctx).WithTimeout(30 * time.Second).WithPolling(time.Second).Should(Succeed())

	By("what the other left kept while its keys live, and gone when the first of them expires")
	var first time.Time
	for name, o := range orphans {
		if strings.HasPrefix(name, "left/") && (first.IsZero() || o.expiry.Before(first)) {
			first = o.expiry
		}
	}
	Expect(first).NotTo(BeZero())
	if time.Until(first) > 5*time.Second {
		for _, s := range secretsOf("left") {
			Expect(s.UID).To(Equal(orphans["left/"+s.Name].uid), "kept before its keys expire")
		}
	}
	for name, o := range orphans {
		if !strings.HasPrefix(name, "left/") {
			continue
		}
		// The orphan controller deletes at the expiry itself; the margin is
		// its reconcile and the informer's delay, not a bound.
		Eventually(func() []corev1.Secret { return secretsOf("left") }).WithContext(ctx).
			WithTimeout(time.Until(o.expiry)+15*time.Second).WithPolling(500*time.Millisecond).
			ShouldNot(ContainElement(HaveField("UID", o.uid)), "%s gone by its first key's expiry", name)
		GinkgoWriter.Printf("Orphaned %s gone %s after its first key's expiry (%s after the ring's creation)\n", name,
			time.Since(o.expiry).Round(100*time.Millisecond), time.Since(start).Round(time.Second))
	}

	By("no Secret of the namespace holding a byte of an expired key")
	all := &corev1.SecretList{}
	Expect(cl.Client.List(ctx, all, inNamespace(ns))).To(Succeed())
	expired := 0
	for _, o := range orphans {
		for _, k := range o.keys {
			if time.Now().Before(k.ExpiresAt) {
				continue
			}
			expired++
			for _, s := range all.Items {
				for file, data := range s.Data {
					Expect(bytes.Contains(data, k.Secret[:])).To(BeFalse(), "key %s in %s/%s", k.ID, s.Name, file)
					Expect(bytes.Contains(data, []byte(base64.StdEncoding.EncodeToString(k.Secret[:])))).To(BeFalse(), "key %s in %s/%s", k.ID, s.Name, file)
				}
			}
		}
	}
	Expect(expired).To(BeNumerically(">", 0))
	GinkgoWriter.Printf("After the orphan delete: %d expired keys in no Secret of %d, %s in all\n", expired, len(all.Items), time.Since(start).Round(time.Second))
}
