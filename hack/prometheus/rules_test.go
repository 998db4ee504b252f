// Package prometheus tests the chart's alert rules with Debian's promtool.
package prometheus

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// kubeVersion is the Kubernetes version the chart is rendered for (the
// Makefile's KUBE_VERSION).
const kubeVersion = "1.37.2"

// tool finds a command: the environment variable env, then the path given,
// then the PATH. Missing: the test is skipped, or fails under the
// integration and e2e tags (requireTools), which make test uses.
func tool(t *testing.T, env, path, name string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	if path != "" {
		if _, err := os.Stat(path); err == nil {
			return path
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if requireTools {
		t.Fatalf("%s not found (set %s, or run make servers helm)", name, env)
	}
	t.Skipf("%s not found: make servers helm installs it (set %s to point at another)", name, env)
	return ""
}

// TestAlertRules renders the chart's PrometheusRule with its default values
// and runs rules_test.yaml on its rules with promtool test rules.
func TestAlertRules(t *testing.T) {
	promtool := tool(t, "RINGMASTER_PROMTOOL", "/usr/bin/promtool", "promtool")
	helm := tool(t, "RINGMASTER_HELM", "../../bin/helm", "helm")
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	out, err := exec.Command(helm, "template", "ringmaster", "../../charts/ringmaster", "--kube-version", kubeVersion,
		"--set", "metrics.prometheusRule.enabled=true", "--show-only", "templates/prometheusrule.yaml").Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	var rule struct {
		Spec struct {
			Groups []any `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(out, &rule); err != nil {
		t.Fatal(err)
	}
	if len(rule.Spec.Groups) == 0 {
		t.Fatal("the chart's PrometheusRule has no groups")
	}
	b, err := yaml.Marshal(map[string]any{"groups": rule.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rules, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", rules).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	spec, err := os.ReadFile("rules_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := filepath.Join(dir, "rules_test.yaml")
	if err := os.WriteFile(tests, append([]byte("rule_files: [rules.yaml]\n"), spec...), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", tests).CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}
