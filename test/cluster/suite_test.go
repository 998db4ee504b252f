//go:build cluster

// Package cluster_test installs ringmaster the way its users will, into a
// real single-node cluster (hack/cluster: kubelet, containerd, runc, CNI,
// kube-proxy), with its Helm chart and the locally built images, both
// pushed to the cluster's own registry and installed from it (helm install
// oci:// by digest, the node pulling the image index), and drives it end to
// end: leader election as its own ServiceAccount with the chart's
// RBAC, helm test, a fleet of examples/server pods mounting the ring through
// the kubelet's projected volume and resuming TLS sessions across replicas
// through rotations and the loss of the leader, helm upgrade and uninstall.
//
// The cluster lives in a network namespace of its own; the load clients and
// the pods' health checks dial from inside it (test/cluster/netns), the
// Kubernetes clients and helm reach kube-apiserver through hack/cluster's
// loopback forwarder.
//
// It needs root, and runs from make test (or make test-cluster), which
// builds the cluster, Helm and the images first.
package cluster_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
	"github.com/ringmaster-io/ringmaster/test/cluster/netns"
)

const (
	// clusterName is the suite's own cluster: make cluster's
	// (ringmaster-node) may run beside it.
	clusterName = "ringmaster-e2e"
	release     = "ringmaster"
	releaseNS   = "ringmaster-system"
	// leaseName is the operator's leader election id.
	leaseName = "ringmaster.ringmaster.io"
)

var (
	// imageTag is the tag make images gave the images (VERSION, the
	// chart's appVersion).
	imageTag string
	// registry is the cluster's registry's loopback address, pushed holds
	// what was pushed to it (reference -> index digest), operatorDigest the
	// operator's image index.
	registry       string
	pushed         map[string]string
	operatorDigest string
	// chartRef is the chart in the registry (oci://), at chartVersion.
	chartRef, chartVersion string
	root                   string
	helmBin                string
	images                 string
	cl                     *fleet.Cluster
	dialer                 netns.Dialer
	env                    []string // RINGMASTER_CLUSTER for the scripts, KUBECONFIG for helm
)

func TestCluster(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Single-node cluster suite")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	Expect(os.Geteuid()).To(BeZero(), "the cluster suite needs root (network namespaces, mounts, cgroups): run it with make test or make test-cluster as root")
	helmBin, images = os.Getenv("RINGMASTER_HELM"), os.Getenv("RINGMASTER_IMAGES")
	Expect(helmBin).NotTo(BeEmpty(), "RINGMASTER_HELM is unset: run this suite with make test or make test-cluster, which build Helm")
	Expect(images).NotTo(BeEmpty(), "RINGMASTER_IMAGES is unset: run this suite with make test or make test-cluster, which run make images")
	imageTag = os.Getenv("RINGMASTER_IMAGE_TAG")
	Expect(imageTag).NotTo(BeEmpty(), "RINGMASTER_IMAGE_TAG is unset: run this suite with make test or make test-cluster, which tag the images")
	var err error
	root, err = fleet.ModuleRoot(ctx)
	Expect(err).NotTo(HaveOccurred())
	env = append(os.Environ(), "RINGMASTER_CLUSTER="+clusterName, "HELM_CACHE_HOME="+GinkgoT().TempDir(), "HELM_CONFIG_HOME="+GinkgoT().TempDir(), "HELM_DATA_HOME="+GinkgoT().TempDir())

	// Stopping is registered before starting: a start that fails midway
	// is cleaned up too (up.sh also cleans up after itself).
	DeferCleanup(stopCluster)
	start := time.Now()
	out, err := run(ctx, filepath.Join(root, "hack/cluster/up.sh"))
	Expect(err).NotTo(HaveOccurred())
	kubeconfig := lastLine(out)
	GinkgoWriter.Printf("Cluster %s up in %s\n", clusterName, time.Since(start).Round(100*time.Millisecond))
	env = append(env, "KUBECONFIG="+kubeconfig, "KUBECACHEDIR="+GinkgoT().TempDir())
	dialer = netns.Dialer{Path: "/run/netns/" + clusterName}

	// The images reach the node as users' do, from a registry: the
	// cluster's own (hack/cluster/up.sh), which containerd pulls every
	// image from. examples/server's takes the air-gapped path instead, a
	// tar file imported into containerd by hack/cluster/load.sh, which
	// the fleet's pods then use without pulling.
	tars, err := filepath.Glob(filepath.Join(images, "*.tar"))
	Expect(err).NotTo(HaveOccurred())
	Expect(tars).To(ContainElements(filepath.Join(images, "ringmaster.tar"), filepath.Join(images, "example-server.tar"), filepath.Join(images, "ringmaster-agent.tar")),
		"make images writes the operator's, the sidecar's and examples/server's images into %s", images)
	addr, err := os.ReadFile(filepath.Join(filepath.Dir(kubeconfig), "registry"))
	Expect(err).NotTo(HaveOccurred(), "hack/cluster/up.sh writes the registry's loopback address beside the kubeconfig")
	registry = strings.TrimSpace(string(addr))
	out, err = run(ctx, "go", append([]string{"run", "./hack/images", "push", "-registry", registry}, tars...)...)
	Expect(err).NotTo(HaveOccurred())
	pushed = map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) >= 2 {
			pushed[f[0]] = f[1]
		}
	}
	operatorDigest = pushed[registry+"/ringmaster-io/ringmaster:"+imageTag]
	Expect(operatorDigest).To(HavePrefix("sha256:"), "hack/images push printed %q", out)
	_, err = run(ctx, filepath.Join(root, "hack/cluster/load.sh"), filepath.Join(images, "example-server.tar"))
	Expect(err).NotTo(HaveOccurred())

	By("pushing the chart to the registry as an OCI artifact")
	dir := GinkgoT().TempDir()
	_, err = helm(ctx, "package", filepath.Join(root, "charts/ringmaster"), "-d", dir)
	Expect(err).NotTo(HaveOccurred())
	chartVersion = strings.TrimPrefix(imageTag, "v")
	_, err = helm(ctx, "push", filepath.Join(dir, "ringmaster-"+chartVersion+".tgz"), "oci://"+registry+"/charts", "--plain-http")
	Expect(err).NotTo(HaveOccurred(), "the chart's version is the images' tag without the v")
	chartRef = "oci://" + registry + "/charts/ringmaster"

	By("signing the operator's index and the chart in the registry with the test key, and verifying them as a policy engine would")
	cosign, key := os.Getenv("RINGMASTER_COSIGN"), os.Getenv("RINGMASTER_COSIGN_KEY")
	Expect(cosign).NotTo(BeEmpty(), "RINGMASTER_COSIGN is unset: run this suite with make test or make test-cluster, which build cosign")
	Expect(key).NotTo(BeEmpty(), "RINGMASTER_COSIGN_KEY is unset: run this suite with make test or make test-cluster (hack/cosign.sh test-key)")
	chart, err := name.ParseReference(registry + "/charts/ringmaster:" + chartVersion)
	Expect(err).NotTo(HaveOccurred())
	chartDesc, err := remote.Head(chart, remote.WithContext(ctx))
	Expect(err).NotTo(HaveOccurred())
	for _, ref := range []string{registry + "/ringmaster-io/ringmaster@" + operatorDigest, registry + "/charts/ringmaster@" + chartDesc.Digest.String()} {
		_, err = runEnv(ctx, []string{"COSIGN_PASSWORD="}, cosign, "sign", "--key", key, "--tlog-upload=false", "--use-signing-config=false", "--yes", "--recursive", ref)
		Expect(err).NotTo(HaveOccurred())
		_, err = run(ctx, cosign, "verify", "--key", filepath.Join(filepath.Dir(key), "cosign.pub"), "--insecure-ignore-tlog=true", ref)
		Expect(err).NotTo(HaveOccurred())
	}

	cl, err = fleet.NewCluster(kubeconfig, filepath.Join(root, "bin/cluster-bin/kubectl"))
	Expect(err).NotTo(HaveOccurred())
}, NodeTimeout(5*time.Minute))

// stopCluster stops the cluster and checks that nothing of it is left: no
// network namespace, no mount, no process of its own.
func stopCluster(ctx SpecContext) {
	start := time.Now()
	_, err := run(ctx, filepath.Join(root, "hack/cluster/down.sh"))
	Expect(err).NotTo(HaveOccurred())
	GinkgoWriter.Printf("Cluster %s down in %s\n", clusterName, time.Since(start).Round(100*time.Millisecond))
	Expect("/run/netns/" + clusterName).NotTo(BeAnExistingFile())
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	Expect(err).NotTo(HaveOccurred())
	Expect(string(mounts)).NotTo(ContainSubstring("/"+clusterName), "mounts left behind")
	Expect("/run/" + clusterName).NotTo(BeAnExistingFile())
	Expect("/var/lib/" + clusterName).NotTo(BeAnExistingFile())
	Expect(clusterProcesses()).To(BeEmpty(), "processes left behind")
}

// run runs a command with the suite's environment, its output going to the
// suite's log, and returns its standard output.
func run(ctx context.Context, name string, args ...string) (string, error) {
	return runEnv(ctx, nil, name, args...)
}

// runEnv is run with extra environment variables.
func runEnv(ctx context.Context, extra []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(slices.Clone(env), extra...)
	cmd.Dir = root
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = GinkgoWriter
	// A cancelled spec still lets down.sh finish: only SIGTERM, and wait.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 2 * time.Minute
	err := cmd.Run()
	_, _ = GinkgoWriter.Write(stdout.Bytes())
	if err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w", filepath.Base(name), strings.Join(args, " "), err)
	}
	return stdout.String(), nil
}

// helm runs the Helm built by make helm against the cluster.
func helm(ctx context.Context, args ...string) (string, error) {
	return run(ctx, helmBin, args...)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// clusterProcesses lists the running processes of the cluster: those whose
// command line names its directories (every daemon and shim does), and
// those in its cgroups (the containers).
func clusterProcesses() []string {
	marks := [][]byte{[]byte("/run/" + clusterName + "/"), []byte("/var/lib/" + clusterName + "/"), []byte("/run/netns/" + clusterName)}
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cgroup, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if bytes.Contains(cgroup, []byte(":/"+clusterName+"/")) || slices.ContainsFunc(marks, func(m []byte) bool { return bytes.Contains(cmdline, m) }) {
			out = append(out, e.Name()+" "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return out
}
