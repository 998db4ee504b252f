package confirm

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/agentstatus"
)

// pod is a ready pod of the fleet of ring secret "web-ticket-keys": its
// server container serves the agent's status on port "status" and mounts
// the projection Secret through a projected volume, as the samples do.
func pod(name string, mutate func(*corev1.Pod)) corev1.Pod {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
		Spec: corev1.PodSpec{NodeName: "node-1",
			Containers: []corev1.Container{{
				Name: "server", Ports: []corev1.ContainerPort{{Name: "status", ContainerPort: 9090}},
				VolumeMounts: []corev1.VolumeMount{{Name: "ticket-keys", MountPath: "/var/run/ringmaster"}},
			}},
			Volumes: []corev1.Volume{{Name: "ticket-keys", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{
					{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "web-tls"}}},
					{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "web-ticket-keys"}}},
				},
			}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.0.7",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	if mutate != nil {
		mutate(&p)
	}
	return p
}

func secretVolume(name string) corev1.Volume {
	return corev1.Volume{Name: "ticket-keys", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name}}}
}

// sidecar moves the status port (and the mount) from the server container
// to an init container with the given restart policy.
func sidecar(policy *corev1.ContainerRestartPolicy) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		c := p.Spec.Containers[0]
		c.Name, c.RestartPolicy = "ringmaster-agent", policy
		p.Spec.InitContainers = []corev1.Container{c}
		p.Spec.Containers = []corev1.Container{{Name: "server"}}
	}
}

func TestVoters(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	tests := []struct {
		name string
		pod  corev1.Pod
		port intstr.IntOrString
		// want: "target" (asked at wantURL), "missing" (votes, cannot be
		// asked: wantReason), or "" (does not vote).
		want, wantURL, wantReason string
	}{
		{name: "a projected volume source naming the Secret, named port", pod: pod("web-a", nil), port: intstr.FromString("status"),
			want: "target", wantURL: "http://10.1.0.7:9090/ringmaster/v1/status"},
		{name: "IPv6", pod: pod("web-a", func(p *corev1.Pod) { p.Status.PodIP = "fd00::7" }), port: intstr.FromString("status"),
			want: "target", wantURL: "http://[fd00::7]:9090/ringmaster/v1/status"},
		{name: "a port number", pod: pod("web-a", nil), port: intstr.FromInt32(8080),
			want: "target", wantURL: "http://10.1.0.7:8080/ringmaster/v1/status"},
		{name: "a secret volume naming the Secret", pod: pod("web-a", func(p *corev1.Pod) { p.Spec.Volumes = []corev1.Volume{secretVolume("web-ticket-keys")} }),
			port: intstr.FromString("status"), want: "target", wantURL: "http://10.1.0.7:9090/ringmaster/v1/status"},
		{name: "a named port and the mount on a native sidecar", pod: pod("web-a", sidecar(&always)), port: intstr.FromString("status"),
			want: "target", wantURL: "http://10.1.0.7:9090/ringmaster/v1/status"},
		{name: "a named port on a plain init container, which has exited: no mount in a running container", pod: pod("web-a", sidecar(nil)),
			port: intstr.FromString("status")},
		{name: "a named port on a plain init container, the mount on the server", pod: pod("web-a", func(p *corev1.Pod) {
			sidecar(nil)(p)
			p.Spec.Containers[0].VolumeMounts = p.Spec.InitContainers[0].VolumeMounts
		}), port: intstr.FromString("status"), want: "missing", wantReason: "declares no container port status"},
		{name: "a UDP port of that name does not serve the status", pod: pod("web-a", func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].Protocol = corev1.ProtocolUDP }),
			port: intstr.FromString("status"), want: "missing", wantReason: "declares no container port status"},
		{name: "no such port", pod: pod("web-a", func(p *corev1.Pod) { p.Spec.Containers[0].Ports = nil }), port: intstr.FromString("status"),
			want: "missing", wantReason: "declares no container port status"},
		{name: "mounts another ring's Secret", pod: pod("web-a", func(p *corev1.Pod) { p.Spec.Volumes = []corev1.Volume{secretVolume("api-ticket-keys")} }),
			port: intstr.FromString("status")},
		{name: "mounts no volume at all", pod: pod("web-a", func(p *corev1.Pod) { p.Spec.Volumes, p.Spec.Containers[0].VolumeMounts = nil, nil }),
			port: intstr.FromString("status")},
		{name: "declares the volume, mounts it in no container", pod: pod("web-a", func(p *corev1.Pod) { p.Spec.Containers[0].VolumeMounts = nil }),
			port: intstr.FromString("status")},
		{name: "not ready", pod: pod("web-a", func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }), port: intstr.FromString("status")},
		{name: "pending", pod: pod("web-a", func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }), port: intstr.FromString("status")},
		{name: "being deleted", pod: pod("web-a", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)} }), port: intstr.FromString("status")},
		{name: "on the host network", pod: pod("web-a", func(p *corev1.Pod) { p.Spec.HostNetwork = true }), port: intstr.FromString("status")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			targets, missing := Voters([]corev1.Pod{tc.pod}, "web-ticket-keys", tc.port)
			switch tc.want {
			case "target":
				if len(targets) != 1 || len(missing) != 0 || targets[0].URL != tc.wantURL || targets[0].Node != "node-1" || targets[0].Namespace != "shop" {
					t.Errorf("targets %+v, missing %+v; want one target at %s", targets, missing, tc.wantURL)
				}
			case "missing":
				if len(targets) != 0 || len(missing) != 1 || !strings.Contains(missing[0].Reason, tc.wantReason) || missing[0].Name != "web-a" {
					t.Errorf("targets %+v, missing %+v; want one missing: %s", targets, missing, tc.wantReason)
				}
			default:
				if len(targets) != 0 || len(missing) != 0 {
					t.Errorf("targets %+v, missing %+v; want the pod left out", targets, missing)
				}
			}
		})
	}

	// Several pods: in namespace and name order, voters only.
	pods := []corev1.Pod{pod("web-b", nil), pod("web-a", nil), pod("stranger", func(p *corev1.Pod) { p.Spec.Volumes = nil }),
		pod("web-c", func(p *corev1.Pod) { p.Namespace = "app" })}
	targets, _ := Voters(pods, "web-ticket-keys", intstr.FromString("status"))
	var got []string
	for _, tg := range targets {
		got = append(got, tg.Namespace+"/"+tg.Name)
	}
	if want := []string{"app/web-c", "shop/web-a", "shop/web-b"}; !slices.Equal(got, want) {
		t.Errorf("targets %v, want %v", got, want)
	}
}

func TestVoterNamespaces(t *testing.T) {
	ns := func(name string, labels map[string]string) corev1.Namespace {
		return corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	namespaces := []corev1.Namespace{
		ns("shop", map[string]string{"tier": "edge", "voters": "yes"}),
		ns("blog", map[string]string{"tier": "edge"}),
		ns("tenant", map[string]string{"tier": "edge", "voters": "yes"}),
		ns("ops", map[string]string{"voters": "yes"}), // not a target
	}
	targets := []string{"blog", "shop", "tenant"}
	tests := []struct {
		name     string
		selector *metav1.LabelSelector
		want     []string
	}{
		{"no selector: no namespace votes", nil, nil},
		{"{}: every target namespace, never one the ring does not deliver to", &metav1.LabelSelector{}, []string{"blog", "shop", "tenant"}},
		{"matchLabels", &metav1.LabelSelector{MatchLabels: map[string]string{"voters": "yes"}}, []string{"shop", "tenant"}},
		{"an invalid selector: none", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "voters", Operator: "Near"}}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := VoterNamespaces(targets, namespaces, tc.selector); !slices.Equal(got, tc.want) {
				t.Errorf("VoterNamespaces = %v, want %v", got, tc.want)
			}
		})
	}
}

// The shipped samples' pods vote for the sample ring, through the named
// port of their ringmaster-agent native sidecar, which serves the agent's
// status on its --listen address.
func TestSamplePodsVote(t *testing.T) {
	data, err := os.ReadFile("../../config/samples/ringmaster_v1alpha1_ticketkeyring.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ring v1alpha1.TicketKeyRing
	if err := yaml.Unmarshal(data, &ring); err != nil {
		t.Fatal(err)
	}
	secret := ring.ProjectionSecretName()
	files, err := filepath.Glob("../../config/samples/*_ringmaster-agent.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples with the sidecar: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var deployments int
			for doc := range bytes.SplitSeq(data, []byte("\n---")) {
				var d appsv1.Deployment
				if err := yaml.Unmarshal(doc, &d); err != nil {
					t.Fatal(err)
				}
				if d.Kind != "Deployment" {
					continue
				}
				deployments++
				p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: d.Name + "-0"}, Spec: d.Spec.Template.Spec,
					Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.0.7",
						Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
				if !Mounts(p, secret) {
					t.Errorf("%s does not mount %s", d.Name, secret)
				}
				var ports []corev1.ContainerPort
				for _, c := range p.Spec.InitContainers {
					if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
						for _, cp := range c.Ports {
							if cp.Name != "" {
								ports = append(ports, cp)
							}
						}
					}
				}
				if len(ports) == 0 {
					t.Fatalf("%s has no native sidecar with a named port", d.Name)
				}
				for _, cp := range ports {
					targets, missing := Voters([]corev1.Pod{p}, secret, intstr.FromString(cp.Name))
					if len(targets) != 1 || len(missing) != 0 || !strings.HasSuffix(targets[0].URL, fmt.Sprintf(":%d/ringmaster/v1/status", cp.ContainerPort)) {
						t.Errorf("%s, port %s: targets %+v, missing %+v; want it asked on port %d", d.Name, cp.Name, targets, missing, cp.ContainerPort)
					}
				}
			}
			if deployments == 0 {
				t.Fatal("no Deployment in the sample")
			}
		})
	}
}

func TestTallyECH(t *testing.T) {
	ech := func(ring string, ids ...uint8) agentstatus.Status {
		st := agentstatus.Status{Ring: "shop/web", ECH: &agentstatus.ECHStatus{Ring: ring, Epoch: 3}}
		for _, id := range ids {
			st.ECH.Configs = append(st.ECH.Configs, agentstatus.ECHConfigStatus{ID: id, State: "staged"})
		}
		return st
	}
	answers := []Answer{
		{Target: Target{Name: "holds"}, Status: ech("shop/web", 7, 6)},
		{Target: Target{Name: "lags"}, Status: ech("shop/web", 6)},
		{Target: Target{Name: "other"}, Status: ech("shop/api", 7)},
		{Target: Target{Name: "tickets-only"}, Status: agentstatus.Status{Ring: "shop/web"}},
	}
	r := TallyECH("shop/web", 7, answers, nil)
	if r.Pods != 4 || r.Holding != 1 || r.Confirmed() {
		t.Fatalf("tally = %+v", r)
	}
	want := map[string]string{
		"lags":         "holds ECH epoch 3, without config 7",
		"other":        `serves ECH ring "shop/api", not "shop/web"`,
		"tickets-only": `serves no ECH ring, not "shop/web"`,
	}
	for _, m := range r.Missing {
		if want[m.Name] != m.Reason {
			t.Errorf("%s: reason %q, want %q", m.Name, m.Reason, want[m.Name])
		}
	}
	if !TallyECH("shop/web", 7, answers[:1], nil).Confirmed() {
		t.Error("a pod holding config 7 does not confirm it")
	}
}
