// Package keyfixtures is test support: the manifests of
// internal/ticketkeys/testdata (ticket keys in the shapes their projects
// document), and the check that an output shows none of their keys' bytes
// in any of the forms a leak could take.
package keyfixtures

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Dir is the directory of the fixtures.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "ticketkeys", "testdata")
}

// Load reads the objects of a multi-document YAML file, named relative to
// Dir unless absolute. stringData of a Secret is folded into its data, as
// the API server does.
func Load(name string) ([]*unstructured.Unstructured, error) {
	if !filepath.IsAbs(name) {
		name = filepath.Join(Dir(), name)
	}
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		if len(u.Object) == 0 {
			continue
		}
		if sd, ok := u.Object["stringData"].(map[string]any); ok && u.GetKind() == "Secret" {
			d, _ := u.Object["data"].(map[string]any)
			if d == nil {
				d = map[string]any{}
			}
			for k, v := range sd {
				d[k] = base64.StdEncoding.EncodeToString([]byte(v.(string)))
			}
			u.Object["data"] = d
			delete(u.Object, "stringData")
		}
		out = append(out, u)
	}
}

// Forbidden lists the forms of every key in objs that no output may show:
// each key's base64 (padded and not), its hex (both cases), its raw bytes,
// and the base64 of each Secret entry that holds keys, as the API server
// serves it. A key is any string (or line of one) that decodes from base64
// to 48 or 80 bytes, or an Envoy inline_string.
func Forbidden(objs []*unstructured.Unstructured) []string {
	var keys [][]byte
	var entries []string
	var walk func(v any, secretData bool, key string)
	walk = func(v any, secretData bool, key string) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				walk(e, secretData, k)
			}
		case []any:
			for _, e := range v {
				walk(e, secretData, key)
			}
		case string:
			text := v
			if secretData {
				raw, err := base64.StdEncoding.DecodeString(v)
				if err != nil {
					return
				}
				text = string(raw)
				if len(raw) == 48 || len(raw) == 80 {
					keys = append(keys, raw)
				}
			}
			if key == "inline_string" || key == "inlineString" {
				keys = append(keys, []byte(v))
			}
			found := false
			for line := range strings.SplitSeq(text, "\n") {
				if k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(line)); err == nil && (len(k) == 48 || len(k) == 80) {
					keys, found = append(keys, k), true
				}
			}
			if secretData && found {
				entries = append(entries, v)
			}
		}
	}
	for _, u := range objs {
		if u.GetKind() == "Secret" {
			walk(u.Object["data"], true, "")
		} else {
			walk(u.Object, false, "")
		}
	}
	out := entries
	for _, k := range keys {
		out = append(out, base64.StdEncoding.EncodeToString(k), base64.RawStdEncoding.EncodeToString(k),
			base64.URLEncoding.EncodeToString(k), hex.EncodeToString(k), strings.ToUpper(hex.EncodeToString(k)), string(k))
	}
	return out
}

// window is the length of the pieces of a forbidden form that Leaks looks
// for: 16 characters of base64 are 12 bytes of a key.
const window = 16

// Leaks returns the forbidden forms of which some piece of window
// characters appears in output.
func Leaks(output string, forbidden []string) []string {
	var out []string
	for _, f := range forbidden {
		for i := 0; i+window <= len(f); i += window / 2 {
			if strings.Contains(output, f[i:i+window]) {
				out = append(out, f[i:i+window])
				break
			}
		}
	}
	return out
}
