//go:build integration

package controller_test

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/testing/blackhole"
)

// The attack the prober's budget exists for: one namespace's rings, all due
// and under confirmation, over pods whose status port accepts and never
// answers. When pods were asked inside the reconcile (2 s a pod, 16 at a
// time, 4 workers for every TicketKeyRing), one sweep of 40 such rings over
// 64 pods held every worker for 40 x 64 / 16 x 2 s / 4 = 80 s, and a
// rotate-now anywhere else waited behind it (about 70 s was measured).

const (
	attackRings = 40
	attackPods  = 64
	// victimBudget is what a rotate-now or a revoke in another namespace
	// may take under the attack: what any spec of the suite allows one
	// unhurried reconcile (timeout), a quarter of the attack's former
	// cost.
	victimBudget = timeout
)

// silentPod creates a ready pod in ns, labelled app=silent, whose status
// port is port on loopback, and that mounts the projection Secrets named:
// a member of each of those rings' fleets, so a voter of each.
func silentPod(ctx context.Context, ns, name string, port int32, secrets []string) {
	GinkgoHelper()
	var sources []corev1.VolumeProjection
	for _, s := range secrets {
		sources = append(sources, corev1.VolumeProjection{Secret: &corev1.SecretProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: s}}})
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "silent"}},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{
			Name: "server", Image: "examples/server", Ports: []corev1.ContainerPort{{Name: "status", ContainerPort: port}},
			VolumeMounts: []corev1.VolumeMount{{Name: "ticket-keys", MountPath: "/var/run/ringmaster", ReadOnly: true}},
		}},
			Volumes: []corev1.Volume{{Name: "ticket-keys", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: sources}}}},
		},
	}
	Expect(k8s.Create(ctx, pod)).To(Succeed())
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	Expect(k8s.Status().Update(ctx, pod)).To(Succeed())
}

var _ = Describe("Probing under a namespace's silent pods", func() {
	It("delays no rotate-now or revoke in another namespace beyond one unhurried reconcile", func() {
		ctx := context.Background()
		victimNS, attackNS := newNamespace(ctx), newNamespace(ctx)
		victim := createRing(ctx, victimNS, "web", nil)
		waitEpoch(ctx, victim, 1)

		By(fmt.Sprintf("%d rings under confirmation over %d silent pods, not yet due", attackRings, attackPods))
		hole := blackhole.Listen(GinkgoT())
		port := hole.Port()
		var secrets []string
		for i := range attackRings {
			secrets = append(secrets, fmt.Sprintf("ring-%02d-ticket-keys", i))
		}
		for i := range attackPods {
			silentPod(ctx, attackNS, fmt.Sprintf("silent-%02d", i), port, secrets)
		}
		var attack []*v1alpha1.TicketKeyRing
		for i := range attackRings {
			attack = append(attack, createRing(ctx, attackNS, fmt.Sprintf("ring-%02d", i), func(r *v1alpha1.TicketKeyRing) {
				r.Spec.Confirmation = &v1alpha1.Confirmation{
					PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "silent"}},
					Port:        intstr.FromString("status"),
					Timeout:     metav1.Duration{Duration: 10 * time.Minute},
					OnTimeout:   v1alpha1.ConfirmationWait,
					// Past the spec's clock steps: the held keys wait for
					// their fleet throughout, never activating by the clock.
					MaxDelay: &metav1.Duration{Duration: 50 * time.Minute},
				}
			}))
		}
		DeferCleanup(func() {
			// Later specs need not share the machine with them.
			Expect(k8s.DeleteAllOf(ctx, &v1alpha1.TicketKeyRing{}, client.InNamespace(attackNS))).To(Succeed())
		})
		for _, r := range attack {
			waitEpoch(ctx, r, 1)
		}
		Expect(hole.Accepted()).To(BeZero(), "no pod is asked before its ring's staged key is due")

		// rotateNow requests a rotation of the victim and returns how long
		// the request took to be carried out, within victimBudget.
		rotateNow := func(id string) time.Duration {
			GinkgoHelper()
			fakeClock.Step(5 * time.Minute) // past the victim's activationDelay (3m)
			epoch := getRing(ctx, victim).Status.Epoch
			start := time.Now()
			requestRotation(ctx, victim, id)
			Eventually(func() string { return getRing(ctx, victim).Status.LastRotateRequestedAt }, victimBudget, 10*time.Millisecond).Should(Equal(id))
			took := time.Since(start)
			Expect(getRing(ctx, victim).Status.Epoch).To(BeNumerically(">", epoch))
			return took
		}
		calm := rotateNow(time.Now().UTC().Format(time.RFC3339Nano))

		By("the attack's staged keys fall due: their pods are asked, and never answer")
		epoch := getRing(ctx, victim).Status.Epoch
		fakeClock.Step(time.Hour)
		poke(ctx, victim) // its own staged key activates by the clock: a new one is staged
		waitEpoch(ctx, victim, epoch+1)
		for _, r := range attack {
			poke(ctx, r)
		}
		Eventually(hole.Accepted, victimBudget, poll).Should(BeNumerically(">=", 32), "the silent pods are being asked")

		underAttack := rotateNow(time.Now().UTC().Add(time.Second).Format(time.RFC3339Nano))

		By("a revoke under the attack")
		epoch = getRing(ctx, victim).Status.Epoch
		before := decode(getSecret(ctx, victimNS, "web-ticket-keys"))
		start := time.Now()
		patchRing(ctx, victim, func(r *v1alpha1.TicketKeyRing) {
			r.Annotations[v1alpha1.RevokeRequestedAtAnnotation] = fakeClock.Now().UTC().Format(time.RFC3339)
		})
		Eventually(func() int { return len(getRing(ctx, victim).Status.Revocations) }, victimBudget, 10*time.Millisecond).Should(Equal(1))
		revoke := time.Since(start)
		waitEpoch(ctx, victim, getRing(ctx, victim).Status.Epoch)
		Expect(getRing(ctx, victim).Status.Epoch).To(BeNumerically(">", epoch))
		after := decode(getSecret(ctx, victimNS, "web-ticket-keys"))
		for _, k := range before.Keys {
			_, held := after.Key(k.ID)
			Expect(held).To(BeFalse(), "revoked key %s is gone from the victim's projection", k.ID)
		}

		By("the attack was real: its rings' pods were asked, and hold their staged keys back")
		Eventually(func() *v1alpha1.ConfirmationStatus { return getRing(ctx, attack[0]).Status.Confirmation }, 2*victimBudget, poll).Should(And(
			Not(BeNil()), HaveField("Pods", BeEquivalentTo(attackPods)), HaveField("Holding", BeZero())))
		for _, r := range attack[:4] {
			Expect(getRing(ctx, r).Status.Epoch).To(BeEquivalentTo(1), "ring %s waits for its fleet", r.Name)
		}

		AddReportEntry("victim latency", fmt.Sprintf("rotate-now %s without the attack, %s under it; revoke %s under it; %d connections to silent pods",
			calm.Round(time.Millisecond), underAttack.Round(time.Millisecond), revoke.Round(time.Millisecond), hole.Accepted()))
		GinkgoWriter.Printf("victim: rotate-now %s calm, %s under attack; revoke %s under attack; %d silent connections\n",
			calm, underAttack, revoke, hole.Accepted())
	})
})
