package ticketkeys

import (
	"encoding/base64"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// How the walker reads a node of an Envoy configuration: anywhere, or as
// one of the messages of session ticket keys.
type mode int

const (
	modeAny          mode = iota
	modeTLSKeys           // envoy.extensions.transport_sockets.tls.v3.TlsSessionTicketKeys
	modeDataSources       // its keys
	modeDataSource        // one envoy.config.core.v3.DataSource
	modeInlineBytes       // a DataSource's inline_bytes
	modeInlineString      // a DataSource's inline_string
	modeFilename          // a DataSource's filename
	modeSDS               // session_ticket_keys_sds_secret_config: an SdsSecretConfig
)

// maxDepth bounds the walk of a custom resource's spec.
const maxDepth = 64

// fieldMode maps the field names of the messages (proto and JSON names
// alike: Envoy and the CRDs take both) to what they hold.
func fieldMode(parent mode, name string) (mode, bool) {
	switch parent {
	case modeAny:
		switch name {
		case "session_ticket_keys", "sessionTicketKeys":
			return modeTLSKeys, true
		case "session_ticket_keys_sds_secret_config", "sessionTicketKeysSdsSecretConfig":
			return modeSDS, true
		}
		return modeAny, true
	case modeTLSKeys:
		if name == "keys" {
			return modeDataSources, true
		}
	case modeDataSource:
		switch name {
		case "inline_bytes", "inlineBytes":
			return modeInlineBytes, true
		case "inline_string", "inlineString":
			return modeInlineString, true
		case "filename":
			return modeFilename, true
		}
	}
	return 0, false
}

// walker collects the keys of an Envoy configuration in a custom
// resource's spec.
type walker struct {
	s *Summary
	o Object
	// block is the finding of the session_ticket_keys being walked.
	block *Finding
	keys  [][]byte
}

func scanEnvoy(s *Summary, o Object) {
	w := &walker{s: s, o: o}
	if o.Kind != KindEnvoyPatchPolicy {
		w.walk(o.Spec, "spec", modeAny, 0)
		return
	}
	// An EnvoyPatchPolicy's JSON patch puts its value at a path: the value
	// is what the path's last fields make it.
	patches, _ := o.Spec["jsonPatches"].([]any)
	for i, p := range patches {
		op, _ := asMap(p)["operation"].(map[string]any)
		path, _ := op["path"].(string)
		w.walk(op["value"], fmt.Sprintf("spec.jsonPatches[%d].operation.value", i), patchMode(path), 0)
	}
}

// patchMode is what a JSON patch's value is, by its path (RFC 6901).
func patchMode(path string) mode {
	m := modeAny
	for seg := range strings.SplitSeq(strings.TrimPrefix(path, "/"), "/") {
		seg = strings.NewReplacer("~1", "/", "~0", "~").Replace(seg)
		switch m {
		case modeDataSources: // an index of keys, or - to append
			m = modeDataSource
		default:
			next, ok := fieldMode(m, seg)
			if !ok {
				return modeAny
			}
			m = next
		}
	}
	return m
}

func asMap(v any) map[string]any { m, _ := v.(map[string]any); return m }

func (w *walker) walk(node any, at string, m mode, depth int) {
	if depth > maxDepth || len(w.s.Findings) >= MaxFindings {
		return
	}
	switch m {
	case modeTLSKeys, modeDataSources:
		if w.block == nil {
			w.begin(at)
			defer w.end()
		}
	case modeDataSource, modeInlineBytes, modeInlineString:
		if w.block == nil { // a patch of one key
			w.begin(at)
			defer w.end()
		}
	}
	switch m {
	case modeInlineBytes:
		s, _ := node.(string)
		k, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			k = []byte(s)
			w.block.Problem = "inline_bytes is not base64: Envoy refuses it"
		}
		w.keys = append(w.keys, k)
		return
	case modeInlineString:
		s, _ := node.(string)
		w.keys = append(w.keys, []byte(s))
		return
	case modeFilename:
		s, _ := node.(string)
		w.s.References = append(w.s.References, Reference{ObjectRef: w.o.Ref(), Field: at, Shape: ShapeEnvoy, Path: s})
		return
	case modeSDS:
		w.sds(asMap(node), at)
		return
	}
	switch v := node.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			if next, ok := fieldMode(m, k); ok {
				w.walk(v[k], at+"."+k, next, depth+1)
			}
		}
	case []any:
		for i, e := range v {
			next := m
			if m == modeDataSources {
				next = modeDataSource
			}
			w.walk(e, fmt.Sprintf("%s[%d]", at, i), next, depth+1)
		}
	}
}

func (w *walker) begin(at string) {
	w.block = &Finding{Field: at, Shape: ShapeEnvoy}
	w.keys = nil
}

// end adds the finding of a session_ticket_keys block that holds inline
// keys, and forgets the keys.
func (w *walker) end() {
	f, keys := w.block, w.keys
	w.block, w.keys = nil, nil
	if len(keys) == 0 {
		return
	}
	f.setKeys(keySet(keys))
	if f.Problem == "" && f.Size != 80 {
		f.Problem = "Envoy needs keys of exactly 80 bytes: it refuses this configuration"
	}
	for _, k := range keys {
		clear(k)
	}
	w.s.add(w.o, *f, []string{"f:spec"})
}

// sds reads an SdsSecretConfig: a file (path_config_source, or the older
// path), or a secret by name, which Istio spells kubernetes://[ns/]name
// and Cilium ns/name; a bare name is in the object's namespace.
func (w *walker) sds(c map[string]any, at string) {
	ref := Reference{ObjectRef: w.o.Ref(), Field: at, Shape: ShapeEnvoy}
	src := asMap(c["sds_config"])
	if src == nil {
		src = asMap(c["sdsConfig"])
	}
	for _, k := range []string{"path_config_source", "pathConfigSource"} {
		if p, ok := asMap(src[k])["path"].(string); ok {
			ref.Path = p
		}
	}
	if p, ok := src["path"].(string); ok && ref.Path == "" {
		ref.Path = p
	}
	name, _ := c["name"].(string)
	if ref.Path == "" && name != "" {
		name = strings.TrimPrefix(name, "kubernetes://")
		ns, n, ok := strings.Cut(name, "/")
		if !ok {
			ns, n = w.o.Namespace, name
		}
		ref.Secret = &ObjectRef{Kind: KindSecret, Namespace: ns, Name: n}
	}
	if ref.Path == "" && ref.Secret == nil {
		return
	}
	w.s.References = append(w.s.References, ref)
}
