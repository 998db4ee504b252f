package confirm

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ringmaster-io/ringmaster/internal/shape"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	toolscache "k8s.io/client-go/tools/cache"
)

// large is a pod of the fleet carrying about 1 MB where a tenant can put
// it: an env value, an annotation, managed fields, an init container's
// command, a volume the server does not mount.
func large(name string) corev1.Pod {
	mb := strings.Repeat("x", 1<<20)
	return pod(name, func(p *corev1.Pod) {
		p.Labels = map[string]string{"app": "web"}
		p.Annotations = map[string]string{"big": mb}
		p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: mb}}
		p.OwnerReferences = []metav1.OwnerReference{{Name: "web-5d8f", Kind: "ReplicaSet"}}
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "BIG", Value: mb}}
		p.Spec.Containers[0].Image = "examples/server"
		p.Spec.InitContainers = []corev1.Container{{Name: "setup", Command: []string{mb},
			VolumeMounts: []corev1.VolumeMount{{Name: "init-only"}}}}
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "init-only", VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: "setup-secret"}}})
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, Message: mb})
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "server", Image: mb}}
	})
}

func strip(t *testing.T, p corev1.Pod) corev1.Pod {
	t.Helper()
	out, err := shape.Pod(p.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	return *out.(*corev1.Pod)
}

func TestPodShape(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	manyLabels := map[string]string{}
	for i := range 80 {
		manyLabels[fmt.Sprintf("example.com/label-%02d", i)] = strings.Repeat("v", 63)
	}
	tests := []struct {
		name string
		pod  corev1.Pod
		// What is kept: the Secrets indexed, the ports, the labels, and
		// CappedAnnotation.
		wantSecrets []string
		wantPorts   []string
		wantLabels  map[string]string
		wantCapped  string
	}{
		{name: "a 1 MB pod of the fleet keeps what voting reads", pod: large("web-a"),
			wantSecrets: []string{"web-tls", "web-ticket-keys"}, wantPorts: []string{"status:9090"}, wantLabels: map[string]string{"app": "web"}},
		{name: "a native sidecar's mount and port are kept", pod: pod("web-a", sidecar(&always)),
			wantSecrets: []string{"web-tls", "web-ticket-keys"}, wantPorts: []string{"status:9090"}},
		{name: "a plain init container's mount and port are not", pod: pod("web-a", sidecar(nil))},
		{name: "a secret volume, UDP and unnamed ports", pod: pod("web-a", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{secretVolume("web-ticket-keys")}
			p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports,
				corev1.ContainerPort{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP}, corev1.ContainerPort{ContainerPort: 8443})
		}), wantSecrets: []string{"web-ticket-keys"}, wantPorts: []string{"status:9090"}},
		{name: "a port name declared twice: the first", pod: pod("web-a", func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "other", Ports: []corev1.ContainerPort{{Name: "status", ContainerPort: 1}}})
		}), wantSecrets: []string{"web-tls", "web-ticket-keys"}, wantPorts: []string{"status:9090"}},
		{name: "labels over the cap: none kept", pod: pod("web-a", func(p *corev1.Pod) { p.Labels = manyLabels }),
			wantSecrets: []string{"web-tls", "web-ticket-keys"}, wantPorts: []string{"status:9090"}, wantCapped: "labels"},
		{name: "more Secrets than the cap: the first ones", pod: pod("web-a", func(p *corev1.Pod) {
			for i := range shape.MaxPodSecrets + 4 {
				p.Spec.Volumes[0].Projected.Sources = append(p.Spec.Volumes[0].Projected.Sources,
					corev1.VolumeProjection{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: fmt.Sprintf("s-%02d", i)}}})
			}
		}), wantSecrets: append([]string{"web-tls", "web-ticket-keys"}, names("s-%02d", shape.MaxPodSecrets-2)...), wantPorts: []string{"status:9090"}, wantCapped: "secrets"},
		{name: "a Secret name no Secret can have is not kept", pod: pod("web-a", func(p *corev1.Pod) {
			p.Spec.Volumes[0].Projected.Sources[0].Secret.Name = strings.Repeat("a", 254)
		}), wantSecrets: []string{"web-ticket-keys"}, wantPorts: []string{"status:9090"}},
		{name: "more named ports than the cap, over two containers", pod: pod("web-a", func(p *corev1.Pod) {
			for i := range shape.MaxPodPorts + 2 {
				p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: fmt.Sprintf("c%d", i),
					Ports: []corev1.ContainerPort{{Name: fmt.Sprintf("p-%02d", i), ContainerPort: int32(1000 + i)}}})
			}
		}), wantSecrets: []string{"web-tls", "web-ticket-keys"}, wantPorts: append([]string{"status:9090"}, ports("p-%02d", 1000, shape.MaxPodPorts-1)...), wantCapped: "ports"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kept := strip(t, tc.pod)
			if kept.Name != tc.pod.Name || kept.Namespace != tc.pod.Namespace || kept.Spec.NodeName != "node-1" ||
				kept.Status.PodIP != tc.pod.Status.PodIP || kept.Status.Phase != tc.pod.Status.Phase {
				t.Errorf("identity, node or status lost: %+v", kept)
			}
			if want := []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}; !equality.Semantic.DeepEqual(kept.Status.Conditions, want) {
				t.Errorf("conditions %+v, want only Ready", kept.Status.Conditions)
			}
			if got := secretsOf(&kept); !slices.Equal(got, withAny(tc.wantSecrets, tc.wantCapped == "secrets")) {
				t.Errorf("indexed under %q, want %q", got, tc.wantSecrets)
			}
			var gotPorts []string
			for _, c := range kept.Spec.Containers {
				for _, p := range c.Ports {
					gotPorts = append(gotPorts, fmt.Sprintf("%s:%d", p.Name, p.ContainerPort))
				}
			}
			if !slices.Equal(gotPorts, tc.wantPorts) {
				t.Errorf("ports %q, want %q", gotPorts, tc.wantPorts)
			}
			if !equality.Semantic.DeepEqual(kept.Labels, tc.wantLabels) {
				t.Errorf("labels %v, want %v", kept.Labels, tc.wantLabels)
			}
			if got := kept.Annotations[shape.CappedAnnotation]; got != tc.wantCapped {
				t.Errorf("capped %q, want %q (annotations %v)", got, tc.wantCapped, kept.Annotations)
			}
			if kept.ManagedFields != nil || kept.OwnerReferences != nil || len(kept.Spec.InitContainers) > 0 || kept.Status.ContainerStatuses != nil {
				t.Errorf("kept more than voting reads: %+v", kept)
			}
			data, err := json.Marshal(kept)
			if err != nil {
				t.Fatal(err)
			}
			if len(data) > 8<<10 {
				t.Errorf("kept %d bytes of JSON", len(data))
			}
			if again := strip(t, kept); !equality.Semantic.DeepEqual(again, kept) {
				t.Errorf("stripping a kept pod changed it:\n%+v\n%+v", kept, again)
			}
		})
	}

	if tomb := (toolscache.DeletedFinalStateUnknown{Key: "shop/web-a"}); func() any { o, _ := shape.Pod(tomb); return o }() != tomb {
		t.Error("a tombstone was not passed on as it is")
	}
}

// The pods Voters chooses are the same whole or as the cache keeps them.
func TestVotersOfKeptPods(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	all := []corev1.Pod{large("web-a"), pod("web-b", sidecar(&always)), pod("web-c", sidecar(nil)),
		pod("web-d", func(p *corev1.Pod) { p.Spec.Containers[0].Ports = nil }),
		pod("web-e", func(p *corev1.Pod) { p.Spec.HostNetwork = true }),
		pod("web-f", func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }),
		pod("web-g", func(p *corev1.Pod) { p.Spec.Volumes = []corev1.Volume{secretVolume("api-ticket-keys")} })}
	var kept []corev1.Pod
	for _, p := range all {
		kept = append(kept, strip(t, p))
	}
	for port, want := range map[intstr.IntOrString]int{intstr.FromString("status"): 2, intstr.FromInt32(8080): 3} {
		wholeT, wholeM := Voters(all, "web-ticket-keys", port)
		keptT, keptM := Voters(kept, "web-ticket-keys", port)
		if !slices.Equal(wholeT, keptT) || !equality.Semantic.DeepEqual(wholeM, keptM) {
			t.Errorf("port %s: whole pods %+v %+v; kept %+v %+v", port.String(), wholeT, wholeM, keptT, keptM)
		}
		if len(wholeT)+len(wholeM) != 3 || len(wholeT) != want {
			t.Errorf("port %s: targets %+v, missing %+v; want web-a, web-b and web-d voting", port.String(), wholeT, wholeM)
		}
	}
}

// A pod the cache cut where voting looks is reported, not judged.
func TestVotersOfCappedPods(t *testing.T) {
	many := func(p *corev1.Pod) {
		p.Labels = map[string]string{}
		for i := range 80 {
			p.Labels[fmt.Sprintf("example.com/label-%02d", i)] = strings.Repeat("v", 63)
		}
	}
	secrets := func(p *corev1.Pod) {
		var srcs []corev1.VolumeProjection
		for i := range shape.MaxPodSecrets {
			srcs = append(srcs, corev1.VolumeProjection{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: fmt.Sprintf("s-%02d", i)}}})
		}
		p.Spec.Volumes[0].Projected.Sources = append(srcs, p.Spec.Volumes[0].Projected.Sources...)
	}
	portsCut := func(p *corev1.Pod) {
		var cps []corev1.ContainerPort
		for i := range shape.MaxPodPorts {
			cps = append(cps, corev1.ContainerPort{Name: fmt.Sprintf("p-%02d", i), ContainerPort: int32(1000 + i)})
		}
		p.Spec.Containers[0].Ports = append(cps, p.Spec.Containers[0].Ports...)
	}
	tests := []struct {
		name       string
		pod        corev1.Pod
		port       intstr.IntOrString
		want       string // the reason it is missing; "": none
		wantTarget bool   // asked
	}{
		{"labels cut", pod("web-a", many), intstr.FromString("status"), "not judged: its labels exceed the 4096 bytes", false},
		{"the projection among the Secrets cut", pod("web-a", secrets), intstr.FromString("status"), "not judged: it mounts more than the 16 Secrets", false},
		{"the port among those cut", pod("web-a", portsCut), intstr.FromString("status"), "not judged: it declares more than the 16 named ports", false},
		{"ports cut, asked on a number", pod("web-a", portsCut), intstr.FromInt32(9090), "", true},
		{"ports cut, the name among those kept", pod("web-a", portsCut), intstr.FromString("p-03"), "", true},
		{"labels cut, not ready: no vote", pod("web-a", func(p *corev1.Pod) { many(p); p.Status.Phase = corev1.PodPending }), intstr.FromString("status"), "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			targets, missing := Voters([]corev1.Pod{strip(t, tc.pod)}, "web-ticket-keys", tc.port)
			switch {
			case tc.wantTarget:
				if len(targets) != 1 || len(missing) != 0 {
					t.Errorf("targets %+v, missing %+v; want it asked", targets, missing)
				}
			case tc.want == "":
				if len(targets) != 0 || len(missing) != 0 {
					t.Errorf("targets %+v, missing %+v; want it left out", targets, missing)
				}
			default:
				if len(targets) != 0 || len(missing) != 1 || !strings.Contains(missing[0].Reason, tc.want) {
					t.Errorf("targets %+v, missing %+v; want it missing: %s", targets, missing, tc.want)
				}
			}
		})
	}
}

func names(format string, n int) (out []string) {
	for i := range n {
		out = append(out, fmt.Sprintf(format, i))
	}
	return out
}

func ports(format string, base, n int) (out []string) {
	for i := range n {
		out = append(out, fmt.Sprintf(format+":%d", i, base+i))
	}
	return out
}

func withAny(secrets []string, capped bool) []string {
	if capped {
		return append(slices.Clone(secrets), anySecret)
	}
	return secrets
}
