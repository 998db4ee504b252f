//go:build integration

package plugin_test

import (
	"context"
	"regexp"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

var _ = Describe("a FleetRequest", func() {
	ctx := context.Background()

	It("rotates every ring a namespace selector selects with one request, follows it to its last ring, and status lists it", func() {
		namespace(ctx, "fleet-a", map[string]string{"incident": "7"})
		namespace(ctx, "fleet-b", map[string]string{"incident": "7"})
		for _, ns := range []string{"fleet-a", "fleet-b"} {
			Expect(k8s.Create(ctx, ring(ns, "web", 3600e9, 1e9))).To(Succeed())
		}
		before := map[string]int64{}
		for _, ns := range []string{"fleet-a", "fleet-b"} {
			before[ns] = published(ns, "web").Status.Epoch
		}

		res := run(admin, "rotate", "--namespace-selector", "incident=7", "--timeout", "1m")
		Expect(res.Code).To(Equal(0), res.Err)
		Expect(res.Out).To(MatchRegexp(`^Created FleetRequest rotate-\S+: Rotate of every ring it selects \(namespaces incident=7\)\n`))
		Expect(res.Out).To(ContainSubstring("[##############################] 2/2 rings served"))
		Expect(res.Out).To(MatchRegexp(`Completed FleetRequest rotate-\S+: 2 rings served, the last at \S+; 0 of 0 pods confirmed`))
		name := regexp.MustCompile(`FleetRequest (rotate-\S+):`).FindStringSubmatch(res.Out)[1]
		for _, ns := range []string{"fleet-a", "fleet-b"} {
			r := getRing(ns, "web")
			Expect(r.Status.Epoch).To(Equal(before[ns]+1), "rotated once")
			Expect(r.Status.FleetRequest).NotTo(BeNil())
			Expect(r.Status.FleetRequest.Name).To(Equal(name))
		}
		fr := &v1alpha1.FleetRequest{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, fr)).To(Succeed())
		Expect(meta.IsStatusConditionTrue(fr.Status.Conditions, v1alpha1.ConditionComplete)).To(BeTrue())

		res = run(viewer, "status")
		Expect(res.Code).To(Equal(0), res.Err)
		Expect(res.Out).To(MatchRegexp(`(?m)^FLEET REQUEST\s+ACTION\s+COMPLETE\s+SERVED\s+PODS\s+WAITING\s+AGE\s+SELECTS\n`))
		Expect(res.Out).To(MatchRegexp(`(?m)^` + name + `\s+Rotate\s+True\s+2/2\s+0/0\s+0\s+\S+\s+namespaces incident=7$`))

		res = run(viewer, "status", "flr/"+name)
		Expect(res.Code).To(Equal(0), res.Err)
		Expect(res.Out).To(ContainSubstring("FleetRequest " + name + ": Rotate of namespaces incident=7\n"))
		Expect(res.Out).To(ContainSubstring("Complete: True (Completed)"))
	})

	It("refuses a team without cluster rights, saying which role it takes, and makes no request", func() {
		var list v1alpha1.FleetRequestList
		Expect(k8s.List(ctx, &list)).To(Succeed())
		had := len(list.Items)
		res := run(team, "revoke", "--key-source", "vault-prod", "--all-namespaces", "--no-wait")
		Expect(res.Code).To(Equal(1))
		Expect(res.Err).To(HavePrefix("error: you may not create a FleetRequest: "))
		Expect(res.Err).To(ContainSubstring("it takes cluster-admin or the ringmaster-fleet-operator ClusterRole"))
		Expect(k8s.List(ctx, &list)).To(Succeed())
		Expect(list.Items).To(HaveLen(had))
	})

	It("takes a ring or a selection, not both", func() {
		res := run(admin, "rotate", "web", "-n", "shop", "--selector", "app=web")
		Expect(res.Code).To(Equal(1))
		Expect(res.Err).To(ContainSubstring("give a RING, or select rings with flags: not both"))
	})
})
