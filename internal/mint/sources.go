package mint

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

// The operator requests tokens for its own service account only, and reads
// the Secrets and ConfigMaps of key sources in its own namespace only. The
// namespace here is the default one; the Helm chart sets the release's.
//
// +kubebuilder:rbac:groups="",namespace=ringmaster-system,resources=serviceaccounts/token,verbs=create,resourceNames=ringmaster
// +kubebuilder:rbac:groups="",namespace=ringmaster-system,resources=configmaps,verbs=get
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create

// DefaultTimeout bounds one mint, or one check of a key source, so that a
// slow or malicious Vault holds up only the rings that use it.
const DefaultTimeout = 30 * time.Second

// Sources gives rings their key sources: crypto/rand, or the Vault client of
// a ClusterKeySource. A Vault client, and so its token, is kept across
// reconciles and shared by every ring of its key source, for as long as the
// key source and the CA bundle it names stay the same.
type Sources struct {
	// Reader reads the Secrets and ConfigMaps key sources name. It must not
	// be the manager's cache, which holds only ringmaster's own Secrets.
	Reader client.Reader
	// Client requests tokens for the operator's service account and has
	// the API server review them.
	Client client.Client
	// Namespace is the operator's own: where the Secrets and ConfigMaps key
	// sources name live, and its service account.
	Namespace string
	// ServiceAccount is the name of the operator's service account, which
	// Vault's Kubernetes auth logs in as.
	ServiceAccount string
	// Timeout bounds each mint and check; 0 means DefaultTimeout.
	Timeout time.Duration

	// Minted, if set, is told the name of a key source after each mint
	// from it, so that its controller reports the outcome (LastMint).
	Minted func(name string)

	mu    sync.Mutex
	vault map[string]cachedVault
	mints map[string]MintResult
}

// MintResult is the outcome of the last mint from a key source.
type MintResult struct {
	// At is when it ended.
	At time.Time
	// Err is why it failed, nil when it succeeded.
	Err error
}

// LastMint returns the outcome of the last mint from the key source named
// name since it was last forgotten, if any.
func (s *Sources) LastMint(name string) (MintResult, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.mints[name]
	return m, ok
}

func (s *Sources) noteMint(name string, err error) {
	s.mu.Lock()
	if s.mints == nil {
		s.mints = map[string]MintResult{}
	}
	prev, had := s.mints[name]
	s.mints[name] = MintResult{At: time.Now(), Err: err}
	s.mu.Unlock()
	// Only a change is worth a check of the key source: not every
	// successful rotation.
	if s.Minted != nil && (!had || (prev.Err == nil) != (err == nil) || ReportedReason(prev.Err) != ReportedReason(err)) {
		s.Minted(name)
	}
}

type cachedVault struct {
	key    string
	source *Vault
}

// Allowed reports whether a ring in namespace ns, whose namespace carries
// nsLabels, may mint from the key source: a ClusterTicketKeyRing (ns empty)
// always may; a TicketKeyRing only when the source's namespaceSelector
// matches its namespace.
func Allowed(cks *v1alpha1.ClusterKeySource, ns string, nsLabels labels.Set) error {
	if ns == "" {
		return nil
	}
	if cks.Spec.NamespaceSelector == nil {
		return fail(v1alpha1.ReasonKeySourceNotAllowed,
			"ClusterKeySource %s allows no TicketKeyRing (it has no spec.namespaceSelector); ask a cluster administrator to allow namespace %s, or use a ClusterTicketKeyRing", cks.Name, ns)
	}
	sel, err := metav1.LabelSelectorAsSelector(cks.Spec.NamespaceSelector)
	if err != nil {
		return fail(v1alpha1.ReasonKeySourceNotAllowed, "ClusterKeySource %s has an invalid spec.namespaceSelector: %v", cks.Name, err)
	}
	if !sel.Matches(nsLabels) {
		return fail(v1alpha1.ReasonKeySourceNotAllowed,
			"ClusterKeySource %s does not allow rings of namespace %s: its spec.namespaceSelector does not match the namespace's labels", cks.Name, ns)
	}
	return nil
}

// LabelsNotKept is the error of a ring whose namespace carries more labels
// than the operator keeps (max bytes): no key source's namespaceSelector
// can judge it, so none allows it.
func LabelsNotKept(cks, ns string, max int) error {
	return fail(v1alpha1.ReasonKeySourceNotAllowed,
		"ClusterKeySource %s cannot judge namespace %s: its labels are over the %d bytes the operator keeps of a namespace's labels, so no spec.namespaceSelector allows it until they are fewer", cks, ns, max)
}

// NotFound is the error of a ring whose spec.sourceRef names no key source.
func NotFound(name string) error {
	return fail(v1alpha1.ReasonKeySourceNotFound, "ClusterKeySource %s does not exist: create it, or fix spec.sourceRef", name)
}

// For returns the source a key source describes; nil mints from crypto/rand.
func (s *Sources) For(ctx context.Context, cks *v1alpha1.ClusterKeySource) (Source, error) {
	if cks == nil {
		return Random{}, nil
	}
	return s.VaultFor(ctx, cks)
}

// VaultFor returns the Vault client of a key source with spec.vault, made
// once per spec, trust and key source and then reused.
func (s *Sources) VaultFor(ctx context.Context, cks *v1alpha1.ClusterKeySource) (*Vault, error) {
	v := cks.Spec.Vault
	if v == nil {
		return nil, fail(v1alpha1.ReasonVaultConfig, "ClusterKeySource %s has no spec.vault", cks.Name)
	}
	ca, err := s.caBundle(ctx, v.CABundle)
	if err != nil {
		return nil, err
	}
	// A key source deleted and created again is a new one (UID); a new
	// generation is a changed spec; a changed CA bundle is a new trust.
	sum := sha256.Sum256(ca)
	key := fmt.Sprintf("%s/%d/%x", cks.UID, cks.Generation, sum)

	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.vault[cks.Name]; ok && c.key == key {
		return c.source, nil
	}
	src, err := NewVault(VaultOptions{
		Address: v.Address, Namespace: v.Namespace, CABundle: ca, RandomPath: v.RandomPath,
		Login: s.login(v.Auth),
	})
	if err != nil {
		return nil, err
	}
	src.name = cks.Name
	if s.vault == nil {
		s.vault = map[string]cachedVault{}
	}
	if old, ok := s.vault[cks.Name]; ok {
		// Its spec or trust changed: the old client's token is of no
		// further use.
		s.revoke(old.source)
	}
	s.vault[cks.Name] = cachedVault{key: key, source: src}
	return src, nil
}

// WithTimeout bounds one exchange with a key source, as a mint is bounded.
func (s *Sources) WithTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.CallTimeout())
}

// Forget drops a deleted key source's client, and revokes its token
// (token/revoke-self) in the background, within the timeout: a token the
// operator no longer uses should not stay valid until its TTL runs out. A
// token read from a Secret (auth.tokenSecretRef) is the owner's, and is
// left alone.
func (s *Sources) Forget(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.vault[name]; ok {
		s.revoke(c.source)
	}
	delete(s.vault, name)
	delete(s.mints, name)
}

// revoke revokes v's token in the background; s.mu is held.
func (s *Sources) revoke(v *Vault) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.CallTimeout())
		defer cancel()
		_ = v.Revoke(ctx) // best effort: the token expires at its TTL anyway
	}()
}

// Check logs in with the key source (or reuses its token) and has Vault
// answer with that token, within the timeout: a key source that passes can
// mint.
func (s *Sources) Check(ctx context.Context, cks *v1alpha1.ClusterKeySource) error {
	ctx, cancel := context.WithTimeout(ctx, s.CallTimeout())
	defer cancel()
	v, err := s.VaultFor(ctx, cks)
	if err != nil {
		return err
	}
	return v.Check(ctx)
}

// Fill mints the keys plan needs from src, within the timeout, and returns
// the completed ring: all of them or none. A source that answers keys the
// ring must refuse (a repeated or all-zero key) fails with the reason of a
// bad response.
func (s *Sources) Fill(ctx context.Context, src Source, plan keyring.Plan) (keyring.Ring, error) {
	if plan.Mint == 0 {
		return plan.Ring, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.CallTimeout())
	defer cancel()
	v, fromVault := src.(*Vault)
	secrets, err := src.Mint(ctx, plan.Mint)
	if err != nil {
		if fromVault && !errors.Is(err, context.Canceled) {
			s.noteMint(v.name, err)
		}
		return keyring.Ring{}, err
	}
	next, err := plan.Fill(secrets)
	if err != nil && fromVault {
		err = &Error{Reason: v1alpha1.ReasonVaultBadResponse, Err: err}
	}
	if fromVault {
		s.noteMint(v.name, err)
	}
	if err != nil {
		return keyring.Ring{}, err
	}
	return next, nil
}

// CallTimeout bounds one exchange with a key source: Timeout, or
// DefaultTimeout.
func (s *Sources) CallTimeout() time.Duration {
	if s.Timeout > 0 {
		return s.Timeout
	}
	return DefaultTimeout
}

func (s *Sources) login(auth v1alpha1.VaultAuth) Login {
	switch {
	case auth.Kubernetes != nil:
		k := auth.Kubernetes
		return KubernetesLogin{Mount: k.MountPath, Role: k.Role, JWT: func(ctx context.Context) (string, error) {
			return s.serviceAccountToken(ctx, k.Audience)
		}}
	case auth.AppRole != nil:
		a := auth.AppRole
		return AppRoleLogin{Mount: a.MountPath, RoleID: a.RoleID, SecretID: func(ctx context.Context) (string, error) {
			return s.secretKey(ctx, a.SecretIDSecretRef)
		}}
	case auth.TokenSecretRef != nil:
		ref := *auth.TokenSecretRef
		return TokenLogin{Token: func(ctx context.Context) (string, error) { return s.secretKey(ctx, ref) }}
	}
	return nil
}

// serviceAccountToken requests a short-lived token for the operator's own
// service account, with the audience the Vault role expects, and refuses to
// hand out one that the API server itself accepts: whoever holds it could
// act as the operator in the cluster.
func (s *Sources) serviceAccountToken(ctx context.Context, audience string) (string, error) {
	if audience == "" {
		return "", fail(v1alpha1.ReasonVaultConfig, "auth.kubernetes.audience is empty: a token without an audience of its own is valid for the Kubernetes API server")
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.ServiceAccount}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{audience}, ExpirationSeconds: ptrTo(int64(600)),
	}}
	if err := s.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
		return "", fail(v1alpha1.ReasonVaultConfig, "request a token for service account %s: %v", types.NamespacedName{Namespace: s.Namespace, Name: s.ServiceAccount}, err)
	}
	review := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: tr.Status.Token}}
	if err := s.Client.Create(ctx, review); err != nil {
		return "", fmt.Errorf("review the token for audience %q: %w", audience, err)
	}
	if review.Status.Authenticated {
		return "", fail(v1alpha1.ReasonVaultConfig,
			"auth.kubernetes.audience %q is one the Kubernetes API server accepts: a token for it would let Vault, or anyone on the way, act as the operator; choose an audience only the Vault role expects", audience)
	}
	return tr.Status.Token, nil
}

func (s *Sources) secretKey(ctx context.Context, ref v1alpha1.KeyRef) (string, error) {
	sec := &corev1.Secret{}
	if err := s.Reader.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: ref.Name}, sec); err != nil {
		return "", s.refError("Secret", ref, err)
	}
	v, ok := sec.Data[ref.Key]
	if !ok || len(v) == 0 {
		return "", fail(v1alpha1.ReasonVaultConfig, "Secret %s/%s has no key %q", s.Namespace, ref.Name, ref.Key)
	}
	return string(v), nil
}

func (s *Sources) caBundle(ctx context.Context, src *v1alpha1.CABundleSource) ([]byte, error) {
	switch {
	case src == nil:
		return nil, nil
	case src.SecretKeyRef != nil:
		v, err := s.secretKey(ctx, *src.SecretKeyRef)
		return []byte(v), err
	case src.ConfigMapKeyRef != nil:
		ref := *src.ConfigMapKeyRef
		cm := &corev1.ConfigMap{}
		if err := s.Reader.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: ref.Name}, cm); err != nil {
			return nil, s.refError("ConfigMap", ref, err)
		}
		if v, ok := cm.Data[ref.Key]; ok && v != "" {
			return []byte(v), nil
		}
		return nil, fail(v1alpha1.ReasonVaultConfig, "ConfigMap %s/%s has no key %q", s.Namespace, ref.Name, ref.Key)
	}
	return nil, nil
}

func (s *Sources) refError(kind string, ref v1alpha1.KeyRef, err error) error {
	if apierrors.IsNotFound(err) {
		return fail(v1alpha1.ReasonVaultConfig, "%s %s/%s named by the key source does not exist", kind, s.Namespace, ref.Name)
	}
	return fmt.Errorf("read %s %s/%s: %w", kind, s.Namespace, ref.Name, err)
}

func ptrTo[T any](v T) *T { return &v }
