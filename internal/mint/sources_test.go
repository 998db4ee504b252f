package mint

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

func TestAllowed(t *testing.T) {
	source := func(sel *metav1.LabelSelector) *v1alpha1.ClusterKeySource {
		return &v1alpha1.ClusterKeySource{ObjectMeta: metav1.ObjectMeta{Name: "vault-prod"}, Spec: v1alpha1.ClusterKeySourceSpec{NamespaceSelector: sel}}
	}
	shop := labels.Set{"kubernetes.io/metadata.name": "shop", "team": "shop"}
	tests := []struct {
		name   string
		source *v1alpha1.ClusterKeySource
		ns     string
		labels labels.Set
		want   string // reason, "" when allowed
	}{
		{"a cluster ring may use any source", source(nil), "", nil, ""},
		{"no selector: no namespaced ring", source(nil), "shop", shop, v1alpha1.ReasonKeySourceNotAllowed},
		{"{} allows every namespace", source(&metav1.LabelSelector{}), "shop", shop, ""},
		{"a matching selector", source(&metav1.LabelSelector{MatchLabels: map[string]string{"team": "shop"}}), "shop", shop, ""},
		{"a selector that does not match", source(&metav1.LabelSelector{MatchLabels: map[string]string{"team": "payments"}}), "shop", shop, v1alpha1.ReasonKeySourceNotAllowed},
		{"an invalid selector allows nothing", source(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Sometimes"}}}), "shop", shop, v1alpha1.ReasonKeySourceNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Allowed(tt.source, tt.ns, tt.labels)
			if got := CarriedReason(err); got != tt.want {
				t.Fatalf("Allowed = %v (reason %q), want reason %q", err, got, tt.want)
			}
		})
	}
}

// A key source's Vault client, and so its token, lives as long as the key
// source and its settings: shared by its rings, reused across reconciles,
// replaced when the key source changes, dropped when it is deleted.
func TestSourcesKeepOneVaultClientPerKeySource(t *testing.T) {
	ctx := context.Background()
	cks := func(uid string, generation int64) *v1alpha1.ClusterKeySource {
		return &v1alpha1.ClusterKeySource{
			ObjectMeta: metav1.ObjectMeta{Name: "vault-prod", UID: types.UID(uid), Generation: generation},
			Spec: v1alpha1.ClusterKeySourceSpec{Vault: &v1alpha1.VaultSource{
				Address: "https://127.0.0.1:8200", Auth: v1alpha1.VaultAuth{TokenSecretRef: &v1alpha1.KeyRef{Name: "t", Key: "token"}},
			}},
		}
	}
	var s Sources
	get := func(c *v1alpha1.ClusterKeySource) Source {
		t.Helper()
		src, err := s.For(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := src.(*Vault); !ok {
			t.Fatalf("source %T, want *Vault", src)
		}
		return src
	}

	first := get(cks("1", 1))
	if get(cks("1", 1)) != first {
		t.Error("a second ring of the same key source got a new client (and would log in again)")
	}
	changed := get(cks("1", 2))
	if changed == first {
		t.Error("a changed key source kept the old client")
	}
	if get(cks("2", 1)) == changed {
		t.Error("a key source created again under the same name kept the deleted one's client")
	}
	s.Forget("vault-prod")
	if len(s.vault) != 0 {
		t.Errorf("Forget left %d clients", len(s.vault))
	}
	if src, err := s.For(ctx, nil); err != nil || src != (Random{}) {
		t.Errorf("no key source gave %T, %v; want Random", src, err)
	}
}

type repeating struct{}

func (repeating) Mint(_ context.Context, n int) ([]keyring.Secret, error) {
	out := make([]keyring.Secret, n)
	for i := range out {
		out[i][0] = 7
	}
	return out, nil
}

func TestSourcesFillIsAllOrNothing(t *testing.T) {
	var s Sources
	plan := keyring.Next(time.Now(), keyring.Policy{RotationInterval: time.Hour, RetainedKeys: 1, ActivationDelay: time.Minute}, keyring.Ring{}, keyring.Inputs{})
	r, err := s.Fill(context.Background(), repeating{}, plan)
	if !errors.Is(err, keyring.ErrBadSecret) || len(r.Keys) != 0 {
		t.Fatalf("Fill with a source repeating its key = %d keys, %v; want none and ErrBadSecret", len(r.Keys), err)
	}
	if got := ReportedReason(err); got != v1alpha1.ReasonMintFailed {
		t.Errorf("reason %q, want %s", got, v1alpha1.ReasonMintFailed)
	}
	r, err = s.Fill(context.Background(), Random{}, plan)
	if err != nil || len(r.Keys) != 2 || r.Keys[0].ID == "" {
		t.Fatalf("Fill from crypto/rand = %+v, %v", r.Keys, err)
	}
}

func TestRetryable(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{NotFound("vault"), false},
		{Allowed(&v1alpha1.ClusterKeySource{}, "shop", nil), false},
		{fail(v1alpha1.ReasonVaultUnavailable, "down"), true},
		{fail(v1alpha1.ReasonVaultConfig, "no such Secret"), true},
		{errors.New("an error without a reason"), true},
	}
	for _, tt := range tests {
		if got := Retryable(tt.err); got != tt.want {
			t.Errorf("Retryable(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// A TicketKeyRing's status shows a failed mint as its reason and the key
// source's name: never the Vault address, the auth mount or the operator's
// Secrets, which the error itself may name.
func TestForTenant(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"no error", nil, ""},
		{"an outage", fail(v1alpha1.ReasonVaultUnavailable, "read random bytes from sys/tools/random: Put \"https://ops:pw@vault.internal:8200/v1/sys/tools/random/32\": dial tcp 10.0.0.7:8200: connection refused"),
			"key source vault-prod: Vault did not answer; the operator retries (VaultUnavailable); a cluster administrator finds the details on ClusterKeySource vault-prod's status"},
		{"a refused login", fail(v1alpha1.ReasonVaultPermissionDenied, "vault refused the login at auth/k8s-prod/login (HTTP 403)"),
			"key source vault-prod: Vault refused the operator (VaultPermissionDenied); a cluster administrator finds the details on ClusterKeySource vault-prod's status"},
		{"a missing Secret", fail(v1alpha1.ReasonVaultConfig, "Secret ringmaster-system/vault-approle named by the key source does not exist"),
			"key source vault-prod: the key source's settings are invalid (VaultConfigInvalid); a cluster administrator finds the details on ClusterKeySource vault-prod's status"},
		{"garbage", fail(v1alpha1.ReasonVaultBadResponse, "vault transit/random answered without data"),
			"key source vault-prod: Vault's answer was refused (VaultBadResponse); a cluster administrator finds the details on ClusterKeySource vault-prod's status"},
		{"no reason", errors.New("read Secret ringmaster-system/vault-token: etcdserver: request timed out"),
			"key source vault-prod: the key source failed (MintFailed); a cluster administrator finds the details on ClusterKeySource vault-prod's status"},
		{"not found: the tenant's to fix", NotFound("vault-prod"), "ClusterKeySource vault-prod does not exist: create it, or fix spec.sourceRef"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ForTenant(tt.err, "vault-prod")
			if got != tt.want {
				t.Errorf("ForTenant = %q\nwant         %q", got, tt.want)
			}
			for _, secret := range []string{"vault.internal", "10.0.0.7", "k8s-prod", "ringmaster-system", "vault-approle", "vault-token", "ops:pw"} {
				if strings.Contains(got, secret) {
					t.Errorf("ForTenant shows %q: %s", secret, got)
				}
			}
		})
	}
}
