package audit

import (
	"fmt"
	"slices"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/certpolicy"
)

// The kinds of pod certificates and trust bundles in the report.
const (
	KindPodCertificateRequest = string(v1alpha1.KindPodCertificateRequest)
	KindClusterTrustBundle    = string(v1alpha1.KindClusterTrustBundle)
)

// podCertificateFacts are the facts of the PodCertificateRequests read, as
// the operator judges them: an issued request that a newer issued request
// of the same pod and signer replaced is superseded (never overdue for
// refresh). The audit sees only the requests that exist: kube-controller-
// manager deletes each 15 minutes after it was made, and the operator's
// status names the pod certificates it keeps past their request.
func podCertificateFacts(pcrs []certificatesv1.PodCertificateRequest) []*certpolicy.Facts {
	type key struct{ ns, pod, signer string }
	newest := map[key]*certificatesv1.PodCertificateRequest{}
	readings := make([]certpolicy.PodReading, len(pcrs))
	for i := range pcrs {
		p := &pcrs[i]
		readings[i] = certpolicy.ReadPodRequest(p)
		if readings[i].Request.State != certpolicy.RequestIssued {
			continue
		}
		k := key{p.Namespace, string(p.Spec.PodUID), p.Spec.SignerName}
		if n := newest[k]; n == nil || p.CreationTimestamp.After(n.CreationTimestamp.Time) ||
			(p.CreationTimestamp.Equal(&n.CreationTimestamp) && p.Name > n.Name) {
			newest[k] = p
		}
	}
	out := make([]*certpolicy.Facts, len(pcrs))
	for i := range pcrs {
		p := &pcrs[i]
		n := newest[key{p.Namespace, string(p.Spec.PodUID), p.Spec.SignerName}]
		superseded := readings[i].Request.State == certpolicy.RequestIssued && n != nil && n.Name != p.Name
		out[i] = &certpolicy.Facts{
			ID:      certpolicy.ID{Kind: v1alpha1.KindPodCertificateRequest, Namespace: p.Namespace, Name: p.Name},
			Subject: readings[i].Subject(superseded),
		}
	}
	return out
}

// trustBundleFacts are the facts of the ClusterTrustBundles read.
func trustBundleFacts(bundles []certificatesv1.ClusterTrustBundle) []*certpolicy.Facts {
	out := make([]*certpolicy.Facts, len(bundles))
	for i := range bundles {
		b := &bundles[i]
		f := &certpolicy.Facts{ID: certpolicy.ID{Kind: v1alpha1.KindClusterTrustBundle, Name: b.Name}, Labels: b.Labels, SignerName: b.Spec.SignerName}
		if certs, err := certpolicy.ParseAll([]byte(b.Spec.TrustBundle)); err != nil {
			f.Subject.ReadError = fmt.Sprintf("ClusterTrustBundle %s: spec.trustBundle: %v", b.Name, err)
		} else {
			f.Subject.CAs = certpolicy.CAChain(certs)
		}
		out[i] = f
	}
	return out
}

// refreshMargin is the least refreshOverdueAfter of the policies named; 0
// when none sets one.
func (ix policyIndex) refreshMargin(policies []string) time.Duration {
	var least time.Duration
	for _, c := range ix.compiled {
		if m := c.Rules.RefreshOverdueAfter; m > 0 && slices.Contains(policies, c.Name) && (least == 0 || m < least) {
			least = m
		}
	}
	return least
}

// podRow fills a row of a pod certificate or trust bundle: what its
// certificate is, when it (or the bundle's first CA) expires, and its state
// in the kubelet's words. ok is false for other kinds.
func podRow(row *Row, f *certpolicy.Facts, margin time.Duration, now time.Time) bool {
	switch s := f.Subject; {
	case s.Pod != nil:
		r := s.Pod
		state := s.State(now, margin)
		row.Detail = fmt.Sprintf("%s; pod %s, signer %s, key %s, up to %ds", state, r.PodName, r.SignerName, r.Key(), r.MaxExpirationSeconds)
		if c := s.Cert; c != nil {
			row.KeyID, row.KeySince, row.KeyAge = c.KeyID, timePtr(c.NotBefore), durationPtr(now.Sub(c.NotBefore))
			row.Expires = timePtr(c.NotAfter)
		}
		if s.ReadError != "" {
			row.Detail += "; " + s.ReadError
		}
		return true
	case f.ID.Kind == v1alpha1.KindClusterTrustBundle:
		row.Detail = fmt.Sprintf("%d CA certificate(s)", max(s.CAs.Count, len(s.CAs.Certs)))
		if f.SignerName != "" {
			row.Detail += ", signer " + f.SignerName
		}
		if c, ok := s.CAs.SoonestExpiry(); ok {
			row.Expires = timePtr(c.NotAfter)
			row.Detail += fmt.Sprintf("; first to expire: %q", c.CommonName)
		}
		if s.ReadError != "" {
			row.Detail = s.ReadError
		}
		return true
	}
	return false
}
