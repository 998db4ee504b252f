//go:build integration

package plugin_test

import (
	"encoding/base64"
	"encoding/json"
	"regexp"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/plugin"
)

var _ = Describe("status", func() {
	It("shows a ring's conditions, keys, projection and snapshot Secrets and events, and no key bytes", func(ctx SpecContext) {
		// A rotate-now, which the operator announces with an event (a
		// scheduled rotation and a new ring's first epoch have none).
		before := published("shop", "web").Status.Epoch
		Expect(run(team, "rotate", "web", "-n", "shop", "--timeout", "2m").Code).To(Equal(0))
		r := published("shop", "web")
		// The event names the epoch that took the request. When the key
		// staged before it had not yet been staged for activationDelay (a
		// rotate-now just before this one), a later, unannounced epoch
		// promotes it, and that is the epoch the ring now serves. The event
		// is sent after the status write, asynchronously: the status may be
		// read before it arrives.
		rotated := regexp.MustCompile(`(?m)^  Normal\s+Rotated\s+\S+\s+Published epoch (\d+) `)
		var res result
		Eventually(func(g Gomega) {
			res = run(admin, "status", "web", "-n", "shop")
			var epochs []int64
			for _, m := range rotated.FindAllStringSubmatch(res.Out, -1) {
				e, err := strconv.ParseInt(m[1], 10, 64)
				g.Expect(err).NotTo(HaveOccurred())
				epochs = append(epochs, e)
			}
			g.Expect(epochs).To(ContainElement(SatisfyAll(BeNumerically(">", before), BeNumerically("<=", r.Status.Epoch))), res.Out)
		}, timeout, poll).Should(Succeed(), "the operator's event for the request")
		Expect(res.Code).To(Equal(0), res.Err)
		Expect(res.Err).To(BeEmpty())
		Expect(res.Out).To(HavePrefix("TicketKeyRing shop/web\n"))
		Expect(res.Out).To(ContainSubstring("  Epoch:           " + strconv.FormatInt(r.Status.Epoch, 10) + " (snapshot " + r.Status.Snapshot + ")"))
		Expect(res.Out).To(MatchRegexp(`(?m)^  Ready\s+True\s+Published\s`))
		Expect(res.Out).To(MatchRegexp(`(?m)^  RotationOverdue\s+False\s+OnSchedule\s`))
		for _, k := range r.Status.Keys {
			Expect(res.Out).To(MatchRegexp(`(?m)^  `+k.ID+`\s+(staged|active|decrypt-only)\s+`+k.ActiveFrom.UTC().Format("2006-01-02T15:04:05Z")), "key %s with its times", k.ID)
		}
		Expect(res.Out).To(MatchRegexp(`(?m)^  shop\s+web-ticket-keys\s+` + strconv.FormatInt(r.Status.Epoch, 10) + `\s`))
		Expect(res.Out).To(MatchRegexp(`(?m)^  shop\s+` + r.Status.Snapshot + `\s`))
		Expect(res.Out).To(ContainSubstring("Pods:\n  not asked: the ring has no spec.confirmation, under which the operator asks its pods which keys they hold\n"))

		projection := &corev1.Secret{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "web-ticket-keys"}, projection)).To(Succeed())
		yaml := run(admin, "status", "tkr/web", "-n", "shop", "-o", "yaml")
		Expect(yaml.Code).To(Equal(0))
		for name, data := range projection.Data {
			for _, out := range []string{res.Out, yaml.Out} {
				Expect(out).NotTo(ContainSubstring(base64.StdEncoding.EncodeToString(data)), "the bytes of %s", name)
				Expect(out).NotTo(ContainSubstring(string(data)), "the bytes of %s", name)
			}
		}
		Expect(yaml.Out).To(HavePrefix("apiVersion: " + plugin.ReportAPIVersion + "\n"))
		Expect(yaml.Out).To(ContainSubstring("kind: RingStatus\n"))
	})

	It("shows a cluster ring's projections in every namespace it targets, and its failed targets", func() {
		res := run(admin, "status", "ctkr/edge", "-o", "json")
		Expect(res.Code).To(Equal(0), res.Err)
		var st plugin.RingStatus
		Expect(json.Unmarshal([]byte(res.Out), &st)).To(Succeed())
		Expect(st.Kind).To(Equal("ClusterTicketKeyRing"))
		Expect(st.Projections).To(ConsistOf(HaveField("Namespace", "shop")), "legacy's Secret of that name is not the ring's")
		Expect(st.Projections[0].Epoch).To(Equal(strconv.FormatInt(st.Status.Epoch, 10)))
		Expect(st.Snapshots).To(ContainElement(HaveField("Namespace", "ringmaster-system")))
		Expect(st.Status.FailedTargets).To(ConsistOf(HaveField("Namespace", "legacy")))
		Expect(st.Problems).To(ContainElement(HaveField("Message", ContainSubstring("legacy (SecretConflict"))))
		Expect(st.Events).NotTo(BeEmpty(), "a cluster ring's events are in the default namespace")
	})

	It("tells a viewer, who may not list Secrets nor events, what it could not read", func() {
		res := run(viewer, "status", "web", "-n", "shop")
		Expect(res.Code).To(Equal(0))
		Expect(res.Err).To(ContainSubstring(`Warning: the ring's Secrets were not listed (by metadata: their data is never read): secrets is forbidden: User "viewer" cannot list resource "secrets" in API group "" in the namespace "shop"`))
		Expect(res.Err).To(ContainSubstring(`Warning: the ring's events were not listed: events is forbidden: User "viewer" cannot list resource "events" in API group "" in the namespace "shop"`))
		Expect(res.Out).To(MatchRegexp(`(?m)^  Ready\s+True\s+Published\s`))
		Expect(res.Out).To(ContainSubstring("Projection Secrets (pods mount these):\n  not listed: you may not list Secrets\n"))
		Expect(res.Out).To(ContainSubstring("Events:\n  not listed: you may not list events\n"))
	})

	It("prints a tenant's escape sequences escaped, never raw", func(ctx SpecContext) {
		Expect(k8s.Create(ctx, ring("shop", "shouty", time.Hour, time.Second))).To(Succeed())
		published("shop", "shouty")
		// What a team may write on its own ring: an OSC title, a clear
		// screen, BEL, an 8-bit CSI, and a newline forging a summary line.
		hostile := "2026-11-30T21:54:24Z\x1b]0;owned\x07\x1b[2J\u009b31m\n  Active key:      forged"
		patchRing(ctx, "shop", "shouty", func(r *v1alpha1.TicketKeyRing) {
			r.Annotations = map[string]string{v1alpha1.RotateRequestedAtAnnotation: hostile}
		})
		res := run(admin, "status", "shouty", "-n", "shop")
		Expect(res.Code).To(Equal(0), res.Err)
		for _, raw := range []string{"\x1b", "\x07", "\u009b"} {
			Expect(res.Out + res.Err).NotTo(ContainSubstring(raw))
		}
		Expect(res.Out).NotTo(MatchRegexp(`(?m)^  Active key:      forged`))
		Expect(res.Out).To(ContainSubstring(`  Rotate request:  2026-11-30T21:54:24Z^[]0;owned\a^[[2J\u009b31m\n  Active key:      forged, `))
	})

	It("says which ring it did not find", func() {
		res := run(admin, "status", "nope", "-n", "shop")
		Expect(res.Code).To(Equal(1))
		Expect(res.Err).To(Equal("error: TicketKeyRing shop/nope not found (a ClusterTicketKeyRing is named ctkr/NAME, an ECHKeyRing ekr/NAME)\n"))
		res = run(team, "status", "ctkr/edge")
		Expect(res.Code).To(Equal(1))
		Expect(res.Err).To(ContainSubstring(`error: you may not read ClusterTicketKeyRing edge: clusterticketkeyrings.ringmaster.io "edge" is forbidden: User "team" cannot get resource "clusterticketkeyrings"`))
	})
})
