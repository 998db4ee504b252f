package mint

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"testing/iotest"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

func TestRandomMint(t *testing.T) {
	secrets, err := Random{}.Mint(context.Background(), 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(secrets) != 3 {
		t.Fatalf("got %d secrets, want 3", len(secrets))
	}
	seen := map[keyring.Secret]bool{}
	for i, s := range secrets {
		if s == (keyring.Secret{}) || seen[s] {
			t.Fatalf("secret %d is zero or repeated", i)
		}
		seen[s] = true
	}
}

func TestRandomMintFailsWhole(t *testing.T) {
	tests := []struct {
		name   string
		reader *bytes.Reader
	}{
		{"empty source", bytes.NewReader(nil)},
		{"short second key", bytes.NewReader(make([]byte, keyring.SecretSize+5))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			secrets, err := Random{Reader: tt.reader}.Mint(context.Background(), 2)
			if err == nil || secrets != nil {
				t.Fatalf("Mint = %d secrets, %v; want no secrets and an error", len(secrets), err)
			}
		})
	}
	boom := errors.New("entropy source failed")
	if _, err := (Random{Reader: iotest.ErrReader(boom)}).Mint(context.Background(), 1); !errors.Is(err, boom) {
		t.Fatalf("Mint error = %v, want it to wrap the reader's error", err)
	}
}
