package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// helmTool finds Helm: $RINGMASTER_HELM, then bin/helm, then the PATH.
// Missing: the test is skipped, or fails under the integration and e2e tags
// (requireTools), which make test uses.
func helmTool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("RINGMASTER_HELM"); p != "" {
		return p
	}
	if _, err := os.Stat("../../bin/helm"); err == nil {
		return "../../bin/helm"
	}
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	if requireTools {
		t.Fatal("helm not found (set RINGMASTER_HELM, or run make helm)")
	}
	t.Skip("helm not found: make helm builds it (set RINGMASTER_HELM to point at another)")
	return ""
}

// render is the chart's objects under the given helm flags.
func render(t *testing.T, helm string, flags ...string) []*unstructured.Unstructured {
	t.Helper()
	args := append([]string{"template", "rm", "../../charts/ringmaster", "--namespace", "ringmaster-system", "--kube-version", "1.37.2"}, flags...)
	var stderr bytes.Buffer
	cmd := exec.Command(helm, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return objs
}

// podVerbs are the verbs the chart's roles grant on pods or their
// subresources, in any group that could be the core's.
func podVerbs(t *testing.T, objs []*unstructured.Unstructured) (reads, writes []string) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
			continue
		}
		var role rbacv1.ClusterRole // a Role's rules read the same
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
			t.Fatal(err)
		}
		for _, r := range role.Rules {
			if !slices.ContainsFunc(r.APIGroups, func(g string) bool { return g == "" || g == "*" }) ||
				!slices.ContainsFunc(r.Resources, func(s string) bool { return s == "*" || s == "pods" || strings.HasPrefix(s, "pods/") }) {
				continue
			}
			for _, v := range r.Verbs {
				if slices.Contains([]string{"get", "list", "watch"}, v) {
					reads = append(reads, v)
				} else {
					writes = append(writes, o.GetKind()+" "+o.GetName()+": "+v)
				}
			}
		}
	}
	return reads, writes
}

// TestChartGrantsPodWritesOnlyToNudge renders the chart and reads what its
// roles grant on pods: the patch of pods only with nudge.enabled and
// admissionPolicy.enabled, and then with the pods' admission guard; in
// every other case no pod write at all, and the operator told not to nudge.
func TestChartGrantsPodWritesOnlyToNudge(t *testing.T) {
	helm := helmTool(t)
	tests := []struct {
		name  string
		flags []string
		nudge bool
	}{
		{"defaults", nil, true},
		{"nudge off", []string{"--set", "nudge.enabled=false"}, false},
		{"admission guards off", []string{"--set", "admissionPolicy.enabled=false"}, false},
		{"namespaces listed", []string{"--set", "watchNamespaces={shop,web}"}, true},
		{"namespaces listed, nudge off", []string{"--set", "watchNamespaces={shop,web}", "--set", "nudge.enabled=false"}, false},
		{"audit off, nudge off", []string{"--set", "certificatePolicy.enabled=false", "--set", "nudge.enabled=false"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := render(t, helm, tt.flags...)
			reads, writes := podVerbs(t, objs)
			if len(reads) == 0 {
				t.Error("no read of pods: the pod cache needs list and watch")
			}
			guard := slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool {
				return o.GetKind() == "ValidatingAdmissionPolicy" && o.GetName() == "rm-ringmaster-pods"
			})
			binding := slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool {
				return o.GetKind() == "ValidatingAdmissionPolicyBinding" && o.GetName() == "rm-ringmaster-pods"
			})
			var args []string
			for _, o := range objs {
				if o.GetKind() == "Deployment" {
					containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
					got, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
					args = got
				}
			}
			flag := "--nudge=false"
			if tt.nudge {
				flag = "--nudge=true"
			}
			if !slices.Contains(args, flag) {
				t.Errorf("the operator's args %v lack %s", args, flag)
			}
			if !tt.nudge {
				if len(writes) > 0 || guard || binding {
					t.Errorf("nudging off: pod writes %v, guard %t, binding %t; want none", writes, guard, binding)
				}
				return
			}
			if !guard || !binding {
				t.Errorf("nudging on without the pods' admission guard (policy %t, binding %t)", guard, binding)
			}
			if len(writes) == 0 {
				t.Error("nudging on, and no role grants the patch of pods")
			}
			for _, w := range writes {
				if !strings.HasSuffix(w, ": patch") {
					t.Errorf("a role grants %s on pods: the operator only patches them", w)
				}
			}
		})
	}
}

// TestChartGrantsUnmanagedTicketKeysOnlyWhenEnabled renders the chart and
// reads what its ClusterRole grants on ConfigMaps and the Envoy
// configurations: nothing by default (the audit is opt-in), list when
// unmanagedTicketKeys.enabled, with the operator told so; and with
// watchNamespaces, the cluster-wide list of Secrets it needs.
func TestChartGrantsUnmanagedTicketKeysOnlyWhenEnabled(t *testing.T) {
	helm := helmTool(t)
	envoy := []string{"networking.istio.io/envoyfilters", "gateway.envoyproxy.io/envoypatchpolicies", "cilium.io/ciliumenvoyconfigs", "cilium.io/ciliumclusterwideenvoyconfigs"}
	tests := []struct {
		name    string
		flags   []string
		enabled bool
	}{
		{"defaults", nil, false},
		{"enabled", []string{"--set", "unmanagedTicketKeys.enabled=true"}, true},
		{"enabled, namespaces listed, CertificatePolicy off", []string{"--set", "unmanagedTicketKeys.enabled=true", "--set", "watchNamespaces={shop}", "--set", "certificatePolicy.enabled=false"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := render(t, helm, tt.flags...)
			granted := map[string][]string{} // group/resource → verbs, of the ClusterRole
			var args []string
			for _, o := range objs {
				switch o.GetKind() {
				case "ClusterRole":
					var role rbacv1.ClusterRole
					if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
						t.Fatal(err)
					}
					for _, r := range role.Rules {
						for _, g := range r.APIGroups {
							for _, res := range r.Resources {
								granted[g+"/"+res] = append(granted[g+"/"+res], r.Verbs...)
							}
						}
					}
				case "Deployment":
					containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
					args, _, _ = unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
				}
			}
			flag := fmt.Sprintf("--unmanaged-ticket-keys=%t", tt.enabled)
			if !slices.Contains(args, flag) {
				t.Errorf("the operator's args %v lack %s", args, flag)
			}
			for _, res := range append([]string{"/configmaps"}, envoy...) {
				verbs := granted[res]
				if tt.enabled && !slices.Equal(verbs, []string{"list"}) {
					t.Errorf("%s: the ClusterRole grants %v, want list", res, verbs)
				}
				if !tt.enabled && len(verbs) > 0 {
					t.Errorf("%s: the ClusterRole grants %v with the audit off", res, verbs)
				}
			}
			if tt.enabled && !slices.Contains(granted["/secrets"], "list") {
				t.Errorf("the ClusterRole does not list Secrets cluster-wide: %v", granted["/secrets"])
			}
		})
	}
}
