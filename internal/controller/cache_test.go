package controller

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
)

func TestKeepOwnedSecrets(t *testing.T) {
	ringRef := func(kind string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: kind, Name: "web", UID: "u1", Controller: ptr.To(true)}}
	}
	big := bytes.Repeat([]byte("x"), 1<<20)
	secret := func(ns string, refs []metav1.OwnerReference) *corev1.Secret {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: ns, Name: "web-ticket-keys", UID: "s1", ResourceVersion: "7",
				Labels:          map[string]string{v1alpha1.RingLabel: "web"},
				Annotations:     map[string]string{v1alpha1.EpochAnnotation: "3", "tenant.example/padding": string(big)},
				OwnerReferences: refs,
				ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
			},
			Type: distribute.SecretType,
			Data: map[string][]byte{"ticketkeys.json": big},
		}
	}
	notController := ringRef(v1alpha1.KindTicketKeyRing)
	notController[0].Controller = nil
	otherGroup := ringRef(v1alpha1.KindTicketKeyRing)
	otherGroup[0].APIVersion = "example.com/v1"
	for _, tt := range []struct {
		name  string
		in    *corev1.Secret
		whole bool
	}{
		{"controlled by a TicketKeyRing", secret("shop", ringRef(v1alpha1.KindTicketKeyRing)), true},
		{"controlled by a ClusterTicketKeyRing", secret("shop", ringRef(v1alpha1.KindClusterTicketKeyRing)), true},
		{"in the operator's namespace", secret("ringmaster-system", nil), true},
		{"a tenant's, unowned", secret("shop", nil), false},
		{"owned by a ring but not controlled", secret("shop", notController), false},
		{"controlled by a kind of another group", secret("shop", otherGroup), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.in.DeepCopy()
			got, err := KeepOwnedSecrets("ringmaster-system")(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			s := got.(*corev1.Secret)
			if len(s.ManagedFields) != 0 {
				t.Error("managed fields kept")
			}
			if s.Name != want.Name || s.Namespace != want.Namespace || s.UID != want.UID || s.ResourceVersion != want.ResourceVersion ||
				s.Type != want.Type || s.Labels[v1alpha1.RingLabel] != "web" || len(s.OwnerReferences) != len(want.OwnerReferences) {
				t.Errorf("identity, labels, type or owners lost: %+v", s.ObjectMeta)
			}
			if again, _ := KeepOwnedSecrets("ringmaster-system")(s.DeepCopy()); len(again.(*corev1.Secret).Data) != len(s.Data) {
				t.Error("transformed twice, it changed")
			}
			if tt.whole {
				if !bytes.Equal(s.Data["ticketkeys.json"], big) || s.Annotations[v1alpha1.EpochAnnotation] != "3" {
					t.Error("an owned Secret lost its data or annotations")
				}
				return
			}
			if s.Data != nil || s.Annotations != nil {
				t.Errorf("kept %d data keys and %d annotations of a Secret the operator does not own", len(s.Data), len(s.Annotations))
			}
		})
	}
	tomb := toolscache.DeletedFinalStateUnknown{Key: "shop/x"}
	if got, err := KeepOwnedSecrets("ringmaster-system")(tomb); err != nil || got != tomb {
		t.Errorf("a tombstone became %v, %v", got, err)
	}
}

func TestStripTLSSecret(t *testing.T) {
	ca, err := testpki.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(testpki.Leaf{DNSNames: []string{"web.example.com"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	in := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-tls", Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{"cert-manager.io/certificate-name": "web", "unrelated.io/note": "x"}},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{
			corev1.TLSCertKey:       append(append([]byte{}, leaf.CertPEM...), ca.PEM...),
			corev1.TLSPrivateKeyKey: leaf.KeyPEM,
			"ca.crt":                ca.PEM,
		},
	}
	got, err := StripTLSSecret(in)
	if err != nil {
		t.Fatal(err)
	}
	s := got.(*corev1.Secret)
	if len(s.Data) != 1 || s.Data[TLSFactsKey] == nil {
		t.Fatalf("data keys %v, want %s only", keys(s.Data), TLSFactsKey)
	}
	for _, leaked := range [][]byte{leaf.KeyPEM, leaf.CertPEM, ca.PEM, leaf.Cert.Raw} {
		if bytes.Contains(s.Data[TLSFactsKey], leaked) {
			t.Error("the cached facts hold a key or a certificate")
		}
	}
	facts := tlsFactsOf(s)
	if facts.Cert == nil || facts.Error != "" {
		t.Fatalf("facts %+v", facts)
	}
	if c := facts.Cert; c.DNSNames[0] != "web.example.com" || !c.NotAfter.Equal(leaf.Cert.NotAfter.UTC()) || c.Algorithm != "ECDSA" || c.Size != 256 || c.KeyID == "" {
		t.Errorf("facts of the leaf %+v", c)
	}
	if len(s.Annotations) != 1 || s.Annotations["cert-manager.io/certificate-name"] != "web" || s.Labels["app"] != "web" {
		t.Errorf("annotations %v, labels %v", s.Annotations, s.Labels)
	}
	again, err := StripTLSSecret(s.DeepCopy())
	if err != nil || !bytes.Equal(again.(*corev1.Secret).Data[TLSFactsKey], s.Data[TLSFactsKey]) {
		t.Errorf("transformed twice: %v, %v", again, err)
	}

	in.Data[corev1.TLSCertKey] = []byte("not a certificate")
	got, err = StripTLSSecret(in)
	if err != nil {
		t.Fatal(err)
	}
	if f := tlsFactsOf(got.(*corev1.Secret)); f.Cert != nil || !strings.Contains(f.Error, "no PEM CERTIFICATE block") {
		t.Errorf("unparsable tls.crt: facts %+v", f)
	}
	if f := tlsFactsOf(&corev1.Secret{}); f.Cert != nil || f.Error == "" {
		t.Errorf("a Secret with no facts: %+v", f)
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// BenchmarkTLSSecretCache measures what the TLS Secret cache holds for
// $RINGMASTER_BENCH_SECRETS (50,000 by default) kubernetes.io/tls Secrets,
// each a fresh P-256 leaf with a two-certificate chain, its key and ca.crt,
// decoded from JSON as an informer decodes them: stored whole, stored with
// tls.key dropped (the transform before), and stored as facts (now).
//
//	go test ./internal/controller/ -run '^$' -bench TLSSecretCache -benchtime 1x
func BenchmarkTLSSecretCache(b *testing.B) {
	n := 50000
	if v, err := fmt.Sscan(os.Getenv("RINGMASTER_BENCH_SECRETS"), &n); v != 1 || err != nil {
		n = 50000
	}
	root, err := testpki.NewCA("bench root")
	if err != nil {
		b.Fatal(err)
	}
	inter, err := testpki.NewCA("bench intermediate")
	if err != nil {
		b.Fatal(err)
	}
	wire := make([][]byte, n)
	size := 0
	for i := range wire {
		leaf, err := inter.Issue(testpki.Leaf{DNSNames: []string{fmt.Sprintf("s%d.example.com", i)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(90 * 24 * time.Hour)})
		if err != nil {
			b.Fatal(err)
		}
		s := &corev1.Secret{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns-%d", i%500), Name: fmt.Sprintf("s-%05d", i), UID: "0123456789abcdef",
				ResourceVersion: "123456", Labels: map[string]string{"app": "web"},
				Annotations: map[string]string{"cert-manager.io/certificate-name": "web", "cert-manager.io/issuer-name": "ca"}},
			Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{
				corev1.TLSCertKey:       bytes.Join([][]byte{leaf.CertPEM, inter.PEM, root.PEM}, nil),
				corev1.TLSPrivateKeyKey: leaf.KeyPEM,
				"ca.crt":                root.PEM,
			},
		}
		if wire[i], err = json.Marshal(s); err != nil {
			b.Fatal(err)
		}
		size += len(wire[i])
	}
	b.Logf("%d Secrets, %.0f bytes each as JSON", n, float64(size)/float64(n))
	for _, v := range []struct {
		name      string
		transform toolscache.TransformFunc
	}{
		{"whole", nil},
		{"key dropped", dropKey},
		{"facts", StripTLSSecret},
	} {
		b.Run(v.name, func(b *testing.B) {
			for range b.N {
				before := liveHeap()
				store := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{})
				for _, w := range wire {
					var obj any = &corev1.Secret{}
					if err := json.Unmarshal(w, obj); err != nil {
						b.Fatal(err)
					}
					if v.transform != nil {
						if obj, err = v.transform(obj); err != nil {
							b.Fatal(err)
						}
					}
					if err := store.Add(obj); err != nil {
						b.Fatal(err)
					}
				}
				held := int64(liveHeap()) - int64(before)
				b.ReportMetric(float64(held)/(1<<20), "MiB")
				b.ReportMetric(float64(held)/float64(n), "B/secret")
				runtime.KeepAlive(store)
			}
		})
	}
}

// dropKey is the TLS Secret transform before facts: tls.key dropped,
// tls.crt (the chain) kept.
func dropKey(obj any) (any, error) {
	s := obj.(*corev1.Secret)
	out := &corev1.Secret{
		TypeMeta: s.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, UID: s.UID, ResourceVersion: s.ResourceVersion,
			CreationTimestamp: s.CreationTimestamp, Labels: s.Labels, Annotations: s.Annotations},
		Type: s.Type,
		Data: map[string][]byte{corev1.TLSCertKey: s.Data[corev1.TLSCertKey]},
	}
	return out, nil
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
