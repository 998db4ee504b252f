// Package samples holds no code: its test checks config/samples'
// NetworkPolicy against the pods of the agent samples, as a network plugin
// that enforces NetworkPolicies would judge them. The cluster suite applies
// the samples themselves (test/cluster).
package samples

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/url"
	"os"
	"slices"
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/ringmaster-io/ringmaster/internal/confirm"
)

// operatorPod is how the chart labels the operator's pods
// (charts/ringmaster/templates/_helpers.tpl, ringmaster.selectorLabels),
// in the namespace the chart's docs install it in.
var operatorPod = peer{namespace: "ringmaster-system", labels: map[string]string{
	"app.kubernetes.io/name": "ringmaster", "app.kubernetes.io/instance": "ringmaster", "app.kubernetes.io/component": "operator",
}}

// peer is a pod that opens a connection.
type peer struct {
	namespace string
	labels    map[string]string
}

// namespaceLabels are a namespace's labels as the API server sets them.
func (p peer) namespaceLabels() labels.Set {
	return labels.Set{"kubernetes.io/metadata.name": p.namespace}
}

func TestAgentNetworkPolicy(t *testing.T) {
	const ns = "shop" // where a user applies the samples
	policy := &networkingv1.NetworkPolicy{}
	readOne(t, "agent_networkpolicy.yaml", policy)
	var pods []corev1.Pod
	for _, f := range []string{"nginx_ringmaster-agent.yaml", "haproxy_ringmaster-agent.yaml"} {
		for _, d := range deployments(t, f) {
			p := corev1.Pod{ObjectMeta: d.Spec.Template.ObjectMeta, Spec: d.Spec.Template.Spec}
			p.Namespace, p.Name = ns, d.Name+"-0"
			p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0." + strconv.Itoa(len(pods)+1), Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
			pods = append(pods, p)
		}
	}
	if len(pods) != 2 {
		t.Fatalf("%d agent samples' pods, want nginx's and HAProxy's", len(pods))
	}

	for _, pod := range pods {
		t.Run(pod.Name, func(t *testing.T) {
			if !selects(t, policy, pod) {
				t.Fatalf("the policy does not select %s's pods", pod.Name)
			}
			// The port the operator asks, as internal/confirm finds it:
			// the agent's, by the name a ring's spec.confirmation.port
			// gives it in the docs.
			targets, missing := confirm.Voters([]corev1.Pod{pod}, "web-ticket-keys", intstr.FromString("agent-metrics"))
			if len(targets) != 1 || len(missing) != 0 {
				t.Fatalf("the operator would not ask %s: targets %v, missing %v", pod.Name, targets, missing)
			}
			u, err := url.Parse(targets[0].URL)
			if err != nil {
				t.Fatal(err)
			}
			agent, err := strconv.Atoi(u.Port())
			if err != nil {
				t.Fatal(err)
			}
			https := containerPort(t, pod, "https")

			for _, tt := range []struct {
				name string
				from peer
				port int32
				want bool
			}{
				{"the operator reaches the agent", operatorPod, int32(agent), true},
				{"the operator reaches the server", operatorPod, https, true},
				{"a pod of the namespace cannot reach the agent", peer{ns, map[string]string{"app": "web-nginx"}}, int32(agent), false},
				{"a pod of another namespace cannot reach the agent", peer{"tenant", map[string]string{"app": "curl"}}, int32(agent), false},
				{"a pod labelled as the operator, elsewhere, cannot", peer{"tenant", operatorPod.labels}, int32(agent), false},
				{"another pod of the operator's namespace cannot", peer{"ringmaster-system", map[string]string{"app": "other"}}, int32(agent), false},
				{"anyone reaches the server", peer{"tenant", map[string]string{"app": "curl"}}, https, true},
				{"no other port is open", operatorPod, 8080, false},
			} {
				if got := admits(t, policy, pod, tt.from, tt.port); got != tt.want {
					t.Errorf("%s (port %d): admitted %v, want %v", tt.name, tt.port, got, tt.want)
				}
			}
		})
	}
}

// selects reports whether the policy applies to pod, for ingress.
func selects(t *testing.T, p *networkingv1.NetworkPolicy, pod corev1.Pod) bool {
	t.Helper()
	return pod.Namespace != "" && selector(t, &p.Spec.PodSelector).Matches(labels.Set(pod.Labels)) &&
		slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
}

// admits judges a connection from a peer to a port of pod as a NetworkPolicy
// does: a pod the policy selects takes only what one of its ingress rules
// allows, both by peer and by port (a named port resolved on the pod).
func admits(t *testing.T, p *networkingv1.NetworkPolicy, pod corev1.Pod, from peer, port int32) bool {
	t.Helper()
	if !selects(t, p, pod) {
		return true
	}
	for _, rule := range p.Spec.Ingress {
		if peerOK(t, rule.From, pod.Namespace, from) && portOK(t, rule.Ports, pod, port) {
			return true
		}
	}
	return false
}

func peerOK(t *testing.T, peers []networkingv1.NetworkPolicyPeer, podNS string, from peer) bool {
	if len(peers) == 0 {
		return true
	}
	for _, p := range peers {
		if p.IPBlock != nil {
			t.Fatal("the sample admits by address, which a pod's identity does not decide")
		}
		nsOK := from.namespace == podNS
		if p.NamespaceSelector != nil {
			nsOK = selector(t, p.NamespaceSelector).Matches(from.namespaceLabels())
		}
		podOK := p.PodSelector == nil || selector(t, p.PodSelector).Matches(labels.Set(from.labels))
		if nsOK && podOK {
			return true
		}
	}
	return false
}

func portOK(t *testing.T, ports []networkingv1.NetworkPolicyPort, pod corev1.Pod, port int32) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
			continue
		}
		switch {
		case p.Port == nil:
			return true
		case p.Port.Type == intstr.String:
			if containerPort(t, pod, p.Port.StrVal) == port {
				return true
			}
		case p.Port.IntVal == port:
			return true
		}
	}
	return false
}

// containerPort is the number of a named port any container of pod declares
// (native sidecars included); the test fails when none does.
func containerPort(t *testing.T, pod corev1.Pod, name string) int32 {
	t.Helper()
	for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
		for _, p := range c.Ports {
			if p.Name == name {
				return p.ContainerPort
			}
		}
	}
	t.Fatalf("pod %s declares no port %q", pod.Name, name)
	return 0
}

func selector(t *testing.T, s *metav1.LabelSelector) labels.Selector {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

// readOne decodes a file holding one object.
func readOne(t *testing.T, file string, into any) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// deployments are the Deployments of a sample file.
func deployments(t *testing.T, file string) []appsv1.Deployment {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []appsv1.Deployment
	dec := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := dec.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if meta.Kind != "Deployment" {
			continue
		}
		var d appsv1.Deployment
		if err := yaml.UnmarshalStrict(doc, &d); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		out = append(out, d)
	}
}
