//go:build integration

package plugin_test

import (
	"encoding/json"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/plugin"
)

var _ = Describe("ECH rings in status and audit", func() {
	It("shows an ECHKeyRing's conditions and configs, and audits it", func(ctx SpecContext) {
		namespace(ctx, "ech-plugin", nil)
		r := &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: "ech-plugin", Name: "web"}, Spec: v1alpha1.ECHKeyRingSpec{
			PublicName: "public.example.test", RotationInterval: metav1.Duration{Duration: time.Hour},
			DeliveryDelay: metav1.Duration{Duration: 5 * time.Minute}, RetirementMargin: metav1.Duration{Duration: 10 * time.Minute}, RetainedConfigs: 1,
			Confirmation: v1alpha1.Confirmation{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, Port: intstr.FromString("status"), Timeout: metav1.Duration{Duration: time.Minute}},
			DNS:          v1alpha1.ECHDNS{ZoneRef: v1alpha1.DNSZoneReference{Name: "no-such-zone"}, Name: "www.example.test", TTL: 300},
		}}
		Expect(k8s.Create(ctx, r)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(k8s.Delete(ctx, r)).To(Succeed()) })
		Eventually(func() string {
			got := &v1alpha1.ECHKeyRing{}
			Expect(k8s.Get(ctx, types.NamespacedName{Namespace: "ech-plugin", Name: "web"}, got)).To(Succeed())
			if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); c != nil {
				return c.Reason
			}
			return ""
		}, timeout, poll).Should(Equal(v1alpha1.ReasonDNSZoneNotFound))

		res := run(viewer, "status", "ekr/web", "-n", "ech-plugin")
		Expect(res.Code).To(Equal(0), res.Err)
		Expect(res.Out).To(HavePrefix("ECHKeyRing ech-plugin/web\n"))
		Expect(res.Out).To(ContainSubstring("  DNS:             HTTPS www.example.test, ClusterDNSZone no-such-zone, last verified never\n"))
		Expect(res.Out).To(MatchRegexp(`(?m)^  Ready\s+False\s+DNSZoneNotFound\s`))
		Expect(res.Out).To(ContainSubstring("Configs, newest first:\n  <none>\n"))
		Expect(res.Out).To(ContainSubstring("Problems:\n  Ready is False (DNSZoneNotFound)"))

		js := run(viewer, "status", "echkeyring/web", "-n", "ech-plugin", "-o", "json")
		Expect(js.Code).To(Equal(0), js.Err)
		var st plugin.ECHRingStatus
		Expect(json.Unmarshal([]byte(js.Out), &st)).To(Succeed())
		Expect(st.Kind).To(Equal("ECHKeyRing"))
		Expect(st.Spec.DNS.Name).To(Equal("www.example.test"))

		audit := run(viewer, "audit", "-n", "ech-plugin", "-o", "json")
		Expect(audit.Code).To(Equal(0), audit.Err)
		Expect(audit.Out).To(ContainSubstring(`"kind": "ECHKeyRing"`))
		Expect(audit.Out).To(ContainSubstring("DNSZoneNotFound"))

		rot := run(admin, "rotate", "ekr/web", "-n", "ech-plugin")
		Expect(rot.Code).To(Equal(1))
		Expect(rot.Err).To(ContainSubstring("only status and audit show them"))
	})
})
