package dnszone_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/dnszone"
)

func TestRecordLease(t *testing.T) {
	long := strings.Repeat("z", 200)
	rec := dnszone.Record{Name: www, Ring: v1alpha1.ECHKeyRingReference{Namespace: "shop", Name: "web", UID: "0b6f2a4c-8d1e-4f1a-9c57-1f3d2e4b5a69"},
		Zone: long, State: v1alpha1.DNSNameReleasing, Since: t0, ReleaseAt: t0.Add(time.Hour)}
	l := dnszone.NewLease("ringmaster-system", rec)
	if l.Namespace != "ringmaster-system" || l.Name != dnszone.LeaseName("WWW.example.test.") || len(l.Name) != len(dnszone.LeasePrefix)+32 {
		t.Fatalf("Lease %s/%s, want ringmaster-system/%s", l.Namespace, l.Name, dnszone.LeaseName(www))
	}
	if errs := validation.IsDNS1123Subdomain(l.Name); len(errs) > 0 {
		t.Fatalf("Lease name %s: %v", l.Name, errs)
	}
	for k, v := range l.Labels {
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 || !strings.HasPrefix(k, "ringmaster.io/") {
			t.Errorf("label %s=%s: %v", k, v, errs)
		}
	}
	if l.Labels[v1alpha1.ComponentLabel] != v1alpha1.ComponentDNSName || l.Labels[v1alpha1.DNSZoneLabel] != dnszone.ZoneLabelValue(long) ||
		!strings.HasPrefix(l.Labels[v1alpha1.DNSZoneLabel], "sha256-") || dnszone.ZoneLabelValue("shop") != "shop" {
		t.Errorf("labels %v", l.Labels)
	}
	if *l.Spec.HolderIdentity != "shop/web" || !l.Spec.AcquireTime.Time.Equal(t0) {
		t.Errorf("spec %+v", l.Spec)
	}
	got, err := dnszone.RecordOf(l, "www.example.test.")
	if err != nil || !dnszone.Same(got, rec) {
		t.Fatalf("RecordOf = %+v, %v; want %+v", got, err, rec)
	}

	// Owned again, without releaseAt: the annotation goes.
	rec.State, rec.ReleaseAt = v1alpha1.DNSNameOwned, time.Time{}
	l.Annotations["example.com/other"] = "kept"
	dnszone.SetLease(l, rec)
	if _, ok := l.Annotations[v1alpha1.DNSReleaseAtAnnotation]; ok || l.Annotations["example.com/other"] != "kept" {
		t.Errorf("annotations %v", l.Annotations)
	}
	if got, err := dnszone.RecordOf(l, www); err != nil || !dnszone.Same(got, rec) {
		t.Fatalf("RecordOf = %+v, %v; want %+v", got, err, rec)
	}

	// Another name whose hash agrees: a conflict, not this name's record.
	if _, err := dnszone.RecordOf(l, "api.example.test"); !errors.Is(err, dnszone.ErrOtherName) {
		t.Errorf("RecordOf another name = %v, want ErrOtherName", err)
	}
	for _, c := range []struct {
		name   string
		mutate func()
		err    string
	}{
		{"no holder", func() { l.Spec.HolderIdentity = nil }, "names no owner ring"},
		{"no UID", func() { delete(l.Labels, v1alpha1.DNSOwnerUIDLabel) }, "names no owner ring"},
		{"no zone", func() { delete(l.Annotations, v1alpha1.DNSZoneAnnotation) }, "names no ClusterDNSZone"},
		{"a state unknown", func() { l.Annotations[v1alpha1.DNSStateAnnotation] = "Mine" }, `state "Mine"`},
		{"releaseAt unreadable", func() { l.Annotations[v1alpha1.DNSReleaseAtAnnotation] = "soon" }, v1alpha1.DNSReleaseAtAnnotation},
	} {
		t.Run(c.name, func(t *testing.T) {
			dnszone.SetLease(l, rec)
			c.mutate()
			if _, err := dnszone.RecordOf(l, www); err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("RecordOf = %v, want an error saying %q", err, c.err)
			}
		})
	}
}
