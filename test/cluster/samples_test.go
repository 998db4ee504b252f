//go:build cluster

package cluster_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
)

const samplesNS = "samples"

// sampleServers are the servers of config/samples' agent samples: the image
// each pins, and the Debian binary of the same version (the machine's, which
// the integration suites run too) that stands in for it, imported by
// hack/cluster/load.sh: the official images cannot be had here. The
// sidecar's image the samples pin comes from the cluster's registry.
var sampleServers = []struct {
	service, file, image, binary string
	entrypoint, cmd              []string
}{
	{"web-nginx", "config/samples/nginx_ringmaster-agent.yaml", "docker.io/library/nginx:1.22.1", "/usr/sbin/nginx",
		nil, []string{"nginx", "-g", "daemon off;"}},
	// The official image's entrypoint runs haproxy -W -db with the
	// container's arguments.
	{"web-haproxy", "config/samples/haproxy_ringmaster-agent.yaml", "docker.io/library/haproxy:2.6.12", "/usr/sbin/haproxy",
		[]string{"haproxy", "-W", "-db"}, nil},
}

// samplesAsShipped applies config/samples as a user does, in a namespace of
// its own: make sample-cert's Secret, the ring, and both agent samples
// unchanged; then, through each Service's ClusterIP, it verifies the
// certificate with the sample CA and resumes sessions.
func samplesAsShipped(ctx SpecContext) {
	Expect(imageTag).To(Equal("v0.1.0"), "config/samples pin the sidecar's image at the chart's appVersion")
	By("loading the servers' images, built from the machine's Debian binaries")
	dir := GinkgoT().TempDir()
	var tars []string
	for _, s := range sampleServers {
		want := regexp.MustCompile(`\d+\.\d+\.\d+$`).FindString(s.image)
		out, err := exec.CommandContext(ctx, s.binary, "-v").CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "%s -v: %s", s.binary, out)
		Expect(string(out)).To(ContainSubstring(want), "%s is not the version %s pins", s.binary, s.file)
		tar := filepath.Join(dir, s.service+".tar")
		Expect(writeBinaryImage(ctx, tar, s.image, s.binary, s.entrypoint, s.cmd)).To(Succeed())
		tars = append(tars, tar)
	}
	_, err := run(ctx, filepath.Join(root, "hack/cluster/load.sh"), tars...)
	Expect(err).NotTo(HaveOccurred())

	Expect(cl.CreateNamespace(ctx, samplesNS)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		if CurrentSpecReport().Failed() {
			for _, args := range [][]string{{"get", "pods", "-o", "wide"}, {"describe", "pods"}, {"logs", "--all-containers", "--prefix", "--tail", "30", "-l", "app in (web-nginx,web-haproxy)"}} {
				out, err := run(ctx, cl.Kubectl, append([]string{"-n", samplesNS}, args...)...)
				GinkgoWriter.Printf("--- kubectl %s (%v):\n%s\n", strings.Join(args, " "), err, out)
			}
		}
		// Frees the node for the specs after; nothing waits on it.
		_, _ = run(ctx, cl.Kubectl, "delete", "namespace", samplesNS, "--wait=false")
	})

	By("making the web-tls Secret with make sample-cert's script, and applying the samples")
	caFile := filepath.Join(dir, "sample-ca.crt")
	_, err = runEnv(ctx, []string{"KUBECTL=" + cl.Kubectl, "CA_FILE=" + caFile}, filepath.Join(root, "hack/sample-cert.sh"), samplesNS)
	Expect(err).NotTo(HaveOccurred())
	caPEM, err := os.ReadFile(caFile)
	Expect(err).NotTo(HaveOccurred())
	roots := x509.NewCertPool()
	Expect(roots.AppendCertsFromPEM(caPEM)).To(BeTrue())
	// The NetworkPolicy too: the bridge plugin enforces none, so this shows
	// only that the API takes it as shipped and the servers stay reachable
	// (config/samples' own test judges what it admits).
	for _, f := range []string{"config/samples/ringmaster_v1alpha1_ticketkeyring.yaml", sampleServers[0].file, sampleServers[1].file, "config/samples/agent_networkpolicy.yaml"} {
		_, err := run(ctx, cl.Kubectl, "apply", "-n", samplesNS, "-f", filepath.Join(root, f))
		Expect(err).NotTo(HaveOccurred())
	}
	start := time.Now()
	_, err = run(ctx, cl.Kubectl, "wait", "-n", samplesNS, "--for=condition=Available", "--timeout=150s",
		"deployment/web-nginx", "deployment/web-haproxy")
	Expect(err).NotTo(HaveOccurred())
	GinkgoWriter.Printf("The samples' Deployments available %s after applying\n", time.Since(start).Round(100*time.Millisecond))

	for _, s := range sampleServers {
		By("resuming through Service " + s.service)
		svc := &corev1.Service{}
		Expect(cl.Client.Get(ctx, key(samplesNS, s.service), svc)).To(Succeed())
		addr := net.JoinHostPort(svc.Spec.ClusterIP, "443")
		tc := &tls.Config{
			RootCAs: roots, ServerName: s.service + "." + samplesNS + ".svc",
			ClientSessionCache: tls.NewLRUClientSessionCache(4),
		}
		// kube-proxy programs the Service a moment after its endpoints are
		// ready: the first full handshake is retried, briefly.
		Eventually(func(g Gomega) {
			resumed, err := greet(ctx, addr, tc)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(resumed).To(BeFalse(), "the first connection has no ticket to resume")
		}).WithContext(ctx).WithTimeout(30 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())
		// Reconnects reach any of the 3 replicas, which share the ring.
		for i := range 5 {
			resumed, err := greet(ctx, addr, tc)
			Expect(err).NotTo(HaveOccurred(), "reconnect %d", i+1)
			Expect(resumed).To(BeTrue(), "reconnect %d through %s paid a full handshake", i+1, s.service)
		}
		GinkgoWriter.Printf("%s (%s): certificate verified with the sample CA, 5 of 5 reconnects resumed\n", s.service, addr)
	}
}

// greet makes one HTTPS request to addr from inside the cluster's network,
// reading the whole answer (and so the TLS 1.3 tickets), and reports
// whether the handshake resumed.
func greet(ctx context.Context, addr string, tc *tls.Config) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	raw, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false, err
	}
	defer raw.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	conn := tls.Client(raw, tc)
	if err := conn.HandshakeContext(ctx); err != nil {
		return false, err
	}
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: "+tc.ServerName+"\r\nConnection: close\r\n\r\n"); err != nil {
		return false, err
	}
	body, err := io.ReadAll(conn)
	if err != nil {
		return false, err
	}
	if !bytes.Contains(body, []byte("hello from")) {
		return false, fmt.Errorf("unexpected answer %q", body)
	}
	return conn.ConnectionState().DidResume, nil
}

// writeBinaryImage writes an OCI archive, for hack/cluster/load.sh, of an
// image named ref holding binary and the shared libraries ldd lists for
// it, with the binary's directory on the PATH.
func writeBinaryImage(ctx context.Context, dst, ref, binary string, entrypoint, cmd []string) error {
	out, err := exec.CommandContext(ctx, "ldd", binary).Output()
	if err != nil {
		return fmt.Errorf("ldd %s: %w", binary, err)
	}
	files := []string{binary}
	for _, f := range regexp.MustCompile(`(?m)(/\S+) \(0x`).FindAllStringSubmatch(string(out), -1) {
		files = append(files, f[1])
	}
	var libDirs []string
	for _, f := range files[1:] {
		if d := filepath.Dir(f); !slices.Contains(libDirs, d) {
			libDirs = append(libDirs, d)
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f) // the target of a symbolic link
		if err != nil {
			return err
		}
		var parents []string
		for d := filepath.Dir(f); d != "/"; d = filepath.Dir(d) {
			parents = append(parents, d)
		}
		slices.Reverse(parents)
		for _, d := range parents {
			if !dirs[d] {
				dirs[d] = true
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d[1:] + "/", Mode: 0o755}); err != nil {
					return err
				}
			}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f[1:], Mode: 0o755, Size: int64(len(data))}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777}); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config = v1.Config{
		Entrypoint: entrypoint, Cmd: cmd, WorkingDir: "/",
		Env: []string{"PATH=" + filepath.Dir(binary) + ":/usr/bin:/bin", "LD_LIBRARY_PATH=" + strings.Join(libDirs, ":")},
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	dir, err := os.MkdirTemp(filepath.Dir(dst), "layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}),
		layout.WithAnnotations(map[string]string{"io.containerd.image.name": ref})); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, "tar", "-C", dir, "-cf", dst, ".").CombinedOutput(); err != nil {
		return fmt.Errorf("tar: %w: %s", err, out)
	}
	return nil
}
