package shape

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

// What the caches keep of the cluster-scoped kinds that cluster
// administrators write (ClusterKeySource, ClusterDNSZone,
// CertificatePolicy): their identity, their spec, whose size the API
// bounds but for its label selectors (each kept up to MaxSelectorBytes; a
// longer one selects nothing, and the object's status says so), and their
// status, which only the operator writes. Nothing reads their labels,
// annotations, managed fields, finalizers or owner references; a policy
// keeps a digest of its annotations (AnnotationsDigest), as a ring does.
//
// Of a Namespace: its identity, its phase, and its labels, which selectors
// read, up to MaxLabelBytes (a namespace with more keeps none and is
// marked: no selector selects it, and what would select it says it could
// not judge it, see Labels).

// ClusterKeySource is the shape of ClusterKeySources.
func ClusterKeySource(obj any) (any, error) {
	k, ok := obj.(*v1alpha1.ClusterKeySource)
	if !ok {
		return obj, tombstone(obj, "*v1alpha1.ClusterKeySource")
	}
	c := carried(k)
	out := &v1alpha1.ClusterKeySource{TypeMeta: k.TypeMeta, ObjectMeta: identity(&k.ObjectMeta), Spec: k.Spec, Status: k.Status}
	out.Spec.NamespaceSelector = selector(k.Spec.NamespaceSelector, CutRingNamespaceSelector, &c)
	if v := k.Spec.Vault; v != nil && v.SharedRings != nil {
		vault, shared := *v, *v.SharedRings
		shared.NamespaceSelector = selector(shared.NamespaceSelector, CutSharedNamespaceSelector, &c)
		vault.SharedRings = &shared
		out.Spec.Vault = &vault
	}
	c.mark(&out.ObjectMeta)
	return out, nil
}

// ClusterDNSZone is the shape of ClusterDNSZones.
func ClusterDNSZone(obj any) (any, error) {
	z, ok := obj.(*v1alpha1.ClusterDNSZone)
	if !ok {
		return obj, tombstone(obj, "*v1alpha1.ClusterDNSZone")
	}
	c := carried(z)
	out := &v1alpha1.ClusterDNSZone{TypeMeta: z.TypeMeta, ObjectMeta: identity(&z.ObjectMeta), Spec: z.Spec, Status: z.Status}
	out.Spec.NamespaceSelector = selector(z.Spec.NamespaceSelector, CutRingNamespaceSelector, &c)
	c.mark(&out.ObjectMeta)
	return out, nil
}

// CertificatePolicy is the shape of CertificatePolicies.
func CertificatePolicy(obj any) (any, error) {
	p, ok := obj.(*v1alpha1.CertificatePolicy)
	if !ok {
		return obj, tombstone(obj, "*v1alpha1.CertificatePolicy")
	}
	c := carried(p)
	out := &v1alpha1.CertificatePolicy{TypeMeta: p.TypeMeta, ObjectMeta: identity(&p.ObjectMeta), Spec: p.Spec, Status: p.Status}
	digestAnnotations(&p.ObjectMeta, &out.ObjectMeta)
	out.Spec.Selector.NamespaceSelector = selector(p.Spec.Selector.NamespaceSelector, CutPolicyNamespaceSelector, &c)
	out.Spec.Selector.LabelSelector = selector(p.Spec.Selector.LabelSelector, CutPolicyLabelSelector, &c)
	c.mark(&out.ObjectMeta)
	return out, nil
}

// Namespace is the shape of Namespaces.
func Namespace(obj any) (any, error) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return obj, tombstone(obj, "*corev1.Namespace")
	}
	c := carried(ns)
	out := &corev1.Namespace{TypeMeta: ns.TypeMeta, ObjectMeta: identity(&ns.ObjectMeta), Status: corev1.NamespaceStatus{Phase: ns.Status.Phase}}
	out.Labels = labelsUpTo(ns.Labels, MaxLabelBytes, &c)
	for k, v := range out.Labels {
		out.Labels[in(k)] = in(v)
	}
	c.mark(&out.ObjectMeta)
	return out, nil
}

// FleetRequest is the shape of FleetRequests: their identity, their spec
// (its selectors bounded as every spec's are) and their status, which
// only the operator writes, its list bounded by the API.
func FleetRequest(obj any) (any, error) {
	f, ok := obj.(*v1alpha1.FleetRequest)
	if !ok {
		return obj, tombstone(obj, "*v1alpha1.FleetRequest")
	}
	c := carried(f)
	out := &v1alpha1.FleetRequest{TypeMeta: f.TypeMeta, ObjectMeta: identity(&f.ObjectMeta), Spec: f.Spec, Status: f.Status}
	out.Spec.NamespaceSelector = selector(f.Spec.NamespaceSelector, CutFleetNamespaceSelector, &c)
	out.Spec.RingSelector = selector(f.Spec.RingSelector, CutFleetRingSelector, &c)
	c.mark(&out.ObjectMeta)
	return out, nil
}
