// Package mint holds the sources of new ticket key secrets: in-cluster
// crypto/rand (the default) and, later, Vault. Controllers see only Source.
package mint

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"

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
