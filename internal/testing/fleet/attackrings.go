package fleet

import (
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

// A tenant's own rings, made large (issue 45): what metadata any tenant
// may give an object it creates, as much as the API server takes, on
// TicketKeyRings, ECHKeyRings and (a cluster administrator's, or a
// compromised one's) ClusterTicketKeyRings that otherwise do as little as
// a ring can.

// Ring metadata of the attack. The API server bounds no label's count, only
// each key (a 253-byte prefix and a 63-byte name) and value (63 bytes), and
// annotations to 256 KiB in all; etcd refuses a request over 1.5 MiB. As
// measured on the harness's control plane (kube-apiserver 1.37), with one
// annotation of RingAnnotationSize bytes: up to 1,850 such labels are
// stored with their managed fields, which repeat every label key (1.57 MB
// stored); past that the API server, refused by etcd, stores the object
// without its managed fields, and takes up to 3,400 labels (1.56 MB); 3,600
// are refused (etcdserver: request is too large). RingLabels makes a
// request of 1.37 MB: as large as the API server takes, with room for the
// status the operator writes.
const (
	// RingLabels is how many labels each large ring carries.
	RingLabels = 2900
	// RingAnnotationSize is the size of each large ring's one annotation:
	// the API server takes 256 KiB of annotations in all, keys included.
	RingAnnotationSize = 250_000
	// LabelKeySize and LabelValueSize are the largest a label's key and
	// value may be.
	LabelKeySize, LabelValueSize = 253 + 1 + 63, 63
)

// NoneLabels select nothing in the harness: no namespace and no pod
// carries them.
var NoneLabels = map[string]string{"attack.example/none": "none"}

// AttackZone names a ClusterDNSZone that does not exist: an ECHKeyRing
// naming it publishes nowhere.
const AttackZone = "attack-none"

// Filler returns n lower-case letters and digits drawn from a stream of
// their own for each seed. Every object of the attack gets values of its
// own: equal strings may be held once (the operator's cache interns
// them), so repeated values would measure less than a tenant can make.
func Filler(seed string, n int) string {
	return newFiller(seed).next(n)
}

type filler struct{ r *rand.ChaCha8 }

func newFiller(seed string) filler { return filler{rand.NewChaCha8(sha256.Sum256([]byte(seed)))} }

const fillerAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

func (f filler) next(n int) string {
	b := make([]byte, n)
	_, _ = f.r.Read(b) // ChaCha8.Read never fails
	for i := range b {
		b[i] = fillerAlphabet[int(b[i])%len(fillerAlphabet)]
	}
	return string(b)
}

// LargeMetadata returns labels (n of them, each key and value as long as
// the API allows) and one annotation of annotationSize bytes, every key
// and value of them drawn for seed alone: distinct from every other
// seed's.
func LargeMetadata(seed string, n, annotationSize int) (labels, annotations map[string]string) {
	f := newFiller(seed)
	labels = make(map[string]string, n)
	for i := range n {
		// A DNS subdomain of four labels (253 bytes), then the name: the
		// index keeps the keys distinct whatever the stream draws.
		prefix := strings.Join([]string{fmt.Sprintf("l%04d", i) + f.next(58), f.next(63), f.next(63), f.next(61)}, ".")
		labels[prefix+"/"+f.next(63)] = f.next(LabelValueSize)
	}
	if annotationSize > 0 {
		annotations = map[string]string{"attack.example/padding": f.next(annotationSize)}
	}
	return labels, annotations
}

// Enlarge gives an object LargeMetadata drawn for its namespace and name.
func Enlarge(obj metav1.Object, labels, annotationSize int) {
	l, a := LargeMetadata(obj.GetNamespace()+"/"+obj.GetName(), labels, annotationSize)
	obj.SetLabels(l)
	obj.SetAnnotations(a)
}

// QuietTicketKeyRing is a TicketKeyRing as small as a ring is: a key an
// hour, minted in-cluster, delivered only to its namespace.
func QuietTicketKeyRing(ns, name string) *v1alpha1.TicketKeyRing {
	return &v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: quietTicketSpec()}
}

func quietTicketSpec() v1alpha1.TicketKeyRingSpec {
	return v1alpha1.TicketKeyRingSpec{RotationInterval: metav1.Duration{Duration: time.Hour}, RetainedKeys: 3,
		ActivationDelay: metav1.Duration{Duration: 3 * time.Minute}}
}

// QuietClusterTicketKeyRing is a ClusterTicketKeyRing that selects no
// namespace: it keeps its snapshots in the operator's namespace, and
// delivers nowhere.
func QuietClusterTicketKeyRing(name string) *v1alpha1.ClusterTicketKeyRing {
	return &v1alpha1.ClusterTicketKeyRing{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ClusterTicketKeyRingSpec{TicketKeyRingSpec: quietTicketSpec(),
			NamespaceSelector: metav1.LabelSelector{MatchLabels: NoneLabels}}}
}

// QuietECHKeyRing is an ECHKeyRing naming AttackZone, which does not
// exist, and confirmed by no pod: it publishes nowhere, and its status
// says the zone is not found (Ready False, DNSZoneNotFound).
func QuietECHKeyRing(ns, name string) *v1alpha1.ECHKeyRing {
	return &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1alpha1.ECHKeyRingSpec{
		PublicName:       "public.attack.example",
		RotationInterval: metav1.Duration{Duration: 24 * time.Hour},
		DeliveryDelay:    metav1.Duration{Duration: 5 * time.Minute},
		RetirementMargin: metav1.Duration{Duration: time.Hour},
		RetainedConfigs:  1,
		Confirmation: v1alpha1.Confirmation{
			PodSelector: metav1.LabelSelector{MatchLabels: NoneLabels},
			Port:        intstr.FromString("status"),
			Timeout:     metav1.Duration{Duration: 10 * time.Minute},
		},
		DNS: v1alpha1.ECHDNS{ZoneRef: v1alpha1.DNSZoneReference{Name: AttackZone}, Name: name + ".attack.example", TTL: 300},
	}}
}
