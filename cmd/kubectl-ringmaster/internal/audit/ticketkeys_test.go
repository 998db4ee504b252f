package audit_test

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/audit"
	"github.com/ringmaster-io/ringmaster/internal/ticketkeys"
)

func TestUnmanagedKeys(t *testing.T) {
	changed := now.Add(-30 * 24 * time.Hour)
	f := ticketkeys.Finding{
		ObjectRef: ticketkeys.ObjectRef{Kind: "ConfigMap", Namespace: "ingress-nginx", Name: "ingress-nginx-controller"},
		Field:     "data[ssl-session-ticket-key]", Shape: ticketkeys.ShapeIngressNginx, Size: 80, Keys: 1,
		Fingerprints: []string{"sha256:0123456789abcdef"},
		Since:        metav1.NewTime(changed), SinceFrom: ticketkeys.SinceManagedFields, Manager: "kubectl-client-side-apply",
	}
	rep := audit.Build(audit.Input{Now: now, TicketKeys: &ticketkeys.Result{Findings: []ticketkeys.Finding{f}},
		TicketKeySources: []audit.Source{{Resource: "configmaps", Read: audit.ReadDone}, {Resource: "envoyfilters.networking.istio.io", Read: audit.ReadNotInstalled}}})
	if rep.UnmanagedKeys == nil || len(rep.UnmanagedKeys.Findings) != 1 {
		t.Fatalf("UnmanagedKeys = %+v", rep.UnmanagedKeys)
	}
	if got, want := rep.UnmanagedKeys.SourceSummary(), "read: configmaps; not installed: envoyfilters.networking.istio.io"; got != want {
		t.Errorf("SourceSummary = %q, want %q", got, want)
	}
	broken := rep.Broken([]audit.Category{audit.Unmanaged})
	if len(broken) != 1 || broken[0].Ref != "ConfigMap ingress-nginx/ingress-nginx-controller data[ssl-session-ticket-key]" ||
		broken[0].Message != "1 80-byte key(s) no ring manages (ingress-nginx), last changed no later than "+changed.UTC().Format(time.RFC3339)+" (managedFields by kubectl-client-side-apply)" {
		t.Errorf("Broken(unmanaged-keys) = %+v", broken)
	}
	if len(rep.Broken([]audit.Category{audit.Overdue})) != 0 {
		t.Error("an unmanaged key is no overdue ring")
	}

	f.SinceFrom, f.Manager = ticketkeys.SinceCreation, ""
	if got := audit.Changed(f); !strings.HasPrefix(got, "at an unknown time (no managedFields; the object was created ") {
		t.Errorf("Changed = %q", got)
	}
	if rep := audit.Build(audit.Input{Now: now}); rep.UnmanagedKeys != nil {
		t.Error("nothing read, yet an account of unmanaged keys")
	}
}
