package mint

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	vault "github.com/hashicorp/vault/api"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

// Error is a failed mint with the reason to report (one of the Vault
// reasons of api/v1alpha1) and a message saying what to fix. It never carries a token, a secret id or key material.
type Error struct {
	Reason string
	Err    error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// CarriedReason is the reason a mint error carries, or "" for an error
// without one (ReportedReason falls back on MintFailed).
func CarriedReason(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// Retryable reports whether a failed mint may succeed on a retry, with
// backoff: not when the user must act on the ring (a key source that does
// not exist, or does not allow it), which a watch on key sources and
// namespaces brings back. No error is not retried either.
func Retryable(err error) bool {
	switch ReportedReason(err) {
	case "", v1alpha1.ReasonKeySourceNotFound, v1alpha1.ReasonKeySourceNotAllowed:
		return false
	}
	return true
}

// ReportedReason is the reason to report for a failed mint: the one it
// carries (CarriedReason), or MintFailed for an error without one. It is ""
// for no error.
func ReportedReason(err error) string {
	if err == nil {
		return ""
	}
	return cmp.Or(CarriedReason(err), v1alpha1.ReasonMintFailed)
}

// Slots is the key source's budget of Vault calls at once, made with n
// slots on first use and the same for the client's life: a send takes a
// slot, a receive gives it back. The shared-ring store
// (internal/sharedring/vaultstore) bounds its calls with it, so that a
// Vault that does not answer holds up only the rings that use it.
func (v *Vault) Slots(n int) chan struct{} {
	v.slotsOnce.Do(func() { v.slots = make(chan struct{}, n) })
	return v.slots
}

// KVv2 is the client of the key source's KV v2 engine at mount, with its
// token.
func (v *Vault) KVv2(mount string) *vault.KVv2 { return v.client.KVv2(mount) }

func fail(reason, format string, args ...any) error {
	return &Error{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// Login obtains a Vault token. Implementations read their credentials at
// each call, so that a rotated credential is picked up by the next login.
type Login interface {
	Login(ctx context.Context, c *vault.Client) (*vault.Secret, error)
}

// VaultOptions configure a Vault source.
type VaultOptions struct {
	Address   string
	Namespace string
	// CABundle is PEM; empty uses the system roots.
	CABundle []byte
	// RandomPath is sys/tools/random or a transit mount's random endpoint.
	RandomPath string
	Login      Login
	// Now defaults to time.Now.
	Now func() time.Time
}

// Vault mints keys from Vault's random endpoint. It logs in once and reuses
// its token, renewing it, or logging in again, before its TTL runs out.
type Vault struct {
	client *vault.Client
	path   string
	login  Login
	now    func() time.Time
	name   string // of its ClusterKeySource, for Sources.LastMint

	mu     sync.Mutex
	token  string
	expiry time.Time // zero: the token does not expire
	renew  bool

	slotsOnce sync.Once
	slots     chan struct{}
}

// NewVault returns a Vault source. It does not contact Vault. Its client
// reads nothing from the operator's environment (no VAULT_ADDR, VAULT_TOKEN,
// VAULT_SKIP_VERIFY or VAULT_CACERT): the key source alone says where keys
// come from and whom to trust. It speaks https only, verifies the server
// against the CA bundle (or the system roots), and follows no redirect, so
// that neither a token nor a credential can be sent anywhere else.
func NewVault(o VaultOptions) (*Vault, error) {
	u, err := url.Parse(o.Address)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fail(v1alpha1.ReasonVaultConfig, "vault address %q is not an https:// URL", o.Address)
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(o.CABundle) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(o.CABundle) {
			return nil, fail(v1alpha1.ReasonVaultConfig, "the vault CA bundle holds no PEM certificate")
		}
		tlsConfig.RootCAs = pool
	}
	transport := cleanhttp.DefaultPooledTransport()
	transport.TLSClientConfig = tlsConfig
	transport.TLSHandshakeTimeout = 10 * time.Second
	c, err := vault.NewClient(&vault.Config{
		Address: o.Address,
		HttpClient: &http.Client{
			Transport:     transport,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		// The caller's deadline bounds a mint; this bounds one request.
		Timeout:          15 * time.Second,
		MaxRetries:       0, // the controller's backoff retries; a mint fails fast
		DisableRedirects: true,
	})
	if err != nil {
		return nil, fail(v1alpha1.ReasonVaultConfig, "vault client for %s: %v", o.Address, err)
	}
	c.ClearToken()              // never a token from the operator's environment
	c.SetNamespace(o.Namespace) // nor a namespace: "" clears it
	now := o.Now
	if now == nil {
		now = time.Now
	}
	path := strings.Trim(o.RandomPath, "/")
	if path == "" {
		path = "sys/tools/random"
	}
	return &Vault{client: c, path: path, login: o.Login, now: now}, nil
}

// Check makes sure the source can mint: it logs in (or reuses its token)
// and has Vault look its token up, a round trip that proves the address,
// the TLS trust and the credentials.
func (v *Vault) Check(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		if err := v.authenticate(ctx); err != nil {
			return err
		}
		_, err := v.client.Auth().Token().LookupSelfWithContext(ctx)
		if err == nil {
			return nil
		}
		err = Classify("look up the operator's vault token", err)
		if CarriedReason(err) == v1alpha1.ReasonVaultPermissionDenied && attempt == 0 {
			v.forget() // a revoked or expired token: log in again, once
			continue
		}
		return err
	}
}

// Mint asks Vault for n 32-byte keys. Each answer must be valid base64 of
// exactly 32 bytes, not all zero, and unlike every other key of the batch;
// anything else fails the whole mint with v1alpha1.ReasonVaultBadResponse.
func (v *Vault) Mint(ctx context.Context, n int) ([]keyring.Secret, error) {
	out := make([]keyring.Secret, 0, n)
	for i := range n {
		s, err := v.random(ctx)
		if err != nil {
			return nil, err
		}
		for _, prev := range out {
			if prev == s {
				return nil, fail(v1alpha1.ReasonVaultBadResponse, "vault %s returned the same key twice: refusing it", v.path)
			}
		}
		if s == (keyring.Secret{}) {
			return nil, fail(v1alpha1.ReasonVaultBadResponse, "vault %s returned an all-zero key %d: refusing it", v.path, i+1)
		}
		out = append(out, s)
	}
	return out, nil
}

func (v *Vault) random(ctx context.Context) (keyring.Secret, error) {
	var s keyring.Secret
	for attempt := 0; ; attempt++ {
		if err := v.authenticate(ctx); err != nil {
			return s, err
		}
		resp, err := v.client.Logical().WriteWithContext(ctx, fmt.Sprintf("%s/%d", v.path, keyring.SecretSize),
			map[string]any{"format": "base64"})
		if err != nil {
			err = Classify(fmt.Sprintf("read random bytes from %s", v.path), err)
			if CarriedReason(err) == v1alpha1.ReasonVaultPermissionDenied && attempt == 0 {
				v.forget() // a revoked or expired token: log in again, once
				continue
			}
			return s, err
		}
		return decodeRandom(v.path, resp)
	}
}

func decodeRandom(path string, resp *vault.Secret) (keyring.Secret, error) {
	var s keyring.Secret
	if resp == nil || resp.Data == nil {
		return s, fail(v1alpha1.ReasonVaultBadResponse, "vault %s answered without data", path)
	}
	b64, ok := resp.Data["random_bytes"].(string)
	if !ok {
		return s, fail(v1alpha1.ReasonVaultBadResponse, "vault %s answered without a random_bytes string", path)
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return s, fail(v1alpha1.ReasonVaultBadResponse, "vault %s answered random_bytes that are not base64", path)
	}
	if len(raw) != keyring.SecretSize {
		return s, fail(v1alpha1.ReasonVaultBadResponse, "vault %s answered %d random bytes, want %d", path, len(raw), keyring.SecretSize)
	}
	copy(s[:], raw)
	return s, nil
}

// authenticate makes sure the client holds a token that will outlive the
// next request: it renews a renewable token in the last third of its TTL,
// and logs in again when renewal fails or the token cannot be renewed.
func (v *Vault) authenticate(ctx context.Context) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	now := v.now()
	if v.token != "" && (v.expiry.IsZero() || now.Before(v.expiry)) {
		return nil
	}
	if v.token != "" && v.renew {
		if resp, err := v.client.Auth().Token().RenewSelfWithContext(ctx, 0); err == nil && resp != nil && resp.Auth != nil {
			v.hold(resp.Auth, now)
			return nil
		}
	}
	v.token = ""
	v.client.ClearToken()
	if v.login == nil {
		return fail(v1alpha1.ReasonVaultConfig, "no vault auth method configured")
	}
	resp, err := v.login.Login(ctx, v.client)
	var re *vault.ResponseError
	if errors.As(err, &re) && re.StatusCode >= 400 && re.StatusCode < 500 {
		return fail(v1alpha1.ReasonVaultPermissionDenied, "vault refused the login (HTTP %d): check the auth role and its credentials", re.StatusCode)
	}
	if err != nil {
		return Classify("log in to vault", err)
	}
	if resp == nil || resp.Auth == nil || resp.Auth.ClientToken == "" {
		return fail(v1alpha1.ReasonVaultBadResponse, "vault login answered without a token")
	}
	v.hold(resp.Auth, now)
	return nil
}

// hold keeps a token until two thirds of its TTL have passed.
func (v *Vault) hold(a *vault.SecretAuth, now time.Time) {
	v.token, v.renew = a.ClientToken, a.Renewable
	v.expiry = time.Time{}
	if a.LeaseDuration > 0 {
		v.expiry = now.Add(time.Duration(a.LeaseDuration) * time.Second * 2 / 3)
	}
	v.client.SetToken(v.token)
}

// Revoke revokes the token the source logged in for (token/revoke-self)
// and forgets it; the next request logs in again. A token it was given
// (TokenLogin) is its owner's and is only forgotten.
func (v *Vault) Revoke(ctx context.Context) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.token == "" {
		return nil
	}
	var err error
	if _, given := v.login.(TokenLogin); !given {
		err = v.client.Auth().Token().RevokeSelfWithContext(ctx, "")
		if err != nil {
			err = Classify("revoke the operator's vault token", err)
		}
	}
	v.token = ""
	v.client.ClearToken()
	return err
}

func (v *Vault) forget() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.token = ""
	v.client.ClearToken()
}

// Classify turns a Vault client error into a mint Error: 401 and 403 are a
// permission problem to fix in Vault, 5xx and transport errors an outage a
// retry may cure, other answers a bad response.
func Classify(what string, err error) error {
	var re *vault.ResponseError
	if errors.As(err, &re) {
		switch {
		case re.StatusCode == http.StatusForbidden || re.StatusCode == http.StatusUnauthorized:
			return fail(v1alpha1.ReasonVaultPermissionDenied, "%s: permission denied (HTTP %d): check the Vault policy and auth role", what, re.StatusCode)
		case re.StatusCode >= 500:
			return fail(v1alpha1.ReasonVaultUnavailable, "%s: vault answered HTTP %d", what, re.StatusCode)
		default:
			return fail(v1alpha1.ReasonVaultBadResponse, "%s: vault answered HTTP %d: %s", what, re.StatusCode, strings.Join(re.Errors, "; "))
		}
	}
	var me *Error
	if errors.As(err, &me) {
		return err
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fail(v1alpha1.ReasonVaultUnavailable, "%s: vault did not answer in time", what)
	}
	if strings.Contains(err.Error(), "invalid character") || strings.Contains(err.Error(), "unexpected end of JSON") {
		return fail(v1alpha1.ReasonVaultBadResponse, "%s: vault's answer is not JSON", what)
	}
	return fail(v1alpha1.ReasonVaultUnavailable, "%s: %v", what, err)
}

// TokenLogin uses a token as it is, read at each login.
type TokenLogin struct {
	Token func(ctx context.Context) (string, error)
}

// Login looks the token up, so that a wrong token fails here, at login.
func (l TokenLogin) Login(ctx context.Context, c *vault.Client) (*vault.Secret, error) {
	token, err := l.Token(ctx)
	if err != nil {
		return nil, err
	}
	c.SetToken(token)
	resp, err := c.Auth().Token().LookupSelfWithContext(ctx)
	if err != nil {
		c.ClearToken()
		return nil, err
	}
	auth := &vault.SecretAuth{ClientToken: token}
	if resp != nil {
		if ttl, err := resp.TokenTTL(); err == nil {
			auth.LeaseDuration = int(ttl.Seconds())
		}
		auth.Renewable, _ = resp.TokenIsRenewable()
	}
	return &vault.Secret{Auth: auth}, nil
}

// KubernetesLogin logs in with a service account token through Vault's
// Kubernetes auth method.
type KubernetesLogin struct {
	Mount, Role string
	JWT         func(ctx context.Context) (string, error)
}

// Login posts the token to auth/<mount>/login.
func (l KubernetesLogin) Login(ctx context.Context, c *vault.Client) (*vault.Secret, error) {
	jwt, err := l.JWT(ctx)
	if err != nil {
		return nil, err
	}
	return c.Logical().WriteWithContext(ctx, "auth/"+strings.Trim(l.Mount, "/")+"/login", map[string]any{"role": l.Role, "jwt": jwt})
}

// AppRoleLogin logs in with a role id and a secret id.
type AppRoleLogin struct {
	Mount, RoleID string
	SecretID      func(ctx context.Context) (string, error)
}

// Login posts the credentials to auth/<mount>/login.
func (l AppRoleLogin) Login(ctx context.Context, c *vault.Client) (*vault.Secret, error) {
	id, err := l.SecretID(ctx)
	if err != nil {
		return nil, err
	}
	return c.Logical().WriteWithContext(ctx, "auth/"+strings.Trim(l.Mount, "/")+"/login", map[string]any{"role_id": l.RoleID, "secret_id": id})
}

// Do runs one request with a token that will outlive it, logging in again
// once when Vault refuses a token it revoked or let expire. Its errors are
// classified mint Errors, but for vault.ErrSecretNotFound and those the
// caller keeps (its own, such as a lost check-and-set), which it returns as
// they are.
func (v *Vault) Do(ctx context.Context, what string, req func() error, keep ...error) error {
	for attempt := 0; ; attempt++ {
		if err := v.authenticate(ctx); err != nil {
			return err
		}
		err := req()
		if err == nil || errors.Is(err, vault.ErrSecretNotFound) || slices.ContainsFunc(keep, func(k error) bool { return errors.Is(err, k) }) {
			return err
		}
		err = Classify(what, err)
		if CarriedReason(err) == v1alpha1.ReasonVaultPermissionDenied && attempt == 0 {
			v.forget()
			continue
		}
		return err
	}
}
