package shape

import (
	"encoding/json"
	"fmt"

	certificatesv1 "k8s.io/api/certificates/v1"

	"github.com/ringmaster-io/ringmaster/internal/certpolicy"
)

// What the caches keep of pod certificates and trust bundles, which
// CertificatePolicies judge: the facts of their certificates, read once
// here, never the certificates, nor a request's stub PKCS#10 request.

// FactsAnnotation holds, on a shaped PodCertificateRequest or
// ClusterTrustBundle, the JSON of what CertificatePolicy reads of it
// (certpolicy.PodReading, BundleFacts).
const FactsAnnotation = "ringmaster.io/facts"

// BundleFacts is what CertificatePolicy reads of a ClusterTrustBundle: the
// CAs of its trustBundle (certpolicy.CAChain), or why it could not be
// read (a message that never quotes the data).
type BundleFacts struct {
	CAs   certpolicy.Chain `json:"cas,omitzero"`
	Error string           `json:"error,omitempty"`
}

// PodCertificateRequest is the shape of PodCertificateRequests. It keeps
// their identity and, in FactsAnnotation, certpolicy.ReadPodRequest's
// reading: the spec's signer, pod, service account and
// maxExpirationSeconds, the requested key's algorithm and size, the
// state, beginRefreshAt, the leaf's facts (SANs bounded as a TLS Secret's
// are) and those of up to certpolicy.MaxCAs CAs of the chain. The stub
// PKCS#10 request, the chain, user annotations, labels and managed fields
// never stay in the operator's memory.
func PodCertificateRequest(obj any) (any, error) {
	pcr, ok := obj.(*certificatesv1.PodCertificateRequest)
	if !ok {
		return obj, tombstone(obj, "*certificatesv1.PodCertificateRequest")
	}
	if _, done := pcr.Annotations[FactsAnnotation]; done && len(pcr.Spec.StubPKCS10Request) == 0 && pcr.Status.CertificateChain == "" {
		return pcr, nil // shaped already
	}
	r := certpolicy.ReadPodRequest(pcr)
	r.Request.SignerName, r.Request.PodName, r.Request.ServiceAccount = cutSigner(r.Request.SignerName), cut(r.Request.PodName), cut(r.Request.ServiceAccount)
	r.Request.PodUID = cut(r.Request.PodUID)
	data, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode the facts of PodCertificateRequest %s/%s: %w", pcr.Namespace, pcr.Name, err)
	}
	out := &certificatesv1.PodCertificateRequest{TypeMeta: pcr.TypeMeta, ObjectMeta: identity(&pcr.ObjectMeta)}
	out.Annotations = map[string]string{FactsAnnotation: string(data)}
	return out, nil
}

// PodReadingOf reads back what PodCertificateRequest kept.
func PodReadingOf(pcr *certificatesv1.PodCertificateRequest) (certpolicy.PodReading, error) {
	var r certpolicy.PodReading
	if err := json.Unmarshal([]byte(pcr.Annotations[FactsAnnotation]), &r); err != nil {
		return r, fmt.Errorf("no facts cached of PodCertificateRequest %s/%s", pcr.Namespace, pcr.Name)
	}
	return r, nil
}

// ClusterTrustBundle is the shape of ClusterTrustBundles. It keeps their
// identity, labels (up to MaxLabelBytes), signer name and, in
// FactsAnnotation, the facts of up to certpolicy.MaxCAs of their
// certificates, those that expire first, and their count. The bundle
// itself never stays in the operator's memory.
func ClusterTrustBundle(obj any) (any, error) {
	b, ok := obj.(*certificatesv1.ClusterTrustBundle)
	if !ok {
		return obj, tombstone(obj, "*certificatesv1.ClusterTrustBundle")
	}
	if _, done := b.Annotations[FactsAnnotation]; done && b.Spec.TrustBundle == "" {
		return b, nil // shaped already
	}
	c := carried(b)
	var facts BundleFacts
	if certs, err := certpolicy.ParseAll([]byte(b.Spec.TrustBundle)); err != nil {
		facts.Error = fmt.Sprintf("ClusterTrustBundle %s: spec.trustBundle: %v", b.Name, err)
	} else {
		facts.CAs = certpolicy.CAChain(certs)
	}
	data, err := json.Marshal(facts)
	if err != nil {
		return nil, fmt.Errorf("encode the facts of ClusterTrustBundle %s: %w", b.Name, err)
	}
	out := &certificatesv1.ClusterTrustBundle{TypeMeta: b.TypeMeta, ObjectMeta: identity(&b.ObjectMeta)}
	out.Spec.SignerName = cutSigner(b.Spec.SignerName)
	out.Labels = labelsUpTo(b.Labels, MaxLabelBytes, &c)
	out.Annotations = map[string]string{FactsAnnotation: string(data)}
	c.mark(&out.ObjectMeta)
	return out, nil
}

// BundleFactsOf reads back what ClusterTrustBundle kept.
func BundleFactsOf(b *certificatesv1.ClusterTrustBundle) BundleFacts {
	var f BundleFacts
	if err := json.Unmarshal([]byte(b.Annotations[FactsAnnotation]), &f); err != nil {
		return BundleFacts{Error: "no facts cached"}
	}
	return f
}

// maxSignerLen is the longest signer name Kubernetes accepts: a domain
// (253), a slash, and a path (317).
const maxSignerLen = 571

func cutSigner(s string) string {
	if len(s) > maxSignerLen {
		return s[:maxSignerLen]
	}
	return s
}
