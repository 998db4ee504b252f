//go:build integration

package plugin_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/audit"
)

// A ring under spec.confirmation whose one pod never confirms: its agent's
// status port answers 503, as a pod whose agent has no ring yet does. The
// operator asks it (on loopback), and the plugin shows what it found.
var _ = Describe("a ring whose fleet does not confirm", func() {
	It("shows in status, rotate and audit which pod holds the staged key back", func(ctx SpecContext) {
		agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "no ring yet", http.StatusServiceUnavailable)
		}))
		DeferCleanup(agent.Close)
		_, port, err := net.SplitHostPort(agent.Listener.Addr().String())
		Expect(err).NotTo(HaveOccurred())
		number, err := strconv.Atoi(port)
		Expect(err).NotTo(HaveOccurred())
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "held-0", Labels: map[string]string{"app": "held"}},
			Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{
				Name: "server", Image: "examples/server", Ports: []corev1.ContainerPort{{Name: "status", ContainerPort: int32(number)}},
				VolumeMounts: []corev1.VolumeMount{{Name: "ticket-keys", MountPath: "/var/run/ringmaster"}},
			}}, Volumes: []corev1.Volume{{Name: "ticket-keys", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "held-ticket-keys"}}}}},
		}
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		Expect(k8s.Status().Update(ctx, pod)).To(Succeed())

		held := ring("shop", "held", time.Hour, time.Second)
		held.Spec.Confirmation = &v1alpha1.Confirmation{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "held"}},
			Port:        intstr.FromString("status"), Timeout: metav1.Duration{Duration: time.Second}, OnTimeout: v1alpha1.ConfirmationWait,
			MaxDelay: &metav1.Duration{Duration: time.Hour},
		}
		Expect(k8s.Create(ctx, held)).To(Succeed())
		published("shop", "held")

		res := run(team, "rotate", "held", "-n", "shop", "--timeout", "15s")
		Expect(res.Code).To(Equal(1))
		Expect(res.Out).To(MatchRegexp(`Waiting for the fleet to confirm key \S+: 0 of 1 ready pod\(s\) hold it; not shop/held-0 on node-a \(.+\)`))
		Expect(res.Err).To(HavePrefix("error: timed out after 15s waiting for TicketKeyRing shop/held to rotate: the fleet has not confirmed the staged key. Waiting for the fleet to confirm key "))

		st := run(admin, "status", "held", "-n", "shop")
		Expect(st.Code).To(Equal(0))
		Expect(st.Out).To(ContainSubstring("  Confirmation:    a due key waits for every pod app=held to hold it, up to 1s, then: Wait (by the clock at most 1h past its due time)\n"))
		Expect(st.Out).To(MatchRegexp(`(?m)^Pods \(selected by app=held, asked on port status \S+ ago\): 0 of 1 ready pod\(s\) hold staged key \S+:$`))
		Expect(st.Out).To(MatchRegexp(`(?m)^  shop\s+held-0\s+node-a\s+\S`))

		Eventually(func(g Gomega) {
			rep, _ := auditJSON(admin, "-n", "shop")
			g.Expect(categories(rowOf(rep, "TicketKeyRing shop/held"))).To(ContainElement(audit.Overdue))
			g.Expect(rowOf(rep, "TicketKeyRing shop/held").Problems[0].Message).To(HavePrefix("confirmation overdue (AwaitingPods): "))
		}, timeout, poll).Should(Succeed())
	})
})
