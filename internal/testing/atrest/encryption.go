package atrest

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
)

// EncryptionConfig is kube-apiserver's EncryptionConfiguration
// (--encryption-provider-config) that encrypts Secrets at rest with
// secretbox (XSalsa20-Poly1305) under key, 32 bytes. No identity provider
// follows: a Secret stored in plaintext fails to read rather than being
// served, which a control plane that starts encrypted never holds.
// hack/cluster/up.sh writes the same configuration for the single-node
// cluster.
func EncryptionConfig(key []byte) []byte {
	return fmt.Appendf(nil, `apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [secrets]
  providers:
  - secretbox:
      keys:
      - name: ringmaster
        secret: %s
`, base64.StdEncoding.EncodeToString(key))
}

// WriteEncryptionConfig writes an EncryptionConfig under a fresh random
// key to path, readable by its owner only. The key lives only there: a
// control plane's key is never reused or committed.
func WriteEncryptionConfig(path string) error {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	defer clear(key)
	return os.WriteFile(path, EncryptionConfig(key), 0o600)
}
