package ticketkeys_test

import (
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ringmaster-io/ringmaster/internal/testing/keyfixtures"
	"github.com/ringmaster-io/ringmaster/internal/ticketkeys"
)

// objects converts fixtures as the plugin does.
func objects(t *testing.T, us []*unstructured.Unstructured) []ticketkeys.Object {
	t.Helper()
	var out []ticketkeys.Object
	for _, u := range us {
		switch u.GetKind() {
		case "ConfigMap":
			cm := &corev1.ConfigMap{}
			mustConvert(t, u, cm)
			out = append(out, ticketkeys.FromConfigMap(cm))
		case "Secret":
			s := &corev1.Secret{}
			mustConvert(t, u, s)
			out = append(out, ticketkeys.FromSecret(s))
		default:
			out = append(out, ticketkeys.FromUnstructured(u))
		}
	}
	return out
}

func mustConvert(t *testing.T, u *unstructured.Unstructured, into any) {
	t.Helper()
	b, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, into); err != nil {
		t.Fatal(err)
	}
}

func load(t *testing.T, names ...string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, n := range names {
		us, err := keyfixtures.Load(n)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, us...)
	}
	return out
}

func audit(objs []ticketkeys.Object) ticketkeys.Result {
	sums := make([]ticketkeys.Summary, len(objs))
	for i, o := range objs {
		sums[i] = ticketkeys.Scan(o)
	}
	return ticketkeys.Resolve(sums)
}

// brief is what a test compares of a finding.
type brief struct {
	Ref, Field, Shape string
	Size, Keys        int
	UsedBy            []string
	Problem           string
}

func briefs(fs []ticketkeys.Finding) []brief {
	var out []brief
	for _, f := range fs {
		out = append(out, brief{f.String(), f.Field, f.Shape, f.Size, f.Keys, f.UsedBy, f.Problem})
	}
	return out
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func TestShapes(t *testing.T) {
	tests := []struct {
		fixtures   []string
		drop       string // names of objects not read (also cilium-edge-ticket-keys)
		want       []brief
		unresolved []string // "<object> <field>: <note>"
	}{{
		fixtures: []string{"ingress-nginx.yaml"},
		want:     []brief{{Ref: "ConfigMap ingress-nginx/ingress-nginx-controller", Field: "data[ssl-session-ticket-key]", Shape: "ingress-nginx", Size: 80, Keys: 1}},
	}, {
		fixtures: []string{"istio-envoyfilter.yaml"},
		want: []brief{{Ref: "EnvoyFilter istio-system/gateway-ticket-keys", Shape: "envoy", Size: 80, Keys: 2,
			Field: "spec.configPatches[0].patch.value.transport_socket.typed_config.session_ticket_keys"}},
	}, {
		fixtures: []string{"istio-envoyfilter-file.yaml"},
		want: []brief{
			{Ref: "Secret shop/gateway-ticket-keys", Field: "data[current.key]", Shape: "envoy", Size: 80, Keys: 1,
				UsedBy: []string{"EnvoyFilter shop/gateway-ticket-key-files spec.configPatches[0].patch.value.transport_socket.typed_config.session_ticket_keys.keys[0].filename"}},
			{Ref: "Secret shop/gateway-ticket-keys", Field: "data[previous.key]", Shape: "envoy", Size: 80, Keys: 1,
				UsedBy: []string{"EnvoyFilter shop/gateway-ticket-key-files spec.configPatches[0].patch.value.transport_socket.typed_config.session_ticket_keys.keys[1].filename"}},
		},
	}, {
		fixtures: []string{"envoy-gateway-patchpolicy.yaml"},
		want: []brief{
			{Ref: "EnvoyPatchPolicy shop/static-ticket-keys", Field: "spec.jsonPatches[0].operation.value", Shape: "envoy", Size: 80, Keys: 1},
			{Ref: "EnvoyPatchPolicy shop/static-ticket-keys", Field: "spec.jsonPatches[1].operation.value", Shape: "envoy", Size: 80, Keys: 1},
		},
	}, {
		fixtures: []string{"cilium-envoyconfig.yaml"},
		want: []brief{{Ref: "CiliumEnvoyConfig shop/store-tls", Shape: "envoy", Size: 80, Keys: 3,
			Field: "spec.resources[0].filter_chains[0].transport_socket.typed_config.session_ticket_keys"}},
	}, {
		fixtures: []string{"haproxy.yaml"},
		want: []brief{{Ref: "Secret edge/haproxy-config", Field: "data[tls-ticket-keys]", Shape: "haproxy", Size: 48, Keys: 3,
			UsedBy: []string{"Secret edge/haproxy-config data[haproxy.cfg]"}}},
	}, {
		// A ring's projection, and ringmaster's own gateway manifests
		// (keys from a ring's Secret, or from the file its sidecar
		// writes), are no unmanaged keys.
		fixtures: []string{"managed.yaml",
			filepath.Join(repoRoot(), "gateways", "envoygateway", "manifests", "envoypatchpolicy.yaml"),
			filepath.Join(repoRoot(), "gateways", "cilium", "manifests", "ciliumenvoyconfig.yaml")},
	}, {
		// Without the Secret it names, a reference is unresolved.
		fixtures: []string{"istio-envoyfilter-file.yaml", "managed.yaml"},
		drop:     "gateway-ticket-keys",
		want:     nil,
		unresolved: []string{
			"CiliumEnvoyConfig shop/edge-tls spec.resources[0].filter_chains[0].transport_socket.typed_config.session_ticket_keys_sds_secret_config: Secret cilium-secrets/cilium-edge-ticket-keys was not read (absent, or not readable)",
			"EnvoyFilter shop/gateway-ticket-key-files spec.configPatches[0].patch.value.transport_socket.typed_config.session_ticket_keys.keys[0].filename: no Secret or ConfigMap read in namespace shop holds ticket keys in an entry named current.key",
			"EnvoyFilter shop/gateway-ticket-key-files spec.configPatches[0].patch.value.transport_socket.typed_config.session_ticket_keys.keys[1].filename: no Secret or ConfigMap read in namespace shop holds ticket keys in an entry named previous.key",
		},
	}}
	for _, tt := range tests {
		t.Run(strings.Join(tt.fixtures, "+"), func(t *testing.T) {
			us := load(t, tt.fixtures...)
			if tt.drop != "" {
				us = slices.DeleteFunc(us, func(u *unstructured.Unstructured) bool {
					return u.GetName() == tt.drop || u.GetName() == "cilium-edge-ticket-keys"
				})
			}
			got := audit(objects(t, us))
			if diff := cmp.Diff(tt.want, briefs(got.Findings)); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
			var unresolved []string
			for _, r := range got.Unresolved {
				unresolved = append(unresolved, r.String()+" "+r.Field+": "+r.Note)
			}
			slices.Sort(unresolved)
			if diff := cmp.Diff(tt.unresolved, unresolved); diff != "" {
				t.Errorf("unresolved (-want +got):\n%s", diff)
			}
			for _, f := range got.Findings {
				if len(f.Fingerprints) != f.Keys || !strings.HasPrefix(f.Fingerprints[0], "sha256:") || len(f.Fingerprints[0]) != len("sha256:")+16 {
					t.Errorf("%s %s: fingerprints %q for %d keys", f.ObjectRef, f.Field, f.Fingerprints, f.Keys)
				}
			}
			out, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			if leaks := keyfixtures.Leaks(string(out), keyfixtures.Forbidden(us)); len(leaks) > 0 {
				t.Errorf("the result shows key bytes: %q", leaks)
			}
		})
	}
}

// managedFields is a managedFields entry owning the given fieldsV1.
func managedFields(manager string, at time.Time, fields string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationApply,
		Time: &metav1.Time{Time: at}, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields)}
}

func TestAge(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	keyWritten, labelled := created.Add(24*time.Hour), created.Add(48*time.Hour)
	key := base64.StdEncoding.EncodeToString(make([]byte, 80))
	cm := func(fields ...metav1.ManagedFieldsEntry) ticketkeys.Object {
		return ticketkeys.FromConfigMap(&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ingress-nginx", Name: "c", CreationTimestamp: metav1.NewTime(created), ManagedFields: fields},
			Data:       map[string]string{ticketkeys.IngressNginxKey: key},
		})
	}
	tests := []struct {
		name    string
		obj     ticketkeys.Object
		since   time.Time
		from    string
		manager string
	}{{
		name: "the entry owning the key dates it, not a later write of another field",
		obj: cm(managedFields("kubectl", keyWritten, `{"f:data":{"f:ssl-session-ticket-key":{}}}`),
			managedFields("labeller", labelled, `{"f:metadata":{"f:labels":{"f:team":{}}}}`)),
		since: keyWritten, from: ticketkeys.SinceManagedFields, manager: "kubectl",
	}, {
		name:  "no entry names the key: the object's last write",
		obj:   cm(managedFields("labeller", labelled, `{"f:metadata":{"f:labels":{"f:team":{}}}}`)),
		since: labelled, from: ticketkeys.SinceManagedFields, manager: "labeller",
	}, {
		name:  "no managedFields: the creation, and the age is unknown",
		obj:   cm(),
		since: created, from: ticketkeys.SinceCreation,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := ticketkeys.Scan(tt.obj).Findings
			if len(fs) != 1 {
				t.Fatalf("findings = %v", fs)
			}
			f := fs[0]
			if !f.Since.Time.Equal(tt.since) || f.SinceFrom != tt.from || f.Manager != tt.manager {
				t.Errorf("since %s from %s by %q, want %s from %s by %q", f.Since, f.SinceFrom, f.Manager, tt.since, tt.from, tt.manager)
			}
		})
	}
}

func TestParseKeys(t *testing.T) {
	k48, k80 := make([]byte, 48), make([]byte, 80)
	k80[0] = 1
	b64 := base64.StdEncoding.EncodeToString
	tests := []struct {
		name       string
		in         string
		ok         bool
		size, keys int
	}{
		{"raw 80 bytes (nginx, Cilium)", string(k80), true, 80, 1},
		{"raw 48 bytes", string(k48), true, 48, 1},
		{"one base64 line (ingress-nginx)", b64(k80), true, 80, 1},
		{"HAProxy's file, with a comment", "# keys\n" + b64(k48) + "\n" + b64(k48) + "\n\n" + b64(k48) + "\n", true, 48, 3},
		{"mixed sizes", b64(k48) + "\n" + b64(k80), true, 0, 2},
		{"unpadded base64", base64.RawStdEncoding.EncodeToString(k80), true, 80, 1},
		{"a certificate", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", false, 0, 0},
		{"a base64 token of 32 bytes", b64(make([]byte, 32)), false, 0, 0},
		{"empty", "", false, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ks, ok := ticketkeys.ParseKeys([]byte(tt.in))
			if ok != tt.ok || ks.Size != tt.size || ks.Keys != tt.keys {
				t.Errorf("ParseKeys = %+v, %t; want size %d, %d keys, %t", ks, ok, tt.size, tt.keys, tt.ok)
			}
		})
	}
}

func TestEnvoyProblemsAndNames(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cilium.io/v2", "kind": "CiliumClusterwideEnvoyConfig",
		"metadata": map[string]any{"name": "wide"},
		"spec": map[string]any{"resources": []any{map[string]any{
			// JSON names, as Envoy and the CRDs also take them.
			"sessionTicketKeys": map[string]any{"keys": []any{
				map[string]any{"inlineBytes": base64.StdEncoding.EncodeToString(make([]byte, 48))},
				map[string]any{"inlineString": strings.Repeat("k", 80)},
				map[string]any{"environment_variable": "TICKET_KEY"},
			}},
		}}},
	}}
	fs := ticketkeys.Scan(ticketkeys.FromUnstructured(u)).Findings
	want := []brief{{Ref: "CiliumClusterwideEnvoyConfig wide", Field: "spec.resources[0].sessionTicketKeys", Shape: "envoy", Size: 0, Keys: 2,
		Problem: "Envoy needs keys of exactly 80 bytes: it refuses this configuration"}}
	if diff := cmp.Diff(want, briefs(fs)); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
}

// The leak check of TestShapes sees the keys: each fixture, printed, leaks.
func TestLeakCheckSeesEveryFixturesKeys(t *testing.T) {
	for _, name := range []string{"ingress-nginx.yaml", "istio-envoyfilter.yaml", "istio-envoyfilter-file.yaml", "envoy-gateway-patchpolicy.yaml", "cilium-envoyconfig.yaml", "haproxy.yaml"} {
		us := load(t, name)
		out, err := json.Marshal(us)
		if err != nil {
			t.Fatal(err)
		}
		forbidden := keyfixtures.Forbidden(us)
		if len(forbidden) == 0 || len(keyfixtures.Leaks(string(out), forbidden)) == 0 {
			t.Errorf("%s: the leak check finds no key in the fixture itself (%d forms)", name, len(forbidden))
		}
	}
}
