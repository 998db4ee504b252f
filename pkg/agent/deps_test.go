package agent_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies keeps the agent embeddable: applications import it, so
// it and everything it imports may pull in only the standard library,
// fsnotify, the Prometheus client (with its own dependencies), and
// internal/keyring. Kubernetes, controller-runtime and Vault are refused by
// name; anything else new must be added here on purpose.
func TestDependencies(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not on PATH")
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}",
		"github.com/ringmaster-io/ringmaster/pkg/agent").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	forbidden := []string{"k8s.io/", "sigs.k8s.io/", "github.com/hashicorp/", "controller-runtime"}
	allowed := []string{
		"github.com/ringmaster-io/ringmaster/pkg/agent",
		"github.com/ringmaster-io/ringmaster/internal/keyring",
		"github.com/ringmaster-io/ringmaster/internal/echring",
		"github.com/ringmaster-io/ringmaster/internal/agentstatus",
		"github.com/ringmaster-io/ringmaster/internal/strictjson",
		"github.com/ringmaster-io/ringmaster/internal/redact",
		// fsnotify and its system calls.
		"github.com/fsnotify/fsnotify",
		"golang.org/x/sys/",
		// The Prometheus client and what it imports.
		"github.com/prometheus/client_golang/prometheus",
		"github.com/prometheus/client_model/",
		"github.com/prometheus/common/",
		"github.com/prometheus/procfs",
		"github.com/beorn7/perks/",
		"github.com/cespare/xxhash/",
		"github.com/munnerz/goautoneg",
		"google.golang.org/protobuf/",
	}
	var deps int
	for _, pkg := range strings.Fields(string(out)) {
		deps++
		for _, f := range forbidden {
			if strings.Contains(pkg, f) {
				t.Errorf("pkg/agent depends on %s", pkg)
			}
		}
		ok := false
		for _, a := range allowed {
			ok = ok || pkg == a || strings.HasPrefix(pkg, a)
		}
		if !ok {
			t.Errorf("pkg/agent depends on %s, which is not on the list of allowed dependencies", pkg)
		}
	}
	if deps == 0 {
		t.Fatal("go list returned no packages")
	}
}
