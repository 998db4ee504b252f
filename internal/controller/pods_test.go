//go:build integration

package controller_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/internal/confirm"
	"github.com/ringmaster-io/ringmaster/internal/operator"
	"github.com/ringmaster-io/ringmaster/internal/shape"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
)

// The prober's pod cache (and the coming nudge's), against the real API
// server, as the operator's service account: the pods that mount a Secret,
// as the cache keeps them.
var _ = Describe("The pod cache", func() {
	It("finds the pods mounting a Secret, or that may, and keeps nothing a tenant can make large", func(ctx SpecContext) {
		ns, other := newNamespace(ctx), newNamespace(ctx)
		big := strings.Repeat("x", 200<<10)
		always := corev1.ContainerRestartPolicyAlways
		create := func(ns, name string, mutate func(*corev1.Pod)) {
			GinkgoHelper()
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"padding": big}},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "server", Image: "examples/server", Env: []corev1.EnvVar{{Name: "PADDING", Value: big}},
						Ports:        []corev1.ContainerPort{{Name: "status", ContainerPort: 9090}},
						VolumeMounts: []corev1.VolumeMount{{Name: "keys", MountPath: "/var/run/ringmaster"}}}},
					Volumes: []corev1.Volume{{Name: "keys", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
						{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "web-tls"}}},
						{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "web-ticket-keys"}}},
					}}}}},
				},
			}
			if mutate != nil {
				mutate(pod)
			}
			Expect(k8s.Create(ctx, pod)).To(Succeed())
		}
		create(ns, "projected", nil)
		create(ns, "secret-volume-in-a-sidecar", func(p *corev1.Pod) {
			p.Spec.Volumes[0].VolumeSource = corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "web-ticket-keys"}}
			p.Spec.InitContainers = []corev1.Container{{Name: "agent", Image: "agent", RestartPolicy: &always, VolumeMounts: p.Spec.Containers[0].VolumeMounts}}
			p.Spec.Containers[0].VolumeMounts = nil
		})
		create(ns, "another-ring", func(p *corev1.Pod) { p.Spec.Volumes[0].Projected.Sources[1].Secret.Name = "api-ticket-keys" })
		create(ns, "mounted-by-no-container", func(p *corev1.Pod) { p.Spec.Containers[0].VolumeMounts = nil })
		create(ns, "many-secrets", func(p *corev1.Pod) {
			var srcs []corev1.VolumeProjection
			for i := range shape.MaxPodSecrets + 1 {
				srcs = append(srcs, corev1.VolumeProjection{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: fmt.Sprintf("s-%02d", i)}}})
			}
			p.Spec.Volumes[0].Projected.Sources = srcs
		})
		create(other, "projected", nil)

		scheme, err := operator.Scheme()
		Expect(err).NotTo(HaveOccurred())
		pods, err := confirm.NewPods(operatorCfg, scheme, nil, confirm.PodsOptions{Shapes: shape.Operator(scheme, testenv.Namespace)})
		Expect(err).NotTo(HaveOccurred())
		early, cancelEarly := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancelEarly()
		_, err = pods.Mounting(early, ns, "web-ticket-keys")
		Expect(err).To(MatchError(ContainSubstring("not running")), "a lookup waits for Start, within its context")

		pctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() {
			defer GinkgoRecover()
			Expect(pods.Start(pctx)).To(Succeed())
		})
		DeferCleanup(func() {
			cancel()
			wg.Wait() // Start returns once the cache it started has stopped
		})

		names := func(secret string) func() []string {
			return func() []string {
				found, err := pods.Mounting(ctx, ns, secret)
				Expect(err).NotTo(HaveOccurred())
				var out []string
				for _, p := range found {
					out = append(out, p.Name)
				}
				return out
			}
		}
		Eventually(names("web-ticket-keys"), timeout, poll).Should(Equal([]string{"many-secrets", "projected", "secret-volume-in-a-sidecar"}),
			"those mounting it, and the one whose Secrets the cache cut; in name order; of this namespace only")
		Expect(names("api-ticket-keys")()).To(Equal([]string{"another-ring", "many-secrets"}))
		Expect(names("s-03")()).To(Equal([]string{"many-secrets"}))

		found, err := pods.Mounting(ctx, ns, "web-ticket-keys")
		Expect(err).NotTo(HaveOccurred())
		for _, p := range found {
			Expect(p.Annotations).NotTo(HaveKey("padding"))
			Expect(p.ManagedFields).To(BeEmpty())
			for _, c := range append(p.Spec.Containers, p.Spec.InitContainers...) {
				Expect(c.Env).To(BeEmpty(), "pod %s keeps an env", p.Name)
			}
			Expect(p.Labels).To(Equal(map[string]string{"app": "web"}))
		}
		Expect(found[0].Annotations).To(HaveKeyWithValue(shape.CappedAnnotation, "secrets"))
		Expect(confirm.Mounts(found[1], "web-ticket-keys")).To(BeTrue())
		Expect(confirm.Mounts(found[2], "web-ticket-keys")).To(BeTrue())
	})
})
