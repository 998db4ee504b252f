//go:build cluster

package cluster_test

import (
	"context"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/ringmaster-io/ringmaster/internal/fleet"
)

// The fault specs: each breaks one piece of the cluster while the fault
// fleet (faults_helpers_test.go) rotates every minute under load, and
// checks the same invariants (internal/invariants) throughout: epochs only
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
	when := "after the leader's successor took over"
	if seen.Before(killed) {
		when = "before the kill: the leader published first"
	}
	r.note("leader %s SIGKILLed right after a rotate request; epoch %d first seen %s %s (%s leads)",
		leader, epoch, seen.Sub(killed).Round(10*time.Millisecond), when, strings.SplitN(next, "_", 2)[0])
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
	addrs := fleetAddrs(ctx)
	Eventually(func(g Gomega) {
		for _, a := range addrs {
			_, err := fleet.ReadHealth(ctx, r.f.health, statusAddr(a))
			g.Expect(err).NotTo(HaveOccurred())
		}
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
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
	const repo = "ghcr.io/ringmaster-io/ringmaster"
	newTag := imageTag + "-faults"
	var from string
	for _, name := range strings.Fields(ctr(ctx, "images", "ls", "-q")) {
		if name == repo+":"+imageTag || strings.HasSuffix(name, "/"+repo+":"+imageTag) {
			from = name
		}
	}
	Expect(from).NotTo(BeEmpty(), "the operator's image %s:%s is loaded", repo, imageTag)
	ctr(ctx, "images", "tag", "--force", from, strings.TrimSuffix(from, imageTag)+newTag)

	due := r.nextDue(ctx, 50*time.Second)
	start := time.Now()
	_, err := helm(ctx, "upgrade", release, root+"/charts/ringmaster", "--namespace", releaseNS, "--reuse-values",
		"--set", "image.tag="+newTag, "--wait", "--timeout", "3m")
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
	addrs := fleetAddrs(ctx)
	Eventually(func(g Gomega) {
		for _, a := range addrs {
			_, err := fleet.ReadHealth(ctx, r.f.health, statusAddr(a))
			g.Expect(err).NotTo(HaveOccurred())
		}
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
	waitService(ctx, r.f.lb, r.f.pki, addrs)
	r.restartWindow(from, time.Now().Add(3*time.Second))
	r.note("node stopped %s before a rotation (down in %s), the fleet serving through its Service again %s after",
		due.Sub(from).Round(time.Second), down.Round(time.Second), time.Since(from).Round(time.Second))
	r.settle(ctx, 2)
	r.finish("node restarted on the same etcd data", 2)
}
