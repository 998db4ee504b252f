package shape_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	corev1 "k8s.io/api/core/v1"

	"github.com/ringmaster-io/ringmaster/internal/operator"
	"github.com/ringmaster-io/ringmaster/internal/shape"
	"github.com/ringmaster-io/ringmaster/internal/testing/maximal"
	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
)

// MaxKept is what a cache may keep of any one object, in JSON, whatever
// its author made it: the objects of maximal are 400 KB to 1.3 MB each.
const MaxKept = 4 << 10

// The operator's registry has a shape for every kind maximal makes, and
// maximal makes every kind the registry holds; each shape keeps of a
// maximal object (with a thousand managed fields entries besides) less
// than MaxKept, and the same again when it shapes what it kept.
func TestEveryKindIsKeptSmall(t *testing.T) {
	scheme, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	reg := shape.Operator(scheme, "ringmaster-system")
	ca, err := testpki.NewCA("shape test")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(testpki.Leaf{DNSNames: []string{"web.example.com"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[schema.GroupKind]bool{}
	for _, o := range maximal.Objects("shop", "ringmaster-system", "web", "seed-1", true, "web-ticket-keys", leaf.CertPEM, leaf.KeyPEM) {
		gvk, err := apiutil.GVKForObject(o, scheme)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(fmt.Sprintf("%s %T", gvk.Kind, o), func(t *testing.T) {
			seen[gvk.GroupKind()] = true
			f, ok := reg.Shape(gvk.GroupKind())
			if !ok {
				t.Fatalf("no shape for %s", gvk.GroupKind())
			}
			o.SetManagedFields(managedFields(o))
			wire, err := json.Marshal(o)
			if err != nil {
				t.Fatal(err)
			}
			// As an informer decodes it.
			decoded, err := scheme.New(gvk)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(wire, decoded); err != nil {
				t.Fatal(err)
			}
			kept, err := f(decoded)
			if err != nil {
				t.Fatal(err)
			}
			size := jsonSize(t, kept)
			t.Logf("%s of %d bytes kept in %d", gvk.Kind, len(wire), size)
			if len(wire) < 300<<10 {
				t.Errorf("the maximal %s is only %d bytes", gvk.Kind, len(wire))
			}
			if size > MaxKept {
				t.Errorf("kept %d bytes of a %d-byte %s, want at most %d", size, len(wire), gvk.Kind, MaxKept)
			}
			again, err := f(kept.(runtime.Object).DeepCopyObject())
			if err != nil || !equality.Semantic.DeepEqual(again, kept) {
				t.Errorf("shaping what was kept changed it: %v", err)
			}
			m := kept.(client.Object)
			if m.GetName() != o.GetName() || m.GetNamespace() != o.GetNamespace() || len(m.GetManagedFields()) > 2 {
				t.Errorf("kept %s/%s with %d managed fields entries", m.GetNamespace(), m.GetName(), len(m.GetManagedFields()))
			}
		})
	}
	for _, gk := range reg.Kinds() {
		if !seen[gk] {
			t.Errorf("maximal makes no %s: give it one, so that its shape is measured here and in the controller suite", gk)
		}
	}
}

// managedFields is what the API server records of an object's metadata
// written by one manager, and a thousand small entries besides.
func managedFields(o client.Object) []metav1.ManagedFieldsEntry {
	var b strings.Builder
	b.WriteString(`{"f:metadata":{"f:labels":{`)
	i := 0
	for k := range o.GetLabels() {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"f:%s":{}`, k)
		i++
	}
	b.WriteString(`}}}`)
	out := []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(b.String())}}
	for i := range 1000 {
		out = append(out, metav1.ManagedFieldsEntry{Manager: fmt.Sprintf("manager-%04d", i), Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1",
			FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:annotations":{"f:tenant.example/padding":{}}}}`)})
	}
	return out
}

func jsonSize(t *testing.T, o any) int {
	t.Helper()
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

// A cache built with a registry refuses to make an informer for a kind
// that has no shape: the informer's transform cannot be set, which fails
// the cache's read or watch of the kind.
func TestNoShapeNoInformer(t *testing.T) {
	scheme, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	reg := shape.NewRegistry(scheme, map[schema.GroupKind]shape.Func{{Kind: "Pod"}: shape.Pod})
	lw := &toolscache.ListWatch{}
	inf := reg.NewInformer(lw, &corev1.ConfigMap{}, 0, toolscache.Indexers{})
	if err := inf.SetTransform(nil); err == nil || !strings.Contains(err.Error(), "no shape for ConfigMap") {
		t.Errorf("SetTransform of a ConfigMap informer: %v, want no shape for ConfigMap", err)
	}
	pods := reg.NewInformer(lw, &corev1.Pod{}, 0, toolscache.Indexers{})
	if err := pods.SetTransform(nil); err != nil {
		t.Fatal(err)
	}
	got := reg.Informers()
	if !slices.Equal(got, []schema.GroupVersionKind{corev1.SchemeGroupVersion.WithKind("ConfigMap"), corev1.SchemeGroupVersion.WithKind("Pod")}) {
		t.Errorf("informers recorded %v", got)
	}
}
