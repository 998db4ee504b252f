package atrest

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"slices"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

// KeyTraces are the byte strings by which a key can be found where
// ringmaster wrote it: its secret raw and in base64 (ticketkeys.json), and
// each derived format's key raw and in base64 (nginx and Envoy key files,
// HAProxy's key list, Cilium's Secret keys). A Secret's data is stored as the raw bytes in etcd
// and read back in base64 through the API, so both encodings of each are
// looked for.
func KeyTraces(s keyring.Secret) map[string][]byte {
	out := map[string][]byte{
		"raw":    bytes.Clone(s[:]),
		"base64": []byte(base64.StdEncoding.EncodeToString(s[:])),
	}
	for _, f := range []keyring.Format{keyring.FormatNginx, keyring.FormatHAProxy, keyring.FormatEnvoy, keyring.FormatCilium} {
		d, err := keyring.DeriveKey(s, f)
		if err != nil {
			panic(fmt.Sprintf("derive %s: %v", f, err)) // every listed format derives
		}
		out[string(f)+" raw"] = bytes.Clone(d[:])
		out[string(f)+" base64"] = []byte(base64.StdEncoding.EncodeToString(d[:]))
	}
	return out
}

// FindTraces reports which traces of s (KeyTraces) data holds, by name.
func FindTraces(data []byte, s keyring.Secret) []string {
	var found []string
	for name, t := range KeyTraces(s) {
		if bytes.Contains(data, t) {
			found = append(found, name)
		}
	}
	slices.Sort(found)
	return found
}
