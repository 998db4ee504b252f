package dnszone

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

// Record is who owns one DNS name, across the cluster: whatever
// ClusterDNSZones allow the name, it is one HTTPS record, so it has one
// record of its owner. The record is a coordination.k8s.io Lease in the
// operator's namespace (LeaseName), which the API server makes unique:
// every change of owner is a create (AlreadyExists: another writer got
// there first) or an update of the version read (a conflict: read again),
// so two writers never both win.
type Record struct {
	// Name is the DNS name, canonical.
	Name string
	// Ring is the ECHKeyRing that owns it.
	Ring v1alpha1.ECHKeyRingReference
	// Zone is the ClusterDNSZone through which the owner was admitted: the
	// only zone through which it writes the name, and whose primary and
	// TSIG key remove its value when it lets the name go.
	Zone  string
	State v1alpha1.DNSNameState
	// Since is when the ring took the name.
	Since time.Time
	// ReleaseAt, while Releasing, is when the name passes on; zero while
	// the owner's value waits to leave DNS.
	ReleaseAt time.Time
}

// LeasePrefix begins the name of every record's Lease.
const LeasePrefix = "ringmaster-dns-"

// LeaseName is the name of the Lease that records name's owner: LeasePrefix
// and the first 32 hex digits (128 bits) of the SHA-256 of the canonical
// name, which fits any name in an object name. Two names whose hashes
// agree are told apart by the record's v1alpha1.DNSNameAnnotation.
func LeaseName(name string) string {
	return LeasePrefix + digest(Canonical(name))
}

// ZoneLabelValue is the value of v1alpha1.DNSZoneLabel for a
// ClusterDNSZone: its name when that fits in a label value, else
// "sha256-" and the first 32 hex digits of its SHA-256.
func ZoneLabelValue(zone string) string {
	if len(zone) <= 63 {
		return zone
	}
	return "sha256-" + digest(zone)
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}

// ErrOtherName is RecordOf's error for a Lease that records another name
// than the one asked for: two names whose hashes agree. The record is a
// conflict to report, never one to overwrite.
var ErrOtherName = errors.New("the record is another name's")

// RecordOf reads the record of name from its Lease. An error says the
// Lease is not a well-formed record of name (ErrOtherName when it records
// another name).
func RecordOf(l *coordinationv1.Lease, name string) (Record, error) {
	name = Canonical(name)
	a := l.Annotations
	r := Record{Name: a[v1alpha1.DNSNameAnnotation], Zone: a[v1alpha1.DNSZoneAnnotation],
		State: v1alpha1.DNSNameState(a[v1alpha1.DNSStateAnnotation])}
	if r.Name != name {
		return Record{}, fmt.Errorf("lease %s/%s records %q, not %s: %w", l.Namespace, l.Name, r.Name, name, ErrOtherName)
	}
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	ns, ring, ok := strings.Cut(holder, "/")
	r.Ring = v1alpha1.ECHKeyRingReference{Namespace: ns, Name: ring, UID: l.Labels[v1alpha1.DNSOwnerUIDLabel]}
	switch {
	case !ok || ns == "" || ring == "" || r.Ring.UID == "":
		return Record{}, fmt.Errorf("lease %s/%s names no owner ring (spec.holderIdentity <namespace>/<name> and label %s)", l.Namespace, l.Name, v1alpha1.DNSOwnerUIDLabel)
	case r.Zone == "":
		return Record{}, fmt.Errorf("lease %s/%s names no ClusterDNSZone (annotation %s)", l.Namespace, l.Name, v1alpha1.DNSZoneAnnotation)
	case r.State != v1alpha1.DNSNameOwned && r.State != v1alpha1.DNSNameReleasing:
		return Record{}, fmt.Errorf("lease %s/%s has state %q, want %s or %s", l.Namespace, l.Name, r.State, v1alpha1.DNSNameOwned, v1alpha1.DNSNameReleasing)
	}
	if l.Spec.AcquireTime != nil {
		r.Since = l.Spec.AcquireTime.Time
	}
	if v, ok := a[v1alpha1.DNSReleaseAtAnnotation]; ok {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return Record{}, fmt.Errorf("lease %s/%s: annotation %s: %w", l.Namespace, l.Name, v1alpha1.DNSReleaseAtAnnotation, err)
		}
		r.ReleaseAt = t
	}
	return r, nil
}

// NewLease is the Lease, in namespace, that records r.
func NewLease(namespace string, r Record) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: LeaseName(r.Name)}}
	SetLease(l, r)
	return l
}

// SetLease writes r into l, leaving l's other labels and annotations as
// they are.
func SetLease(l *coordinationv1.Lease, r Record) {
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Labels[v1alpha1.ComponentLabel] = v1alpha1.ComponentDNSName
	l.Labels[v1alpha1.DNSZoneLabel] = ZoneLabelValue(r.Zone)
	l.Labels[v1alpha1.DNSOwnerUIDLabel] = r.Ring.UID
	l.Annotations[v1alpha1.DNSNameAnnotation] = Canonical(r.Name)
	l.Annotations[v1alpha1.DNSZoneAnnotation] = r.Zone
	l.Annotations[v1alpha1.DNSStateAnnotation] = string(r.State)
	delete(l.Annotations, v1alpha1.DNSReleaseAtAnnotation)
	if !r.ReleaseAt.IsZero() {
		l.Annotations[v1alpha1.DNSReleaseAtAnnotation] = r.ReleaseAt.UTC().Format(time.RFC3339)
	}
	holder := r.Ring.Namespace + "/" + r.Ring.Name
	l.Spec.HolderIdentity = &holder
	l.Spec.AcquireTime = &metav1.MicroTime{Time: r.Since}
}

// Same reports whether a and b record the same thing, as a Lease holds it
// (times to the second).
func Same(a, b Record) bool {
	return a.Name == b.Name && a.Ring == b.Ring && a.Zone == b.Zone && a.State == b.State &&
		a.Since.Truncate(time.Second).Equal(b.Since.Truncate(time.Second)) &&
		a.ReleaseAt.Truncate(time.Second).Equal(b.ReleaseAt.Truncate(time.Second))
}
