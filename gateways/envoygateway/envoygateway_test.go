package envoygateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	// The types Envoy Gateway's listener carries in its Any fields.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/health_check/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protojson"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

// The listener the Gateway's HTTPS listener becomes:
// <gateway namespace>/<gateway>/<listener>, which the EnvoyPatchPolicy
// names.
const listenerName = "shop/eg/https"

// bins are egctl, built from Envoy Gateway's module at the version this
// module requires, and the ringmaster-agent sidecar, built from this
// repository.
var bins struct{ egctl, agent string }

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ringmaster-envoygateway-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins.egctl, bins.agent = filepath.Join(dir, "egctl"), filepath.Join(dir, "ringmaster-agent")
	for bin, pkg := range map[string]string{
		bins.egctl: "github.com/envoyproxy/gateway/cmd/egctl",
		bins.agent: "github.com/ringmaster-io/ringmaster/cmd/ringmaster-agent",
	} {
		cmd := exec.Command("go", "build", "-o", bin, pkg)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n", pkg, err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// manifest reads one of the docs' manifests (docs/gateways.md shows them
// as they are).
func manifest(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("manifests", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// certificateSecret is shop/www-tls, the Gateway's certificate, made for
// the test.
func certificateSecret(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "www.example.com"},
		DNSNames: []string{"www.example.com"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	s := corev1.Secret{Type: corev1.SecretTypeTLS, Data: map[string][]byte{
		corev1.TLSCertKey:       pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		corev1.TLSPrivateKeyKey: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}}
	s.APIVersion, s.Kind, s.Namespace, s.Name = "v1", "Secret", "shop", "www-tls"
	b, err := yaml.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// backendService is shop/www, the route's backend, with the cluster IP
// the API server would give it (egctl routes to it, not to endpoints).
var backendService = []byte(`apiVersion: v1
kind: Service
metadata: {name: www, namespace: shop}
spec:
  clusterIP: 10.96.0.10
  selector: {app: www}
  ports:
  - port: 8080
`)

// translate runs egctl x translate on the documents given, to out (xds or
// gateway-api), and returns its JSON.
func translate(t *testing.T, out string, docs ...[]byte) map[string]any {
	t.Helper()
	in := filepath.Join(t.TempDir(), "in.yaml")
	if err := os.WriteFile(in, bytes.Join(docs, []byte("\n---\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), bins.egctl, "x", "translate", "--from", "gateway-api", "--to", out, "-t", "all", "-o", "json", "-f", in)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("egctl x translate --to %s: %v\n%s", out, err, stderr.String())
	}
	var result map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &result); err != nil {
		t.Fatalf("egctl's output: %v", err)
	}
	return result
}

// listener finds the listener named name in egctl's xDS output (a config
// dump per Gateway) and parses it with Envoy's types.
func listener(t *testing.T, result map[string]any, name string) *listenerv3.Listener {
	t.Helper()
	var found []byte
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if v["@type"] == "type.googleapis.com/envoy.config.listener.v3.Listener" && v["name"] == name {
				b, err := json.Marshal(v)
				if err != nil {
					t.Fatal(err)
				}
				found = b
				return
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(result["xds"])
	if found == nil {
		t.Fatalf("no listener %s in Envoy Gateway's xDS", name)
	}
	// The dump's Any: unwrap it into the Listener.
	var l listenerv3.Listener
	var wrapped map[string]any
	_ = json.Unmarshal(found, &wrapped)
	delete(wrapped, "@type")
	b, _ := json.Marshal(wrapped)
	if err := (protojson.UnmarshalOptions{}).Unmarshal(b, &l); err != nil {
		t.Fatalf("listener %s: %v", name, err)
	}
	return &l
}

// tlsContexts are the DownstreamTlsContexts of l's filter chains.
func tlsContexts(t *testing.T, l *listenerv3.Listener) []*tlsv3.DownstreamTlsContext {
	t.Helper()
	var out []*tlsv3.DownstreamTlsContext
	for _, fc := range l.GetFilterChains() {
		tc := fc.GetTransportSocket().GetTypedConfig()
		if tc == nil {
			continue
		}
		d := &tlsv3.DownstreamTlsContext{}
		if err := tc.UnmarshalTo(d); err != nil {
			t.Fatalf("listener %s: %v", l.GetName(), err)
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		t.Fatalf("listener %s terminates no TLS", l.GetName())
	}
	return out
}

// theEnvoyProxy is the docs' EnvoyProxy, read with Envoy Gateway's types,
// strictly.
func theEnvoyProxy(t *testing.T) *egv1a1.EnvoyProxy {
	t.Helper()
	ep := &egv1a1.EnvoyProxy{}
	if err := yaml.UnmarshalStrict(manifest(t, "envoyproxy.yaml"), ep); err != nil {
		t.Fatal(err)
	}
	return ep
}

// flag is the value of --name=value among a container's args.
func flag(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// TestEnvoyGatewayListenerTakesTheRing feeds Envoy Gateway's translator
// the docs' Gateway, HTTPRoute, EnvoyProxy, ClientTrafficPolicy and
// EnvoyPatchPolicy (with the certificate and the backend Service), and checks
// the listener it emits: session_ticket_keys_sds_secret_config names the
// sidecar's Secret in the file the EnvoyProxy's sidecar writes, on the
// volume the EnvoyProxy mounts into Envoy's container, and Envoy's rules
// accept it. Then it runs that sidecar, with the EnvoyProxy's arguments,
// on a ring, and checks that the file it writes is the Secret the listener
// expects: the ring's Envoy keys, active first.
func TestEnvoyGatewayListenerTakesTheRing(t *testing.T) {
	docs := [][]byte{manifest(t, "gateway.yaml"), manifest(t, "envoyproxy.yaml"), manifest(t, "clienttrafficpolicy.yaml"),
		manifest(t, "envoypatchpolicy.yaml"), certificateSecret(t), backendService}
	checkAccepted(t, translate(t, "gateway-api", docs...))

	l := listener(t, translate(t, "xds", docs...), listenerName)
	if err := l.ValidateAll(); err != nil {
		t.Fatalf("Envoy would refuse the listener: %v", err)
	}
	var sds *tlsv3.SdsSecretConfig
	for _, d := range tlsContexts(t, l) {
		if d.GetSessionTicketKeysSdsSecretConfig() == nil {
			t.Fatalf("listener %s: a filter chain without session_ticket_keys_sds_secret_config", listenerName)
		}
		sds = d.GetSessionTicketKeysSdsSecretConfig()
	}
	file := sds.GetSdsConfig().GetPathConfigSource().GetPath()
	watched := sds.GetSdsConfig().GetPathConfigSource().GetWatchedDirectory().GetPath()
	if file == "" || path.Dir(file) != watched {
		t.Fatalf("the SDS file %q is not in the watched directory %q", file, watched)
	}

	// The EnvoyProxy mounts that directory into Envoy's container from a
	// volume the sidecar writes into as its --out-dir, and the sidecar
	// writes the Secret the listener names.
	ep := theEnvoyProxy(t)
	dep := ep.Spec.Provider.Kubernetes.EnvoyDeployment
	var volume string
	for _, m := range dep.Container.VolumeMounts {
		if m.MountPath == watched {
			volume = m.Name
		}
	}
	if volume == "" {
		t.Fatalf("the EnvoyProxy mounts nothing at %s in Envoy's container", watched)
	}
	if i := slices.IndexFunc(dep.Pod.Volumes, func(v corev1.Volume) bool { return v.Name == volume }); i < 0 || dep.Pod.Volumes[i].EmptyDir == nil || dep.Pod.Volumes[i].EmptyDir.Medium != corev1.StorageMediumMemory {
		t.Fatalf("volume %s is not an emptyDir in memory", volume)
	}
	i := slices.IndexFunc(dep.InitContainers, func(c corev1.Container) bool { return c.Name == "ringmaster-agent" })
	if i < 0 {
		t.Fatal("the EnvoyProxy runs no ringmaster-agent")
	}
	sidecar := dep.InitContainers[i]
	if sidecar.RestartPolicy == nil || *sidecar.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Error("the sidecar is not a native sidecar (restartPolicy: Always)")
	}
	outDir := flag(sidecar.Args, "out-dir")
	if !slices.ContainsFunc(sidecar.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == volume && m.MountPath == outDir }) {
		t.Fatalf("the sidecar's --out-dir %s is not volume %s", outDir, volume)
	}
	if got := flag(sidecar.Args, "envoy-secret"); got != sds.GetName() {
		t.Fatalf("the sidecar writes Secret %q, the listener asks for %q", got, sds.GetName())
	}
	if flag(sidecar.Args, "server") != "envoy" {
		t.Fatal("the sidecar does not feed Envoy")
	}

	// The sidecar, with the EnvoyProxy's arguments on directories of the
	// test, on a ring of a staged and an active key.
	now := time.Now().Truncate(time.Second)
	key := func(label string, af time.Time) keyring.Key {
		k := keyring.NewKey(keyring.Secret(sha256.Sum256([]byte(label))))
		k.ActiveFrom, k.RetireAt, k.ExpiresAt = af, af.Add(time.Hour), af.Add(2*time.Hour)
		return k
	}
	A, S := key("A", now.Add(-time.Minute)), key("S", now.Add(time.Hour-time.Minute))
	A.RetireAt = S.ActiveFrom
	ring := keyring.Ring{Name: "envoy-gateway-system/web", Epoch: 1, IssuedAt: now, Keys: []keyring.Key{S, A}}
	written := runSidecar(t, sidecar.Args, ring, path.Base(file))

	var resp discoveryv3.DiscoveryResponse
	if err := protojson.Unmarshal(written, &resp); err != nil {
		t.Fatalf("the sidecar's %s: %v", path.Base(file), err)
	}
	if len(resp.GetResources()) != 1 {
		t.Fatalf("the sidecar's file holds %d resources, want 1", len(resp.GetResources()))
	}
	secret := &tlsv3.Secret{}
	if err := resp.GetResources()[0].UnmarshalTo(secret); err != nil {
		t.Fatal(err)
	}
	if err := secret.ValidateAll(); err != nil {
		t.Fatalf("Envoy would refuse the sidecar's Secret: %v", err)
	}
	if secret.GetName() != sds.GetName() {
		t.Fatalf("the sidecar's Secret is %q, the listener asks for %q", secret.GetName(), sds.GetName())
	}
	keys := secret.GetSessionTicketKeys().GetKeys()
	want := ring.TicketKeys(time.Now())
	if len(keys) != len(want) {
		t.Fatalf("%d keys, want %d", len(keys), len(want))
	}
	for i, k := range want {
		d, err := keyring.DeriveKey(k.Secret, keyring.FormatEnvoy)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(keys[i].GetInlineBytes(), d[:]) {
			t.Errorf("key %d is not the Envoy key of %s", i, k.ID)
		}
	}
	if want[0].ID != A.ID {
		t.Errorf("the first key, which Envoy encrypts with, is not the active key")
	}
}

// TestEnvoyGatewayWithoutThePolicy: with the ClientTrafficPolicy alone,
// the listener resumes by tickets but has neither session ticket keys nor
// an SDS source for them: each Envoy keys its tickets itself, and a ticket
// resumes only there. With neither policy, Envoy Gateway turns tickets off.
// And the EnvoyPatchPolicy alone is refused: session ticket keys and
// disable_stateless_session_resumption are one oneof in Envoy's
// DownstreamTlsContext, so Envoy Gateway drops the patch (it logs the
// error and marks the policy not programmed) and the listener keeps
// tickets off: the ClientTrafficPolicy is needed.
func TestEnvoyGatewayWithoutThePolicy(t *testing.T) {
	base := [][]byte{manifest(t, "gateway.yaml"), manifest(t, "envoyproxy.yaml"), certificateSecret(t), backendService}
	tests := []struct {
		name      string
		policies  []string
		stateless bool // tickets on
	}{
		{"the ClientTrafficPolicy alone: per-instance keys", []string{"clienttrafficpolicy.yaml"}, true},
		{"no policy: tickets off", nil, false},
		{"the EnvoyPatchPolicy alone: refused, tickets off", []string{"envoypatchpolicy.yaml"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			docs := slices.Clone(base)
			for _, p := range tc.policies {
				docs = append(docs, manifest(t, p))
			}
			l := listener(t, translate(t, "xds", docs...), listenerName)
			if err := l.ValidateAll(); err != nil {
				t.Fatal(err)
			}
			for _, d := range tlsContexts(t, l) {
				if d.GetSessionTicketKeys() != nil || d.GetSessionTicketKeysSdsSecretConfig() != nil {
					t.Fatalf("listener %s has shared ticket keys", listenerName)
				}
				if stateless := !d.GetDisableStatelessSessionResumption(); stateless != tc.stateless {
					t.Errorf("listener %s: tickets on %v, want %v", listenerName, stateless, tc.stateless)
				}
			}
		})
	}
}

// checkAccepted checks, in egctl's gateway-api output, that the
// GatewayClass, the Gateway's listener and the two policies are accepted.
func checkAccepted(t *testing.T, result map[string]any) {
	t.Helper()
	b, err := json.Marshal(result)
	if err != nil {
		t.Fatal(err)
	}
	type ancestors struct {
		Status struct {
			Ancestors []struct{ Conditions []condition } `json:"ancestors"`
		} `json:"status"`
	}
	var res struct {
		GatewayClass struct {
			Status struct{ Conditions []condition } `json:"status"`
		} `json:"gatewayClass"`
		Gateways []struct {
			Status struct {
				Listeners []struct {
					Name       string      `json:"name"`
					Conditions []condition `json:"conditions"`
				} `json:"listeners"`
			} `json:"status"`
		} `json:"gateways"`
		ClientTrafficPolicies []ancestors `json:"clientTrafficPolicies"`
		EnvoyPatchPolicies    []ancestors `json:"envoyPatchPolicies"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	holds := func(what, typ string, cs []condition) {
		t.Helper()
		for _, c := range cs {
			if c.Type == typ && c.Status == "True" {
				return
			}
		}
		t.Errorf("%s is not %s: %+v", what, typ, cs)
	}
	holds("the GatewayClass", "Accepted", res.GatewayClass.Status.Conditions)
	if len(res.Gateways) != 1 || len(res.Gateways[0].Status.Listeners) != 1 {
		t.Fatalf("want one Gateway with one listener: %+v", res.Gateways)
	}
	for _, typ := range []string{"Accepted", "Programmed", "ResolvedRefs"} {
		holds("the Gateway's listener", typ, res.Gateways[0].Status.Listeners[0].Conditions)
	}
	for what, ps := range map[string][]ancestors{"ClientTrafficPolicy": res.ClientTrafficPolicies, "EnvoyPatchPolicy": res.EnvoyPatchPolicies} {
		if len(ps) != 1 || len(ps[0].Status.Ancestors) != 1 {
			t.Fatalf("the %s has no status for the Gateway: %+v", what, ps)
		}
		holds("the "+what, "Accepted", ps[0].Status.Ancestors[0].Conditions)
	}
}

type condition struct {
	Type, Status, Reason, Message string
}

// runSidecar runs the ringmaster-agent with args (the EnvoyProxy's, with
// its directories moved under the test's), on ring, until it has written
// file; it returns the file.
func runSidecar(t *testing.T, args []string, ring keyring.Ring, file string) []byte {
	t.Helper()
	dir, out := t.TempDir(), t.TempDir()
	data, err := keyring.Encode(ring)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, keyring.FileName), data, 0o600); err != nil {
		t.Fatal(err)
	}
	var run []string
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "--dir="):
			a = "--dir=" + dir
		case strings.HasPrefix(a, "--out-dir="):
			a = "--out-dir=" + out
		case strings.HasPrefix(a, "--listen="):
			a = "--listen=127.0.0.1:0"
		}
		run = append(run, a)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.agent, run...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}()
	// It writes the server's files once before it serves, so they exist
	// when it says where it listens.
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "listening on ") {
			b, err := os.ReadFile(filepath.Join(out, file))
			if err != nil {
				t.Fatalf("the sidecar wrote no %s: %v\n%s", file, err, stderr.String())
			}
			return b
		}
	}
	t.Fatalf("the sidecar did not start\n%s", stderr.String())
	return nil
}
