// Package ticketkeys finds TLS session-ticket keys that no ring manages,
// in the places users put them:
//   - ingress-nginx's ConfigMap key ssl-session-ticket-key (base64 of 48
//     or 80 bytes);
//   - Envoy's session_ticket_keys (DataSources: inline_bytes,
//     inline_string, filename) and session_ticket_keys_sds_secret_config,
//     wherever they appear in an Istio EnvoyFilter, an Envoy Gateway
//     EnvoyPatchPolicy (also as the target of a JSON patch path) or a
//     Cilium CiliumEnvoyConfig / CiliumClusterwideEnvoyConfig;
//   - HAProxy's tls-ticket-keys file, named by a bind line of an
//     haproxy.cfg kept in a Secret or ConfigMap, whose content (base64 keys
//     of 48 or 80 bytes, one a line) is in the same object or another of
//     its namespace;
//   - any Secret or ConfigMap entry named like a ticket key file (its name
//     holds "ticket") whose content is ticket keys: raw 48 or 80 bytes
//     (nginx's ssl_session_ticket_key, Cilium's tls.sessionticket.key), or
//     base64 lines of them.
//
// It is pure: objects in, findings out. A finding says where the keys are,
// their size and count, a fingerprint of each (a truncated SHA-256, from
// which nothing of the key can be learnt) and when they last changed, as
// far as the object tells; it never holds a key's bytes. What a ring
// manages (its snapshot and projection Secrets, by their labels and type)
// is skipped.
//
// Scan reduces one object to a Summary, which keeps no byte of it: what
// the plugin keeps per object read, page by page, and what an informer's
// shape would keep. Resolve joins the summaries: references (an SDS
// secret, a filename, an HAProxy key file kept elsewhere) to the entries
// they name.
package ticketkeys

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

// The shapes keys are found in.
const (
	// ShapeIngressNginx: ingress-nginx's ConfigMap key ssl-session-ticket-key.
	ShapeIngressNginx = "ingress-nginx"
	// ShapeEnvoy: Envoy's session_ticket_keys in an EnvoyFilter,
	// EnvoyPatchPolicy or CiliumEnvoyConfig.
	ShapeEnvoy = "envoy"
	// ShapeHAProxy: the file an haproxy.cfg's tls-ticket-keys names.
	ShapeHAProxy = "haproxy"
	// ShapeKeyFile: a Secret or ConfigMap entry named like a ticket key
	// file that holds ticket keys.
	ShapeKeyFile = "key-file"
)

// The kinds read, and their API groups.
const (
	KindConfigMap                    = "ConfigMap"
	KindSecret                       = "Secret"
	KindEnvoyFilter                  = "EnvoyFilter"
	KindEnvoyPatchPolicy             = "EnvoyPatchPolicy"
	KindCiliumEnvoyConfig            = "CiliumEnvoyConfig"
	KindCiliumClusterwideEnvoyConfig = "CiliumClusterwideEnvoyConfig"

	GroupIstio        = "networking.istio.io"
	GroupEnvoyGateway = "gateway.envoyproxy.io"
	GroupCilium       = "cilium.io"
)

// Where the age of a key comes from.
const (
	// SinceManagedFields: the time of the managedFields entry that owns the
	// key's field (the last time that manager changed a field it owns), or
	// of the object's latest entry when none names the field. The key has
	// not changed since: it is at least as old as that.
	SinceManagedFields = "managedFields"
	// SinceCreation: the object carries no managedFields; its
	// creationTimestamp bounds the key's age from above only, so the age
	// is unknown.
	SinceCreation = "creationTimestamp"
)

// Limits that keep a Summary small whatever the object holds (DESIGN
// bound 5).
const (
	// MaxFindings bounds the findings and references kept per object.
	MaxFindings = 32
	// MaxFingerprints bounds the fingerprints kept per finding; Keys
	// counts them all.
	MaxFingerprints = 10
	// maxEntryBytes: entries larger than this are no key file.
	maxEntryBytes = 64 << 10
)

// ringSecretType is the type of every Secret a ring writes
// (internal/distribute.SecretType).
const ringSecretType = "ringmaster.io/ticket-keys"

// Object is what the finder reads of one object: a ConfigMap's data and
// binaryData, a Secret's data, or a custom resource's spec.
type Object struct {
	Group, Kind     string
	Namespace, Name string
	Labels          map[string]string
	// Type is a Secret's type.
	Type          string
	Created       time.Time
	ManagedFields []metav1.ManagedFieldsEntry
	Data          map[string][]byte
	Spec          map[string]any
}

// Ref names an object as kubectl does: Kind namespace/name.
func (o Object) Ref() ObjectRef {
	return ObjectRef{Kind: o.Kind, Namespace: o.Namespace, Name: o.Name}
}

// ObjectRef names an object.
type ObjectRef struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

func (r ObjectRef) String() string {
	if r.Namespace == "" {
		return r.Kind + " " + r.Name
	}
	return r.Kind + " " + r.Namespace + "/" + r.Name
}

// Finding is a set of ticket keys no ring manages, in one place. It never
// holds a key's bytes.
type Finding struct {
	ObjectRef `json:",inline"`
	// Field is where in the object: data[<key>], or the path of the field
	// in the spec (spec.configPatches[0].patch.value....inline_bytes).
	Field string `json:"field"`
	// Shape is the form the keys are in (ingress-nginx, envoy, haproxy,
	// key-file).
	Shape string `json:"shape"`
	// Size is the size of each key in bytes (48 or 80; others are shown
	// as they are, and Problem says who refuses them); 0 when mixed.
	Size int `json:"size"`
	// Keys counts the keys.
	Keys int `json:"keys"`
	// Fingerprints are "sha256:" and the first 16 hex digits of the
	// SHA-256 of each key (up to MaxFingerprints): enough to tell keys
	// apart and to see the same key in two places, nothing of the key.
	Fingerprints []string `json:"fingerprints,omitempty"`
	// Since is when the keys last changed, at the latest, as far as the
	// object tells; SinceFrom says how it is known (managedFields, or
	// creationTimestamp when the age is unknown), Manager who wrote it.
	Since     metav1.Time `json:"since"`
	SinceFrom string      `json:"sinceFrom"`
	Manager   string      `json:"manager,omitempty"`
	// UsedBy names the objects whose configuration points at these keys
	// (an haproxy.cfg, an Envoy filename or SDS secret).
	UsedBy []string `json:"usedBy,omitempty"`
	// Problem says what is wrong with the keys besides being unmanaged:
	// a size the server refuses.
	Problem string `json:"problem,omitempty"`
}

// Reference is a place whose keys live elsewhere: an Envoy filename or SDS
// secret, an haproxy.cfg's tls-ticket-keys file not in its own object.
type Reference struct {
	ObjectRef `json:",inline"`
	Field     string `json:"field"`
	Shape     string `json:"shape"`
	// Secret names the Secret referred to (Envoy SDS), when it is one.
	Secret *ObjectRef `json:"secret,omitempty"`
	// Path is the file referred to (Envoy filename, HAProxy
	// tls-ticket-keys); it is looked for by its base name among the
	// entries of the Secrets and ConfigMaps of the same namespace.
	Path string `json:"path,omitempty"`
	// Note says why the keys were not read, when they were not.
	Note string `json:"note,omitempty"`
}

func (r Reference) what() string { return r.String() + " " + r.Field }

// KeySet is what is kept of an entry that holds ticket keys: never the
// bytes.
type KeySet struct {
	Size         int
	Keys         int
	Fingerprints []string
}

// entry is a Secret or ConfigMap entry that holds ticket keys.
type entry struct {
	KeySet
	Since     time.Time
	SinceFrom string
	Manager   string
	// Found is set when the entry is a finding by itself.
	Found bool
}

// Summary is what Scan keeps of one object: its findings, its references,
// and the entries holding ticket keys that a reference may name.
type Summary struct {
	Object     ObjectRef
	Findings   []Finding
	References []Reference
	// entries holds the key sets of a Secret's or ConfigMap's entries, by
	// entry name.
	entries map[string]entry
	// managed: the object is a ring's.
	managed bool
}

// Managed reports whether an object is a ring's (a snapshot or projection
// Secret), by its labels or its type.
func Managed(labels map[string]string, typ string) bool {
	if typ == ringSecretType {
		return true
	}
	for _, l := range []string{v1alpha1.RingLabel, v1alpha1.ClusterRingLabel, v1alpha1.ComponentLabel} {
		if _, ok := labels[l]; ok {
			return true
		}
	}
	return false
}

// Fingerprint is the id of a key: "sha256:" and the first 16 hex digits of
// its SHA-256.
func Fingerprint(key []byte) string {
	sum := sha256.Sum256(key)
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// Scan reduces one object to what the audit needs of it. It keeps no byte
// of the object's data.
func Scan(o Object) Summary {
	s := Summary{Object: o.Ref()}
	if Managed(o.Labels, o.Type) {
		// Only the names of its entries, so that a reference to one of
		// them is known to be to a ring's keys.
		s.managed, s.entries = true, map[string]entry{}
		for name := range o.Data {
			if len(s.entries) < MaxFindings {
				s.entries[name] = entry{}
			}
		}
		return s
	}
	switch o.Kind {
	case KindConfigMap, KindSecret:
		scanData(&s, o)
	case KindEnvoyFilter, KindEnvoyPatchPolicy, KindCiliumEnvoyConfig, KindCiliumClusterwideEnvoyConfig:
		scanEnvoy(&s, o)
	}
	if len(s.Findings) > MaxFindings {
		s.Findings = s.Findings[:MaxFindings]
	}
	if len(s.References) > MaxFindings {
		s.References = s.References[:MaxFindings]
	}
	return s
}

// ParseKeys reads ticket key material: raw bytes of one key (48 or 80
// bytes, nginx's file and Cilium's entries), or text of base64 keys, one a
// line (HAProxy's file; ingress-nginx's value is one line). Empty lines
// and # comments are skipped. ok is false when it is no key material.
func ParseKeys(b []byte) (KeySet, bool) {
	if len(b) == 0 || len(b) > maxEntryBytes {
		return KeySet{}, false
	}
	if len(b) == 48 || len(b) == 80 {
		// Raw: base64 of a key is 64 or 108 characters, never 48 or 80.
		return keySet([][]byte{b}), true
	}
	keys, ok := parseText(b)
	if !ok {
		return KeySet{}, false
	}
	return keySet(keys), true
}

// parseText reads base64 keys of 48 or 80 bytes, one a line.
func parseText(b []byte) ([][]byte, bool) {
	var keys [][]byte
	for line := range strings.SplitSeq(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := decodeBase64(line)
		if err != nil || (len(k) != 48 && len(k) != 80) {
			return nil, false
		}
		keys = append(keys, k)
	}
	return keys, len(keys) > 0
}

func decodeBase64(s string) ([]byte, error) {
	if k, err := base64.StdEncoding.DecodeString(s); err == nil {
		return k, nil
	}
	return base64.RawStdEncoding.DecodeString(s)
}

func keySet(keys [][]byte) KeySet {
	ks := KeySet{Keys: len(keys)}
	for i, k := range keys {
		switch {
		case i == 0:
			ks.Size = len(k)
		case len(k) != ks.Size:
			ks.Size = 0
		}
		if len(ks.Fingerprints) < MaxFingerprints {
			ks.Fingerprints = append(ks.Fingerprints, Fingerprint(k))
		}
	}
	return ks
}

// since dates a field of o: the latest managedFields entry that owns one
// of paths (as fieldsV1 spells them: "f:data", "f:<key>"), else the
// latest entry, else the creationTimestamp.
func since(o Object, paths ...[]string) (time.Time, string, string) {
	var owner, any *metav1.ManagedFieldsEntry
	for i := range o.ManagedFields {
		e := &o.ManagedFields[i]
		if e.Time == nil {
			continue
		}
		if any == nil || e.Time.After(any.Time.Time) {
			any = e
		}
		if slices.ContainsFunc(paths, func(p []string) bool { return owns(e, p) }) && (owner == nil || e.Time.After(owner.Time.Time)) {
			owner = e
		}
	}
	switch {
	case owner != nil:
		return owner.Time.Time, SinceManagedFields, owner.Manager
	case any != nil:
		return any.Time.Time, SinceManagedFields, any.Manager
	}
	return o.Created, SinceCreation, ""
}

// owns reports whether a managedFields entry's fieldsV1 holds path.
func owns(e *metav1.ManagedFieldsEntry, path []string) bool {
	if e.FieldsV1 == nil {
		return false
	}
	var node map[string]json.RawMessage
	if json.Unmarshal(e.FieldsV1.GetRawBytes(), &node) != nil {
		return false
	}
	for i, p := range path {
		raw, ok := node[p]
		if !ok {
			return false
		}
		if i == len(path)-1 {
			return true
		}
		node = nil
		if json.Unmarshal(raw, &node) != nil {
			return false
		}
	}
	return true
}

func (s *Summary) add(o Object, f Finding, paths ...[]string) {
	f.ObjectRef = o.Ref()
	t, from, manager := since(o, paths...)
	f.Since, f.SinceFrom, f.Manager = metav1.NewTime(t), from, manager
	s.Findings = append(s.Findings, f)
}

func (f *Finding) setKeys(ks KeySet) {
	f.Size, f.Keys, f.Fingerprints = ks.Size, ks.Keys, ks.Fingerprints
}
