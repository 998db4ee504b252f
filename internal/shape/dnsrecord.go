package shape

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

// The labels and annotations of a DNS name's record that ringmaster
// writes, and the only ones the cache keeps.
var (
	recordLabels      = []string{v1alpha1.ComponentLabel, v1alpha1.DNSZoneLabel, v1alpha1.DNSOwnerUIDLabel}
	recordAnnotations = []string{v1alpha1.DNSNameAnnotation, v1alpha1.DNSZoneAnnotation, v1alpha1.DNSStateAnnotation, v1alpha1.DNSReleaseAtAnnotation}
)

// maxRecordValue bounds each label and annotation value, and the holder's
// identity, that the cache keeps of a record: a DNS name or an object's
// name, at most 253 bytes. A longer one is dropped (the record then reads
// as malformed, which the DNS name controller reports).
const maxRecordValue = 253

// DNSRecord is the shape of the records of DNS names'
// owners: coordination.k8s.io Leases in the operator's namespace labelled
// ringmaster.io/component=dns-name (dnszone.Record). Of a Lease it keeps
// its name, namespace, UID, resourceVersion, creation and deletion
// timestamps, the labels and annotations ringmaster writes (three and
// four, each value at most 253 bytes) and its spec, whose holder's
// identity is bounded alike; managed fields, owner references, finalizers,
// other labels and annotations never stay in the operator's memory. Only
// administrators write the operator's namespace, but the cache is bounded
// by construction, whoever writes. Transforming its own output changes
// nothing.
func DNSRecord(obj any) (any, error) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return obj, tombstone(obj, "*coordinationv1.Lease")
	}
	out := &coordinationv1.Lease{
		TypeMeta: l.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: l.Name, Namespace: in(l.Namespace), UID: l.UID, ResourceVersion: l.ResourceVersion,
			CreationTimestamp: l.CreationTimestamp, DeletionTimestamp: l.DeletionTimestamp,
			Labels: kept(l.Labels, recordLabels), Annotations: kept(l.Annotations, recordAnnotations),
		},
		Spec: *l.Spec.DeepCopy(),
	}
	if h := out.Spec.HolderIdentity; h != nil && len(*h) > maxRecordValue {
		out.Spec.HolderIdentity = nil
	}
	return out, nil
}

// kept is the entries of m under keys whose values are at most
// maxRecordValue bytes; nil for none.
func kept(m map[string]string, keys []string) map[string]string {
	var out map[string]string
	for _, k := range keys {
		if v, ok := m[k]; ok && len(v) <= maxRecordValue {
			if out == nil {
				out = make(map[string]string, len(keys))
			}
			out[k] = in(v)
		}
	}
	return out
}
