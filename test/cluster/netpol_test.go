//go:build cluster

package cluster_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
	"github.com/ringmaster-io/ringmaster/test/cluster/netns"
)

// statusPortGuarded runs kube-router's NetworkPolicy controller in the
// cluster's network namespace (the bridge plugin enforces no policy), and
// config/samples' NetworkPolicy, unchanged, over pods labelled and named as
// the agent samples' (app: web-nginx, ports https and agent-metrics), which
// serve examples/server's status on agent-metrics. A pod of another
// namespace reaches the status port before the policy and not after, and
// still reaches https; the operator's pods still ask the fleet, so that
// a rotation of a ring whose promotion waits for every pod to confirm
// (onTimeout Wait, for up to 30 minutes) completes.
func statusPortGuarded(ctx SpecContext) {
	const ns, elsewhere, ring, replicas = "netpol", "netpol-elsewhere", "web", 2
	router := os.Getenv("RINGMASTER_KUBE_ROUTER")
	Expect(router).NotTo(BeEmpty(), "RINGMASTER_KUBE_ROUTER is unset: run this suite with make test or make test-cluster, which build kube-router (hack/kube-router.sh)")

	By("starting kube-router's NetworkPolicy controller in the cluster's network namespace")
	nsPath := "/run/netns/" + clusterName
	state := "/var/lib/" + clusterName
	routerArgs := []string{"--net=" + nsPath, "--", router, "--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
		"--kubeconfig=" + filepath.Join(state, "admin.kubeconfig"), "--hostname-override=" + clusterName, "--metrics-port=0", "--health-port=20244"}
	cmd := exec.Command("nsenter", routerArgs...)
	cmd.Stdout, cmd.Stderr = GinkgoWriter, GinkgoWriter
	Expect(cmd.Start()).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		// Stopped by its pid, then its chains and sets removed, so that the
		// specs after this one run on the plain bridge again.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		removeRouterRules(ctx, nsPath)
	})
	Eventually(func() string {
		out, _ := exec.CommandContext(ctx, "nsenter", "--net="+nsPath, "--", "iptables-save", "-t", "filter").Output()
		return string(out)
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(ContainSubstring("KUBE-ROUTER-FORWARD"))

	By("a fleet under a ring whose promotions wait for every pod")
	pki, err := fleet.NewPKI(fleet.ECDSAP256)
	Expect(err).NotTo(HaveOccurred())
	Expect(cl.CreateNamespace(ctx, ns)).To(Succeed())
	Expect(cl.CreateNamespace(ctx, elsewhere)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		for _, n := range []string{ns, elsewhere} {
			_, _ = run(ctx, cl.Kubectl, "delete", "namespace", n, "--wait=false")
		}
	})
	Expect(cl.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-tls"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": pki.CertPEM, "tls.key": pki.KeyPEM},
	})).To(Succeed())
	_, err = cl.CreateRing(ctx, fleet.RingSpec{Namespace: ns, Name: ring, RotationInterval: time.Hour, ActivationDelay: 10 * time.Second, RetainedKeys: 1,
		Confirmation: &v1alpha1.Confirmation{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web-nginx"}},
			Port:        intstr.FromString("agent-metrics"),
			Timeout:     metav1.Duration{Duration: 20 * time.Second},
			OnTimeout:   v1alpha1.ConfirmationWait,
			MaxDelay:    &metav1.Duration{Duration: 30 * time.Minute},
		}})
	Expect(err).NotTo(HaveOccurred())
	Expect(cl.Client.Create(ctx, agentLikeDeployment(ns, replicas))).To(Succeed())
	var pods []corev1.Pod
	Eventually(func(g Gomega) {
		list := &corev1.PodList{}
		g.Expect(cl.Client.List(ctx, list, inNamespace(ns), matchingLabels(map[string]string{"app": "web-nginx"}))).To(Succeed())
		g.Expect(list.Items).To(HaveLen(replicas))
		for _, p := range list.Items {
			g.Expect(podReady(p)).To(BeTrue(), "pod %s", p.Name)
		}
		pods = list.Items
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())

	By("a pod of another namespace")
	Expect(cl.Client.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: elsewhere, Name: "client"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "pause", Image: "localhost/ringmaster-pause:dev", ImagePullPolicy: corev1.PullNever}}},
	})).To(Succeed())
	client := &corev1.Pod{}
	Eventually(func(g Gomega) {
		g.Expect(cl.Client.Get(ctx, key(elsewhere, "client"), client)).To(Succeed())
		g.Expect(podReady(*client)).To(BeTrue())
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
	from := netns.Dialer{Path: podNetns(client.UID)}
	reach := func(pod corev1.Pod, port string) error {
		dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		conn, err := from.DialContext(dctx, "tcp", net.JoinHostPort(pod.Status.PodIP, port))
		if err == nil {
			_ = conn.Close()
		}
		return err
	}
	for _, p := range pods {
		Expect(reach(p, "9090")).To(Succeed(), "before the policy, %s's status port is open to all", p.Name)
	}

	By("config/samples' NetworkPolicy, as shipped")
	_, err = run(ctx, cl.Kubectl, "apply", "-n", ns, "-f", filepath.Join(root, "config/samples/agent_networkpolicy.yaml"))
	Expect(err).NotTo(HaveOccurred())
	for _, p := range pods {
		Eventually(func() error { return reach(p, "9090") }).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).
			ShouldNot(Succeed(), "%s's status port closed to a pod of another namespace", p.Name)
		Expect(reach(p, "8443")).To(Succeed(), "%s's server still open to all", p.Name)
	}

	By("the operator still asking the fleet: a rotation that waits for every pod completes")
	start := time.Now()
	rot, err := cl.Rotate(ctx, ns, ring)
	Expect(err).NotTo(HaveOccurred())
	r, err := cl.GetRing(ctx, ns, ring)
	Expect(err).NotTo(HaveOccurred())
	Expect(r.Status.Conditions).NotTo(ContainElement(And(HaveField("Type", v1alpha1.ConditionConfirmationOverdue), HaveField("Status", metav1.ConditionTrue))))
	GinkgoWriter.Printf("Under the NetworkPolicy, enforced by kube-router: rotated %s -> %s (epoch %d) in %s, confirmed by the fleet\n",
		rot.From, rot.To, rot.Epoch, time.Since(start).Round(100*time.Millisecond))
	// The key staged by that rotation was staged under the policy: its
	// promotion shows the operator's probes get through.
	rot, err = cl.Rotate(ctx, ns, ring)
	Expect(err).NotTo(HaveOccurred())
	GinkgoWriter.Printf("And again: %s -> %s (epoch %d), %s after the policy was applied\n", rot.From, rot.To, rot.Epoch, time.Since(start).Round(100*time.Millisecond))
	for _, p := range pods {
		Expect(reach(p, "9090")).NotTo(Succeed(), "%s's status port still closed", p.Name)
	}
}

// removeRouterRules removes what kube-router's NetworkPolicy controller left
// in a network namespace once stopped: its chains, the jumps to them, and
// its ipsets, so that the specs after this one run on the plain bridge
// again. (Its own --cleanup-config leaves its top chains in v2.1.0, and
// then panics in the service proxy's cleanup.)
func removeRouterRules(ctx context.Context, nsPath string) {
	GinkgoHelper()
	in := func(args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + nsPath, "--"}, args...)...)
	}
	saved, err := in("iptables-save", "-t", "filter").Output()
	Expect(err).NotTo(HaveOccurred())
	// Its chains, and nothing of kube-proxy's (KUBE-SERVICES, KUBE-FORWARD
	// and the others).
	routers := func(chain string) bool {
		return strings.HasPrefix(chain, "KUBE-ROUTER-") || strings.HasPrefix(chain, "KUBE-POD-FW-") || strings.HasPrefix(chain, "KUBE-NWPLCY-")
	}
	var jumps, chains []string
	for _, line := range strings.Split(string(saved), "\n") {
		f := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, ":") && routers(f[0][1:]):
			chains = append(chains, f[0][1:])
		case strings.HasPrefix(line, "-A ") && len(f) > 1 && !routers(f[1]) && routers(f[len(f)-1]) && f[len(f)-2] == "-j":
			jumps = append(jumps, "-D "+line[len("-A "):])
		}
	}
	script := []string{"*filter"}
	script = append(script, jumps...)
	for _, c := range chains {
		script = append(script, "-F "+c)
	}
	for _, c := range chains {
		script = append(script, "-X "+c)
	}
	script = append(script, "COMMIT", "")
	restore := in("iptables-restore", "--noflush")
	restore.Stdin = strings.NewReader(strings.Join(script, "\n"))
	restore.Stdout, restore.Stderr = GinkgoWriter, GinkgoWriter
	Expect(restore.Run()).To(Succeed())
	sets, err := in("ipset", "list", "-n").Output()
	Expect(err).NotTo(HaveOccurred())
	for _, set := range strings.Fields(string(sets)) {
		if strings.HasPrefix(set, "KUBE-SRC-") || strings.HasPrefix(set, "KUBE-DST-") || strings.HasPrefix(set, "KUBE-ROUTER-") || strings.HasPrefix(set, "kube-router-") {
			Expect(in("ipset", "destroy", set).Run()).To(Succeed(), "ipset %s", set)
		}
	}
	saved, err = in("iptables-save", "-t", "filter").Output()
	Expect(err).NotTo(HaveOccurred())
	Expect(string(saved)).NotTo(ContainSubstring("KUBE-ROUTER"), "kube-router's chains removed")
	var left []string
	for _, line := range strings.Split(string(saved), "\n") {
		if strings.HasPrefix(line, ":") {
			left = append(left, strings.Fields(line[1:])[0])
		}
	}
	GinkgoWriter.Printf("Filter chains left after kube-router: %s\n", strings.Join(left, " "))
}

// agentLikeDeployment is examples/server under the labels and port names of
// config/samples' agent samples (app: web-nginx; https, and agent-metrics
// for the status the operator asks), mounting the ring web's projection.
func agentLikeDeployment(ns string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": "web-nginx"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-nginx"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), FSGroup: ptr.To(int64(65532)),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers: []corev1.Container{{
						Name: "server", Image: "ghcr.io/ringmaster-io/ringmaster-example-server:" + imageTag, ImagePullPolicy: corev1.PullNever,
						Args:  []string{"-dir", "/var/run/ringmaster", "-listen", ":8443", "-status-listen", ":9090"},
						Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: 8443}, {Name: "agent-metrics", ContainerPort: 9090}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
							Path: "/healthz", Port: intstr.FromString("agent-metrics"), Scheme: corev1.URISchemeHTTP,
						}}, PeriodSeconds: 2},
						VolumeMounts: []corev1.VolumeMount{{Name: "keys", MountPath: "/var/run/ringmaster", ReadOnly: true}},
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
					}},
					Volumes: []corev1.Volume{{Name: "keys", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
						DefaultMode: ptr.To(int32(0o440)),
						Sources: []corev1.VolumeProjection{
							{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "web-ticket-keys"}}},
							{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "web-tls"}}},
						},
					}}}},
				},
			},
		},
	}
}

// podNetns is the network namespace of a pod, found through a process of
// it (the kubelet's cgroupfs driver names a pod's cgroup pod<uid>): where a
// connection from that pod starts.
func podNetns(uid types.UID) string {
	GinkgoHelper()
	cgroups, err := filepath.Glob("/proc/[0-9]*/cgroup")
	Expect(err).NotTo(HaveOccurred())
	for _, c := range cgroups {
		data, err := os.ReadFile(c)
		if err == nil && (strings.Contains(string(data), "pod"+string(uid)) || strings.Contains(string(data), "pod"+strings.ReplaceAll(string(uid), "-", "_"))) {
			return filepath.Join(filepath.Dir(c), "ns", "net")
		}
	}
	Fail("no process of pod " + string(uid))
	return ""
}
