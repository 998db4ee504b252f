// Package audit turns what `kubectl ringmaster audit` read from the API
// server into its report: one row per ring (its active key's age against
// its rotation interval, its oldest key against its expiry), per
// CertificatePolicy, and per certificate a policy selects (its key's age,
// its expiry, its violations), each with the problems found, problems
// first.
//
// It is pure: objects and the time in, a report out. Rings are read by the
// clock as a pod reads them, with internal/keyring; certificate keys are
// dated as the operator dates them, with internal/certpolicy; violations are
// the operator's, from the policies' status.
package audit

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/certpolicy"
	"github.com/ringmaster-io/ringmaster/internal/ticketkeys"
)

// Category is a kind of problem; --fail-on names categories.
type Category string

// The categories of problems.
const (
	// Overdue: a ring's rotation is overdue (its RotationOverdue or
	// ConfirmationOverdue condition, or no key staged behind an active key
	// by the clock), a key past its expiry is still in the ring, or the
	// ring holds no key.
	Overdue Category = "overdue"
	// KeyAge: a ring's active key is older than its rotationInterval, or a
	// certificate's key older than the least maxKeyAge of the policies
	// selecting it.
	KeyAge Category = "key-age"
	// ExpiredSoon: a certificate has expired or expires within the expiry
	// window.
	ExpiredSoon Category = "expired-soon"
	// Violations: a CertificatePolicy reports violations.
	Violations Category = "violations"
	// FailedTargets: a ring's newest epoch did not reach some namespaces.
	FailedTargets Category = "failed-targets"
	// NotReady: a ring or policy is not Ready for another reason, or the
	// operator has not handled its current generation.
	NotReady Category = "not-ready"
	// AtRest: the API server's metrics do not show Secrets encrypted at
	// rest, or a Secret holding keys is not excluded from backups.
	AtRest Category = "at-rest"
	// UnmanagedKeys: a session-ticket key no ring manages (an
	// ingress-nginx ConfigMap, an Envoy configuration, an HAProxy key
	// file), which rotates only when someone rotates it by hand.
	Unmanaged Category = "unmanaged-keys"
)

// Categories lists every category, in the order problems are shown.
var Categories = []Category{Overdue, KeyAge, ExpiredSoon, Violations, FailedTargets, NotReady, AtRest, Unmanaged}

// ParseCategories reads a --fail-on value: categories separated by commas,
// or "all".
func ParseCategories(s string) ([]Category, error) {
	var out []Category
	for part := range strings.SplitSeq(s, ",") {
		c := Category(strings.TrimSpace(part))
		switch {
		case c == "":
		case c == "all":
			return slices.Clone(Categories), nil
		case !slices.Contains(Categories, c):
			return nil, fmt.Errorf("unknown category %q: want all, or some of %s", c, joinCategories(Categories))
		case !slices.Contains(out, c):
			out = append(out, c)
		}
	}
	return out, nil
}

func joinCategories(cs []Category) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = string(c)
	}
	return strings.Join(parts, ",")
}

// Grace is how long the clock may run past a rotation or an expiry before
// the operator's lag is called a problem: it reconciles at those instants,
// within a second or two, and clocks differ.
const Grace = time.Minute

// Problem is one thing wrong with a row's object. A problem may fall in
// several categories: a maxKeyAge violation is both a violation and a key
// too old.
type Problem struct {
	Categories []Category `json:"categories"`
	Message    string     `json:"message"`
}

// In reports whether the problem falls in any of cats.
func (p Problem) In(cats []Category) bool {
	return slices.ContainsFunc(p.Categories, func(c Category) bool { return slices.Contains(cats, c) })
}

// The kinds of rows, in the order rows without problems are listed.
const (
	KindTicketKeyRing        = v1alpha1.KindTicketKeyRing
	KindClusterTicketKeyRing = v1alpha1.KindClusterTicketKeyRing
	// KindCertificatePolicy is the kind of ringmaster's policies with its
	// group, as kubectl names a kind unambiguously: Open Cluster
	// Management also serves a CertificatePolicy
	// (policy.open-cluster-management.io).
	KindCertificatePolicy = "CertificatePolicy.ringmaster.io"
	KindCertificate       = string(v1alpha1.KindCertificate)
	KindSecret            = string(v1alpha1.KindSecret)
)

var kindOrder = []string{KindTicketKeyRing, KindClusterTicketKeyRing, KindECHKeyRing, KindCertificatePolicy, KindCertificate, KindSecret, KindPodCertificateRequest, KindClusterTrustBundle}

// Row is one audited object.
type Row struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`

	// KeyID is a ring's active key, a certificate's public key id.
	KeyID string `json:"keyID,omitempty"`
	// KeySince is when that key started to encrypt (a ring), or is first
	// known to have existed (a certificate, dated as the operator dates it);
	// for a policy, the oldest key among its certificates. KeyAge is the
	// time since, at the report's time.
	KeySince *metav1.Time     `json:"keySince,omitempty"`
	KeyAge   *metav1.Duration `json:"keyAge,omitempty"`
	// MaxKeyAge is the limit the key's age is held to: a ring's
	// rotationInterval, the least maxKeyAge of the policies selecting a
	// certificate, a policy's maxKeyAge.
	MaxKeyAge *metav1.Duration `json:"maxKeyAge,omitempty"`
	// Expires is when a ring's oldest retained key is destroyed, when a
	// certificate expires, or the soonest expiry among a policy's
	// certificates.
	Expires *metav1.Time `json:"expires,omitempty"`
	// Policies are the CertificatePolicies that select a certificate.
	Policies []string `json:"policies,omitempty"`
	// Pods counts a ring's pods by what they hold of its staged key, in
	// the kubelet's words for a pod certificate where they fit (fresh,
	// pending, overdue for refresh); only for a ring whose pods confirm.
	Pods map[certpolicy.PodState]int32 `json:"pods,omitempty"`
	// Detail says more: a ring's epoch and keys, a policy's counts, why a
	// certificate has no key shown.
	Detail string `json:"detail,omitempty"`

	Problems []Problem `json:"problems,omitempty"`
}

// Ref names the row's object as kubectl does: Kind namespace/name.
func (r Row) Ref() string {
	if r.Namespace == "" {
		return r.Kind + " " + r.Name
	}
	return r.Kind + " " + r.Namespace + "/" + r.Name
}

// Note says what could not be read, and which categories of problems the
// audit is therefore blind to.
type Note struct {
	Message string     `json:"message"`
	Blinds  []Category `json:"blinds,omitempty"`
}

// Report is the audit.
type Report struct {
	// Time is when the rows were computed; ages are as of then.
	Time metav1.Time `json:"time"`
	// Namespace the audit covers; empty: the whole cluster.
	Namespace string `json:"namespace,omitempty"`
	Rows      []Row  `json:"rows"`
	Notes     []Note `json:"notes,omitempty"`
	// AtRest is the keys' posture at rest; nil when nothing of it was read.
	AtRest *Posture `json:"atRest,omitempty"`
	// UnmanagedKeys are the session-ticket keys no ring manages; nil when
	// nothing was read for them.
	UnmanagedKeys *UnmanagedKeys `json:"unmanagedKeys,omitempty"`
}

// Input is what was read from the API server.
type Input struct {
	Now time.Time
	// Namespace limits the audit to one namespace; empty: the whole
	// cluster. Rings must already be limited to it (cluster rings to those
	// delivering into it); policies are cluster-scoped and their verdicts
	// are filtered here.
	Namespace string
	Rings     []Ring
	// ECHRings are the ECHKeyRings of the namespace (or cluster).
	ECHRings []v1alpha1.ECHKeyRing
	Policies []v1alpha1.CertificatePolicy
	// Certificates and TLSSecrets are those of the namespace (or cluster);
	// CertificatesRead and SecretsRead say whether they could be listed.
	Certificates     []cmapi.Certificate
	CertificatesRead bool
	TLSSecrets       []TLSSecret
	SecretsRead      bool
	// PodCertificateRequests are those of the namespace (or cluster), and
	// TrustBundles the cluster's (none when a namespace is audited); read
	// only when some policy judges their kind.
	PodCertificateRequests []certificatesv1.PodCertificateRequest
	TrustBundles           []certificatesv1.ClusterTrustBundle
	// NamespaceLabels are the labels of every namespace audited; nil when
	// they could not be read. A namespace missing from it is judged by the
	// one label every namespace has, kubernetes.io/metadata.name.
	NamespaceLabels map[string]map[string]string
	// ExpiryWindow: a certificate expiring within it is a problem.
	ExpiryWindow time.Duration
	// Notes say what could not be read.
	Notes []Note
	// KeySecrets are the Secrets holding keys in the namespace (or
	// cluster), by their metadata; nil when they could not be listed.
	KeySecrets []KeySecret
	// Encryption and Provider are how the API server writes Secrets, from
	// EncryptionFromMetrics; empty when its metrics were not read.
	Encryption Encryption
	Provider   string
	// TicketKeys are the ticket keys no ring manages, found in what was
	// read (ticketkeys.Resolve), and TicketKeySources the kinds read for
	// them; nil when none was.
	TicketKeys       *ticketkeys.Result
	TicketKeySources []Source
}

// Build makes the report, problems first.
func Build(in Input) Report {
	r := Report{Time: metav1.NewTime(in.Now), Namespace: in.Namespace, Notes: in.Notes}
	for _, ring := range in.Rings {
		r.Rows = append(r.Rows, ring.Row(in.Now))
	}
	for i := range in.ECHRings {
		r.Rows = append(r.Rows, ECHRow(&in.ECHRings[i], in.Now))
	}
	if in.Namespace == "" {
		for i := range in.Policies {
			r.Rows = append(r.Rows, policyRow(&in.Policies[i], in.Now, in.ExpiryWindow))
		}
	}
	r.Rows = append(r.Rows, certificateRows(in)...)
	Sort(r.Rows)
	r.AtRest = posture(in)
	if in.TicketKeys != nil || len(in.TicketKeySources) > 0 {
		r.UnmanagedKeys = &UnmanagedKeys{Findings: []ticketkeys.Finding{}, Sources: in.TicketKeySources}
		if in.TicketKeys != nil {
			r.UnmanagedKeys.Findings = append(r.UnmanagedKeys.Findings, in.TicketKeys.Findings...)
			r.UnmanagedKeys.Unresolved = in.TicketKeys.Unresolved
		}
	}
	return r
}

// Sort orders rows with problems first, then by kind, namespace and name.
func Sort(rows []Row) {
	slices.SortStableFunc(rows, func(a, b Row) int {
		return cmp.Or(
			cmp.Compare(min(len(b.Problems), 1), min(len(a.Problems), 1)),
			cmp.Compare(slices.Index(kindOrder, a.Kind), slices.Index(kindOrder, b.Kind)),
			cmp.Compare(a.Namespace, b.Namespace),
			cmp.Compare(a.Name, b.Name))
	})
}

// Finding is a problem of one row.
type Finding struct {
	Ref string
	Problem
}

// Broken lists the problems that fall in cats, in row order.
func (r Report) Broken(cats []Category) []Finding {
	var out []Finding
	for _, row := range r.Rows {
		for _, p := range row.Problems {
			if p.In(cats) {
				out = append(out, Finding{Ref: row.Ref(), Problem: p})
			}
		}
	}
	if r.UnmanagedKeys != nil && slices.Contains(cats, Unmanaged) {
		for _, f := range r.UnmanagedKeys.Findings {
			out = append(out, Finding{Ref: FindingRef(f), Problem: unmanagedProblem(f)})
		}
	}
	if r.AtRest != nil {
		for _, p := range r.AtRest.Problems {
			if p.In(cats) {
				out = append(out, Finding{Ref: "Keys at rest", Problem: p})
			}
		}
	}
	return out
}

// Blind lists the notes that hide problems of cats: the audit cannot vouch
// for those categories.
func (r Report) Blind(cats []Category) []Note {
	var out []Note
	for _, n := range r.Notes {
		if slices.ContainsFunc(n.Blinds, func(c Category) bool { return slices.Contains(cats, c) }) {
			out = append(out, n)
		}
	}
	return out
}

func problem(msg string, cats ...Category) Problem {
	return Problem{Categories: cats, Message: msg}
}

func timePtr(t time.Time) *metav1.Time { return &metav1.Time{Time: t} }

func durationPtr(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
