package shape

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/certpolicy"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
)

func TestOwnedSecrets(t *testing.T) {
	ringRef := func(kind string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: kind, Name: "web", UID: "u1", Controller: ptr.To(true)}}
	}
	// A snapshot's few keys in a few formats, and a Secret as large as the
	// API server takes, which only a forger writes.
	keys, big := bytes.Repeat([]byte("k"), 8<<10), bytes.Repeat([]byte("x"), 1<<20)
	sized := func(ns string, refs []metav1.OwnerReference, data []byte) *corev1.Secret {
		padding := "p"
		if len(data) > MaxOwnedSecretBytes {
			padding = string(data)
		}
		labels := map[string]string{v1alpha1.RingLabel: "web", v1alpha1.ComponentLabel: v1alpha1.ComponentSnapshot}
		for i := range 1000 {
			labels[fmt.Sprintf("tenant.example/l-%04d", i)] = strings.Repeat("v", 63)
		}
		if len(data) <= MaxOwnedSecretBytes {
			labels = map[string]string{v1alpha1.RingLabel: "web", v1alpha1.ComponentLabel: v1alpha1.ComponentSnapshot}
		}
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: ns, Name: "web-ticket-keys", UID: "s1", ResourceVersion: "7",
				Labels:          labels,
				Annotations:     map[string]string{v1alpha1.EpochAnnotation: "3", "tenant.example/padding": padding},
				OwnerReferences: refs,
				ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
			},
			Type: distribute.SecretType,
			Data: map[string][]byte{"ticketkeys.json": data},
		}
	}
	secret := func(ns string, refs []metav1.OwnerReference) *corev1.Secret { return sized(ns, refs, keys) }
	forged := func(ns string, refs []metav1.OwnerReference) *corev1.Secret { return sized(ns, refs, big) }
	notController := ringRef(v1alpha1.KindTicketKeyRing)
	notController[0].Controller = nil
	otherGroup := ringRef(v1alpha1.KindTicketKeyRing)
	otherGroup[0].APIVersion = "example.com/v1"
	var manyOwners []metav1.OwnerReference
	for i := range 500 {
		manyOwners = append(manyOwners, metav1.OwnerReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.KindTicketKeyRing, Name: "web", UID: types.UID(fmt.Sprint(i))})
	}
	for _, tt := range []struct {
		name   string
		in     *corev1.Secret
		whole  bool
		owners int // owner references kept
	}{
		{"controlled by a TicketKeyRing", secret("shop", ringRef(v1alpha1.KindTicketKeyRing)), true, 1},
		{"controlled by a ClusterTicketKeyRing", secret("shop", ringRef(v1alpha1.KindClusterTicketKeyRing)), true, 1},
		{"in the operator's namespace", secret("ringmaster-system", nil), true, 0},
		{"a tenant's, unowned", forged("shop", nil), false, 0},
		{"owned by a ring but not controlled", forged("shop", notController), false, 1},
		{"controlled by a kind of another group", forged("shop", otherGroup), false, 1},
		{"controlled by a ring, over the bound of a snapshot", forged("shop", ringRef(v1alpha1.KindTicketKeyRing)), false, 1},
		{"in the operator's namespace, over the bound", forged("ringmaster-system", nil), false, 0},
		{"owned 500 times: two references kept, one naming no ring", func() *corev1.Secret {
			s := forged("shop", manyOwners)
			s.Labels[v1alpha1.ComponentLabel] = v1alpha1.ComponentProjection
			return s
		}(), false, maxOwnerRefs},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.in.DeepCopy()
			got, err := OwnedSecrets("ringmaster-system")(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			s := got.(*corev1.Secret)
			if len(s.ManagedFields) != 0 {
				t.Error("managed fields kept")
			}
			if s.Name != want.Name || s.Namespace != want.Namespace || s.UID != want.UID || s.ResourceVersion != want.ResourceVersion ||
				s.Type != want.Type || s.Labels[v1alpha1.RingLabel] != "web" || s.Labels[v1alpha1.ComponentLabel] != want.Labels[v1alpha1.ComponentLabel] || len(s.OwnerReferences) != tt.owners {
				t.Errorf("identity, ring labels, type or owners lost: %.300v", s.ObjectMeta)
			}
			if again, _ := OwnedSecrets("ringmaster-system")(s.DeepCopy()); !equality.Semantic.DeepEqual(again, s) {
				t.Error("transformed twice, it changed")
			}
			if size := jsonSize(t, s); size > 4<<10 && !tt.whole || size > MaxOwnedSecretBytes+4<<10 {
				t.Errorf("kept %d bytes of JSON", size)
			}
			if tt.whole {
				if !bytes.Equal(s.Data["ticketkeys.json"], keys) || s.Annotations[v1alpha1.EpochAnnotation] != "3" {
					t.Error("an owned Secret lost its data or annotations")
				}
				return
			}
			if s.Data != nil || s.Annotations != nil || len(s.Labels) > 2 {
				t.Errorf("kept %d data keys, %d annotations and %d labels of a Secret the operator does not own", len(s.Data), len(s.Annotations), len(s.Labels))
			}
			if len(want.OwnerReferences) > maxOwnerRefs {
				if _, ok := distribute.ClaimOf(s, "ringmaster-system"); ok {
					t.Error("a Secret whose owner references were not all kept is taken for a ring's")
				}
			}
		})
	}
	// A ring's projection keeps its data's digest, not its keys.
	for _, ns := range []string{"shop", "ringmaster-system"} {
		projection := secret(ns, ringRef(v1alpha1.KindTicketKeyRing))
		projection.Labels[v1alpha1.ComponentLabel] = v1alpha1.ComponentProjection
		projection.Data = map[string][]byte{"ticketkeys.json": bytes.Clone(keys)}
		digest := distribute.DataDigest(projection.DeepCopy().Data)
		keys := projection.Data["ticketkeys.json"]
		got, _ := OwnedSecrets("ringmaster-system")(projection)
		s := got.(*corev1.Secret)
		if !distribute.Digested(s) || !bytes.Equal(s.Data[distribute.DigestKey], digest) || s.Annotations[v1alpha1.EpochAnnotation] != "3" {
			t.Errorf("a projection in %s is kept as %d data keys, not its digest, or lost its annotations", ns, len(s.Data))
		}
		if bytes.ContainsFunc(keys, func(r rune) bool { return r != 0 }) {
			t.Errorf("the projection's decoded data in %s was dropped without being zeroed", ns)
		}
		if again, _ := OwnedSecrets("ringmaster-system")(s.DeepCopy()); !bytes.Equal(again.(*corev1.Secret).Data[distribute.DigestKey], digest) {
			t.Error("a projection transformed twice changed")
		}
	}
	// The strings Secrets share are held once: each Secret decoded has its
	// own copies, the cache one.
	var kept []*corev1.Secret
	for range 2 {
		in := secret(strings.Clone("shop"), ringRef(v1alpha1.KindTicketKeyRing))
		in.Labels = map[string]string{strings.Clone(v1alpha1.RingLabel): strings.Clone("web")}
		got, _ := OwnedSecrets("ringmaster-system")(in)
		kept = append(kept, got.(*corev1.Secret))
	}
	same := func(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
	a, b := kept[0], kept[1]
	var ka, kb string
	for k := range a.Labels {
		ka = k
	}
	for k := range b.Labels {
		kb = k
	}
	if !same(a.Namespace, b.Namespace) || !same(ka, kb) || !same(a.Labels[ka], b.Labels[kb]) ||
		!same(a.OwnerReferences[0].Kind, b.OwnerReferences[0].Kind) || !same(string(a.Type), string(b.Type)) ||
		!same(string(a.OwnerReferences[0].UID), string(b.OwnerReferences[0].UID)) {
		t.Error("two Secrets of one namespace and ring keep their own copies of the strings they share")
	}
	if a.OwnerReferences[0].Controller != b.OwnerReferences[0].Controller || !*a.OwnerReferences[0].Controller {
		t.Error("two Secrets' owner references keep their own copies of the controller flag, or lost it")
	}
	tomb := toolscache.DeletedFinalStateUnknown{Key: "shop/x"}
	if got, err := OwnedSecrets("ringmaster-system")(tomb); err != nil || got != tomb {
		t.Errorf("a tombstone became %v, %v", got, err)
	}
}

func TestTLSSecretShape(t *testing.T) {
	ca, err := testpki.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	issue := func(names ...string) *testpki.Issued {
		t.Helper()
		leaf, err := ca.Issue(testpki.Leaf{DNSNames: names, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		return leaf
	}
	// A certificate of 15,500 SANs, about 1 MB as PEM.
	var many []string
	for i := range 15500 {
		many = append(many, fmt.Sprintf("host-%05d.tenant-with-a-long-name.example.com", i))
	}
	small, huge := issue("web.example.com"), issue(many...)
	secret := func(leaf *testpki.Issued, mutate func(*corev1.Secret)) *corev1.Secret {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-tls", UID: "u1", ResourceVersion: "5", Labels: map[string]string{"app": "web"},
				Annotations:   map[string]string{cmapi.CertificateNameKey: "web", cmapi.IssuerNameAnnotationKey: "ca", "unrelated.io/note": "x"},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "cert-manager"}}},
			Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{
				corev1.TLSCertKey:       append(append([]byte{}, leaf.CertPEM...), ca.PEM...),
				corev1.TLSPrivateKeyKey: leaf.KeyPEM,
				"ca.crt":                ca.PEM,
			},
		}
		if mutate != nil {
			mutate(s)
		}
		return s
	}
	big := strings.Repeat("x", 1<<20)
	manyLabels := map[string]string{}
	for i := range 80 {
		manyLabels[fmt.Sprintf("example.com/label-%02d", i)] = strings.Repeat("v", 63)
	}
	tests := []struct {
		name string
		in   *corev1.Secret
		// What is kept: the certificate's DNS names (the first ones) and
		// their true count, or the error; the labels; the annotations.
		wantNames       int
		wantCount       int
		wantFirst       string
		wantError       string
		wantLabels      map[string]string
		wantAnnotations map[string]string
		// maxFacts bounds the facts' JSON.
		maxFacts int
	}{
		{name: "a certificate of one name", in: secret(small, nil), wantNames: 1, wantCount: 1, wantFirst: "web.example.com",
			wantLabels: map[string]string{"app": "web"}, wantAnnotations: map[string]string{cmapi.CertificateNameKey: "web", cmapi.IssuerNameAnnotationKey: "ca"}, maxFacts: 1 << 10},
		{name: "15,500 SANs: the first 256 and the count", in: secret(huge, nil), wantNames: certpolicy.MaxDNSNames, wantCount: 15500, wantFirst: many[0],
			wantLabels: map[string]string{"app": "web"}, wantAnnotations: map[string]string{cmapi.CertificateNameKey: "web", cmapi.IssuerNameAnnotationKey: "ca"}, maxFacts: 20 << 10},
		{name: "cert-manager's annotations: the four read, each if it can name an object", in: secret(small, func(s *corev1.Secret) {
			s.Annotations = map[string]string{cmapi.AltNamesAnnotationKey: big, cmapi.IssuerNameAnnotationKey: strings.Repeat("i", 254),
				cmapi.IssuerKindAnnotationKey: "ClusterIssuer", cmapi.IssuerGroupAnnotationKey: "cert-manager.io", "tenant.example/padding": big}
		}), wantNames: 1, wantCount: 1, wantFirst: "web.example.com", wantLabels: map[string]string{"app": "web"},
			wantAnnotations: map[string]string{cmapi.IssuerKindAnnotationKey: "ClusterIssuer", cmapi.IssuerGroupAnnotationKey: "cert-manager.io"}, maxFacts: 1 << 10},
		{name: "labels over 4 KiB: none kept, and the cut marked", in: secret(small, func(s *corev1.Secret) { s.Labels = manyLabels }),
			wantNames: 1, wantCount: 1, wantFirst: "web.example.com",
			wantAnnotations: map[string]string{cmapi.CertificateNameKey: "web", cmapi.IssuerNameAnnotationKey: "ca", CappedAnnotation: CutLabels}, maxFacts: 1 << 10},
		{name: "an unparsable tls.crt: the error, quoting nothing", in: secret(small, func(s *corev1.Secret) { s.Data[corev1.TLSCertKey] = []byte(big) }),
			wantError: "no PEM CERTIFICATE block", wantLabels: map[string]string{"app": "web"},
			wantAnnotations: map[string]string{cmapi.CertificateNameKey: "web", cmapi.IssuerNameAnnotationKey: "ca"}, maxFacts: 1 << 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			leaked := [][]byte{tc.in.Data[corev1.TLSPrivateKeyKey], tc.in.Data[corev1.TLSCertKey], ca.PEM}
			got, err := TLSSecret(tc.in.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			s := got.(*corev1.Secret)
			if len(s.Data) != 1 || s.Data[TLSFactsKey] == nil {
				t.Fatalf("data keys %v, want %s only", keys(s.Data), TLSFactsKey)
			}
			for _, l := range leaked {
				if bytes.Contains(s.Data[TLSFactsKey], l) {
					t.Error("the cached facts hold a key or a certificate")
				}
			}
			if n := len(s.Data[TLSFactsKey]); n > tc.maxFacts {
				t.Errorf("facts of %d bytes, want at most %d", n, tc.maxFacts)
			}
			if s.Name != "web-tls" || s.Namespace != "shop" || s.UID != "u1" || s.ResourceVersion != "5" || s.ManagedFields != nil {
				t.Errorf("identity lost or managed fields kept: %+v", s.ObjectMeta)
			}
			if !maps.Equal(s.Labels, tc.wantLabels) || !maps.Equal(s.Annotations, tc.wantAnnotations) {
				t.Errorf("labels %v, annotations %.80v; want %v, %v", s.Labels, s.Annotations, tc.wantLabels, tc.wantAnnotations)
			}
			facts := FactsOf(s)
			switch {
			case tc.wantError != "":
				if facts.Cert != nil || !strings.Contains(facts.Error, tc.wantError) || len(facts.Error) > 200 {
					t.Errorf("facts %.200v, want the error %q", facts, tc.wantError)
				}
			case facts.Cert == nil:
				t.Fatalf("facts %+v", facts)
			default:
				c := facts.Cert
				if len(c.DNSNames) != tc.wantNames || c.DNSNameCount != tc.wantCount || c.DNSNames[0] != tc.wantFirst {
					t.Errorf("kept %d DNS names of %d, the first %q", len(c.DNSNames), c.DNSNameCount, c.DNSNames[0])
				}
				if c.NotAfter.IsZero() || c.Algorithm != "ECDSA" || c.Size != 256 || c.KeyID == "" {
					t.Errorf("facts of the leaf %+v", c)
				}
			}
			again, err := TLSSecret(s.DeepCopy())
			if err != nil || !bytes.Equal(again.(*corev1.Secret).Data[TLSFactsKey], s.Data[TLSFactsKey]) ||
				!maps.Equal(again.(*corev1.Secret).Labels, s.Labels) || !maps.Equal(again.(*corev1.Secret).Annotations, s.Annotations) {
				t.Errorf("transformed twice: %v, %v", again, err)
			}
		})
	}

	if f := FactsOf(&corev1.Secret{}); f.Cert != nil || f.Error == "" {
		t.Errorf("a Secret with no facts: %+v", f)
	}
	tomb := toolscache.DeletedFinalStateUnknown{Key: "shop/x"}
	if got, err := TLSSecret(tomb); err != nil || got != tomb {
		t.Errorf("a tombstone became %v, %v", got, err)
	}
}

func TestCertificateShape(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	var names []string
	for i := range 15000 {
		names = append(names, fmt.Sprintf("host-%05d.example.com", i))
	}
	now := metav1.Now()
	crt := func(mutate func(*cmapi.Certificate)) *cmapi.Certificate {
		c := &cmapi.Certificate{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "u1", ResourceVersion: "9", Generation: 3,
				Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"note": big},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
			Spec: cmapi.CertificateSpec{SecretName: "web-tls", DNSNames: names, CommonName: "web",
				IssuerRef:  cmmeta.IssuerReference{Name: "ca", Kind: "ClusterIssuer", Group: "cert-manager.io"},
				Duration:   &metav1.Duration{Duration: 24 * time.Hour},
				PrivateKey: &cmapi.CertificatePrivateKey{RotationPolicy: cmapi.RotationPolicyNever, Size: 256}},
			Status: cmapi.CertificateStatus{Revision: ptr.To(4), NotAfter: &now, Conditions: []cmapi.CertificateCondition{
				{Type: cmapi.CertificateConditionReady, Status: cmmeta.ConditionTrue, Message: big},
				{Type: cmapi.CertificateConditionIssuing, Status: cmmeta.ConditionTrue, Message: big},
			}},
		}
		if mutate != nil {
			mutate(c)
		}
		return c
	}
	for _, tc := range []struct {
		name       string
		in         *cmapi.Certificate
		wantLabels map[string]string
		wantIssuer string
	}{
		{"a Certificate of 15,000 names and 1 MiB of annotations", crt(nil), map[string]string{"app": "web"}, "ca"},
		{"labels over 4 KiB, an issuer name no issuer can have", crt(func(c *cmapi.Certificate) {
			c.Labels = map[string]string{}
			for i := range 80 {
				c.Labels[fmt.Sprintf("example.com/label-%02d", i)] = strings.Repeat("v", 63)
			}
			c.Spec.IssuerRef.Name = strings.Repeat("i", 300)
		}), nil, strings.Repeat("i", 253)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Certificate(tc.in.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			c := got.(*cmapi.Certificate)
			f := certpolicy.CertificateFacts(c)
			want := certpolicy.CertificateFacts(tc.in)
			if f.Revision != want.Revision || f.Issuing != want.Issuing || *f.Subject.CertManager != *want.Subject.CertManager ||
				!certpolicy.Manages(c, "web-tls") || !certpolicy.IsCurrent(c, &certpolicy.Certificate{NotAfter: now.Time}) {
				t.Errorf("facts %+v, want %+v", f, want)
			}
			if f.Issuer.Name != tc.wantIssuer || f.Issuer.Kind != "ClusterIssuer" || !maps.Equal(c.Labels, tc.wantLabels) {
				t.Errorf("issuer %+v, labels %v", f.Issuer, c.Labels)
			}
			if c.Name != "web" || c.Namespace != "shop" || c.UID != "u1" || c.ResourceVersion != "9" || c.Generation != 3 {
				t.Errorf("identity lost: %+v", c.ObjectMeta)
			}
			data, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			if len(data) > 8<<10 {
				t.Errorf("kept %d bytes of JSON", len(data))
			}
			again, _ := Certificate(c.DeepCopy())
			if !equality.Semantic.DeepEqual(again, c) {
				t.Errorf("transformed twice, it changed")
			}
		})
	}
}

func jsonSize(t *testing.T, o any) int {
	t.Helper()
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
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
		{"facts", TLSSecret},
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
