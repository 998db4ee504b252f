//go:build integration

package plugin_test

import (
	"regexp"
	"strconv"
	"strings"
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
		Expect(res.Out).To(MatchRegexp(`Rotated TicketKeyRing shop/web: key ` + staged + ` encrypts since \S+, key \S+ is staged to encrypt from \S+; epoch \d+ is published`))

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
		Expect(getRing("shop", "stuck").Status.Keys).NotTo(BeEmpty(), "published in BeforeSuite; its key source gone since")
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
		Expect(res.Err).To(ContainSubstring("it takes the ringmaster-ring-editor ClusterRole, bound in namespace shop (docs/security.md, Tenancy)"))
		Expect(getRing("shop", "web").Annotations[v1alpha1.RotateRequestedAtAnnotation]).To(Equal(was))
	})
})

var _ = Describe("revoke", func() {
	It("destroys every key at once at a team's request, and says so once the operator has recorded it", func(ctx SpecContext) {
		Expect(k8s.Create(ctx, ring("shop", "payments", time.Hour, time.Minute))).To(Succeed())
		before := published("shop", "payments")
		var old []string
		for _, k := range before.Status.Keys {
			old = append(old, k.ID)
		}

		res := run(team, "revoke", "payments", "-n", "shop")
		Expect(res.Code).To(Equal(0), res.Err)
		Expect(res.Out).To(HavePrefix("Requested an emergency revoke of TicketKeyRing shop/payments: ringmaster.io/revoke-requested-at="))
		Expect(res.Out).To(ContainSubstring("Revoked TicketKeyRing shop/payments, requested with field manager kubectl-ringmaster: keys " + strings.Join(old, " ") + " are destroyed; epoch "))

		after := getRing("shop", "payments")
		value := after.Annotations[v1alpha1.RevokeRequestedAtAnnotation]
		Expect(after.Status.LastRevokeRequestedAt).To(Equal(value))
		Expect(after.Status.Revocations).To(HaveLen(1))
		rev := after.Status.Revocations[0]
		Expect(rev.RequestedBy).To(Equal("kubectl-ringmaster"), "the plugin's writes carry its field manager")
		Expect(rev.Keys).To(ConsistOf(old))
		for _, k := range after.Status.Keys {
			Expect(old).NotTo(ContainElement(k.ID), "a key that survived the revoke")
		}
		Expect(res.Out).To(ContainSubstring("epoch %d encrypts with fresh key %s", rev.Epoch, after.Status.ActiveKey.ID))

		st := run(admin, "status", "payments", "-n", "shop")
		Expect(st.Out).To(ContainSubstring("  Revoke request:  " + value + ", carried out\n"))
		Expect(st.Out).To(MatchRegexp(`(?m)^  ` + regexp.QuoteMeta(value) + `\s+kubectl-ringmaster\s+` + strconv.FormatInt(rev.Epoch, 10) + `\s+` + strings.Join(old, " ") + `$`))
		Expect(st.Out).To(MatchRegexp(`(?m)^  Warning\s+Revoked\s`))
	})

	It("says plainly when the operator could not carry the revoke out, and the old keys still serve", func() {
		Expect(getRing("shop", "stuck").Status.Keys).NotTo(BeEmpty(), "published in BeforeSuite; its key source gone since")
		res := run(admin, "revoke", "stuck", "-n", "shop", "--timeout", "15s")
		Expect(res.Code).To(Equal(1))
		Expect(res.Out).To(ContainSubstring("Ready is False (KeySourceNotFound): "))
		Expect(res.Err).To(HavePrefix("error: timed out after 15s waiting for TicketKeyRing shop/stuck to be revoked: the operator has not carried it out: the ring's keys are not destroyed and still serve"))
		Expect(res.Err).To(ContainSubstring("Ready: False (KeySourceNotFound): "))
	})

	It("refuses a viewer with a readable message", func() {
		res := run(viewer, "revoke", "web", "-n", "shop")
		Expect(res.Code).To(Equal(1))
		Expect(res.Err).To(ContainSubstring(`error: you may not revoke the keys of TicketKeyRing shop/web: ticketkeyrings.ringmaster.io "web" is forbidden: User "viewer" cannot patch resource "ticketkeyrings"`))
		Expect(getRing("shop", "web").Status.Revocations).To(BeEmpty())
	})
})
