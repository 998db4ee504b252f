package fleet

import (
	"context"
	"fmt"
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StatusPort is the name of the container port on which the pods
// RegisterPods makes declare the replicas' status address.
const StatusPort = "status"

// RegisterPods makes the fleet's replicas known to the API server as ready
// Pods in ns, labelled with labels: each at pod IP 127.0.0.1, declaring its
// replica's status port and mounting the fleet's projection Secret (only a
// pod that mounts it votes). No kubelet runs here; the Pods stand for the
// processes, so that the operator can ask them what they hold, as it asks
// real pods (spec.confirmation).
func (f *Fleet) RegisterPods(ctx context.Context, c *Cluster, ns string, labels map[string]string) error {
	for _, r := range f.Replicas {
		host, port, err := net.SplitHostPort(r.StatusAddr)
		if err != nil {
			return fmt.Errorf("replica %d status address %q: %w", r.Index, r.StatusAddr, err)
		}
		n, err := strconv.Atoi(port)
		if err != nil {
			return err
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", f.Name, r.Index), Labels: labels},
			Spec: corev1.PodSpec{NodeName: fmt.Sprintf("loopback-%d", r.Index), Containers: []corev1.Container{{
				Name: "server", Image: "examples/server",
				Ports:        []corev1.ContainerPort{{Name: StatusPort, ContainerPort: int32(n)}},
				VolumeMounts: []corev1.VolumeMount{{Name: "ticket-keys", MountPath: "/var/run/ringmaster", ReadOnly: true}},
			}}, Volumes: []corev1.Volume{{Name: "ticket-keys", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: f.secret}}}},
			}}}}},
		}
		if err := c.Client.Create(ctx, pod); err != nil {
			return fmt.Errorf("register replica %d: %w", r.Index, err)
		}
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: host,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		if err := c.Client.Status().Update(ctx, pod); err != nil {
			return fmt.Errorf("register replica %d as ready: %w", r.Index, err)
		}
	}
	return nil
}
