// Package mint holds the sources of new key secrets, for ticket keys and
// ECH configs' seeds alike: in-cluster crypto/rand (the default) and Vault
// (a ClusterKeySource: sys/tools/random or a transit mount), under each key
// source's budget and timeout, with errors a ring's status may show
// (ForTenant). Controllers see only Sources and Source; with
// internal/sharedring/vaultstore, it is the only user of vault/api.
package mint

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

// Source mints fresh ticket key secrets.
type Source interface {
	// Mint returns n new secrets, or an error and none: a mint is all or
	// nothing, so that no half rotation is ever published. Errors name the
	// source and the cause, never key material.
	Mint(ctx context.Context, n int) ([]keyring.Secret, error)
}

// Random mints secrets from a cryptographically secure random source.
type Random struct {
	// Reader defaults to crypto/rand.Reader.
	Reader io.Reader
}

// Mint reads n secrets from the random source.
func (r Random) Mint(_ context.Context, n int) ([]keyring.Secret, error) {
	rd := r.Reader
	if rd == nil {
		rd = rand.Reader
	}
	out := make([]keyring.Secret, n)
	for i := range out {
		if _, err := io.ReadFull(rd, out[i][:]); err != nil {
			return nil, fmt.Errorf("read random key %d of %d: %w", i+1, n, err)
		}
	}
	return out, nil
}

// ForTenant is what the status of a ring in a tenant's namespace shows of a
// failed mint from the key source named source: the reason and the key
// source's name. The error's own text may name the Vault address, the auth
// mount, or Secrets of the operator's namespace, which are the cluster
// administrator's: it goes on the ClusterKeySource's status (its Minting
// condition, see Sources.LastMint) and into the operator's log instead.
// The errors a tenant must act on (a key source that does not exist, or
// does not allow the namespace) name nothing else, and are shown whole.
func ForTenant(err error, source string) string {
	reason := ReportedReason(err)
	switch reason {
	case "":
		return ""
	case v1alpha1.ReasonKeySourceNotFound, v1alpha1.ReasonKeySourceNotAllowed,
		v1alpha1.ReasonSharedRingRolledBack, v1alpha1.ReasonSharedRingUnsupported, v1alpha1.ReasonSharedRingPolicyMismatch:
		// About the ring and its namespace, not the key source's settings.
		return err.Error()
	}
	what := map[string]string{
		v1alpha1.ReasonVaultUnavailable:      "Vault did not answer; the operator retries",
		v1alpha1.ReasonVaultPermissionDenied: "Vault refused the operator",
		v1alpha1.ReasonVaultBadResponse:      "Vault's answer was refused",
		v1alpha1.ReasonVaultConfig:           "the key source's settings are invalid",
	}[reason]
	if what == "" {
		what = "the key source failed"
	}
	return fmt.Sprintf("key source %s: %s (%s); a cluster administrator finds the details on ClusterKeySource %s's status", source, what, reason, source)
}
