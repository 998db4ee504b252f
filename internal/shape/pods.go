package shape

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Limits of what Pod keeps of one pod. A pod over one of them is kept
// with CappedAnnotation naming what was cut (CutLabels, CutSecrets,
// CutPorts); the prober reports such a pod as not judged rather than
// guess.
const (
	// MaxPodSecrets bounds the Secrets kept of a pod: those its running
	// containers mount, the first ones in volume order.
	MaxPodSecrets = 16
	// MaxPodPorts bounds the named TCP ports kept of a pod's running
	// containers, the first ones in container order.
	MaxPodPorts = 16
)

// KeptContainer is the one container of a kept pod: it holds the mounts
// and named ports of all the pod's running containers.
const KeptContainer = "kept"

// Pod is the shape of pods: it keeps what voting and the lookups by
// Secret need, and nothing a tenant can make large.
//   - metadata: name, namespace, uid, resourceVersion, deletionTimestamp,
//     and the labels up to MaxLabelBytes;
//   - spec: nodeName, hostNetwork; of the volumes, only the Secrets that a
//     running container (a container or a native sidecar) mounts, through a
//     secret volume or a projected volume's secret source, at most
//     MaxPodSecrets, as one secret volume each; and one container, "kept",
//     mounting them all and declaring the first MaxPodPorts named TCP ports
//     of the running containers;
//   - status: phase, pod IP, and the Ready condition's status.
//
// Annotations, managed fields, owner references, env, commands, images,
// other volumes and the rest of the status are dropped.
func Pod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, tombstone(obj, "*corev1.Pod")
	}
	c := carried(p)
	out := &corev1.Pod{
		TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: in(p.Namespace), UID: p.UID,
			ResourceVersion: p.ResourceVersion, DeletionTimestamp: p.DeletionTimestamp,
		},
		Spec:   corev1.PodSpec{NodeName: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork},
		Status: corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP},
	}
	out.Labels = labelsUpTo(p.Labels, MaxLabelBytes, &c)

	secrets, cutSecrets := mountedSecrets(*p)
	if cutSecrets {
		c.add(CutSecrets)
	}
	ports, cutPorts := namedPorts(*p)
	if cutPorts {
		c.add(CutPorts)
	}
	kept := corev1.Container{Name: KeptContainer, Ports: ports}
	for _, s := range secrets {
		out.Spec.Volumes = append(out.Spec.Volumes, corev1.Volume{Name: s, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: s}}})
		kept.VolumeMounts = append(kept.VolumeMounts, corev1.VolumeMount{Name: s})
	}
	if len(kept.Ports) > 0 || len(kept.VolumeMounts) > 0 {
		out.Spec.Containers = []corev1.Container{kept}
	}

	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			out.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: cond.Status}}
			break
		}
	}
	c.mark(&out.ObjectMeta)
	return out, nil
}

// mountedSecrets are the Secrets the pod's running containers mount, in
// volume order, at most MaxPodSecrets; cut reports that there were more.
func mountedSecrets(p corev1.Pod) (secrets []string, cut bool) {
	mounted := map[string]bool{}
	for _, c := range Running(p) {
		for _, m := range c.VolumeMounts {
			mounted[m.Name] = true
		}
	}
	add := func(name string) {
		if name == "" || len(name) > maxNameLen || slices.Contains(secrets, name) {
			return
		}
		if len(secrets) == MaxPodSecrets {
			cut = true
			return
		}
		secrets = append(secrets, name)
	}
	for _, v := range p.Spec.Volumes {
		if !mounted[v.Name] {
			continue
		}
		switch {
		case v.Secret != nil:
			add(v.Secret.SecretName)
		case v.Projected != nil:
			for _, src := range v.Projected.Sources {
				if src.Secret != nil {
					add(src.Secret.Name)
				}
			}
		}
	}
	return secrets, cut
}

// namedPorts are the named TCP ports of the pod's running containers, the
// first of each name, at most MaxPodPorts; cut reports that there were more.
func namedPorts(p corev1.Pod) (ports []corev1.ContainerPort, cut bool) {
	for _, c := range Running(p) {
		for _, cp := range c.Ports {
			if cp.Name == "" || (cp.Protocol != "" && cp.Protocol != corev1.ProtocolTCP) ||
				slices.ContainsFunc(ports, func(k corev1.ContainerPort) bool { return k.Name == cp.Name }) {
				continue
			}
			if len(ports) == MaxPodPorts {
				return ports, true
			}
			ports = append(ports, corev1.ContainerPort{Name: cp.Name, ContainerPort: cp.ContainerPort})
		}
	}
	return ports, false
}

// Running are the containers of p that run beside it: its containers and
// its native sidecars (init containers that restart always).
func Running(p corev1.Pod) []corev1.Container {
	out := slices.Clone(p.Spec.Containers)
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			out = append(out, c)
		}
	}
	return out
}
