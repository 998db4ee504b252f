package fleet

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/validation"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// LargeMetadata is what the API server takes, as long as each key and
// value may be, and no two objects share a value: the cache may hold an
// equal string once, and the attack would then measure less than it makes.
func TestLargeMetadataIsValidMaximalAndDistinct(t *testing.T) {
	const n = 50
	a, aAnn := LargeMetadata("attack/tkr-000", n, RingAnnotationSize)
	b, bAnn := LargeMetadata("attack/tkr-001", n, RingAnnotationSize)
	for _, l := range []map[string]string{a, b} {
		if errs := metavalidation.ValidateLabels(l, field.NewPath("labels")); len(errs) > 0 {
			t.Fatalf("labels the API server refuses: %v", errs[0])
		}
		if len(l) != n {
			t.Fatalf("%d labels, want %d", len(l), n)
		}
		for k, v := range l {
			if len(k) != LabelKeySize || len(v) != LabelValueSize {
				t.Fatalf("label of a %d-byte key and %d-byte value, want %d and %d", len(k), len(v), LabelKeySize, LabelValueSize)
			}
		}
	}
	if errs := validation.ValidateAnnotations(aAnn, field.NewPath("annotations")); len(errs) > 0 {
		t.Fatalf("an annotation the API server refuses: %v", errs[0])
	}
	// Every label's key and value, and every annotation's value: the
	// annotation's key is short, and the same on every object.
	seen := map[string]bool{}
	for _, s := range append(append(keysAndValues(a), keysAndValues(b)...), aAnn["attack.example/padding"], bAnn["attack.example/padding"]) {
		if seen[s] {
			t.Fatalf("drawn twice: %.40s...", s)
		}
		seen[s] = true
	}
	if got := len(aAnn["attack.example/padding"]); got != RingAnnotationSize {
		t.Fatalf("annotation of %d bytes, want %d", got, RingAnnotationSize)
	}
	again, _ := LargeMetadata("attack/tkr-000", n, 0)
	for k, v := range a {
		if again[k] != v {
			t.Fatal("the same seed drew other labels: the bench would not be repeatable")
		}
	}

	ring := QuietTicketKeyRing("attack", "tkr-002")
	Enlarge(ring, n, 1000)
	if len(ring.Labels) != n || len(ring.Annotations["attack.example/padding"]) != 1000 {
		t.Fatalf("Enlarge gave %d labels and %d bytes of annotation", len(ring.Labels), len(ring.Annotations["attack.example/padding"]))
	}
}

func keysAndValues(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k, v)
	}
	return out
}
