package audit

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Encryption is how kube-apiserver stores Secrets, by its own metrics.
type Encryption string

const (
	// EncryptionOn: Secrets were written through an encrypting provider
	// (the Posture names its prefix) and none in plaintext.
	EncryptionOn Encryption = "on"
	// EncryptionOff: a Secret was written in plaintext, through an
	// EncryptionConfiguration whose first provider is identity.
	EncryptionOff Encryption = "off"
	// EncryptionUnknown: the metrics show no write of a Secret through an
	// EncryptionConfiguration: none covers Secrets (kube-apiserver's
	// default, plaintext), or no Secret was written since it started.
	EncryptionUnknown Encryption = "unknown"
	// EncryptionUnread: the API server's metrics could not be read.
	EncryptionUnread Encryption = "unread"
)

// transformations is kube-apiserver's counter of the values it encrypts
// and decrypts, labelled resource, transformation_type, transformer_prefix
// and status. It counts only what goes through an EncryptionConfiguration.
const transformations = "apiserver_storage_transformation_operations_total"

// EncryptionFromMetrics reads how Secrets are written from kube-apiserver's
// /metrics, in the text format: the prefixes of the successful to_storage
// transformations of secrets.
func EncryptionFromMetrics(text []byte) (enc Encryption, provider string, err error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return EncryptionUnread, "", fmt.Errorf("parse the API server's metrics: %w", err)
	}
	var prefixes []string
	if f, ok := families[transformations]; ok {
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["resource"] == "secrets" && l["transformation_type"] == "to_storage" && l["status"] == "OK" && m.GetCounter().GetValue() > 0 {
				prefixes = append(prefixes, l["transformer_prefix"])
			}
		}
	}
	// A provider's transformer counts under its prefix, and the key it
	// chose under the key's name: "k8s:enc:secretbox:v1:" and "<name>:".
	// identity counts as itself.
	slices.Sort(prefixes)
	providers := slices.DeleteFunc(slices.Clone(prefixes), func(p string) bool { return !strings.HasPrefix(p, "k8s:enc:") })
	switch {
	case slices.Contains(prefixes, "identity"):
		return EncryptionOff, "", nil
	case len(providers) > 0:
		return EncryptionOn, strings.Join(providers, ","), nil
	}
	return EncryptionUnknown, "", nil
}

// KeySecret is a Secret that holds key bytes (type ringmaster.io/ticket-keys),
// as its metadata shows it: the audit never reads a Secret's data.
type KeySecret struct {
	Namespace, Name string
	// Component is snapshot or projection (the ringmaster.io/component label).
	Component string
	// Excluded says it carries velero.io/exclude-from-backup=true.
	Excluded bool
}

// Posture is the report's account of the keys at rest: which Secrets hold
// key bytes, whether backups skip them, and whether the API server
// encrypts them. The operator does not learn it: nothing it may read says
// how kube-apiserver stores Secrets (a Secret read back is decrypted
// alike), so the audit asks kube-apiserver's metrics, as the user.
type Posture struct {
	// Snapshots and Projections count the Secrets holding key bytes
	// audited; Namespaces are theirs.
	Snapshots   int      `json:"snapshots"`
	Projections int      `json:"projections"`
	Namespaces  []string `json:"namespaces,omitempty"`
	// InBackups names, up to MaxListed, those backups do not skip.
	InBackups []string `json:"inBackups,omitempty"`
	// Encryption is how the API server writes Secrets; Provider, when on,
	// the prefixes they are stored under (k8s:enc:<provider>:v1:<key>:).
	Encryption Encryption `json:"encryption"`
	Provider   string     `json:"provider,omitempty"`
	// Verify shows how one of them is stored, read around the API server.
	Verify   string    `json:"verify,omitempty"`
	Problems []Problem `json:"problems,omitempty"`
}

// MaxListed bounds the Secrets a Posture names.
const MaxListed = 10

// posture judges the Secrets holding keys and the API server's encryption.
func posture(in Input) *Posture {
	if in.KeySecrets == nil && in.Encryption == "" {
		return nil
	}
	p := &Posture{Encryption: in.Encryption, Provider: in.Provider}
	excluded := 0
	for _, s := range in.KeySecrets {
		if s.Component == "snapshot" {
			p.Snapshots++
			if p.Verify == "" {
				p.Verify = fmt.Sprintf("ETCDCTL_API=3 etcdctl get /registry/secrets/%s/%s --print-value-only | head -c 32", s.Namespace, s.Name)
			}
		} else {
			p.Projections++
		}
		if !slices.Contains(p.Namespaces, s.Namespace) {
			p.Namespaces = append(p.Namespaces, s.Namespace)
		}
		if s.Excluded {
			excluded++
		} else if len(p.InBackups) < MaxListed {
			p.InBackups = append(p.InBackups, s.Namespace+"/"+s.Name)
		}
	}
	slices.Sort(p.Namespaces)
	if n := len(in.KeySecrets) - excluded; n > 0 {
		p.Problems = append(p.Problems, problem(fmt.Sprintf("%d Secret(s) holding keys lack velero.io/exclude-from-backup=true, so backups keep their keys past expiresAt (the operator's --exclude-secrets-from-backup is off?): %s",
			n, strings.Join(p.InBackups, ", ")), AtRest))
	}
	switch in.Encryption {
	case EncryptionOff:
		p.Problems = append(p.Problems, problem("The API server writes Secrets in plaintext (its EncryptionConfiguration puts identity first): etcd's files and backups keep every key's bytes long past expiresAt. Encrypt Secrets at rest", AtRest))
	case EncryptionUnknown:
		p.Problems = append(p.Problems, problem("The API server's metrics show no Secret written through an EncryptionConfiguration: Secrets are most likely stored in plaintext (kube-apiserver's default), and etcd's files keep every key's bytes long past expiresAt. Encrypt Secrets at rest, and check with the command shown", AtRest))
	}
	return p
}
