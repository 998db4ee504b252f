//go:build integration

// The suite of kubectl ringmaster runs each command against a real
// kube-apiserver and etcd (internal/testing/testenv), with ringmaster's and
// cert-manager's CRDs installed and the operator built as main.go builds it
// (internal/operator), running as its own service account with the RBAC
// config/rbac generates. The plugin runs in-process as three users: an
// administrator, a viewer bound to ringmaster-viewer across the cluster, and
// a team bound to ringmaster-ring-editor in its namespaces.
package plugin_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/plugin"
	"github.com/ringmaster-io/ringmaster/internal/operator"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
)

const (
	timeout = 60 * time.Second
	poll    = 200 * time.Millisecond
)

var (
	env      *testenv.Env
	k8s      client.Client
	registry *prometheus.Registry
	// running is the suite, for what its operator holds.
	running *testenv.Suite
	// kubeconfigs of the users the plugin runs as.
	admin, viewer, team string
)

func TestPlugin(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "kubectl ringmaster suite")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	// The operator audits unmanaged ticket keys too (opt-in), every
	// second, for its metrics: the plugin's findings are checked against
	// them.
	suite, err := testenv.StartSuite(ctx, testenv.SuiteOptions{Log: GinkgoWriter,
		Operator: operator.Options{UnmanagedTicketKeys: true, UnmanagedTicketKeysInterval: time.Second}})
	Expect(err).NotTo(HaveOccurred(), "the control plane runs and the operator leads, with its own RBAC")
	DeferCleanup(suite.Stop)
	env, k8s, registry = suite.Env, suite.Admin(), suite.Registry
	running = suite

	dir := GinkgoT().TempDir()
	Expect(env.Apply(ctx, filepath.Join(testenv.Root(), "config", "rbac", "tenant_roles.yaml"))).To(Succeed())
	admin = kubeconfig(dir, "admin")
	viewer = kubeconfig(dir, "viewer")
	team = kubeconfig(dir, "team")
	Expect(k8s.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "viewer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "ringmaster-viewer"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "viewer"}},
	})).To(Succeed())

	setUpRings(ctx)
	setUpCertificates(ctx)
	setUpTicketKeys(ctx)
}, NodeTimeout(3*time.Minute))

// kubeconfig adds a user, writes its kubeconfig and returns its path. The
// administrator is in system:masters; the others have what RBAC grants.
func kubeconfig(dir, user string) string {
	GinkgoHelper()
	var data []byte
	var err error
	if user == "admin" {
		data, err = env.AddAdmin(user)
	} else {
		data, err = env.AddUser(user)
	}
	Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(dir, user+".kubeconfig")
	Expect(os.WriteFile(path, data, 0o600)).To(Succeed())
	return path
}

// bindTeam grants the team ringmaster-ring-editor in a namespace.
func bindTeam(ctx context.Context, ns string) {
	GinkgoHelper()
	Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "team-rings"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "ringmaster-ring-editor"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "team"}},
	})).To(Succeed())
}

// result is one run of the plugin.
type result struct {
	Out, Err string
	Code     int
}

// run runs `kubectl ringmaster args...` in-process as the user of
// kubeconfig.
func run(kubeconfig string, args ...string) result {
	var out, errOut bytes.Buffer
	code := plugin.Main(append([]string{"--kubeconfig", kubeconfig}, args...), genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut})
	GinkgoWriter.Printf("kubectl ringmaster %v: exit %d\n%s%s", args, code, out.String(), errOut.String())
	return result{Out: out.String(), Err: errOut.String(), Code: code}
}
