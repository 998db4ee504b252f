// Package testenv starts the control plane every envtest suite runs
// against: a real kube-apiserver and etcd (built by hack/envtest.sh, found
// through KUBEBUILDER_ASSETS) with ringmaster's CRDs and cert-manager's
// installed, and, for suites that run the operator as deployed, its service
// account bound to exactly the RBAC that config/rbac generates from the
// code's markers. It is test support, imported only by tests.
package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/ringmaster-io/ringmaster/internal/operator"
	"github.com/ringmaster-io/ringmaster/internal/testing/apiaudit"
	"github.com/ringmaster-io/ringmaster/internal/testing/atrest"
)

// The operator's namespace and service account in every suite: those the
// RBAC markers and config/rbac name.
const (
	Namespace      = "ringmaster-system"
	ServiceAccount = "ringmaster"
)

// Env is a running control plane.
type Env struct {
	env *envtest.Environment
	// Config and Client act as a cluster admin.
	Config *rest.Config
	Client client.Client
	// Encrypted says Secrets are encrypted at rest (see Options.Plaintext).
	Encrypted bool
	// AuditLog is kube-apiserver's audit log of the operator's service
	// account's requests, with Options.Audit; empty otherwise.
	AuditLog string
	// configDir holds the EncryptionConfiguration and the audit policy and
	// log; removed at Stop.
	configDir string
}

// Options change how Start runs the control plane.
type Options struct {
	// Plaintext leaves Secrets unencrypted in etcd, kube-apiserver's own
	// default. Otherwise they are encrypted at rest with secretbox, under a
	// key generated for this control plane and never written elsewhere
	// than its EncryptionConfiguration (see atrest.EncryptionConfig).
	Plaintext bool
	// Audit has kube-apiserver record every request of the operator's
	// service account (Namespace/ServiceAccount), at Metadata level, in
	// Env.AuditLog (internal/testing/apiaudit): what test/requests counts.
	Audit bool
}

// Start runs kube-apiserver and etcd with every CRD installed, Secrets
// encrypted at rest. The API server enforces owner reference permissions,
// as hardened clusters do, so that the suites prove the operator's RBAC
// covers them.
func Start() (*Env, error) { return StartWith(Options{}) }

// StartWith is Start with options.
func StartWith(o Options) (*Env, error) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, errors.New("KUBEBUILDER_ASSETS is unset: run the tests through make (make test, make test-integration), which builds kube-apiserver, etcd and kubectl and sets it")
	}
	cm, err := CertManagerCRDs()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(Root(), "config", "crd", "bases"), cm},
		ErrorIfCRDPathMissing: true,
	}
	// ValidatingAdmissionPolicy is on by default since Kubernetes 1.30;
	// named here so that the admission guard's specs (Guard) never run
	// against an API server that would ignore it.
	env.ControlPlane.GetAPIServer().Configure().
		Append("enable-admission-plugins", "OwnerReferencesPermissionEnforcement").
		Append("enable-admission-plugins", "ValidatingAdmissionPolicy")
	e := &Env{env: env, Encrypted: !o.Plaintext}
	if e.Encrypted || o.Audit {
		if e.configDir, err = os.MkdirTemp("", "ringmaster-apiserver-"); err != nil {
			return nil, err
		}
	}
	if o.Audit {
		policy := filepath.Join(e.configDir, "audit-policy.json")
		if err := apiaudit.WritePolicy(policy, apiaudit.ServiceAccountUser(Namespace, ServiceAccount)); err != nil {
			return nil, errors.Join(err, e.removeConfig())
		}
		e.AuditLog = filepath.Join(e.configDir, "audit.log")
		for k, v := range apiaudit.Flags(policy, e.AuditLog) {
			env.ControlPlane.GetAPIServer().Configure().Set(k, v)
		}
	}
	if e.Encrypted {
		path := filepath.Join(e.configDir, "encryption.yaml")
		if err := atrest.WriteEncryptionConfig(path); err != nil {
			return nil, errors.Join(err, os.RemoveAll(e.configDir))
		}
		env.ControlPlane.GetAPIServer().Configure().Set("encryption-provider-config", path)
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("start the control plane: %w", err), e.removeConfig())
	}
	scheme, err := operator.Scheme()
	if err != nil {
		return nil, errors.Join(err, e.Stop())
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, errors.Join(err, e.Stop())
	}
	e.Config, e.Client = cfg, c
	return e, nil
}

// Stop ends kube-apiserver and etcd, and removes etcd's data directory, the
// encryption key and the audit log.
func (e *Env) Stop() error { return errors.Join(e.env.Stop(), e.removeConfig()) }

func (e *Env) removeConfig() error {
	if e.configDir == "" {
		return nil
	}
	return os.RemoveAll(e.configDir)
}

// EtcdDataDir is etcd's data directory: member/snap/db (the bbolt file)
// and member/wal, where every write lands before the API sees it.
func (e *Env) EtcdDataDir() string { return e.env.ControlPlane.Etcd.DataDir }

// EtcdURL is etcd's client URL, to read keys around kube-apiserver as an
// etcd backup would.
func (e *Env) EtcdURL() string { return e.env.ControlPlane.Etcd.URL.String() }

// AddAdmin adds a user in system:masters and returns its kubeconfig, for a
// process such as cert-manager's controllers.
func (e *Env) AddAdmin(name string) ([]byte, error) {
	return e.AddUser(name, "system:masters")
}

// AddUser adds a user in groups and returns its kubeconfig. Outside
// system:masters the user may do only what RBAC grants it, as a person
// running kubectl would.
func (e *Env) AddUser(name string, groups ...string) ([]byte, error) {
	u, err := e.env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, err
	}
	return u.KubeConfig()
}

// OperatorConfig creates the operator's namespace and service account,
// applies config/rbac (the generated roles and their bindings), and returns
// a config that authenticates as that service account: an operator built
// with it can do what a deployed one can, and nothing more.
func (e *Env) OperatorConfig(ctx context.Context) (*rest.Config, error) {
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: ServiceAccount}},
	} {
		if err := e.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
	}
	for _, f := range []string{"role.yaml", "role_binding.yaml"} {
		if err := e.Apply(ctx, filepath.Join(Root(), "config", "rbac", f)); err != nil {
			return nil, err
		}
	}
	token, err := e.Token(ctx, ServiceAccount, nil)
	if err != nil {
		return nil, err
	}
	return &rest.Config{
		Host:            e.Config.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: e.Config.CAData},
		BearerToken:     token,
		QPS:             e.Config.QPS,
		Burst:           e.Config.Burst,
	}, nil
}

// Token requests a day-long token of a service account of the operator's
// namespace, for the given audiences (nil: the API server's own).
func (e *Env) Token(ctx context.Context, serviceAccount string, audiences []string) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: serviceAccount}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: audiences, ExpirationSeconds: ptr.To(int64((24 * time.Hour).Seconds())),
	}}
	if err := e.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
		return "", fmt.Errorf("request a token for %s/%s: %w", Namespace, serviceAccount, err)
	}
	return tr.Status.Token, nil
}

// Apply creates every object of a YAML file, such as the roles of
// config/rbac; those that exist are left.
func (e *Env) Apply(ctx context.Context, path string) error { return ApplyFile(ctx, e.Client, path) }

// ApplyFile creates, through c, every object of the YAML file at path;
// those that exist already are left as they are.
func ApplyFile(ctx context.Context, c client.Client, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("%s: %w", path, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := c.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%s: create %s %s: %w", path, u.GetKind(), u.GetName(), err)
		}
	}
}

// Guard installs the admission guard of ringmaster's Secrets as config/
// ships it (config/admission/policy.yaml: the policy and its binding) and
// returns what removes it again. The API server enforces a policy a moment
// after it is created, and stops a moment after it is deleted: callers wait
// for either.
func (e *Env) Guard(ctx context.Context) (remove func(context.Context) error, err error) {
	return e.guard(ctx, "policy.yaml", GuardName)
}

// PodGuard installs the admission guard of pods as config/ ships it
// (config/admission/pods.yaml), as Guard does the Secrets'.
func (e *Env) PodGuard(ctx context.Context) (remove func(context.Context) error, err error) {
	return e.guard(ctx, "pods.yaml", PodGuardName)
}

func (e *Env) guard(ctx context.Context, file, name string) (remove func(context.Context) error, err error) {
	path := filepath.Join(Root(), "config", "admission", file)
	if err := e.Apply(ctx, path); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		var errs []error
		for _, obj := range []client.Object{
			&admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name}},
			&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}},
		} {
			errs = append(errs, client.IgnoreNotFound(e.Client.Delete(ctx, obj)))
		}
		return errors.Join(errs...)
	}, nil
}

// GuardName and PodGuardName are the names of the admission guards'
// policies and bindings in config/admission: ringmaster's Secrets', and
// the pods'.
const (
	GuardName    = "ringmaster-secrets"
	PodGuardName = "ringmaster-pods"
)

// As returns a client that acts as the given user and groups, by
// impersonation: what the user may do is what RBAC and admission allow it.
func (e *Env) As(user string, groups ...string) (client.Client, error) {
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append([]string{"system:authenticated"}, groups...)}
	return client.New(cfg, client.Options{Scheme: e.Client.Scheme()})
}

// Root is the repository's root directory.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// CertManagerCRDs is the deploy/crds directory of the cert-manager module
// go.mod requires, from the module cache.
func CertManagerCRDs() (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/cert-manager/cert-manager")
	cmd.Dir = Root()
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locate the cert-manager module: %w", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "deploy", "crds")
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("cert-manager's CRDs: %w", err)
	}
	return dir, nil
}
