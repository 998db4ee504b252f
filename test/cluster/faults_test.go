//go:build cluster

package cluster_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/mint"
	"github.com/ringmaster-io/ringmaster/internal/testing/vaulttest"
)

// The fault specs: each breaks one piece of the cluster while the fault
// fleet (faults_helpers_test.go) rotates every minute under load, and
// checks the same invariants (internal/testing/invariants) throughout: epochs only
// grow, one content each; every key staged for activationDelay and held by
// every pod before it encrypts; no key served past its expiresAt; no
// connection failed and every reconnect resumed, except across the
// restart of the fleet's pods, counted apart. Each prints its resumption
// rate and full handshakes, and the table of the faults so far.
//
// Those labelled faultsLong do not fit make test's time; make test-faults
// runs them.
const (
	faultsLabel = "faults"
	faultsLong  = "faults-long"
)

// leaseIdentity is the lease holder's full identity (pod and a per-process
// id): a leader killed and restarted in the same pod holds it under
// another.
func leaseIdentity(ctx context.Context) string {
	l := &coordinationv1.Lease{}
	if err := cl.Client.Get(ctx, key(releaseNS, leaseName), l); err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// waitNewLeader waits until the lease is held under an identity other than
// old, and returns it.
func waitNewLeader(ctx context.Context, old string) string {
	var id string
	Eventually(func() bool {
		id = leaseIdentity(ctx)
		return id != "" && id != old
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(BeTrue())
	return id
}

// operatorRestarts sums the restarts of the operator's containers.
func operatorRestarts(ctx context.Context) int32 {
	var n int32
	for _, p := range operatorPods(ctx) {
		for _, c := range p.Status.ContainerStatuses {
			n += c.RestartCount
		}
	}
	return n
}

func leaderKilledWhileStaged(ctx SpecContext) {
	r := startFaultRun(ctx, getFaultFleet(ctx))
	defer r.stop()
	due := r.nextDue(ctx, 30*time.Second)
	sleepUntil(ctx, due.Add(-25*time.Second))
	id := leaseIdentity(ctx)
	leader, _, _ := strings.Cut(id, "_")
	sigkillPod(ctx, releaseNS, leader)
	killed := time.Now()
	next := waitNewLeader(ctx, id)
	r.note("leader %s SIGKILLed %s before its staged key activates; %s leads %s later",
		leader, due.Sub(killed).Round(time.Second), strings.SplitN(next, "_", 2)[0], time.Since(killed).Round(time.Second))
	r.settle(ctx, 2)
	r.finish("leader SIGKILLed between staging and activation", 2)
}

func leaderKilledBeforePublish(ctx SpecContext) {
	r := startFaultRun(ctx, getFaultFleet(ctx))
	defer r.stop()
	// Past activationDelay since the staged key was published, a rotate
	// request promotes it at once: the leader mints the next key and
	// publishes both in a new epoch. It is killed right after the request.
	due := r.nextDue(ctx, 20*time.Second)
	sleepUntil(ctx, due.Add(-12*time.Second))
	before := r.latestEpoch()
	id := leaseIdentity(ctx)
	leader, _, _ := strings.Cut(id, "_")
	pids := podProcesses(ctx, releaseNS, leader)
	Expect(pids).NotTo(BeEmpty())
	requested, err := cl.RequestRotation(ctx, faultsNS, ringName)
	Expect(err).NotTo(HaveOccurred())
	for _, pid := range pids {
		Expect(sigkill(pid)).To(Succeed())
	}
	killed := time.Now()
	epoch, seen := r.waitEpochAfter(ctx, before, 2*time.Minute)
	next := waitNewLeader(ctx, id)
	when := "after the kill: published by the successor"
	if seen.Before(killed) {
		when = "before the kill: the leader published first"
	}
	r.note("leader %s SIGKILLed right after a rotate request; epoch %d first seen %s %s (%s leads)",
		leader, epoch, seen.Sub(killed).Abs().Round(10*time.Millisecond), when, strings.SplitN(next, "_", 2)[0])
	Eventually(func() string { return r.ring(ctx).Status.LastRotateRequestedAt }).
		WithContext(ctx).WithTimeout(2*time.Minute).WithPolling(time.Second).Should(Equal(requested), "the request handled")
	r.settle(ctx, 1)
	r.finish("leader SIGKILLed between minting and publishing", 2)
}

func apiServerStopped(ctx SpecContext) {
	r := startFaultRun(ctx, getFaultFleet(ctx))
	defer r.stop()
	restarts := operatorRestarts(ctx)
	due := r.nextDue(ctx, 15*time.Second)
	sleepUntil(ctx, due.Add(-10*time.Second))
	stopped := time.Now()
	component(ctx, "stop", "kube-apiserver")
	sleepUntil(ctx, stopped.Add(30*time.Second))
	component(ctx, "start", "kube-apiserver")
	waitAPI(ctx)
	r.note("kube-apiserver stopped 10 s before a rotation for 30 s, answering again %s after the stop",
		time.Since(stopped).Round(time.Second))
	r.settle(ctx, 2)
	r.note("operator container restarts meanwhile: %d", operatorRestarts(ctx)-restarts)
	r.finish("kube-apiserver stopped 30 s across a rotation", 2)
}

func kubeletRestarted(ctx SpecContext) {
	r := startFaultRun(ctx, getFaultFleet(ctx))
	defer r.stop()
	due := r.nextDue(ctx, 5*time.Second)
	epoch, seen := r.waitEpochAfter(ctx, r.latestEpoch(), time.Until(due)+time.Minute)
	stopped := time.Now()
	component(ctx, "stop", "kubelet")
	sleepCtx(ctx, 5*time.Second)
	component(ctx, "start", "kubelet")
	r.note("kubelet stopped %s after epoch %d was published, started 5 s later",
		stopped.Sub(seen).Round(100*time.Millisecond), epoch)
	r.settle(ctx, 2)
	r.finish("kubelet restarted while a rotation is delivered", 2)
}

func containerdRestarted(ctx SpecContext) {
	r := startFaultRun(ctx, getFaultFleet(ctx))
	defer r.stop()
	due := r.nextDue(ctx, 30*time.Second)
	sleepUntil(ctx, due.Add(-25*time.Second))
	from := time.Now()
	component(ctx, "restart", "containerd")
	// Then the fleet's containers are killed through containerd, and the
	// kubelet starts them again.
	var killed int
	for _, line := range strings.Split(ctr(ctx, "containers", "ls"), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || !strings.Contains(fields[1], "ringmaster-example-server") {
			continue
		}
		if _, err := run(ctx, filepath.Join(root, "bin/cluster-bin/ctr"), "--address", "/run/"+clusterName+"/containerd.sock", "-n", "k8s.io",
			"tasks", "kill", "-s", "SIGKILL", fields[0]); err == nil {
			killed++
		}
	}
	Expect(killed).To(BeNumerically(">=", servers), "the fleet's containers killed")
	waitFleetServing(ctx, r.f.health)
	to := time.Now().Add(3 * time.Second)
	r.restartWindow(from, to)
	r.note("containerd restarted %s before a rotation, then %d containers of the fleet killed; all serving again %s after",
		due.Sub(from).Round(time.Second), killed, time.Since(from).Round(time.Second))
	r.settle(ctx, 1)
	r.finish("containerd restarted, the fleet's containers restarted", 1)
}

func helmUpgradeWhileStaged(ctx SpecContext) {
	r := startFaultRun(ctx, getFaultFleet(ctx))
	defer r.stop()
	// A new tag of the same index, in the cluster's registry: a new image
	// reference for the pods, pulled by the node.
	newTag := imageTag + "-faults"
	src, err := name.ParseReference(registry + "/ringmaster-io/ringmaster@" + operatorDigest)
	Expect(err).NotTo(HaveOccurred())
	desc, err := remote.Get(src, remote.WithContext(ctx))
	Expect(err).NotTo(HaveOccurred())
	Expect(remote.Tag(src.Context().Tag(newTag), desc, remote.WithContext(ctx))).To(Succeed())

	due := r.nextDue(ctx, 50*time.Second)
	start := time.Now()
	_, err = helm(ctx, "upgrade", release, chartRef, "--version", chartVersion, "--plain-http", "--namespace", releaseNS, "--reuse-values",
		"--set", "image.digest=", "--set", "image.tag="+newTag, "--wait", "--timeout", "3m")
	Expect(err).NotTo(HaveOccurred())
	took := time.Since(start)
	Eventually(func(g Gomega) {
		dep := &appsv1.Deployment{}
		g.Expect(cl.Client.Get(ctx, key(releaseNS, release), dep)).To(Succeed())
		g.Expect(dep.Spec.Template.Spec.Containers[0].Image).To(HaveSuffix(":" + newTag))
		g.Expect(dep.Status.UpdatedReplicas).To(Equal(int32(2)))
		g.Expect(dep.Status.ReadyReplicas).To(Equal(int32(2)))
		g.Expect(dep.Status.Replicas).To(Equal(int32(2)))
	}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
	r.note("helm upgrade to image tag %s began %s before the staged key's activation and took %s",
		newTag, due.Sub(start).Round(time.Second), took.Round(time.Second))
	r.settle(ctx, 2)
	r.finish("helm upgrade to a new image tag while a key is staged", 2)
}

func nodeRestarted(ctx SpecContext) {
	r := startFaultRun(ctx, getFaultFleet(ctx))
	defer r.stop()
	due := r.nextDue(ctx, 40*time.Second)
	sleepUntil(ctx, due.Add(-30*time.Second))
	from := time.Now()
	_, err := run(ctx, filepath.Join(root, "hack/cluster/down.sh"), "--keep-state")
	Expect(err).NotTo(HaveOccurred())
	down := time.Since(from)
	_, err = run(ctx, filepath.Join(root, "hack/cluster/up.sh"), "--reuse-state")
	Expect(err).NotTo(HaveOccurred())
	waitAPI(ctx)
	addrs := waitFleetServing(ctx, r.f.health)
	waitService(ctx, r.f.lb, r.f.pki, addrs)
	r.restartWindow(from, time.Now().Add(3*time.Second))
	r.note("node stopped %s before a rotation (down in %s), the fleet serving through its Service again %s after",
		due.Sub(from).Round(time.Second), down.Round(time.Second), time.Since(from).Round(time.Second))
	r.settle(ctx, 2)
	r.finish("node restarted on the same etcd data", 2)
}

// vaultAddr is where the Vault of the key source fault listens: on the
// node's address, inside the cluster's network namespace, which the pods
// reach through their bridge.
const vaultAddr = "10.240.0.2:8200"

// startVault runs a Vault dev server with TLS inside the cluster's network
// namespace, and a ClusterKeySource minting from it with its root token;
// it returns the source's name. Vault is stopped, and its source deleted,
// at the spec's end.
func startVault(ctx context.Context) string {
	bin, err := vaulttest.Binary()
	Expect(err).NotTo(HaveOccurred(), "make test-faults builds Vault (hack/vault.sh)")
	// Under the cluster's run directory: the suite's check for processes
	// left behind would name it, and down.sh removes the directory.
	dir := filepath.Join("/run", clusterName, "vault")
	Expect(os.MkdirAll(dir, 0o700)).To(Succeed())
	logf, err := os.Create(filepath.Join(dir, "vault.log"))
	Expect(err).NotTo(HaveOccurred())
	defer logf.Close()
	cmd := exec.Command("nsenter", "--net=/run/netns/"+clusterName, "--", bin, "server", "-dev", "-dev-tls",
		"-dev-tls-cert-dir="+dir, "-dev-tls-san=10.240.0.2", "-dev-root-token-id="+vaulttest.RootToken,
		"-dev-listen-address="+vaultAddr, "-dev-no-store-token")
	cmd.Env = append(os.Environ(), "HOME="+dir, "VAULT_ADDR=", "VAULT_TOKEN=")
	cmd.Stdout, cmd.Stderr = logf, logf
	Expect(cmd.Start()).To(Succeed())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	DeferCleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	var ca []byte
	Eventually(func() error {
		ca, err = os.ReadFile(filepath.Join(dir, "vault-ca.pem"))
		if err == nil && !bytes.Contains(ca, []byte("-----END CERTIFICATE-----")) {
			err = errors.New("vault-ca.pem not written yet")
		}
		return err
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	pool := x509.NewCertPool()
	Expect(pool.AppendCertsFromPEM(ca)).To(BeTrue())
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: dialer.DialContext, TLSClientConfig: &tls.Config{RootCAs: pool},
	}}
	Eventually(func() error {
		resp, err := hc.Get("https://" + vaultAddr + "/v1/sys/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("vault health: %s", resp.Status)
		}
		return nil
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())

	const name = "faults-vault"
	Expect(cl.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: releaseNS, Name: name},
		Data:       map[string][]byte{"token": []byte(vaulttest.RootToken), "ca.crt": ca},
	})).To(Succeed())
	src := &v1alpha1.ClusterKeySource{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ClusterKeySourceSpec{
			Vault: &v1alpha1.VaultSource{
				Address:  "https://" + vaultAddr,
				CABundle: &v1alpha1.CABundleSource{SecretKeyRef: &v1alpha1.KeyRef{Name: name, Key: "ca.crt"}},
				Auth:     v1alpha1.VaultAuth{TokenSecretRef: &v1alpha1.KeyRef{Name: name, Key: "token"}},
			},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": faultsNS}},
		},
	}
	Expect(cl.Client.Create(ctx, src)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		_ = cl.Client.Delete(ctx, src)
		_ = cl.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: releaseNS, Name: name}})
	})
	return name
}

// vaultBlocked drops (or, with on false, lets through again) every packet
// to Vault's port inside the cluster's network: Vault unreachable, as
// behind a failed network path, neither refused nor answered.
func vaultBlocked(ctx context.Context, on bool) error {
	op := "-I"
	if !on {
		op = "-D"
	}
	_, err := run(ctx, "nsenter", "--net=/run/netns/"+clusterName, "--", "iptables", op, "INPUT", "-p", "tcp", "--dport", "8200", "-j", "DROP")
	return err
}

func vaultUnreachable(ctx SpecContext) {
	f := getFaultFleet(ctx)
	source := startVault(ctx)
	patch := fmt.Sprintf(`{"spec":{"sourceRef":{"name":%q}}}`, source)
	ring := &v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: faultsNS, Name: ringName}}
	Expect(cl.Client.Patch(ctx, ring, client.RawPatch(types.MergePatchType, []byte(patch)))).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		ring := &v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: faultsNS, Name: ringName}}
		_ = cl.Client.Patch(ctx, ring, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"sourceRef":null}}`)))
	})
	// Before ringplan.Replan, the operator counted activationDelay from the
	// instant it planned, before it asked the key source: a mint that
	// waited for Vault (up to mint.DefaultTimeout) published the next key
	// staged for that much less (measured: 34.3 s of 45 s). The checker
	// still allows it here, and the spec prints the shortest staged time;
	// every pod must still hold each key before it encrypts.
	r := startFaultRunLag(ctx, f, publishLag+mint.DefaultTimeout)
	defer r.stop()
	// A rotation minted from Vault first, then Vault cut off just after the
	// next staged key is published, across the next due rotation (when the
	// operator mints the key to stage next).
	r.settle(ctx, 1)
	due := r.nextDue(ctx, 50*time.Second)
	from := time.Now()
	Expect(vaultBlocked(ctx, true)).To(Succeed())
	blocked := true
	DeferCleanup(func(ctx SpecContext) {
		if blocked {
			_ = vaultBlocked(ctx, false)
		}
	})
	sleepUntil(ctx, due.Add(20*time.Second))
	overdue := r.ring(ctx)
	Expect(vaultBlocked(ctx, false)).To(Succeed())
	blocked = false
	var cond string
	for _, c := range overdue.Status.Conditions {
		if c.Status == metav1.ConditionTrue && c.Type != "Ready" || c.Type == "Ready" {
			cond += fmt.Sprintf(" %s=%s(%s)", c.Type, c.Status, c.Reason)
		}
	}
	r.note("Vault unreachable %s, from %s before a due rotation to 20 s after; ring then:%s",
		time.Since(from).Round(time.Second), due.Sub(from).Round(time.Second), cond)
	r.settle(ctx, 2)
	r.finish("key source (Vault) unreachable across a due rotation", 2)
}
