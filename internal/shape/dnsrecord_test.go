package shape

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/dnszone"
)

func TestDNSRecordShape(t *testing.T) {
	rec := dnszone.Record{Name: "www.example.test", Ring: v1alpha1.ECHKeyRingReference{Namespace: "shop", Name: "web", UID: "u1"},
		Zone: "example", State: v1alpha1.DNSNameReleasing, Since: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), ReleaseAt: time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)}
	big := strings.Repeat("x", 1<<20)
	l := dnszone.NewLease("ringmaster-system", rec)
	l.UID, l.ResourceVersion, l.Generation = "l1", "7", 3
	l.OwnerReferences = []metav1.OwnerReference{{Name: "someone"}}
	l.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", FieldsV1: metav1.NewFieldsV1(big)}}
	l.Labels["example.com/team"] = "shop"
	l.Annotations["example.com/padding"] = big
	l.Annotations["ringmaster.io/padding"] = big
	l.Spec.LeaseDurationSeconds = ptr.To[int32](15)
	l.Finalizers = []string{"example.com/keep"}

	got, err := DNSRecord(l.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	s := got.(*coordinationv1.Lease)
	if s.Name != l.Name || s.Namespace != l.Namespace || s.UID != l.UID || s.ResourceVersion != "7" || !s.CreationTimestamp.Equal(&l.CreationTimestamp) {
		t.Errorf("identity lost: %+v", s.ObjectMeta)
	}
	if s.ManagedFields != nil || s.OwnerReferences != nil || s.Finalizers != nil || s.Generation != 0 {
		t.Errorf("kept metadata beyond identity: %+v", s.ObjectMeta)
	}
	if _, ok := s.Labels["example.com/team"]; ok || len(s.Labels) != 3 {
		t.Errorf("labels %v, want ringmaster's three", s.Labels)
	}
	if _, ok := s.Annotations["example.com/padding"]; ok || len(s.Annotations) != 4 {
		t.Errorf("kept %d annotations, want ringmaster's four, none over %d bytes", len(s.Annotations), maxRecordValue)
	}
	if !equality.Semantic.DeepEqual(s.Spec, l.Spec) {
		t.Errorf("spec %+v, want %+v", s.Spec, l.Spec)
	}
	if back, err := dnszone.RecordOf(s, rec.Name); err != nil || !dnszone.Same(back, rec) {
		t.Errorf("the record read from the cache is %+v, %v; want %+v", back, err, rec)
	}
	if again, _ := DNSRecord(s.DeepCopy()); !equality.Semantic.DeepEqual(again, s) {
		t.Error("transformed twice, it changed")
	}

	// A value past any DNS or object name is not kept at all: the record
	// then reads as malformed.
	long := l.DeepCopy()
	long.Spec.HolderIdentity = &big
	long.Annotations[v1alpha1.DNSZoneAnnotation] = big
	got, _ = DNSRecord(long)
	if s := got.(*coordinationv1.Lease); s.Annotations[v1alpha1.DNSZoneAnnotation] != "" || s.Spec.HolderIdentity != nil {
		t.Errorf("kept a zone of %d bytes and a holder of %d bytes", len(s.Annotations[v1alpha1.DNSZoneAnnotation]), len(ptr.Deref(s.Spec.HolderIdentity, "")))
	}

	tomb := toolscache.DeletedFinalStateUnknown{Key: "ringmaster-system/x"}
	if got, err := DNSRecord(tomb); err != nil || got != tomb {
		t.Errorf("a tombstone became %v, %v", got, err)
	}
}
