package cilium

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cilium/cilium/pkg/crypto/certificatemanager"
	"github.com/cilium/cilium/pkg/endpointstate"
	"github.com/cilium/cilium/pkg/envoy"
	envoyconfig "github.com/cilium/cilium/pkg/envoy/config"
	"github.com/cilium/cilium/pkg/hive"
	"github.com/cilium/cilium/pkg/ipcache"
	k8sclient "github.com/cilium/cilium/pkg/k8s/client/testutils"
	slim_corev1 "github.com/cilium/cilium/pkg/k8s/slim/k8s/api/core/v1"
	"github.com/cilium/cilium/pkg/node"
	"github.com/cilium/cilium/pkg/option"
	"github.com/cilium/cilium/pkg/policy/api"
	"github.com/cilium/cilium/pkg/promise"
	"github.com/cilium/cilium/pkg/proxy/accesslog"
	syncnames "github.com/cilium/cilium/pkg/secretsync/names"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

// The namespace Cilium's agent reads Secrets from for CiliumEnvoyConfig
// (its --envoy-secrets-namespace; cilium-secrets in its Helm chart).
const secretsNamespace = "cilium-secrets"

// theRing is the ClusterTicketKeyRing of the docs (docs/gateways.md#cilium),
// which delivers into secretsNamespace.
func theRing(t *testing.T) *v1alpha1.ClusterTicketKeyRing {
	t.Helper()
	b, err := os.ReadFile("manifests/clusterticketkeyring.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ring := &v1alpha1.ClusterTicketKeyRing{}
	if err := yaml.UnmarshalStrict(b, ring); err != nil {
		t.Fatal(err)
	}
	sel, err := metav1.LabelSelectorAsSelector(&ring.Spec.NamespaceSelector)
	if err != nil {
		t.Fatal(err)
	}
	// Every namespace carries its name as this label (the API server sets it).
	if !sel.Matches(labels.Set{"kubernetes.io/metadata.name": secretsNamespace}) {
		t.Fatalf("the ring does not deliver into %s", secretsNamespace)
	}
	if !slices.Contains(ring.Spec.Distribution.Formats, v1alpha1.KeyFormat(keyring.FormatCilium)) {
		t.Fatalf("the ring's formats %v lack cilium", ring.Spec.Distribution.Formats)
	}
	if int(ring.Spec.RetainedKeys) > keyring.FormatCilium.DecryptOnlyKeys() {
		t.Fatalf("retainedKeys %d: Cilium keeps %d", ring.Spec.RetainedKeys, keyring.FormatCilium.DecryptOnlyKeys())
	}
	ring.UID = "uid-cilium-edge"
	return ring
}

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// epochs are the first epochs of a ring under policy p, each published as
// the operator publishes it: the first at t0, the next at each plan's
// RequeueAt (a key activating, or expiring).
func epochs(t *testing.T, p keyring.Policy, n int) []keyring.Ring {
	t.Helper()
	var out []keyring.Ring
	cur, now := keyring.Ring{Name: "cilium-edge"}, t0
	for len(out) < n {
		plan := keyring.Next(now, p, cur, keyring.Inputs{})
		secrets := make([]keyring.Secret, plan.Mint)
		for i := range secrets {
			secrets[i] = keyring.Secret(sha256.Sum256(fmt.Appendf(nil, "cilium test %d/%d", len(out), i)))
		}
		next, err := plan.Fill(secrets)
		if err != nil {
			t.Fatal(err)
		}
		if plan.Changed {
			out = append(out, next)
		}
		cur, now = next, plan.RequeueAt
	}
	return out
}

// projection is the projection Secret the operator writes into Cilium's
// namespace for epoch r of ring.
func projection(t *testing.T, ring *v1alpha1.ClusterTicketKeyRing, r keyring.Ring) *corev1.Secret {
	t.Helper()
	owner := distribute.ClusterOwnerOf(ring, "ringmaster-system")
	snapshot, err := distribute.Snapshot(owner, r, distribute.Requests{})
	if err != nil {
		t.Fatal(err)
	}
	return distribute.Projection(owner, snapshot, secretsNamespace)
}

// slim is s as Cilium's agent reads it: its slim Secret type.
func slim(t *testing.T, s *corev1.Secret) *slim_corev1.Secret {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	out := &slim_corev1.Secret{}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// agent is the part of Cilium's agent that serves Envoy its Secrets: the
// envoy cell (pkg/envoy: its secret syncer and its xDS server on a Unix
// socket), on a fake API server, with Envoy run elsewhere (the cilium-envoy
// DaemonSet, --external-envoy-proxy) so that no Envoy is started here.
type agent struct {
	client *k8sclient.FakeClientset
	socket string
}

func startAgent(t *testing.T) *agent {
	t.Helper()
	run := t.TempDir()
	// Where the agent's xDS and access log servers put their sockets; made
	// here, or the two race to make it.
	sockets := filepath.Join(run, "envoy", "sockets")
	if err := os.MkdirAll(sockets, 0o700); err != nil {
		t.Fatal(err)
	}
	saved := *option.Config
	t.Cleanup(func() { *option.Config = saved })
	option.Config.RunDir = run
	option.Config.EnableL7Proxy = true
	option.Config.ExternalEnvoyProxy = true
	option.Config.EnableEnvoyConfig = true

	a := &agent{}
	h := hive.New(
		k8sclient.FakeClientCell(),
		cell.Provide(
			func() *node.LocalNodeStore { return node.NewTestLocalNodeStore(node.LocalNode{}) },
			// The parts of the agent the envoy cell asks for, with
			// nothing behind them: this test has no endpoints, policies
			// or access logs.
			func() *ipcache.IPCache { return nil },
			func() promise.Promise[endpointstate.Restorer] {
				resolver, p := promise.New[endpointstate.Restorer]()
				resolver.Resolve(nil)
				return p
			},
			func() accesslog.ProxyAccessLogger { return nil },
			func() certificatemanager.SecretManager { return noSecretManager{} },
		),
		envoy.Cell,
		cell.Invoke(func(c *k8sclient.FakeClientset) { a.client = c }),
	)
	hive.AddConfigOverride(h, func(c *envoyconfig.SecretSyncConfig) { c.EnvoySecretsNamespace = secretsNamespace })
	hive.AddConfigOverride(h, func(c *envoyconfig.ProxyConfig) { c.DisableEnvoyVersionCheck = true })
	log := hivetest.Logger(t)
	if err := h.Start(log, t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Stop(log, context.Background()); err != nil {
			t.Error(err)
		}
	})
	// The xDS server starts as a job of the hive: wait for its socket.
	a.socket = filepath.Join(sockets, "xds.sock")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if fi, err := os.Stat(a.socket); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("no xDS socket at %s after 30 s", a.socket)
		}
	}
}

// sds is an Envoy's SDS stream to the agent, as cilium-envoy opens it.
type sds struct {
	t      *testing.T
	stream secretv3.SecretDiscoveryService_StreamSecretsClient
	name   string
	nonce  string
	vers   string
}

func (a *agent) subscribe(t *testing.T, name string) *sds {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+a.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	stream, err := secretv3.NewSecretDiscoveryServiceClient(conn).StreamSecrets(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	s := &sds{t: t, stream: stream, name: name}
	s.request()
	return s
}

func (s *sds) request() {
	s.t.Helper()
	err := s.stream.Send(&discoveryv3.DiscoveryRequest{
		// Cilium's Envoy names itself host~<node IP>~<id>~<domain>.
		Node:          &corev3.Node{Id: "host~127.0.0.1~cilium-envoy~localdomain"},
		TypeUrl:       "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret",
		ResourceNames: []string{s.name},
		VersionInfo:   s.vers,
		ResponseNonce: s.nonce,
	})
	if err != nil {
		s.t.Fatal(err)
	}
}

// next waits for the agent's answers, ACKing each as Envoy does, until one
// holds the Secret, and returns the session ticket keys it holds. (The
// first answers may come before the Secret exists: they hold nothing.)
func (s *sds) next() *tlsv3.TlsSessionTicketKeys {
	s.t.Helper()
	type answer struct {
		r   *discoveryv3.DiscoveryResponse
		err error
	}
	deadline := time.After(30 * time.Second)
	for {
		ch := make(chan answer, 1)
		go func() { r, err := s.stream.Recv(); ch <- answer{r, err} }()
		var a answer
		select {
		case a = <-ch:
		case <-deadline:
			s.t.Fatalf("no SDS answer holding %s from Cilium's agent in 30 s", s.name)
		}
		if a.err != nil {
			s.t.Fatal(a.err)
		}
		s.vers, s.nonce = a.r.GetVersionInfo(), a.r.GetNonce()
		s.request()
		for _, res := range a.r.GetResources() {
			secret := &tlsv3.Secret{}
			if err := res.UnmarshalTo(secret); err != nil {
				s.t.Fatal(err)
			}
			if secret.GetName() != s.name {
				continue
			}
			if err := secret.ValidateAll(); err != nil {
				s.t.Fatalf("Envoy would refuse the Secret Cilium serves: %v", err)
			}
			if secret.GetSessionTicketKeys() == nil {
				s.t.Fatalf("Cilium serves %s as %T, not session ticket keys", s.name, secret.GetType())
			}
			return secret.GetSessionTicketKeys()
		}
	}
}

// upsert writes the projection into the fake API server, as the operator
// does (create, then update).
func (a *agent) upsert(t *testing.T, s *corev1.Secret) {
	t.Helper()
	secrets := a.client.Slim().CoreV1().Secrets(secretsNamespace)
	have, err := secrets.Get(t.Context(), s.Name, metav1.GetOptions{})
	if err != nil {
		if _, err := secrets.Create(t.Context(), slim(t, s), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return
	}
	want := slim(t, s)
	want.ResourceVersion = have.ResourceVersion
	if _, err := secrets.Update(t.Context(), want, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestCiliumServesTheRing feeds the projection ringmaster writes in
// Cilium's layout to Cilium's own agent code (pkg/envoy's secret syncer
// and xDS server) through a fake API server, and reads what an Envoy gets
// over SDS, through two rotations: the keys in the order of the projection,
// the first (which Envoy encrypts with) the active key. A stand-in for
// Envoy's ticket keys, fed those keys, shows a session resumes across each
// rotation: its ticket, under the key that encrypted before the rotation,
// decrypts after it; and stops resuming once that key expires.
func TestCiliumServesTheRing(t *testing.T) {
	ring := theRing(t)
	// One key retained, so that a key expires within three epochs.
	p := keyring.Policy{RotationInterval: ring.Spec.RotationInterval.Duration, RetainedKeys: 1, ActivationDelay: ring.Spec.ActivationDelay.Duration}
	rings := epochs(t, p, 3) // e1: A active, B staged; e2: B, C staged, A; e3: C, D, B (A expired)
	a := startAgent(t)
	name := syncnames.SourceSDSSecretName(types.NamespacedName{Namespace: secretsNamespace, Name: ring.ProjectionSecretName()})
	envoyKeys := a.subscribe(t, name)

	server := newStandIn(t)
	versions := []uint16{tls.VersionTLS12, tls.VersionTLS13}
	tickets := map[uint16][]*tls.ClientSessionState{}
	for i, r := range rings {
		proj := projection(t, ring, r)
		a.upsert(t, proj)
		got := envoyKeys.next()
		want := keyring.CiliumKeys(r.TicketKeys(r.IssuedAt))
		if len(got.GetKeys()) != len(want) {
			t.Fatalf("epoch %d: Cilium serves %d keys, want %d", r.Epoch, len(got.GetKeys()), len(want))
		}
		for j, k := range want {
			d, err := keyring.DeriveKey(k.Secret, keyring.FormatCilium)
			if err != nil {
				t.Fatal(err)
			}
			if string(got.GetKeys()[j].GetInlineBytes()) != string(d[:]) || string(proj.Data[keyring.CiliumFileName(j)]) != string(d[:]) {
				t.Errorf("epoch %d: key %d served is not %s, as %s of the projection", r.Epoch, j, k.ID, keyring.CiliumFileName(j))
			}
		}
		if active, _ := r.Active(r.IssuedAt); len(want) == 0 || want[0].ID != active.ID {
			t.Errorf("epoch %d: the first key served is not the active key", r.Epoch)
		}

		server.setKeys(got.GetKeys())
		for _, v := range versions {
			for k, ticket := range tickets[v] {
				resumed := server.resumes(t, v, ticket)
				// The ticket of the epoch before, under the key that
				// encrypted until this rotation, resumes; the one of two
				// epochs back is under a key expired by now (retainedKeys 1).
				if wantResumed := k == i-1; resumed != wantResumed {
					t.Errorf("epoch %d, %s: a ticket from epoch %d resumed %v, want %v", r.Epoch, tls.VersionName(v), k+1, resumed, wantResumed)
				}
			}
			tickets[v] = append(tickets[v], server.ticket(t, v))
		}
	}
}

// TestCiliumEnvoyConfig checks the docs' CiliumEnvoyConfig: each of its
// resources is what its @type says, by Envoy's own rules (go-control-plane's
// ValidateAll), and its listener takes its session ticket keys from the
// Secret Cilium serves for the ring's projection. Cilium serves a Secret
// name that carries a namespace as it is (pkg/policy/api's
// ResourceQualifiedName, which its CiliumEnvoyConfig parser applies), and
// qualifies any other with the CiliumEnvoyConfig's own namespace and name.
func TestCiliumEnvoyConfig(t *testing.T) {
	ring := theRing(t)
	b, err := os.ReadFile("manifests/ciliumenvoyconfig.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cec struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Spec struct {
			Resources []json.RawMessage `json:"resources"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &cec); err != nil {
		t.Fatal(err)
	}
	if cec.APIVersion != "cilium.io/v2" || cec.Kind != "CiliumEnvoyConfig" {
		t.Fatalf("%s %s, want a cilium.io/v2 CiliumEnvoyConfig", cec.APIVersion, cec.Kind)
	}
	want := syncnames.SourceSDSSecretName(types.NamespacedName{Namespace: secretsNamespace, Name: ring.ProjectionSecretName()})
	var listeners int
	for i, raw := range cec.Spec.Resources {
		res := &anypb.Any{}
		if err := protojson.Unmarshal(raw, res); err != nil {
			t.Fatalf("resource %d: %v", i, err)
		}
		msg, err := res.UnmarshalNew()
		if err != nil {
			t.Fatalf("resource %d: %v", i, err)
		}
		if v, ok := msg.(interface{ ValidateAll() error }); !ok {
			t.Fatalf("resource %d: %T has no validation", i, msg)
		} else if err := v.ValidateAll(); err != nil {
			t.Errorf("resource %d: Envoy would refuse it: %v", i, err)
		}
		l, ok := msg.(*listenerv3.Listener)
		if !ok {
			continue
		}
		for _, fc := range l.GetFilterChains() {
			listeners++
			dtc := &tlsv3.DownstreamTlsContext{}
			if err := fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(dtc); err != nil {
				t.Fatalf("listener %s: %v", l.GetName(), err)
			}
			name := dtc.GetSessionTicketKeysSdsSecretConfig().GetName()
			if got, _ := api.ResourceQualifiedName(cec.Metadata.Namespace, cec.Metadata.Name, name); got != want {
				t.Errorf("listener %s: Cilium looks its session ticket keys up as %q, but serves the ring's projection as %q", l.GetName(), got, want)
			}
		}
	}
	if listeners == 0 {
		t.Fatal("no TLS filter chain")
	}
	if got, _ := api.ResourceQualifiedName(cec.Metadata.Namespace, cec.Metadata.Name, ring.ProjectionSecretName()); got == want {
		t.Error("a name without its namespace reaches the synced Secret")
	}
}

// noSecretManager is the agent's manager of policy Secrets, with policy
// Secret sync off: the envoy cell asks for one.
type noSecretManager struct{}

func (noSecretManager) GetSecretString(context.Context, *api.Secret, string) (string, error) {
	return "", fmt.Errorf("no policy secrets here")
}
func (noSecretManager) PolicySecretSyncEnabled() bool         { return false }
func (noSecretManager) SecretsOnlyFromSecretsNamespace() bool { return false }
func (noSecretManager) GetSecretSyncNamespace() string        { return "" }
