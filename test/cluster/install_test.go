//go:build cluster

package cluster_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

const (
	shopNS     = "shop"
	ringName   = "web"
	keysSecret = "web-ticket-keys"
	tlsSecret  = "fleet-tls"
	servers    = 3
	rotations  = 3
	// activationDelay stays well above the kubelet's refresh of a Secret
	// volume, 6-15 s with the cluster's syncFrequency of 10 s: every pod
	// then holds a key before any pod encrypts with it.
	activationDelay = 45 * time.Second

	// The load: each client reconnects about 10 times a second; the
	// connection cap only bounds a run that would hang.
	clients        = 8
	connsPerClient = 100000
	interval       = 100 * time.Millisecond
)

var _ = Describe("ringmaster installed with its Helm chart", Ordered, func() {
	BeforeAll(func() {
		DeferCleanup(func(ctx SpecContext) {
			if CurrentSpecReport().Failed() {
				dumpCluster(ctx)
			}
		})
	})

	It("installs from the registry as users do: helm install oci:// by digest, the node pulls; the operator's pods become Ready, one holds the lease, and helm test passes", func(ctx SpecContext) {
		installFromRegistry(ctx)

		pods := operatorPods(ctx)
		Expect(pods).To(HaveLen(2))
		want := "ghcr.io/ringmaster-io/ringmaster@" + operatorDigest
		for _, p := range pods {
			Expect(podReady(p)).To(BeTrue(), "pod %s is not Ready", p.Name)
			Expect(p.Spec.Containers[0].Image).To(Equal(want), "the chart pins the image by digest")
			Expect(p.Spec.Containers[0].ImagePullPolicy).NotTo(Equal(corev1.PullNever))
			// The node pulled the index and took its own platform's image.
			Expect(p.Status.ContainerStatuses[0].ImageID).To(HaveSuffix("@"+operatorDigest), "pod %s runs %s", p.Name, p.Status.ContainerStatuses[0].ImageID)
			Expect(p.Spec.ServiceAccountName).To(Equal(release))
			c := p.Spec.Containers[0]
			Expect(c.SecurityContext.ReadOnlyRootFilesystem).To(Equal(ptr.To(true)))
			Expect(c.SecurityContext.Capabilities.Drop).To(ConsistOf(corev1.Capability("ALL")))
		}
		holder := waitLeader(ctx, "")
		Expect(slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.Name == holder })).To(BeTrue(),
			"the lease holder %s is none of the operator's pods", holder)
		GinkgoWriter.Printf("Leader: %s\n", holder)

		out, err := helm(ctx, "test", release, "--namespace", releaseNS, "--timeout", "3m")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(MatchRegexp(`TEST SUITE:\s+ringmaster-test[\s\S]*Phase:\s+Succeeded`))
	}, NodeTimeout(5*time.Minute))

	It("rotates a fleet's ring through the kubelet: replicas resume each other's sessions through rotations and the loss of the leader", func(ctx SpecContext) {
		pki, err := fleet.NewPKI(fleet.ECDSAP256)
		Expect(err).NotTo(HaveOccurred())
		Expect(cl.CreateNamespace(ctx, shopNS)).To(Succeed())
		Expect(cl.Client.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: shopNS, Name: tlsSecret},
			Type:       corev1.SecretTypeTLS,
			Data:       map[string][]byte{"tls.crt": pki.CertPEM, "tls.key": pki.KeyPEM},
		})).To(Succeed())

		// Watch the ring's Secrets and the lease from before the ring exists.
		rec := startRecorder(ctx)
		defer rec.stop()

		Expect(cl.Client.Create(ctx, &v1alpha1.TicketKeyRing{
			ObjectMeta: metav1.ObjectMeta{Namespace: shopNS, Name: ringName},
			Spec: v1alpha1.TicketKeyRingSpec{
				RotationInterval: metav1.Duration{Duration: time.Hour},
				RetainedKeys:     3,
				ActivationDelay:  metav1.Duration{Duration: activationDelay},
				Distribution:     v1alpha1.Distribution{SecretName: keysSecret, Formats: []v1alpha1.KeyFormat{"go"}},
			},
		})).To(Succeed())
		ring, err := cl.WaitRing(ctx, shopNS, ringName, "Ready", fleet.Ready)
		Expect(err).NotTo(HaveOccurred())

		Expect(cl.Client.Create(ctx, serverDeployment())).To(Succeed())
		Expect(cl.Client.Create(ctx, serverService())).To(Succeed())
		addrs := waitServers(ctx)
		svc := &corev1.Service{}
		Expect(cl.Client.Get(ctx, key(shopNS, "server"), svc)).To(Succeed())
		lb := net.JoinHostPort(svc.Spec.ClusterIP, "443")

		health := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			DialContext:       dialer.DialContext,
			TLSClientConfig:   &tls.Config{RootCAs: pki.Roots, ServerName: fleet.ServerName},
			DisableKeepAlives: true,
		}}
		watcher := startHealthWatch(ctx, health, addrs)
		defer watcher.stop()
		waitServing(ctx, watcher, addrs, fleet.ActiveKey(ring), ring.Status.Epoch)

		// kube-proxy programs the Service's rules a moment after its
		// endpoints are ready; until then a connection is refused. The
		// load starts once the Service reaches every pod.
		waitService(ctx, lb, pki, addrs)

		load := fleet.StartLoad(ctx, fleet.LoadConfig{
			Addr: lb, Roots: pki.Roots, Version: tls.VersionTLS13, Dial: dialer.DialContext,
			Clients: clients, ConnsPerClient: connsPerClient, Interval: interval,
		})
		defer load.Stop()

		keys := []string{fleet.ActiveKey(ring)}
		var deleted, successor string
		for i := range rotations {
			if i == 1 {
				By("deleting the leader's pod mid-run")
				deleted = leaseHolder(ctx)
				Expect(cl.Client.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: releaseNS, Name: deleted}})).To(Succeed())
				successor = waitLeader(ctx, deleted)
				GinkgoWriter.Printf("Leader %s deleted; %s leads\n", deleted, successor)
			}
			rot, err := cl.Rotate(ctx, shopNS, ringName)
			Expect(err).NotTo(HaveOccurred())
			GinkgoWriter.Printf("Rotation %d: %s -> %s (epoch %d), %s staged\n", i+1, rot.From, rot.To, rot.Epoch, rot.Staged)
			keys = append(keys, rot.To)
			waitServing(ctx, watcher, addrs, rot.To, rot.Epoch)
		}
		// Some more load under the last key, then stop.
		time.Sleep(5 * time.Second)
		res := load.Stop()

		sum := res.Summary()
		GinkgoWriter.Printf("Fleet of %d pods behind Service %s: %d connections, %d reconnects (%d to another pod), %d resumed (%.2f%%), %d full, %d failed; active keys seen %v\n",
			servers, lb, sum.Conns, sum.Reconnects, sum.Moved, sum.Resumed, 100*sum.ResumptionRate(), sum.Full, sum.Failures, res.ActiveKeys())
		Expect(sum.Failures).To(BeZero(), "failed connections: %v", res.Errors())
		Expect(sum.Reconnects).To(BeNumerically(">=", 1000))
		// kube-proxy spreads connections at random: most reconnects reach
		// another pod than the one that issued the client's ticket.
		Expect(sum.Moved).To(BeNumerically(">=", sum.Reconnects/2))
		Expect(sum.ResumptionRate()).To(BeNumerically(">=", 0.995), "%d of %d reconnects paid a full handshake", sum.Full, sum.Reconnects)
		Expect(float64(sum.MovedResumed) / float64(sum.Moved)).To(BeNumerically(">=", 0.995))
		Expect(res.ActiveKeys()).To(ContainElements(keys), "the load ran under every key")
		for _, a := range addrs {
			Expect(res.ByBackend()[a].Resumed).To(BeNumerically(">", 0), "pod %s resumed nothing", a)
		}

		By("checking that losing the leader lost nothing")
		rec.stop()
		Expect(successor).NotTo(Equal(deleted))
		Expect(rec.holdersAfter(deleted)).To(Equal([]string{successor}), "one new leader, and only one")
		// A rotation publishes two epochs (the promotion, then the next
		// staged key); every epoch once, none skipped, none twice.
		final, err := cl.GetRing(ctx, shopNS, ringName)
		Expect(err).NotTo(HaveOccurred())
		epochs := rec.epochs()
		Expect(epochs).NotTo(BeEmpty())
		Expect(epochs[0]).To(Equal(ring.Status.Epoch), "snapshots %v", epochs)
		Expect(epochs[len(epochs)-1]).To(Equal(final.Status.Epoch), "snapshots %v", epochs)
		for i, e := range epochs {
			Expect(e).To(Equal(epochs[0]+int64(i)), "snapshots %v", epochs)
		}
		GinkgoWriter.Printf("Epochs %d to %d, each published once, as one snapshot Secret\n", epochs[0], epochs[len(epochs)-1])
		Expect(rec.twice()).To(BeEmpty(), "an epoch published twice, with different keys or as two snapshot Secrets")

		lags := watcher.lags(rec.published())
		GinkgoWriter.Printf("Projection refresh lag in real pods (Secret written -> agent serving it), %d samples: %s\n", len(lags), describeLags(lags))
		// Each pod served at least one new epoch per rotation.
		Expect(len(lags)).To(BeNumerically(">=", rotations*servers))
	}, NodeTimeout(10*time.Minute))

	It("guards ringmaster's Secrets: a tenant's forged snapshot, forged projection and ring-labelled Secret are refused, naming the policy; the operator still rotates, and garbage collection and namespace deletion still remove them",
		guardsRingmastersSecrets, NodeTimeout(5*time.Minute))

	It("guards pods: the operator nudged the fleet's pods through the pods' admission guard, and may change nothing else of a pod",
		guardsPods, NodeTimeout(3*time.Minute))

	It("destroys what an orphan delete leaves, with the real garbage collector, when its first key expires; a ring created again under the name takes its place",
		orphansDestroyed, NodeTimeout(5*time.Minute))

	It("keeps no plaintext copy of any key in etcd's files: Secrets are encrypted at rest", func(ctx SpecContext) {
		minted, destroyed := keysAtRest(ctx)
		GinkgoWriter.Printf("etcd's files hold none of the %d keys minted (%d destroyed) in plaintext\n", minted, destroyed)
	}, NodeTimeout(3*time.Minute))

	It("runs config/samples as shipped: nginx and HAProxy with the sidecar, behind their Services, resume sessions under the sample certificate",
		samplesAsShipped, NodeTimeout(4*time.Minute))

	It("governs pod certificates: the kubelet's requests, issued by the spec's own signer, audited by a CertificatePolicy compliant and violating; in Enforce a forbidden pod is refused, naming the policy and the rule",
		podCertificatesGoverned, NodeTimeout(6*time.Minute))

	It("admits only the operator's pods to the agents' status port under config/samples' NetworkPolicy, enforced by kube-router; the fleet still confirms a rotation",
		Label("netpol"), statusPortGuarded, NodeTimeout(6*time.Minute))

	// Faults during rotation (faults_test.go), each under load on a fleet
	// of its own; make test runs those that fit its time, make test-faults
	// the others.
	It("keeps a rotation's invariants when the leader is SIGKILLed between staging and activation", Label(faultsLabel), leaderKilledWhileStaged, NodeTimeout(5*time.Minute))
	It("keeps a rotation's invariants when the leader is SIGKILLed between minting and publishing", Label(faultsLabel), leaderKilledBeforePublish, NodeTimeout(5*time.Minute))
	It("keeps a rotation's invariants when kube-apiserver stops for 30 s across a rotation", Label(faultsLabel), apiServerStopped, NodeTimeout(6*time.Minute))
	It("keeps a rotation's invariants when the kubelet restarts while a rotation is delivered", Label(faultsLabel), kubeletRestarted, NodeTimeout(5*time.Minute))
	It("keeps a rotation's invariants when containerd restarts and the fleet's containers with it", Label(faultsLabel, faultsLong), containerdRestarted, NodeTimeout(6*time.Minute))
	It("keeps a rotation's invariants when the key source (Vault) is unreachable across a due rotation", Label(faultsLabel, faultsLong), vaultUnreachable, NodeTimeout(7*time.Minute))
	It("keeps a rotation's invariants through helm upgrade to a new image tag while a key is staged", Label(faultsLabel, faultsLong), helmUpgradeWhileStaged, NodeTimeout(6*time.Minute))
	It("keeps a rotation's invariants through a node restart on the same etcd data", Label(faultsLabel, faultsLong), nodeRestarted, NodeTimeout(8*time.Minute))

	It("upgrades to a changed value, and the new pods take over", func(ctx SpecContext) {
		_, err := helm(ctx, "upgrade", release, chartRef, "--version", chartVersion, "--plain-http", "--namespace", releaseNS, "--reuse-values",
			"--set", "logLevel=debug", "--wait", "--timeout", "3m")
		Expect(err).NotTo(HaveOccurred())
		dep := &appsv1.Deployment{}
		Expect(cl.Client.Get(ctx, key(releaseNS, release), dep)).To(Succeed())
		Expect(dep.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--zap-log-level=debug"))
		Eventually(func(g Gomega) {
			g.Expect(cl.Client.Get(ctx, key(releaseNS, release), dep)).To(Succeed())
			g.Expect(dep.Status.UpdatedReplicas).To(Equal(int32(2)))
			g.Expect(dep.Status.ReadyReplicas).To(Equal(int32(2)))
			g.Expect(dep.Status.Replicas).To(Equal(int32(2)))
		}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
		pods := operatorPods(ctx)
		holder := waitLeaderAmong(ctx, pods)
		GinkgoWriter.Printf("After the upgrade %s leads\n", holder)

		By("rotating once more under the new leader")
		rot, err := cl.Rotate(ctx, shopNS, ringName)
		Expect(err).NotTo(HaveOccurred())
		Expect(rot.To).NotTo(BeEmpty())
	}, NodeTimeout(5*time.Minute))

	It("uninstalls, leaving nothing of the release but the CRDs and what they hold", func(ctx SpecContext) {
		_, err := helm(ctx, "uninstall", release, "--namespace", releaseNS, "--wait", "--timeout", "2m")
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			g.Expect(releaseObjects(ctx)).To(BeEmpty())
		}).WithContext(ctx).WithTimeout(90 * time.Second).Should(Succeed())
		out, err := helm(ctx, "list", "--all-namespaces", "--all", "--short")
		Expect(err).NotTo(HaveOccurred())
		Expect(strings.TrimSpace(out)).To(BeEmpty())
		// crds.keep: the CRDs stay, and with them the rings.
		served, err := cl.Clientset.Discovery().ServerResourcesForGroupVersion("ringmaster.io/v1alpha1")
		Expect(err).NotTo(HaveOccurred())
		var kinds []string
		for _, r := range served.APIResources {
			kinds = append(kinds, r.Name)
		}
		Expect(kinds).To(ContainElements("ticketkeyrings", "certificatepolicies"))
		_, err = cl.GetRing(ctx, shopNS, ringName)
		Expect(err).NotTo(HaveOccurred())
	}, NodeTimeout(4*time.Minute))
})

// installFromRegistry installs the release the way users do: the chart
// from the registry as an OCI artifact at its version, the operator's
// image pinned by its index's digest (the chart's default repository,
// ghcr.io/ringmaster-io/ringmaster, which the node's containerd resolves
// through the cluster's registry), pulled by the node.
func installFromRegistry(ctx context.Context) {
	GinkgoHelper()
	_, err := helm(ctx, "install", release, chartRef, "--version", chartVersion, "--plain-http",
		"--namespace", releaseNS, "--create-namespace",
		"--set", "image.digest="+operatorDigest, "--wait", "--timeout", "3m")
	Expect(err).NotTo(HaveOccurred())
}

// serverDeployment is the fleet: examples/server pods mounting the ring's
// projection Secret and the TLS Secret through one projected volume, with
// no subPath, so that the kubelet swaps both atomically.
func serverDeployment() *appsv1.Deployment {
	labels := map[string]string{"app": "server"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: shopNS, Name: "server"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(servers)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot: ptr.To(true), FSGroup: ptr.To(int64(65532)),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name: "server",
						// Imported from make images' tar file by
						// hack/cluster/load.sh, the air-gapped path.
						Image:           "ghcr.io/ringmaster-io/ringmaster-example-server:" + imageTag,
						ImagePullPolicy: corev1.PullNever,
						// The status port is apart from the TLS port, which
						// serves the greeting alone (naming the key, for the
						// load's attribution).
						Args:  []string{"-dir", "/var/run/ringmaster", "-listen", ":8443", "-status-listen", ":9090", "-greeting-names-keys"},
						Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: 8443}, {Name: "status", ContainerPort: 9090}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
							Path: "/healthz", Port: intstr.FromString("status"), Scheme: corev1.URISchemeHTTP,
						}}, PeriodSeconds: 2},
						VolumeMounts: []corev1.VolumeMount{{Name: "tls", MountPath: "/var/run/ringmaster", ReadOnly: true}},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
					Volumes: []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
						DefaultMode: ptr.To(int32(0o440)),
						Sources: []corev1.VolumeProjection{
							{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: keysSecret}}},
							{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: tlsSecret}}},
						},
					}}}},
				},
			},
		},
	}
}

func serverService() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: shopNS, Name: "server"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "server"},
			Ports:    []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromString("https")}},
		},
	}
}

// waitServers waits until every server pod is Ready and returns their
// addresses, pod IP:8443.
func waitServers(ctx context.Context) []string {
	var addrs []string
	Eventually(func(g Gomega) {
		pods := &corev1.PodList{}
		g.Expect(cl.Client.List(ctx, pods, inNamespace(shopNS), matchingLabels(map[string]string{"app": "server"}))).To(Succeed())
		g.Expect(pods.Items).To(HaveLen(servers))
		addrs = nil
		for _, p := range pods.Items {
			g.Expect(podReady(p)).To(BeTrue(), "pod %s", p.Name)
			addrs = append(addrs, net.JoinHostPort(p.Status.PodIP, "8443"))
		}
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
	slices.Sort(addrs)
	return addrs
}

// waitService waits until connections to the Service at lb, from inside
// the cluster's network, have reached every pod.
func waitService(ctx context.Context, lb string, pki *fleet.PKI, addrs []string) {
	seen := map[string]bool{}
	tc := &tls.Config{RootCAs: pki.Roots, ServerName: fleet.ServerName, MinVersion: tls.VersionTLS13}
	Eventually(func(g Gomega) {
		s := fleet.ConnectVia(ctx, dialer.DialContext, lb, tc, 5*time.Second)
		g.Expect(s.Err).To(BeEmpty())
		seen[s.Backend] = true
		for _, a := range addrs {
			g.Expect(seen).To(HaveKey(a), "the Service has not reached pod %s yet", a)
		}
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(50 * time.Millisecond).Should(Succeed())
}

// waitServing waits until every server serves key id at epoch or later.
func waitServing(ctx context.Context, w *healthWatch, addrs []string, id string, epoch int64) {
	Eventually(func(g Gomega) {
		for _, a := range addrs {
			st := w.last(a)
			g.Expect(st.ActiveKeyID).To(Equal(id), "pod %s", a)
			g.Expect(st.Epoch).To(BeNumerically(">=", epoch), "pod %s", a)
		}
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
}

// operatorPods returns the operator's running pods.
func operatorPods(ctx context.Context) []corev1.Pod {
	pods := &corev1.PodList{}
	Expect(cl.Client.List(ctx, pods, inNamespace(releaseNS), matchingLabels(map[string]string{
		"app.kubernetes.io/instance": release, "app.kubernetes.io/component": "operator",
	}))).To(Succeed())
	return slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
}

// leaseHolder returns the pod holding the leader election lease, or "".
func leaseHolder(ctx context.Context) string {
	l := &coordinationv1.Lease{}
	if err := cl.Client.Get(ctx, key(releaseNS, leaseName), l); err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	pod, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
	return pod
}

// waitLeader waits until a pod other than not holds the lease, and returns
// it.
func waitLeader(ctx context.Context, not string) string {
	var holder string
	Eventually(func() string {
		holder = leaseHolder(ctx)
		if holder == not {
			return ""
		}
		return holder
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).ShouldNot(BeEmpty())
	return holder
}

// waitLeaderAmong waits until one of pods holds the lease.
func waitLeaderAmong(ctx context.Context, pods []corev1.Pod) string {
	var holder string
	Eventually(func() bool {
		holder = leaseHolder(ctx)
		return slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.Name == holder })
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(BeTrue())
	return holder
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// releaseObjects lists what is left of the release: every object of the
// chart's kinds labelled with its instance, in its namespace or the
// cluster's.
func releaseObjects(ctx context.Context) []string {
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release}
	cs := cl.Clientset
	var left []string
	add := func(kind string, n int, err error, names func(int) string) {
		Expect(err).NotTo(HaveOccurred(), kind)
		for i := range n {
			left = append(left, kind+"/"+names(i))
		}
	}
	d, err := cs.AppsV1().Deployments(releaseNS).List(ctx, sel)
	add("deployment", len(d.Items), err, func(i int) string { return d.Items[i].Name })
	rs, err := cs.AppsV1().ReplicaSets(releaseNS).List(ctx, sel)
	add("replicaset", len(rs.Items), err, func(i int) string { return rs.Items[i].Name })
	p, err := cs.CoreV1().Pods(releaseNS).List(ctx, sel)
	add("pod", len(p.Items), err, func(i int) string { return p.Items[i].Name })
	s, err := cs.CoreV1().Services(releaseNS).List(ctx, sel)
	add("service", len(s.Items), err, func(i int) string { return s.Items[i].Name })
	sa, err := cs.CoreV1().ServiceAccounts(releaseNS).List(ctx, sel)
	add("serviceaccount", len(sa.Items), err, func(i int) string { return sa.Items[i].Name })
	r, err := cs.RbacV1().Roles(releaseNS).List(ctx, sel)
	add("role", len(r.Items), err, func(i int) string { return r.Items[i].Name })
	rb, err := cs.RbacV1().RoleBindings(releaseNS).List(ctx, sel)
	add("rolebinding", len(rb.Items), err, func(i int) string { return rb.Items[i].Name })
	cr, err := cs.RbacV1().ClusterRoles().List(ctx, sel)
	add("clusterrole", len(cr.Items), err, func(i int) string { return cr.Items[i].Name })
	crb, err := cs.RbacV1().ClusterRoleBindings().List(ctx, sel)
	add("clusterrolebinding", len(crb.Items), err, func(i int) string { return crb.Items[i].Name })
	pdb, err := cs.PolicyV1().PodDisruptionBudgets(releaseNS).List(ctx, sel)
	add("poddisruptionbudget", len(pdb.Items), err, func(i int) string { return pdb.Items[i].Name })
	// Helm's own record of the release.
	hs, err := cs.CoreV1().Secrets(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=" + release})
	add("secret", len(hs.Items), err, func(i int) string { return hs.Items[i].Name })
	return left
}

// recorder watches, from before the ring exists until stopped, what
// publishing its epochs and electing the leader leave in the API: every
// snapshot Secret created, every version of the projection Secret, and
// every lease holder.
type recorder struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	snapshots map[int64][]string // epoch -> snapshot Secret UIDs
	keysAt    map[int64][]string // epoch -> key ids in the projection
	conflicts []string
	firstSeen map[int64]time.Time // epoch -> when the projection first held it
	holders   []string            // lease holders (pods), in order, without repeats
}

func startRecorder(ctx context.Context) *recorder {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &recorder{cancel: cancel, snapshots: map[int64][]string{}, keysAt: map[int64][]string{}, firstSeen: map[int64]time.Time{}}
	cs := cl.Clientset
	secrets, err := cs.CoreV1().Secrets(shopNS).Watch(ctx, metav1.ListOptions{LabelSelector: v1alpha1.RingLabel + "=" + ringName})
	Expect(err).NotTo(HaveOccurred())
	leases, err := cs.CoordinationV1().Leases(releaseNS).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + leaseName})
	Expect(err).NotTo(HaveOccurred())
	if h := leaseHolder(ctx); h != "" {
		r.holders = append(r.holders, h)
	}
	r.wg.Go(func() {
		defer secrets.Stop()
		for ev := range secrets.ResultChan() {
			if s, ok := ev.Object.(*corev1.Secret); ok && ev.Type != watch.Deleted {
				r.secret(s, time.Now())
			}
		}
	})
	r.wg.Go(func() {
		defer leases.Stop()
		for ev := range leases.ResultChan() {
			if l, ok := ev.Object.(*coordinationv1.Lease); ok && l.Spec.HolderIdentity != nil {
				pod, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
				r.mu.Lock()
				if pod != "" && (len(r.holders) == 0 || r.holders[len(r.holders)-1] != pod) {
					r.holders = append(r.holders, pod)
				}
				r.mu.Unlock()
			}
		}
	})
	return r
}

func (r *recorder) secret(s *corev1.Secret, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch s.Labels[v1alpha1.ComponentLabel] {
	case v1alpha1.ComponentSnapshot:
		e, err := strconv.ParseInt(s.Labels[v1alpha1.EpochLabel], 10, 64)
		if err != nil {
			r.conflicts = append(r.conflicts, fmt.Sprintf("snapshot %s: epoch label %q", s.Name, s.Labels[v1alpha1.EpochLabel]))
			return
		}
		if !slices.Contains(r.snapshots[e], string(s.UID)) {
			r.snapshots[e] = append(r.snapshots[e], string(s.UID))
			if len(r.snapshots[e]) > 1 {
				r.conflicts = append(r.conflicts, fmt.Sprintf("epoch %d: a second snapshot Secret %s", e, s.Name))
			}
		}
	case v1alpha1.ComponentProjection:
		ring, err := keyring.Decode(s.Data[keyring.FileName])
		if err != nil {
			r.conflicts = append(r.conflicts, fmt.Sprintf("projection %s: %v", s.Name, err))
			return
		}
		ids := make([]string, len(ring.Keys))
		for i, k := range ring.Keys {
			ids[i] = k.ID
		}
		if prev, ok := r.keysAt[ring.Epoch]; ok && !slices.Equal(prev, ids) {
			r.conflicts = append(r.conflicts, fmt.Sprintf("epoch %d published with keys %v, then %v", ring.Epoch, prev, ids))
		}
		if _, ok := r.firstSeen[ring.Epoch]; !ok {
			r.firstSeen[ring.Epoch] = at
			r.keysAt[ring.Epoch] = ids
		}
	}
}

func (r *recorder) stop() {
	r.cancel()
	r.wg.Wait()
}

// epochs returns the epochs of the snapshot Secrets created, in order.
func (r *recorder) epochs() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int64
	for e := range r.snapshots {
		out = append(out, e)
	}
	slices.Sort(out)
	return out
}

func (r *recorder) twice() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.conflicts)
}

// published returns when the projection Secret first held each epoch.
func (r *recorder) published() map[int64]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[int64]time.Time, len(r.firstSeen))
	for e, t := range r.firstSeen {
		out[e] = t
	}
	return out
}

// holdersAfter returns the lease holders that followed pod.
func (r *recorder) holdersAfter(pod string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := slices.Index(r.holders, pod)
	if i < 0 {
		return nil
	}
	return slices.Clone(r.holders[i+1:])
}

// statusAddr is the status port of the server pod at addr, pod IP:8443.
func statusAddr(addr string) string {
	host, _, _ := net.SplitHostPort(addr)
	return net.JoinHostPort(host, "9090")
}

// healthWatch polls every server pod's /healthz, from inside the cluster's
// network, and records when each first served each epoch.
type healthWatch struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	seen  map[string]map[int64]time.Time // addr -> epoch -> first seen
	lastS map[string]agent.Status
}

func startHealthWatch(ctx context.Context, c *http.Client, addrs []string) *healthWatch {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w := &healthWatch{cancel: cancel, seen: map[string]map[int64]time.Time{}, lastS: map[string]agent.Status{}}
	for _, a := range addrs {
		w.seen[a] = map[int64]time.Time{}
		w.wg.Go(func() {
			for ctx.Err() == nil {
				st, err := fleet.ReadHealth(ctx, c, statusAddr(a))
				now := time.Now()
				if err == nil {
					w.mu.Lock()
					w.lastS[a] = st
					if _, ok := w.seen[a][st.Epoch]; !ok {
						w.seen[a][st.Epoch] = now
					}
					w.mu.Unlock()
				}
				select {
				case <-ctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
			}
		})
	}
	return w
}

func (w *healthWatch) last(addr string) agent.Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastS[addr]
}

func (w *healthWatch) stop() {
	w.cancel()
	w.wg.Wait()
}

// lags returns, for every pod and every epoch after the first, how long
// after the projection Secret held it the pod served it.
func (w *healthWatch) lags(published map[int64]time.Time) []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	first := int64(-1)
	for e := range published {
		if first < 0 || e < first {
			first = e
		}
	}
	var out []time.Duration
	for _, byEpoch := range w.seen {
		for e, at := range byEpoch {
			if p, ok := published[e]; ok && e != first {
				out = append(out, at.Sub(p))
			}
		}
	}
	slices.Sort(out)
	return out
}

func describeLags(l []time.Duration) string {
	if len(l) == 0 {
		return "none"
	}
	return fmt.Sprintf("min %s, median %s, max %s", l[0].Round(100*time.Millisecond), l[len(l)/2].Round(100*time.Millisecond), l[len(l)-1].Round(100*time.Millisecond))
}

// dumpCluster prints what helps to understand a failure: pods, events, and
// the ends of the operator's logs.
func dumpCluster(ctx context.Context) {
	for _, args := range [][]string{
		{"get", "pods", "-A", "-o", "wide"},
		{"get", "events", "-A", "--sort-by", ".lastTimestamp"},
		{"get", "tkr", "-A", "-o", "yaml"},
		{"logs", "-n", releaseNS, "-l", "app.kubernetes.io/component=operator", "--tail", "60", "--prefix"},
	} {
		out, err := run(ctx, cl.Kubectl, args...)
		GinkgoWriter.Printf("--- kubectl %s (%v):\n%s\n", strings.Join(args, " "), err, out)
	}
}

func key(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}

func inNamespace(ns string) client.InNamespace { return client.InNamespace(ns) }

func matchingLabels(l map[string]string) client.MatchingLabels { return client.MatchingLabels(l) }
