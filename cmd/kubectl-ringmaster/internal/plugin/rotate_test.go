//go:build integration

package plugin_test

import (
	"regexp"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/audit"
)

var _ = Describe("rotate", func() {
	It("makes the documented request as a team with ringmaster-ring-editor, and waits until the staged key encrypts", func() {
		before := published("shop", "web")
		var staged string
		for _, k := range before.Status.Keys {
			if k.State == "staged" {
				staged = k.ID
			}
		}
		Expect(staged).NotTo(BeEmpty())

		res := run(team, "rotate", "web", "-n", "shop", "--timeout", "2m")
		Expect(res.Code).To(Equal(0), res.Err)
		Expect(res.Out).To(HavePrefix("Requested a rotation of TicketKeyRing shop/web: ringmaster.io/rotate-requested-at="))
		Expect(res.Out).To(ContainSubstring("Waiting for the operator to take the request\n"))
		Expect(res.Out).To(MatchRegexp(`Rotated TicketKeyRing shop/web: key ` + staged + ` encrypts since \S+, key \S+ is staged from \S+; epoch \d+ is published`))

		value := regexp.MustCompile(`rotate-requested-at=(\S+)`).FindStringSubmatch(res.Out)[1]
		after := getRing("shop", "web")
		Expect(after.Annotations[v1alpha1.RotateRequestedAtAnnotation]).To(Equal(value))
		_, err := time.Parse(time.RFC3339, value)
		Expect(err).NotTo(HaveOccurred(), "the value is RFC 3339, as the README documents")
		Expect(after.Status.LastRotateRequestedAt).To(Equal(value), "the operator echoed the request")
		active, ok := audit.FromTicketKeyRing(after).Keys().Active(time.Now())
		Expect(ok).To(BeTrue())
		Expect(active.ID).To(Equal(staged), "the key staged before the request encrypts")
		Expect(after.Status.Epoch).To(BeNumerically(">", before.Status.Epoch))
	})

	It("times out with the reason when the operator cannot carry the rotation out", func() {
		published("shop", "stuck")
		res := run(admin, "rotate", "stuck", "-n", "shop", "--timeout", "15s")
		Expect(res.Code).To(Equal(1))
		Expect(res.Out).To(ContainSubstring("Ready is False (KeySourceNotFound): "))
		Expect(res.Err).To(HavePrefix("error: timed out after 15s waiting for TicketKeyRing shop/stuck to rotate: the operator has not taken the request"))
		Expect(res.Err).To(ContainSubstring("Ready: False (KeySourceNotFound): "))
		Expect(res.Err).To(ContainSubstring(missing))
	})

	It("refuses a viewer with a readable message", func() {
		was := getRing("shop", "web").Annotations[v1alpha1.RotateRequestedAtAnnotation]
		res := run(viewer, "rotate", "web", "-n", "shop")
		Expect(res.Code).To(Equal(1))
		Expect(res.Err).To(ContainSubstring(`error: you may not rotate TicketKeyRing shop/web: ticketkeyrings.ringmaster.io "web" is forbidden: User "viewer" cannot patch resource "ticketkeyrings" in API group "ringmaster.io" in the namespace "shop"`))
		Expect(res.Err).To(ContainSubstring("it takes the ringmaster-ring-editor ClusterRole, bound in namespace shop (README, Tenancy)"))
		Expect(getRing("shop", "web").Annotations[v1alpha1.RotateRequestedAtAnnotation]).To(Equal(was))
	})
})

var _ = Describe("revoke", func() {
	It("explains that the emergency revoke arrives with issue 14, and exits 1", func() {
		res := run(admin, "revoke", "web", "-n", "shop")
		Expect(res.Code).To(Equal(1))
		Expect(res.Err).To(HavePrefix("error: revoke is not available yet: the operator has no emergency revoke. Issue 14"))
		Expect(res.Out).To(BeEmpty())
	})
})
