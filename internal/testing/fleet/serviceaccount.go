package fleet

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
)

// OperatorServiceAccount is the operator's service account in
// OperatorNamespace: the one config/rbac binds its roles to.
const OperatorServiceAccount = "ringmaster"

// UseServiceAccount makes the operator run as a deployed one does: as its
// own service account, bound to exactly the roles config/rbac generates
// from the code's markers, with nothing of the admin's rights. It creates
// the operator's namespace, config/rbac's service account, roles and
// bindings, requests a token of the service account lasting a day, and
// writes a kubeconfig with it to dir/operator.kubeconfig, which the
// operators StartOperator starts from now on use.
func (c *Cluster) UseServiceAccount(ctx context.Context, dir string) error {
	if err := c.CreateNamespace(ctx, OperatorNamespace); err != nil {
		return err
	}
	root, err := ModuleRoot(ctx)
	if err != nil {
		return err
	}
	for _, f := range []string{"service_account.yaml", "role.yaml", "role_binding.yaml"} {
		if err := c.Apply(ctx, filepath.Join(root, "config", "rbac", f)); err != nil {
			return err
		}
	}
	tr, err := c.Clientset.CoreV1().ServiceAccounts(OperatorNamespace).CreateToken(ctx, OperatorServiceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64((24 * time.Hour).Seconds()))},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("request a token for %s/%s: %w", OperatorNamespace, OperatorServiceAccount, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: c.Config.CAData}
	cfg.AuthInfos["operator"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["operator"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "operator", Namespace: OperatorNamespace}
	cfg.CurrentContext = "operator"
	path := filepath.Join(dir, "operator.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write the operator's kubeconfig: %w", err)
	}
	c.OperatorKubeconfig = path
	return nil
}

// Apply creates every object of a YAML file, such as the roles of
// config/rbac; those that exist already are left as they are.
func (c *Cluster) Apply(ctx context.Context, path string) error {
	return testenv.ApplyFile(ctx, c.Client, path)
}
