package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

// The typed_config types the listener example names, registered with the
// protobuf registry by importing their packages.
var _ = []proto.Message{&hcmv3.HttpConnectionManager{}, &routerv3.Router{}}

const envoyListenerExample = "../../examples/envoy/listener.yaml"

// strict is protojson as Envoy reads JSON: an unknown field is an error.
var strict = protojson.UnmarshalOptions{DiscardUnknown: false}

// validated is what go-control-plane's ValidateAll (protoc-gen-validate's
// rules, Envoy's own) reports on a message.
type validated interface{ ValidateAll() error }

// readEnvoySDS parses an envoy-ticket-keys.json the way Envoy's file-based
// SDS does: a DiscoveryResponse whose resources are Secrets, strict on
// unknown fields, each validated. It returns the Secrets.
func readEnvoySDS(data []byte) ([]*tlsv3.Secret, error) {
	var resp discoveryv3.DiscoveryResponse
	if err := strict.Unmarshal(data, &resp); err != nil {
		return nil, err
	}
	if err := resp.ValidateAll(); err != nil {
		return nil, err
	}
	if len(resp.GetResources()) == 0 {
		return nil, errors.New("no resources")
	}
	var out []*tlsv3.Secret
	for _, r := range resp.GetResources() {
		var s tlsv3.Secret
		if err := r.UnmarshalTo(&s); err != nil {
			return nil, err
		}
		if err := s.ValidateAll(); err != nil {
			return nil, err
		}
		// Envoy's own check when it loads the keys (the type's rules say
		// only "at least one key").
		for i, k := range s.GetSessionTicketKeys().GetKeys() {
			if n := len(k.GetInlineBytes()); n != 80 {
				return nil, fmt.Errorf("session_ticket_keys.keys[%d]: %d bytes, not 80", i, n)
			}
		}
		out = append(out, &s)
	}
	return out, nil
}

// readEnvoyListener parses a listener YAML the way Envoy reads its config:
// YAML to JSON, then protojson strict on unknown fields, the Listener and
// the DownstreamTlsContext inside it validated.
func readEnvoyListener(data []byte) (*listenerv3.Listener, *tlsv3.DownstreamTlsContext, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, nil, err
	}
	var l listenerv3.Listener
	if err := strict.Unmarshal(js, &l); err != nil {
		return nil, nil, err
	}
	if err := l.ValidateAll(); err != nil {
		return nil, nil, err
	}
	var tlsCtx *tlsv3.DownstreamTlsContext
	for _, fc := range l.GetFilterChains() {
		if ts := fc.GetTransportSocket(); ts != nil {
			tlsCtx = &tlsv3.DownstreamTlsContext{}
			if err := ts.GetTypedConfig().UnmarshalTo(tlsCtx); err != nil {
				return nil, nil, err
			}
			if err := tlsCtx.ValidateAll(); err != nil {
				return nil, nil, err
			}
		}
		// The filters' typed configs, validated too (Validate on an Any
		// checks its type URL only).
		for _, f := range fc.GetFilters() {
			m, err := f.GetTypedConfig().UnmarshalNew()
			if err != nil {
				return nil, nil, err
			}
			if v, ok := m.(validated); ok {
				if err := v.ValidateAll(); err != nil {
					return nil, nil, err
				}
			}
		}
	}
	if tlsCtx == nil {
		return nil, nil, errors.New("no TLS transport socket")
	}
	return &l, tlsCtx, nil
}

// TestEnvoySDSFile: the file the sidecar writes for Envoy is a
// DiscoveryResponse of one Secret that Envoy's generated types accept,
// strict on unknown fields and validated, with the sidecar's keys in order;
// the same reader refuses malformed files.
func TestEnvoySDSFile(t *testing.T) {
	now := time.Now()
	var keys []agent.TicketKey
	for i, state := range []string{"active", "staged", "decrypt-only"} {
		k := agent.TicketKey{ID: "k" + string(rune('1'+i)), State: state, ActiveFrom: now, ExpiresAt: now.Add(time.Hour)}
		for j := range k.Secret {
			k.Secret[j] = byte(i*32 + j)
		}
		keys = append(keys, k)
	}
	for _, n := range []int{1, len(keys)} {
		dir := t.TempDir()
		e := &envoy{dir: dir, secret: "ringmaster-ticket-keys"}
		if _, err := e.apply(context.Background(), keys[:n]); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(dir, envoySDS))
		if err != nil {
			t.Fatal(err)
		}
		secrets, err := readEnvoySDS(data)
		if err != nil {
			t.Fatalf("%d keys: Envoy's types refuse %s: %v", n, envoySDS, err)
		}
		if len(secrets) != 1 || secrets[0].GetName() != e.secret {
			t.Fatalf("%d keys: secrets %v, want one named %s", n, secrets, e.secret)
		}
		got := secrets[0].GetSessionTicketKeys().GetKeys()
		if len(got) != n {
			t.Fatalf("%d keys: the Secret holds %d", n, len(got))
		}
		for i, k := range got {
			if want := derive(keys[i], keyring.FormatEnvoy); string(k.GetInlineBytes()) != string(want[:]) {
				t.Errorf("%d keys: key %d is not %s's Envoy key", n, i, keys[i].ID)
			}
		}
	}

	const typ = `"@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"`
	key80 := base64.StdEncoding.EncodeToString(make([]byte, 80))
	key := base64.StdEncoding.EncodeToString(make([]byte, 81))
	for _, tc := range []struct{ name, file, want string }{
		{"well-formed", `{"resources": [{` + typ + `, "name": "r", "session_ticket_keys": {"keys": [{"inline_bytes": "` + key80 + `"}]}}]}`, ""},
		{"unknown field", `{"resources": [{` + typ + `, "name": "r", "session_ticket_key": {"keys": [{"inline_bytes": "` + key80 + `"}]}}]}`, "unknown field"},
		{"no keys", `{"resources": [{` + typ + `, "name": "r", "session_ticket_keys": {"keys": []}}]}`, "at least 1 item"},
		{"key of 81 bytes", `{"resources": [{` + typ + `, "name": "r", "session_ticket_keys": {"keys": [{"inline_bytes": "` + key + `"}]}}]}`, "not 80"},
		{"unknown type", `{"resources": [{"@type": "type.googleapis.com/envoy.Nothing", "name": "r"}]}`, "envoy.Nothing"},
		{"not JSON", `resources: []`, "syntax error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readEnvoySDS([]byte(tc.file))
			if tc.want == "" && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// TestEnvoyListenerExample: examples/envoy/listener.yaml is a Listener that
// Envoy's generated types accept, strict on unknown fields and validated,
// and its session_ticket_keys_sds_secret_config names the Secret and the
// file the sidecar writes by default, from a watched directory. Broken
// copies of it are refused.
func TestEnvoyListenerExample(t *testing.T) {
	example, err := os.ReadFile(envoyListenerExample)
	if err != nil {
		t.Fatal(err)
	}
	c, err := parseFlags([]string{"--server", "envoy"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, tlsCtx, err := readEnvoyListener(example)
	if err != nil {
		t.Fatalf("Envoy's types refuse %s: %v", envoyListenerExample, err)
	}
	sds := tlsCtx.GetSessionTicketKeysSdsSecretConfig()
	if sds.GetName() != c.envoySecret {
		t.Errorf("the listener asks for Secret %q, the sidecar writes %q", sds.GetName(), c.envoySecret)
	}
	pcs := sds.GetSdsConfig().GetPathConfigSource()
	if want := filepath.Join(c.outDir, envoySDS); pcs.GetPath() != want {
		t.Errorf("the listener reads %q, the sidecar writes %q", pcs.GetPath(), want)
	}
	if pcs.GetWatchedDirectory().GetPath() != c.outDir {
		t.Errorf("the listener watches %q, the sidecar renames into %q", pcs.GetWatchedDirectory().GetPath(), c.outDir)
	}

	for _, tc := range []struct{ name, from, to, want string }{
		{"misspelled field", "session_ticket_keys_sds_secret_config:", "session_ticket_key_sds_secret_config:", "unknown field"},
		{"empty path", "path: /var/run/ringmaster-server/envoy-ticket-keys.json", "path: \"\"", "PathConfigSource"},
		{"no Secret name", "name: ringmaster-ticket-keys", "name: \"\"", "SdsSecretConfig.Name"},
		{"bad TLS version", "TLSv1_2", "TLSv1_9", "TLSv1_9"},
		{"empty HTTP filter name", "name: envoy.filters.http.router", "name: \"\"", "HttpFilter.Name"},
		{"unknown typed_config", "http_connection_manager.v3.HttpConnectionManager", "http_connection_manager.v3.Nothing", "Nothing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			broken := strings.Replace(string(example), tc.from, tc.to, 1)
			if broken == string(example) {
				t.Fatalf("%q is not in the example", tc.from)
			}
			_, _, err := readEnvoyListener([]byte(broken))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}
