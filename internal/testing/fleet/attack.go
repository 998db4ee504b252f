package fleet

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
)

// What a tenant can make the operator read, made large: the objects of
// make bench-attack (hack/attack) and of test/e2e's memory spec.

// ProcPeakRSS returns the most a process's resident set has been since it
// started, in bytes (VmHWM of /proc/PID/status).
func ProcPeakRSS(pid int) (int64, error) { return procStatusBytes(pid, "VmHWM:") }

func procStatusBytes(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), field)
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/status %s %q: %w", pid, field, v, err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

// AttackLabels are the labels of the attack's pods, which its ring selects.
var AttackLabels = map[string]string{"app": "attack"}

// LargePod is a pod of about size bytes, most of them one env value of
// its own (Filler), as any tenant who may create pods can make: labelled
// AttackLabels, mounting
// Secret secret through a projected volume, declaring port "status" as
// port. Nothing schedules it on the harness's control plane: it stays
// Pending.
func LargePod(ns, name string, size int, secret string, port int32) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: AttackLabels},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "server", Image: "examples/server",
				Env:          []corev1.EnvVar{{Name: "PADDING", Value: Filler(ns+"/"+name, max(0, size-1024))}},
				Ports:        []corev1.ContainerPort{{Name: "status", ContainerPort: port}},
				VolumeMounts: []corev1.VolumeMount{{Name: "ticket-keys", MountPath: "/var/run/ringmaster", ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "ticket-keys", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: secret}}}},
			}}}},
		},
	}
}

// MarkReady gives a pod the status a kubelet would once it runs and is
// ready, at ip.
func MarkReady(ctx context.Context, c client.Client, pod *corev1.Pod, ip string) error {
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if err := c.Status().Update(ctx, pod); err != nil {
		return fmt.Errorf("mark pod %s/%s ready: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// RefusingPort returns a loopback port nothing listens on: a voter there
// refuses every connection, and the prober asks it every round.
func RefusingPort() (int32, error) {
	addr, err := FreePort()
	if err != nil {
		return 0, err
	}
	_, p, _ := strings.Cut(addr, ":")
	n, err := strconv.Atoi(p)
	return int32(n), err
}

// ProbedRing is a TicketKeyRing whose staged key its fleet must confirm: the
// pods labelled AttackLabels that mount its projection, asked on port
// "status". It waits for them up to 50 minutes (onTimeout Wait), so that a
// voter that never answers keeps it probing.
func ProbedRing(ns, name string) *v1alpha1.TicketKeyRing {
	return &v1alpha1.TicketKeyRing{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.TicketKeyRingSpec{
			RotationInterval: metav1.Duration{Duration: time.Hour},
			RetainedKeys:     1,
			ActivationDelay:  metav1.Duration{},
			Confirmation: &v1alpha1.Confirmation{
				PodSelector: metav1.LabelSelector{MatchLabels: AttackLabels},
				Port:        intstr.FromString("status"),
				Timeout:     metav1.Duration{Duration: 10 * time.Minute},
				OnTimeout:   v1alpha1.ConfirmationWait,
				MaxDelay:    &metav1.Duration{Duration: 50 * time.Minute},
			},
		},
	}
}

// RequestRotation sets a ring's rotate-now annotation: its staged key falls
// due at once (activationDelay 0), and a ring under confirmation probes its
// pods until they confirm it.
func RequestRotation(ctx context.Context, c client.Client, ring *v1alpha1.TicketKeyRing) error {
	patch := client.MergeFrom(ring.DeepCopy())
	if ring.Annotations == nil {
		ring.Annotations = map[string]string{}
	}
	ring.Annotations[v1alpha1.RotateRequestedAtAnnotation] = time.Now().UTC().Format(time.RFC3339)
	if err := c.Patch(ctx, ring, patch); err != nil {
		return fmt.Errorf("request a rotation of ring %s/%s: %w", ring.Namespace, ring.Name, err)
	}
	return nil
}

// LargeCertificateName is the first DNS name of every LargeCertificate,
// which a CertificatePolicy may require.
const LargeCertificateName = "host-00000.tenant-with-a-long-name.example.com"

// LargeCertificate issues a certificate with n DNS SANs (about 64 bytes of
// PEM each: 15,500 make about 1 MB), and returns tls.crt and tls.key. Its
// names but the first (LargeCertificateName) are under tenant's
// subdomain: certificates of different tenants share no other name. A
// tenant of 23 characters keeps the names as long as the first.
func LargeCertificate(tenant string, n int) (certPEM, keyPEM []byte, err error) {
	ca, err := testpki.NewCA("ringmaster attack CA")
	if err != nil {
		return nil, nil, err
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("host-%05d.%s.example.com", i, tenant)
	}
	names[0] = LargeCertificateName
	leaf, err := ca.Issue(testpki.Leaf{DNSNames: names, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(90 * 24 * time.Hour)})
	if err != nil {
		return nil, nil, err
	}
	return leaf.CertPEM, leaf.KeyPEM, nil
}

// TLSSecret is a kubernetes.io/tls Secret holding the certificate.
func TLSSecret(ns, name string, certPEM, keyPEM []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM},
	}
}
