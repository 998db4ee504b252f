package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

// Cluster is a cluster the harness drives as admin: the local control plane
// (a real etcd and kube-apiserver, run by hack/controlplane as a child
// process, with the CRDs installed), or the single-node cluster of
// test/cluster.
type Cluster struct {
	// Kubeconfig is the admin kubeconfig.
	Kubeconfig string
	// Kubectl is the kubectl built with kube-apiserver.
	Kubectl string
	// Config, Client and Clientset all talk to it as admin.
	Config    *rest.Config
	Client    client.Client
	Clientset kubernetes.Interface
	// OperatorArgs are added to the operator's flags by StartOperator (a
	// later flag wins), e.g. to serve its metrics.
	OperatorArgs []string
	// OperatorEnv is added to the operator's environment by StartOperator,
	// e.g. GOMEMLIMIT.
	OperatorEnv []string
	// OperatorKubeconfig, when set, is the kubeconfig the operator runs
	// with (UseServiceAccount writes one); otherwise it runs as admin.
	OperatorKubeconfig string
}

// StartCluster starts hack/controlplane (which needs KUBEBUILDER_ASSETS),
// with args added to its flags, records the etcd and kube-apiserver it
// starts with the supervisor, and installs the CRDs of config/crd/bases.
func StartCluster(ctx context.Context, sup *Supervisor, bins Binaries, work string, args ...string) (*Cluster, error) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return nil, fmt.Errorf("KUBEBUILDER_ASSETS is unset: run through make (make test, make test-e2e, make demo, make bench-fleet), which builds the control plane and sets it")
	}
	kubeconfig := filepath.Join(work, "kubeconfig")
	cp, err := sup.Start("controlplane", bins.ControlPlane, append([]string{"-write-kubeconfig", kubeconfig}, args...))
	if err != nil {
		return nil, err
	}
	// It stops kube-apiserver and etcd in turn, envtest allowing each 20s.
	cp.Grace = time.Minute
	ready, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if _, err := cp.WaitLine(ready, "ready"); err != nil {
		return nil, err
	}
	for _, pid := range descendants(cp.PID) {
		sup.Track(commName(pid), pid)
	}

	c, err := NewCluster(kubeconfig, filepath.Join(assets, "kubectl"))
	if err != nil {
		return nil, err
	}
	root, err := ModuleRoot(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := envtest.InstallCRDs(c.Config, envtest.CRDInstallOptions{
		Paths:              []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfPathMissing: true,
		Scheme:             c.Client.Scheme(),
	}); err != nil {
		return nil, fmt.Errorf("install CRDs: %w", err)
	}
	return c, nil
}

// NewCluster connects to the cluster of an admin kubeconfig: the local
// control plane, or the single-node cluster of hack/cluster.
func NewCluster(kubeconfig, kubectl string) (*Cluster, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 200, 400 // the harness polls status; keep client-side throttling out of the way
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Cluster{
		Kubeconfig: kubeconfig,
		Kubectl:    kubectl,
		Config:     cfg,
		Client:     c,
		Clientset:  cs,
	}, nil
}

// OperatorNamespace is the operator's own namespace in the harness.
const OperatorNamespace = "ringmaster-system"

// StartOperator runs the operator binary against the cluster, with its
// namespace OperatorNamespace, as admin or, after UseServiceAccount, as its
// own service account. It elects a leader there when leaderElect is set, as
// a deployed operator does.
func (c *Cluster) StartOperator(ctx context.Context, sup *Supervisor, bins Binaries, leaderElect bool) (*Proc, error) {
	if err := c.CreateNamespace(ctx, OperatorNamespace); err != nil {
		return nil, err
	}
	args := []string{
		"--metrics-bind-address", "0",
		"--health-probe-bind-address", "127.0.0.1:0",
		fmt.Sprintf("--leader-elect=%t", leaderElect),
		"--cluster-resource-namespace", OperatorNamespace,
	}
	args = append(args, c.OperatorArgs...)
	kubeconfig := c.Kubeconfig
	if c.OperatorKubeconfig != "" {
		kubeconfig = c.OperatorKubeconfig
	}
	return sup.Start("operator", bins.Operator, args, append([]string{"KUBECONFIG=" + kubeconfig}, c.OperatorEnv...)...)
}

// CreateNamespace creates a namespace; one that exists already is fine.
func (c *Cluster) CreateNamespace(ctx context.Context, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}
