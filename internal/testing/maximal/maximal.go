// Package maximal makes objects as large as their authors can make them, of
// every kind the operator's caches hold: a tenant's rings, pods and Secrets,
// an administrator's key sources, zones and policies. Each carries
// metadata to the API server's limits (about 1,400 labels, a 250 KB
// annotation, finalizers) with values distinct per object, so that no cache
// can share them, and the largest spec its kind's validation admits (label
// selectors of a hundred KB). The API server stores every one of them: the
// controller suite creates them, and the shape package's tests decode them
// as an informer would.
package maximal

import (
	"fmt"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
)

// The sizes of what Metadata and Selector write.
const (
	// Labels on each object: with 24-byte keys and 63-byte values, about
	// 120 KB, and as much again in the managed fields the API server
	// writes for them.
	Labels = 1400
	// AnnotationBytes is one annotation's value: the API server takes
	// 256 KiB of annotations in all.
	AnnotationBytes = 250 << 10
	// Finalizers on each object that may carry them.
	Finalizers = 64
	// SelectorLabels is the matchLabels of each selector of a spec, and
	// as many values in one matchExpressions entry: about 100 KB each.
	SelectorLabels = 1000
)

// Finalizer is the prefix of the finalizers Metadata adds: a test removes
// them before it deletes the object.
const Finalizer = "example.com/hold-"

// Metadata gives o the largest metadata its author can write, distinct by
// seed: Labels labels, one annotation of AnnotationBytes, and, with
// finalizers, Finalizers finalizers.
func Metadata(o metav1.Object, seed string, finalizers bool) {
	labels := o.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	for i := range Labels {
		labels[fmt.Sprintf("tenant.example/l-%05d", i)] = value(seed, i, 63)
	}
	o.SetLabels(labels)
	ann := o.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann["tenant.example/padding"] = value(seed, 0, AnnotationBytes)
	o.SetAnnotations(ann)
	if finalizers {
		f := o.GetFinalizers()
		for i := range Finalizers {
			f = append(f, fmt.Sprintf("%s%s-%03d", Finalizer, seed, i))
		}
		o.SetFinalizers(f)
	}
}

// value is n bytes distinct by seed and i, valid as a label value when n is
// 63 or less.
func value(seed string, i, n int) string {
	head := fmt.Sprintf("%s-%d-", seed, i)
	if len(head) >= n {
		return head[:n-1] + "x"
	}
	return head + strings.Repeat("v", n-len(head)-1) + "x"
}

// Selector is a label selector of about SelectorLabels entries of 87
// bytes and as many values, distinct by seed, that selects nothing that
// exists.
func Selector(seed string) *metav1.LabelSelector {
	s := &metav1.LabelSelector{MatchLabels: map[string]string{}}
	values := make([]string, SelectorLabels)
	for i := range SelectorLabels {
		s.MatchLabels[fmt.Sprintf("selector.example/l-%05d", i)] = value(seed, i, 63)
		values[i] = value(seed, i+SelectorLabels, 63)
	}
	s.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "selector.example/e", Operator: metav1.LabelSelectorOpIn, Values: values}}
	return s
}

// Objects are one object of each kind the operator's caches hold, two
// Secrets (one of ringmaster's type that no ring controls, one
// kubernetes.io/tls of certPEM and keyPEM), named name, the namespaced
// ones in namespace ns, distinct by seed, each with maximal metadata
// (with finalizers, but the Namespace) and spec. The pod mounts Secret
// secret. The record of a DNS name's owner is in namespace home, the
// operator's.
func Objects(ns, home, name, seed string, finalizers bool, secret string, certPEM, keyPEM []byte) []client.Object {
	out := []client.Object{DNSRecord(home, name, seed),
		TicketKeyRing(ns, name, seed), ClusterTicketKeyRing(name, seed), ECHKeyRing(ns, name, seed),
		ClusterKeySource(name, seed), ClusterDNSZone(name, seed), CertificatePolicy(name, seed), FleetRequest(name, seed),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, Pod(ns, name, seed, secret),
		RingSecret(ns, name, seed), TLSSecret(ns, name+"-tls", seed, certPEM, keyPEM), Certificate(ns, name, seed),
		PodCertificateRequest(ns, name, seed), ClusterTrustBundle(name, seed),
	}
	for _, o := range out {
		_, isNamespace := o.(*corev1.Namespace)
		Metadata(o, seed, finalizers && !isNamespace)
	}
	return out
}

// TicketKeyRing is a valid TicketKeyRing whose confirmation selectors are
// maximal.
func TicketKeyRing(ns, name, seed string) *v1alpha1.TicketKeyRing {
	return &v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: ringSpec(seed)}
}

// ClusterTicketKeyRing is a valid ClusterTicketKeyRing whose selectors are
// maximal.
func ClusterTicketKeyRing(name, seed string) *v1alpha1.ClusterTicketKeyRing {
	spec := ringSpec(seed)
	spec.Confirmation = confirmation(seed, true)
	return &v1alpha1.ClusterTicketKeyRing{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ClusterTicketKeyRingSpec{TicketKeyRingSpec: spec, NamespaceSelector: *Selector(seed + "-ns")}}
}

func ringSpec(seed string) v1alpha1.TicketKeyRingSpec {
	return v1alpha1.TicketKeyRingSpec{
		RotationInterval: metav1.Duration{Duration: time.Hour}, RetainedKeys: 3, ActivationDelay: metav1.Duration{Duration: 3 * time.Minute},
		Confirmation: confirmation(seed, false),
	}
}

// confirmation is a spec.confirmation of maximal selectors; voters only a
// cluster ring may have.
func confirmation(seed string, voters bool) *v1alpha1.Confirmation {
	c := &v1alpha1.Confirmation{PodSelector: *Selector(seed + "-pods"),
		Port: intstr.FromString("status"), Timeout: metav1.Duration{Duration: 10 * time.Minute}, OnTimeout: v1alpha1.ConfirmationWait}
	if voters {
		c.VoterNamespaceSelector = Selector(seed + "-voters")
	}
	return c
}

// ECHKeyRing is a valid ECHKeyRing, naming a zone that need not exist,
// whose confirmation selectors are maximal.
func ECHKeyRing(ns, name, seed string) *v1alpha1.ECHKeyRing {
	return &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1alpha1.ECHKeyRingSpec{
		PublicName:       "public.shop.example.com",
		RotationInterval: metav1.Duration{Duration: 24 * time.Hour}, DeliveryDelay: metav1.Duration{Duration: 5 * time.Minute},
		RetirementMargin: metav1.Duration{Duration: time.Hour}, RetainedConfigs: 1,
		Confirmation: *confirmation(seed, false),
		DNS:          v1alpha1.ECHDNS{ZoneRef: v1alpha1.DNSZoneReference{Name: "nowhere"}, Name: "www.shop.example.com", TTL: 300},
	}}
}

// ClusterKeySource is a valid ClusterKeySource whose selectors are maximal.
func ClusterKeySource(name, seed string) *v1alpha1.ClusterKeySource {
	return &v1alpha1.ClusterKeySource{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.ClusterKeySourceSpec{
		NamespaceSelector: Selector(seed + "-ns"),
		Vault: &v1alpha1.VaultSource{Address: "https://vault.example.com:8200",
			Auth:        v1alpha1.VaultAuth{Kubernetes: &v1alpha1.VaultKubernetesAuth{Role: "ringmaster", Audience: "vault"}},
			SharedRings: &v1alpha1.VaultSharedRings{Path: "ringmaster/prod", NamespaceSelector: Selector(seed + "-shared")}},
	}}
}

// ClusterDNSZone is a valid verify-only ClusterDNSZone whose selector is
// maximal.
func ClusterDNSZone(name, seed string) *v1alpha1.ClusterDNSZone {
	return &v1alpha1.ClusterDNSZone{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.ClusterDNSZoneSpec{
		Zone: "example.com", Servers: []string{"127.0.0.1:53"}, NamespaceSelector: Selector(seed + "-ns"), AllowedNames: []string{"*.example.com"},
	}}
}

// CertificatePolicy is a valid audit policy whose selectors are maximal.
func CertificatePolicy(name, seed string) *v1alpha1.CertificatePolicy {
	return &v1alpha1.CertificatePolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.CertificatePolicySpec{
		Action:   v1alpha1.ActionAudit,
		Selector: v1alpha1.CertificateSelector{NamespaceSelector: Selector(seed + "-ns"), LabelSelector: Selector(seed + "-labels")},
		Rules:    v1alpha1.CertificateRules{MaxValidity: &metav1.Duration{Duration: 2160 * time.Hour}},
	}}
}

// FleetRequest is a valid FleetRequest whose selectors are maximal.
func FleetRequest(name, seed string) *v1alpha1.FleetRequest {
	return &v1alpha1.FleetRequest{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.FleetRequestSpec{
		Action: v1alpha1.FleetRevoke, NamespaceSelector: Selector(seed + "-ns"), RingSelector: Selector(seed + "-rings"),
		Kinds: []v1alpha1.RingKind{v1alpha1.KindTicketKeyRing, v1alpha1.KindClusterTicketKeyRing}, KeySource: value(seed, 7, 253),
	}}
}

// DNSRecord is a Lease labelled as the record of a DNS name's owner
// (dnszone.Record), whose every field is as long as the API takes:
// only administrators write the operator's namespace, where it lives.
func DNSRecord(home, name, seed string) *coordinationv1.Lease {
	holder := value(seed, 0, 100<<10)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: name, Labels: map[string]string{v1alpha1.ComponentLabel: v1alpha1.ComponentDNSName},
			Annotations: map[string]string{v1alpha1.DNSNameAnnotation: value(seed, 1, 2000)}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}
}

// Pod is a pod of about 1 MiB (one env value), mounting secret.
func Pod(ns, name, seed, secret string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "server", Image: "examples/server",
				Env:          []corev1.EnvVar{{Name: "PADDING", Value: value(seed, 0, 600<<10)}},
				Ports:        []corev1.ContainerPort{{Name: "status", ContainerPort: 9090}},
				VolumeMounts: []corev1.VolumeMount{{Name: "keys", MountPath: "/var/run/ringmaster", ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "keys", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}}},
		},
	}
}

// RingSecret is a Secret of ringmaster's type no ring controls, with 600
// KiB of data: what a tenant may create where the admission guard is not
// installed.
func RingSecret(ns, name, seed string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: distribute.SecretType,
		Data: map[string][]byte{"ticketkeys.json": []byte(value(seed, 0, 600<<10))}}
}

// TLSSecret is a kubernetes.io/tls Secret of the given certificate and
// key, with 300 KiB of other data.
func TLSSecret(ns, name, seed string, certPEM, keyPEM []byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM, "padding": []byte(value(seed, 0, 300<<10))}}
}

// Certificate is a cert-manager Certificate of 8,000 DNS names.
func Certificate(ns, name, seed string) *cmapi.Certificate {
	names := make([]string, 8000)
	for i := range names {
		names[i] = fmt.Sprintf("h-%05d.%s.example.com", i, seed)
	}
	return &cmapi.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: cmapi.CertificateSpec{
		SecretName: name + "-tls", DNSNames: names, IssuerRef: cmmeta.IssuerReference{Name: "ca", Kind: "ClusterIssuer"},
	}}
}

// PodCertificateRequest is a valid PodCertificateRequest, as a kubelet
// makes one (an RSA 4096 key, the largest it makes), with user annotations
// to the API server's limit.
func PodCertificateRequest(ns, name, seed string) *certificatesv1.PodCertificateRequest {
	csr := must(testpki.CSR(must(testpki.NewKey(testpki.RSA4096))))
	return &certificatesv1.PodCertificateRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: certificatesv1.PodCertificateRequestSpec{
		SignerName: "example.com/" + strings.Repeat("s", 250), PodName: name, PodUID: types.UID("uid-" + seed), ServiceAccountName: name, ServiceAccountUID: types.UID("uid-sa-" + seed),
		NodeName: types.NodeName("node-" + seed), NodeUID: types.UID("uid-node-" + seed), MaxExpirationSeconds: ptrTo(int32(86400)), StubPKCS10Request: csr,
		UnverifiedUserAnnotations: map[string]string{"tenant.example/padding": value(seed, 1, 200<<10)},
	}}
}

// BundleCAs is how many CA certificates ClusterTrustBundle carries.
const BundleCAs = 200

// ClusterTrustBundle is a valid ClusterTrustBundle of BundleCAs distinct
// CA certificates.
func ClusterTrustBundle(name, seed string) *certificatesv1.ClusterTrustBundle {
	var bundle strings.Builder
	for i := range BundleCAs {
		ca := must(testpki.NewCA(fmt.Sprintf("%s CA %d", seed, i)))
		bundle.Write(ca.PEM)
	}
	return &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: bundle.String()}}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func ptrTo[T any](v T) *T { return &v }
