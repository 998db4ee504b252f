package certpolicy

import (
	"crypto/x509"
	"fmt"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
)

// Pod certificates (KEP-4317): a kubelet makes a key for a pod's
// podCertificate projected volume, asks a signer for a certificate with a
// PodCertificateRequest, and asks again from the issued certificate's
// beginRefreshAt. kube-controller-manager deletes each request 15 minutes
// after it was made, so a pod's certificate is known by the last request
// the operator saw issued for it.

// RequestState is where a PodCertificateRequest stands with its signer.
type RequestState string

// Request states: the request's one terminal condition, or none yet.
const (
	RequestPending RequestState = "Pending"
	RequestIssued  RequestState = "Issued"
	RequestDenied  RequestState = "Denied"
	RequestFailed  RequestState = "Failed"
)

// PodState is the state of a pod's certificate, in the words of the
// kubelet's podCertificate manager where they fit.
type PodState string

// Pod certificate states.
const (
	PodPending           PodState = "pending"
	PodFresh             PodState = "fresh"
	PodOverdueForRefresh PodState = "overdue for refresh"
	PodExpired           PodState = "expired"
	PodFailed            PodState = "failed"
	PodDenied            PodState = "denied"
)

// PodStates lists every state, in the order status and metrics show them.
var PodStates = []PodState{PodPending, PodFresh, PodOverdueForRefresh, PodExpired, PodFailed, PodDenied}

// DefaultMaxExpirationSeconds is what kube-apiserver sets when a request
// sets no maxExpirationSeconds.
const DefaultMaxExpirationSeconds = 86400

// PodRequest is what the operator knows of a PodCertificateRequest besides
// its certificates: public facts only.
type PodRequest struct {
	SignerName     string `json:"signerName"`
	PodName        string `json:"podName"`
	PodUID         string `json:"podUID"`
	ServiceAccount string `json:"serviceAccount"`
	// MaxExpirationSeconds is the lifetime the request asks for at most.
	MaxExpirationSeconds int32 `json:"maxExpirationSeconds"`
	// KeyAlgorithm and KeySize are of the key the kubelet made, read from
	// the request's public key.
	KeyAlgorithm Algorithm    `json:"keyAlgorithm"`
	KeySize      int          `json:"keySize,omitempty"`
	State        RequestState `json:"state"`
	// Reason and Message are the signer's, when it denied or failed the
	// request (cut to 256 bytes).
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// BeginRefreshAt is when the kubelet begins to ask again.
	BeginRefreshAt time.Time `json:"beginRefreshAt,omitzero"`
	// Superseded: a newer request of the same pod and signer exists, so
	// this one is no longer the pod's certificate to refresh. The
	// controller sets it; a request does not know it of itself.
	Superseded bool `json:"-"`
}

// Key describes the requested key, e.g. "ECDSA 256".
func (r PodRequest) Key() string {
	return Certificate{Algorithm: r.KeyAlgorithm, Size: r.KeySize}.Key()
}

// PodReading is what a PodCertificateRequest says, read once: its request,
// its issued leaf (Cert, trimmed) and the CAs of its chain, or why the
// chain could not be read. It holds no certificate bytes.
type PodReading struct {
	Request PodRequest   `json:"request"`
	Cert    *Certificate `json:"cert,omitempty"`
	CAs     Chain        `json:"cas,omitzero"`
	Error   string       `json:"error,omitempty"`
}

// maxSignerMessage cuts what a signer says of a denial or failure.
const maxSignerMessage = 256

// ReadPodRequest reads a PodCertificateRequest: its spec, the key of its
// stub PKCS#10 request, its state, and its issued chain. It never keeps
// nor quotes key or certificate bytes.
func ReadPodRequest(pcr *certificatesv1.PodCertificateRequest) PodReading {
	r := PodReading{Request: PodRequest{
		SignerName: pcr.Spec.SignerName, PodName: pcr.Spec.PodName, PodUID: string(pcr.Spec.PodUID),
		ServiceAccount:       pcr.Spec.ServiceAccountName,
		MaxExpirationSeconds: ptr.Deref(pcr.Spec.MaxExpirationSeconds, DefaultMaxExpirationSeconds),
		KeyAlgorithm:         Unknown,
		State:                RequestPending,
	}}
	if csr, err := x509.ParseCertificateRequest(pcr.Spec.StubPKCS10Request); err == nil {
		r.Request.KeyAlgorithm, r.Request.KeySize = PublicKey(csr.PublicKey)
	}
	for _, t := range []RequestState{RequestIssued, RequestDenied, RequestFailed} {
		c := meta.FindStatusCondition(pcr.Status.Conditions, string(t))
		if c == nil || c.Status != "True" {
			continue
		}
		r.Request.State = t
		if t != RequestIssued {
			r.Request.Reason, r.Request.Message = cutString(c.Reason, maxSignerMessage), cutString(c.Message, maxSignerMessage)
		}
		break
	}
	if r.Request.State != RequestIssued {
		return r
	}
	if t := pcr.Status.BeginRefreshAt; t != nil {
		r.Request.BeginRefreshAt = t.Time
	}
	certs, err := ParseAll([]byte(pcr.Status.CertificateChain))
	if err != nil {
		r.Error = fmt.Sprintf("PodCertificateRequest %s/%s: status.certificateChain: %v", pcr.Namespace, pcr.Name, err)
		return r
	}
	leaf := certs[0].Trim()
	r.Cert, r.CAs = &leaf, CAChain(certs[1:])
	return r
}

// Subject is what the policy judges of the reading: the leaf (its key as
// old as its certificate, since the kubelet makes a key per request), its
// CAs, and the request.
func (r PodReading) Subject(superseded bool) Subject {
	req := r.Request
	req.Superseded = superseded
	s := Subject{Cert: r.Cert, ReadError: r.Error, CAs: r.CAs, Pod: &req}
	if r.Cert != nil {
		s.KeySince = r.Cert.NotBefore
	}
	return s
}

func cutString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

// State is the pod certificate's state at now, given the margin past
// beginRefreshAt after which a refresh is overdue (0: never overdue).
func (s Subject) State(now time.Time, margin time.Duration) PodState {
	if s.Pod == nil {
		return ""
	}
	switch s.Pod.State {
	case RequestDenied:
		return PodDenied
	case RequestFailed:
		return PodFailed
	case RequestPending:
		return PodPending
	}
	c := s.Cert
	switch {
	case c == nil:
		return PodFailed // issued, but no certificate the operator can read
	case now.After(c.NotAfter):
		return PodExpired
	case overdue(s.Pod, margin, now):
		return PodOverdueForRefresh
	}
	return PodFresh
}

func overdue(r *PodRequest, margin time.Duration, now time.Time) bool {
	return margin > 0 && !r.Superseded && !r.BeginRefreshAt.IsZero() && now.After(r.BeginRefreshAt.Add(margin))
}

// judgePod applies the rules of pod certificates to the request.
func (v *Verdict) judgePod(p Policy, s Subject, now time.Time, recheckAt func(time.Time)) {
	r := s.Pod
	v.PodState = s.State(now, p.RefreshOverdueAfter)
	if len(p.AllowedSignerNames) > 0 && !matchAny(p.AllowedSignerNames, r.SignerName) {
		v.add(AllowedSignerNames, "signer %q not allowed by allowedSignerNames %s", r.SignerName, quoteList(p.AllowedSignerNames))
	}
	if p.MaxExpirationSeconds > 0 && r.MaxExpirationSeconds > p.MaxExpirationSeconds {
		v.add(MaxExpirationSeconds, "requests a lifetime of up to %ds; maxExpirationSeconds is %d", r.MaxExpirationSeconds, p.MaxExpirationSeconds)
	}
	if s.Cert == nil {
		// Not issued: the requested key is all there is to judge of it.
		if msg, ok := allowedKey(p.KeyAlgorithms, Certificate{Algorithm: r.KeyAlgorithm, Size: r.KeySize}); !ok {
			v.add(KeyAlgorithms, "requested %s", msg)
		}
	}
	switch r.State {
	case RequestDenied, RequestFailed:
		v.add(Issued, "%s by signer %q: %s: %s", strings.ToLower(string(r.State)), r.SignerName, r.Reason, r.Message)
	case RequestIssued:
		if p.RefreshOverdueAfter > 0 && !r.Superseded && !r.BeginRefreshAt.IsZero() && s.Cert != nil {
			deadline := r.BeginRefreshAt.Add(p.RefreshOverdueAfter)
			if now.After(deadline) && !now.After(s.Cert.NotAfter) {
				v.add(RefreshOverdue, "not refreshed since beginRefreshAt %s, past refreshOverdueAfter %s", stamp(r.BeginRefreshAt), human(p.RefreshOverdueAfter))
			}
			recheckAt(deadline.Add(time.Nanosecond))
		}
	}
}

func matchAny(patterns []string, s string) bool {
	for _, p := range patterns {
		if MatchGlob(p, s) {
			return true
		}
	}
	return false
}
