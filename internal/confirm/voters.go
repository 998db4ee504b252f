package confirm

import (
	"cmp"
	"fmt"
	"net"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/agentstatus"
	"github.com/ringmaster-io/ringmaster/internal/shape"
)

// Voters chooses, among the pods a ring's podSelector matched, those whose
// answer counts, in namespace and name order, and returns the ones to ask.
// A pod votes only if it is ready, is not on the host network (its address
// is the node's, which a tenant's selector must not point the operator at),
// and is a real member of the fleet: it mounts the ring's projection Secret
// (secretName) in a container or a native sidecar, through a secret volume
// or a projected volume source. Any other pod holds none of the ring's keys
// and is left out, neither asked nor counted. A voter whose port cannot be
// found is reported as missing.
//
// The pods may be whole or as the pod cache keeps them (shape.Pod). A kept
// pod that shape.Pod cut (shape.CappedAnnotation) where voting looks is reported
// as missing, not judged: its labels (it may or may not be selected), its
// Secrets (it may mount the projection) or its named ports (the port may
// be among those cut).
func Voters(pods []corev1.Pod, secretName string, port intstr.IntOrString) (targets []Target, missing []v1alpha1.PodReport) {
	pods = slices.Clone(pods)
	slices.SortFunc(pods, func(a, b corev1.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	for _, p := range pods {
		if !ready(p) || p.Spec.HostNetwork {
			continue
		}
		mounts := Mounts(p, secretName)
		if !mounts && !shape.WasCut(&p, shape.CutSecrets) {
			continue
		}
		miss := func(reason string) {
			missing = append(missing, v1alpha1.PodReport{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName, Reason: reason})
		}
		switch {
		case shape.WasCut(&p, shape.CutLabels):
			miss(fmt.Sprintf("not judged: its labels exceed the %d bytes the operator keeps", shape.MaxLabelBytes))
			continue
		case !mounts:
			miss(fmt.Sprintf("not judged: it mounts more than the %d Secrets the operator keeps", shape.MaxPodSecrets))
			continue
		}
		n, ok := portOf(p, port)
		switch {
		case !ok && port.Type == intstr.String && shape.WasCut(&p, shape.CutPorts):
			miss(fmt.Sprintf("not judged: it declares more than the %d named ports the operator keeps, none of them %s", shape.MaxPodPorts, port.String()))
			continue
		case !ok:
			miss(fmt.Sprintf("declares no container port %s", port.String()))
			continue
		}
		targets = append(targets, Target{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName,
			URL: "http://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(n))) + agentstatus.Path})
	}
	return targets, missing
}

// VoterNamespaces returns, in order, the namespaces among a
// ClusterTicketKeyRing's targets whose pods vote: those its
// confirmation.voterNamespaceSelector matches. A nil or invalid selector
// lets none vote. (A TicketKeyRing's voters are in its own namespace.)
func VoterNamespaces(targets []string, namespaces []corev1.Namespace, selector *metav1.LabelSelector) []string {
	if selector == nil {
		return nil
	}
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return nil
	}
	var out []string
	for _, ns := range namespaces {
		if slices.Contains(targets, ns.Name) && sel.Matches(labels.Set(ns.Labels)) {
			out = append(out, ns.Name)
		}
	}
	slices.Sort(out)
	return out
}

// Mounts reports whether the pod mounts Secret name in a container or a
// native sidecar: a secret volume, or a projected volume with a source of
// it, that one of them mounts.
func Mounts(p corev1.Pod, name string) bool {
	volumes := map[string]bool{}
	for _, v := range p.Spec.Volumes {
		switch {
		case v.Secret != nil && v.Secret.SecretName == name:
			volumes[v.Name] = true
		case v.Projected != nil:
			for _, src := range v.Projected.Sources {
				if src.Secret != nil && src.Secret.Name == name {
					volumes[v.Name] = true
				}
			}
		}
	}
	if len(volumes) == 0 {
		return false
	}
	for _, c := range shape.Running(p) {
		for _, m := range c.VolumeMounts {
			if volumes[m.Name] {
				return true
			}
		}
	}
	return false
}

func ready(p corev1.Pod) bool {
	if !p.DeletionTimestamp.IsZero() || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// portOf resolves port on the pod: a number as is, a name among the TCP
// ports of its containers and native sidecars.
func portOf(p corev1.Pod, port intstr.IntOrString) (int32, bool) {
	if port.Type == intstr.Int {
		return port.IntVal, port.IntVal > 0
	}
	for _, c := range shape.Running(p) {
		for _, cp := range c.Ports {
			if cp.Name == port.StrVal && (cp.Protocol == "" || cp.Protocol == corev1.ProtocolTCP) {
				return cp.ContainerPort, true
			}
		}
	}
	return 0, false
}
