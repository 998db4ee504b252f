package agent

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

// TestTypesRedactSecrets: a snapshot, a certificate, a ticket key and the
// Agent show no key byte and no private key in any fmt verb, in log/slog,
// logr or encoding/json.
func TestTypesRedactSecrets(t *testing.T) {
	t0 := time.Now().Truncate(time.Second)
	k := keyring.NewKey(keyring.Secret(sha256.Sum256([]byte("k"))))
	k.ActiveFrom, k.RetireAt, k.ExpiresAt = t0.Add(-time.Hour), t0.Add(time.Hour), t0.Add(2*time.Hour)
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cert := &certificate{tls: tls.Certificate{PrivateKey: priv, Leaf: &x509.Certificate{SerialNumber: big.NewInt(77)}}, notAfter: t0.Add(time.Hour)}
	ring := &keyring.Ring{Name: "shop/web", Epoch: 3, IssuedAt: t0, Keys: []keyring.Key{k}}
	snap := newSnapshot(&keyring.Ring{Name: ring.Name, Epoch: ring.Epoch, IssuedAt: t0, Keys: []keyring.Key{k}}, nil, unknownDelay, cert, t0)
	a := &Agent{dir: "/etc/ticket-keys", ring: ring, cert: cert}
	a.snap.Store(snap)
	tk := TicketKey{ID: k.ID, State: "active", ActiveFrom: k.ActiveFrom, ExpiresAt: k.ExpiresAt, Secret: k.Secret}

	raw, err := priv.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	forbidden := []string{
		base64.StdEncoding.EncodeToString(k.Secret[:])[:16],
		hex.EncodeToString(k.Secret[:])[:16],
		strings.Trim(fmt.Sprintf("%d", k.Secret[:]), "[]")[:16],
		hex.EncodeToString(raw)[:16],
		new(big.Int).SetBytes(raw).String()[:16], // as %v prints a big.Int
		base64.StdEncoding.EncodeToString(raw)[:16],
	}
	for _, tc := range []struct {
		name  string
		v     any
		shows string
	}{
		{"snapshot", snap, k.ID},
		{"certificate", cert, "77"},
		{"TicketKey", tk, k.ID},
		{"[]TicketKey", []TicketKey{tk}, k.ID},
		{"Secret", tk.Secret, "[redacted]"},
		{"Agent", a, "/etc/ticket-keys"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out []string
			for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%d"} {
				s := fmt.Sprintf(verb, tc.v)
				if verb == "%v" && !strings.Contains(s, tc.shows) {
					t.Errorf("%%v = %s, want it to show %s", s, tc.shows)
				}
				out = append(out, s)
			}
			var b bytes.Buffer
			slog.New(slog.NewJSONHandler(&b, nil)).Info("m", "v", tc.v)
			slog.New(slog.NewTextHandler(&b, nil)).Info("m", "v", tc.v)
			funcr.New(func(_, args string) { b.WriteString(args) }, funcr.Options{}).Info("m", "v", tc.v)
			if j, err := json.Marshal(tc.v); err == nil {
				b.Write(j)
			}
			out = append(out, b.String())
			all := strings.Join(out, "\n")
			for _, f := range forbidden {
				if strings.Contains(all, f) {
					t.Errorf("shows %s…:\n%s", f, all)
				}
			}
		})
	}
}
