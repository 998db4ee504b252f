//go:build e2e

package probe_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/plugin"
	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/probe"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
)

// TestProbeFleet runs kubectl ringmaster probe against two fleets of four
// examples/server replicas behind a round-robin balancer (internal/testing/fleet):
// one sharing a TicketKeyRing the operator rotates, one whose replicas keep
// crypto/tls's own keys. The first must be found to share its keys, the
// second to hold four sets.
func TestProbeFleet(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is unset: run through make test, which builds kube-apiserver, etcd and kubectl and sets it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	env, err := fleet.Setup(ctx, fleet.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Close(); err != nil {
			t.Errorf("close the fleet environment: %v", err)
		}
	})
	if _, err := env.Cluster.CreateRing(ctx, fleet.RingSpec{Namespace: "shop", Name: "web", RotationInterval: time.Hour, ActivationDelay: 3 * time.Second, RetainedKeys: 1}); err != nil {
		t.Fatal(err)
	}
	replicas := make([]time.Duration, 4)
	shared, err := env.StartFleet(ctx, fleet.Config{Name: "shared", Delays: replicas, Namespace: "shop", Secret: "web-ticket-keys"})
	if err != nil {
		t.Fatal(err)
	}
	own, err := env.StartFleet(ctx, fleet.Config{Name: "own", Delays: replicas})
	if err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, env.PKI.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		fleet     *fleet.Fleet
		version   string
		sessions  int // of 19 reconnects
		oneTicket int // of 20 connections
		shared    bool
		keySets   int
	}{
		{fleet: shared, version: "1.3", sessions: 19, oneTicket: 20, shared: true, keySets: 1},
		{fleet: shared, version: "1.2", sessions: 19, oneTicket: 20, shared: true, keySets: 1},
		// Round robin sends each reconnect to the next replica, which never
		// holds the previous one's keys; and one ticket in four reaches the
		// replica that issued it.
		{fleet: own, version: "1.3", sessions: 0, oneTicket: 5, keySets: 4},
		{fleet: own, version: "1.2", sessions: 0, oneTicket: 5, keySets: 4},
	} {
		args := []string{"probe", tc.fleet.LB.Addr(), "--sni", fleet.ServerName, "--ca-file", ca, "--tls-version", tc.version, "--connections", "20"}
		text := kubectlRingmaster(t, args...)
		t.Logf("kubectl ringmaster %s\n%s", strings.Join(args, " "), text)
		var res probe.Result
		if err := json.Unmarshal([]byte(kubectlRingmaster(t, append(args, "-o", "json")...)), &res); err != nil {
			t.Fatal(err)
		}
		s, o := res.Sessions, res.OneTicket
		if s.Failed+o.Failed != 0 || s.Resumed != tc.sessions || o.Resumed != tc.oneTicket || o.Full != 20-tc.oneTicket ||
			res.Shared != tc.shared || res.KeySets != tc.keySets || res.Version != "TLS "+tc.version {
			t.Errorf("fleet %s, TLS %s: %+v; want %d of 19 and %d of 20 resumed, shared %v, %d key set(s)",
				tc.fleet.Name, tc.version, res, tc.sessions, tc.oneTicket, tc.shared, tc.keySets)
		}
		if want := map[bool]string{true: "share their ticket keys", false: "do not share their ticket keys"}[tc.shared]; !strings.Contains(text, want) {
			t.Errorf("fleet %s: the verdict does not say %q:\n%s", tc.fleet.Name, want, text)
		}
	}
}

func kubectlRingmaster(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := plugin.Main(args, genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut}); code != 0 {
		t.Fatalf("kubectl ringmaster %v: exit %d: %s", args, code, errOut.String())
	}
	return out.String()
}
