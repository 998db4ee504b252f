package mint

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

// Sources gives each ring its key source, and keeps a ring's Vault source
// (and so its token) across reconciles for as long as its settings stay.
type Sources struct {
	// Reader reads the Secrets and ConfigMaps the Vault settings name. It
	// must not be the manager's cache, which holds only ringmaster's Secrets.
	Reader client.Reader
	// Client requests service account tokens.
	Client client.Client
	// ServiceAccount is the operator's own, used for Kubernetes auth.
	ServiceAccount types.NamespacedName

	mu    sync.Mutex
	vault map[types.NamespacedName]cachedVault
}

type cachedVault struct {
	spec   string
	source *Vault
}

// For returns the source of ring's keys.
func (s *Sources) For(ctx context.Context, ring *v1alpha1.TicketKeyRing) (Source, error) {
	v := ring.Spec.Source.Vault
	if v == nil {
		return Random{}, nil
	}
	spec, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	ca, err := s.caBundle(ctx, ring.Namespace, v.CABundle)
	if err != nil {
		return nil, err
	}
	// A ring deleted and created again under its name is a new ring (UID).
	key := string(ring.UID) + "\x00" + string(spec) + "\x00" + string(ca)
	name := types.NamespacedName{Namespace: ring.Namespace, Name: ring.Name}

	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.vault[name]; ok && c.spec == key {
		return c.source, nil
	}
	src, err := NewVault(VaultOptions{
		Address: v.Address, Namespace: v.Namespace, CABundle: ca, RandomPath: v.RandomPath,
		Login: s.login(ring.Namespace, v.Auth),
	})
	if err != nil {
		return nil, err
	}
	if s.vault == nil {
		s.vault = map[types.NamespacedName]cachedVault{}
	}
	s.vault[name] = cachedVault{spec: key, source: src}
	return src, nil
}

// Forget drops a deleted ring's source and its token.
func (s *Sources) Forget(ring types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.vault, ring)
}

func (s *Sources) login(ns string, auth v1alpha1.VaultAuth) Login {
	switch {
	case auth.Kubernetes != nil:
		k := auth.Kubernetes
		return KubernetesLogin{Mount: k.MountPath, Role: k.Role, JWT: func(ctx context.Context) (string, error) {
			return s.serviceAccountToken(ctx, k.Audience)
		}}
	case auth.AppRole != nil:
		a := auth.AppRole
		return AppRoleLogin{Mount: a.MountPath, RoleID: a.RoleID, SecretID: func(ctx context.Context) (string, error) {
			return s.secretKey(ctx, ns, a.SecretIDSecretRef)
		}}
	case auth.TokenSecretRef != nil:
		ref := *auth.TokenSecretRef
		return TokenLogin{Token: func(ctx context.Context) (string, error) { return s.secretKey(ctx, ns, ref) }}
	}
	return nil
}

// serviceAccountToken requests a short-lived token for the operator's
// service account, with the audience the Vault role expects.
func (s *Sources) serviceAccountToken(ctx context.Context, audience string) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: s.ServiceAccount.Namespace, Name: s.ServiceAccount.Name}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo(int64(600))}}
	if audience != "" {
		tr.Spec.Audiences = []string{audience}
	}
	if err := s.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
		return "", fail(v1alpha1.ReasonVaultConfig, "request a token for service account %s: %v", s.ServiceAccount, err)
	}
	return tr.Status.Token, nil
}

func (s *Sources) secretKey(ctx context.Context, ns string, ref v1alpha1.KeyRef) (string, error) {
	sec := &corev1.Secret{}
	if err := s.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.Name}, sec); err != nil {
		return "", refError("Secret", ns, ref, err)
	}
	v, ok := sec.Data[ref.Key]
	if !ok || len(v) == 0 {
		return "", fail(v1alpha1.ReasonVaultConfig, "Secret %s/%s has no key %q", ns, ref.Name, ref.Key)
	}
	return string(v), nil
}

func (s *Sources) caBundle(ctx context.Context, ns string, src *v1alpha1.CABundleSource) ([]byte, error) {
	switch {
	case src == nil:
		return nil, nil
	case src.SecretKeyRef != nil:
		v, err := s.secretKey(ctx, ns, *src.SecretKeyRef)
		return []byte(v), err
	case src.ConfigMapKeyRef != nil:
		ref := *src.ConfigMapKeyRef
		cm := &corev1.ConfigMap{}
		if err := s.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.Name}, cm); err != nil {
			return nil, refError("ConfigMap", ns, ref, err)
		}
		if v, ok := cm.Data[ref.Key]; ok && v != "" {
			return []byte(v), nil
		}
		return nil, fail(v1alpha1.ReasonVaultConfig, "ConfigMap %s/%s has no key %q", ns, ref.Name, ref.Key)
	}
	return nil, nil
}

func refError(kind, ns string, ref v1alpha1.KeyRef, err error) error {
	if apierrors.IsNotFound(err) {
		return fail(v1alpha1.ReasonVaultConfig, "%s %s/%s named by spec.source.vault does not exist", kind, ns, ref.Name)
	}
	return fmt.Errorf("read %s %s/%s: %w", kind, ns, ref.Name, err)
}

func ptrTo[T any](v T) *T { return &v }
