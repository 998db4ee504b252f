package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PolicyAction is what a CertificatePolicy does about a violation.
// +kubebuilder:validation:Enum=Audit;Enforce
type PolicyAction string

const (
	// ActionAudit reports violations in status, events and metrics.
	ActionAudit PolicyAction = "Audit"
	// ActionEnforce also re-issues cert-manager Certificates that break
	// maxKeyAge, maxValidity or minRemainingValidity.
	ActionEnforce PolicyAction = "Enforce"
)

// KeyAlgorithm is a public key algorithm of a certificate.
// +kubebuilder:validation:Enum=RSA;ECDSA;Ed25519
type KeyAlgorithm string

// Key algorithms.
const (
	KeyAlgorithmRSA     KeyAlgorithm = "RSA"
	KeyAlgorithmECDSA   KeyAlgorithm = "ECDSA"
	KeyAlgorithmEd25519 KeyAlgorithm = "Ed25519"
)

// CertificateKind is a kind of object that carries a certificate.
// +kubebuilder:validation:Enum=Certificate;Secret;PodCertificateRequest;ClusterTrustBundle
type CertificateKind string

const (
	// KindCertificate is a cert-manager.io/v1 Certificate, judged by its
	// spec and by the certificate in its spec.secretName.
	KindCertificate CertificateKind = "Certificate"
	// KindSecret is a kubernetes.io/tls Secret that no Certificate in the
	// cluster manages, judged by its tls.crt.
	KindSecret CertificateKind = "Secret"
	// KindPodCertificateRequest is a certificates.k8s.io/v1
	// PodCertificateRequest: what a kubelet asks a signer for, for a pod's
	// podCertificate projected volume (KEP-4317), judged by its spec and by
	// the chain the signer issued in its status.
	KindPodCertificateRequest CertificateKind = "PodCertificateRequest"
	// KindClusterTrustBundle is a certificates.k8s.io/v1 ClusterTrustBundle
	// (KEP-3257), whose certificates are judged as CAs (spec.caRules).
	KindClusterTrustBundle CertificateKind = "ClusterTrustBundle"
)

// CertificatePolicySpec selects certificates and the rules they must obey.
//
// +kubebuilder:validation:XValidation:rule="!has(self.action) || self.action != 'Enforce' || has(self.rules.maxKeyAge) || has(self.rules.maxValidity) || has(self.rules.minRemainingValidity) || has(self.rules.allowedSignerNames) || has(self.rules.maxExpirationSeconds)",message="action Enforce re-issues certificates that break maxKeyAge, maxValidity or minRemainingValidity, and refuses pods whose podCertificate volumes break allowedSignerNames, maxExpirationSeconds or keyAlgorithms: set at least one of maxKeyAge, maxValidity, minRemainingValidity, allowedSignerNames or maxExpirationSeconds"
type CertificatePolicySpec struct {
	// selector chooses the certificates the policy judges. Every condition
	// set must hold. An empty selector selects every certificate in the
	// cluster.
	// +kubebuilder:default={}
	// +optional
	Selector CertificateSelector `json:"selector,omitempty"`

	// rules are what a selected certificate must obey. A certificate that
	// breaks one or more is violating; each broken rule is reported.
	// +required
	Rules CertificateRules `json:"rules"`

	// action is Audit (default: report violations in status, events and
	// metrics) or Enforce (also re-issue cert-manager Certificates that
	// break maxKeyAge, maxValidity or minRemainingValidity, by setting their
	// Issuing condition as `cmctl renew` does, at most
	// --max-renewals-per-minute across the cluster). Enforce never changes a
	// Secret, and never re-issues what re-issuing cannot mend: those are
	// reported with the reason CannotEnforce.
	// +kubebuilder:default=Audit
	// +optional
	Action PolicyAction `json:"action,omitempty"`

	// caRules are what a CA certificate must obey: the certificates of a
	// selected ClusterTrustBundle, the CA certificates in a selected TLS
	// Secret (its ca.crt, or its tls.crt when that is a CA itself, as in a
	// cert-manager CA issuer's Secret), and the intermediates of a
	// PodCertificateRequest's issued chain. A CA certificate is judged by
	// these rules alone, never by spec.rules, which are for leaves.
	// Omitted: CA certificates are judged only for being expired or not
	// yet valid (rule caValidity).
	// +optional
	CARules *CARules `json:"caRules,omitempty"`
}

// CARules are what a CA certificate must obey. Besides them, a CA
// certificate that has expired or is not yet valid always violates (rule
// caValidity).
//
// +kubebuilder:validation:XValidation:rule="has(self.maxValidity) || has(self.minValidity) || has(self.minRemainingValidity) || has(self.keyAlgorithms)",message="caRules must set at least one rule"
// +kubebuilder:validation:XValidation:rule="!has(self.maxValidity) || !has(self.minValidity) || duration(self.minValidity) <= duration(self.maxValidity)",message="caRules.minValidity must not exceed caRules.maxValidity, or no CA could comply"
type CARules struct {
	// maxValidity is the longest a CA certificate may be valid for:
	// notAfter minus notBefore. At least 1h. For example "87600h" (10
	// years).
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1h')",message="caRules.maxValidity must be at least 1h"
	// +optional
	MaxValidity *metav1.Duration `json:"maxValidity,omitempty"`

	// minValidity is the shortest a CA certificate may be valid for: a CA
	// must outlive the leaves it signs. At least 1h. For example "8760h"
	// (1 year).
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1h')",message="caRules.minValidity must be at least 1h"
	// +optional
	MinValidity *metav1.Duration `json:"minValidity,omitempty"`

	// minRemainingValidity is the least time a CA certificate must have
	// left before its notAfter: a trust bundle or chain whose CA expires
	// within it is near expiry. At least 1m. For example "720h" (30 days).
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="caRules.minRemainingValidity must be at least 1m"
	// +optional
	MinRemainingValidity *metav1.Duration `json:"minRemainingValidity,omitempty"`

	// keyAlgorithms, when set, are the only public key algorithms a CA
	// certificate may have, each with its least size. Omitted: any.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=3
	// +listType=map
	// +listMapKey=algorithm
	// +optional
	KeyAlgorithms []KeyAlgorithmRule `json:"keyAlgorithms,omitempty"`
}

// CertificateSelector chooses certificates. Every condition that is set must
// hold.
type CertificateSelector struct {
	// namespaceSelector selects the namespaces, by their labels, whose
	// certificates are judged. Omitted: every namespace. It does not apply
	// to ClusterTrustBundles, which have none. Match the label
	// kubernetes.io/metadata.name to name namespaces.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// labelSelector selects certificates by their own labels: a
	// Certificate's labels, the labels of a kubernetes.io/tls Secret that
	// no Certificate manages, or a ClusterTrustBundle's. It does not apply
	// to PodCertificateRequests, which kubelets make without labels.
	// Omitted: every certificate.
	// +optional
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`

	// issuerRefs, when set, select only certificates issued through one of
	// these cert-manager issuers: a Certificate's spec.issuerRef, or the
	// cert-manager.io/issuer-name, -kind and -group annotations of a Secret.
	// A Secret that cert-manager did not issue has no issuer and is not
	// selected when issuerRefs is set. It does not apply to
	// PodCertificateRequests and ClusterTrustBundles: see signerNames.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	IssuerRefs []IssuerRefPattern `json:"issuerRefs,omitempty"`

	// kinds are the objects judged: "Certificate" (cert-manager
	// Certificates, with the certificate in their Secret), "Secret"
	// (kubernetes.io/tls Secrets that no Certificate manages),
	// "PodCertificateRequest" (the requests kubelets make for
	// podCertificate projected volumes, with the chain their signer
	// issued) and "ClusterTrustBundle" (whose certificates are judged as
	// CAs, by spec.caRules). A Secret that a Certificate manages is judged
	// once, as that Certificate. Omitted: Certificate and Secret; pod
	// certificates and trust bundles are judged only by a policy that
	// names them.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=4
	// +listType=set
	// +optional
	Kinds []CertificateKind `json:"kinds,omitempty"`

	// signerNames, when set, select only PodCertificateRequests and
	// ClusterTrustBundles whose spec.signerName matches one of these
	// patterns, in which "*" matches any run of characters:
	// "example.com/*" matches "example.com/mesh". A ClusterTrustBundle
	// with no signer name is then not selected. Certificates and Secrets
	// are not affected.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=571
	// +kubebuilder:validation:items:Pattern=`^[-a-zA-Z0-9.*/_:]+$`
	// +listType=set
	// +optional
	SignerNames []string `json:"signerNames,omitempty"`

	// serviceAccountNames, when set, select only the PodCertificateRequests
	// of pods that run as a service account whose name matches one of
	// these patterns, in which "*" matches any run of characters. Other
	// kinds are not affected.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[-a-zA-Z0-9.*/_:]+$`
	// +listType=set
	// +optional
	ServiceAccountNames []string `json:"serviceAccountNames,omitempty"`
}

// IssuerRefPattern matches a cert-manager issuer reference. In each field,
// "*" matches any run of characters: "vault-*" matches "vault-prod".
type IssuerRefPattern struct {
	// name of the issuer, e.g. "letsencrypt-prod" or "vault-*".
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`

	// kind of the issuer: "Issuer", "ClusterIssuer", or an external
	// issuer's kind. Omitted: any kind. A Certificate whose issuerRef has no
	// kind is taken to name an "Issuer", as cert-manager does.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Kind string `json:"kind,omitempty"`

	// group of the issuer: "cert-manager.io", or an external issuer's API
	// group. Omitted: any group. A Certificate whose issuerRef has no group
	// is taken to name one in "cert-manager.io", as cert-manager does.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Group string `json:"group,omitempty"`
}

// CertificateRules are what a selected certificate must obey. Besides them,
// a certificate that has expired, is not yet valid, or cannot be parsed
// always violates (rule "validity" or "readable").
//
// +kubebuilder:validation:XValidation:rule="has(self.maxValidity) || has(self.minRemainingValidity) || has(self.maxKeyAge) || has(self.keyAlgorithms) || has(self.allowedDNSNames) || has(self.deniedDNSNames) || has(self.requiredDNSNames) || has(self.allowedIPRanges) || (has(self.requireKeyRotation) && self.requireKeyRotation) || has(self.allowedSignerNames) || has(self.maxExpirationSeconds) || has(self.refreshOverdueAfter)",message="rules must set at least one rule"
// +kubebuilder:validation:XValidation:rule="!has(self.maxValidity) || !has(self.minRemainingValidity) || duration(self.minRemainingValidity) < duration(self.maxValidity)",message="minRemainingValidity must be less than maxValidity, or no certificate could comply"
type CertificateRules struct {
	// maxValidity is the longest a certificate may be valid for: notAfter
	// minus notBefore. At least 1h. For example "2160h" (90 days).
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1h')",message="maxValidity must be at least 1h"
	// +optional
	MaxValidity *metav1.Duration `json:"maxValidity,omitempty"`

	// minRemainingValidity is the least time a certificate must have left
	// before its notAfter. For example "360h" (15 days) flags certificates
	// whose renewal is overdue. At least 1m.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="minRemainingValidity must be at least 1m"
	// +optional
	MinRemainingValidity *metav1.Duration `json:"minRemainingValidity,omitempty"`

	// maxKeyAge is the oldest a certificate's private key may be. At least
	// 1h. The operator never reads private keys; it dates a key by its
	// public key. For a Certificate with privateKey.rotationPolicy Always
	// (cert-manager's default since v1.18) every issuance brings a new key,
	// so the key is as old as the certificate (now minus notBefore). For
	// any other certificate (rotationPolicy Never, or a Secret that no
	// Certificate manages) a key may outlive its certificate, so it is as
	// old as the notBefore of the earliest certificate the operator has seen
	// carrying the same public key. That record lives in the operator's
	// memory: after a restart a reused key looks as young as its current
	// certificate until renewed again. Issuers that back-date notBefore (some
	// do, by up to an hour) make keys look that much older.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1h')",message="maxKeyAge must be at least 1h"
	// +optional
	MaxKeyAge *metav1.Duration `json:"maxKeyAge,omitempty"`

	// keyAlgorithms, when set, are the only public key algorithms allowed,
	// each with its least size. Omitted: any algorithm.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=3
	// +listType=map
	// +listMapKey=algorithm
	// +optional
	KeyAlgorithms []KeyAlgorithmRule `json:"keyAlgorithms,omitempty"`

	// allowedDNSNames, when set, are patterns that every DNS name of a
	// certificate (its DNS subject alternative names, and its common name
	// when it has none) must match. In a pattern, "*" matches any run of
	// characters within one label and "**" any run of whole labels:
	// "*.example.com" matches "www.example.com" but not "a.b.example.com";
	// "**.example.com" matches both. A wildcard name in a certificate,
	// "*.example.com", matches only a pattern that allows every name it
	// covers, such as "*.example.com" or "**.example.com".
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[a-zA-Z0-9*]([-a-zA-Z0-9*]*[a-zA-Z0-9*])?(\.[a-zA-Z0-9*]([-a-zA-Z0-9*]*[a-zA-Z0-9*])?)*$`
	// +listType=set
	// +optional
	AllowedDNSNames []string `json:"allowedDNSNames,omitempty"`

	// deniedDNSNames, when set, are patterns that no DNS name of a
	// certificate (its DNS subject alternative names, and its common name
	// when it has none) may match, written as in allowedDNSNames: it
	// refuses names an allow-list would let through, such as
	// "**.internal.example.com" or "localhost". A wildcard name in a
	// certificate is denied when any name it covers would be: a
	// certificate for "*.example.com" breaks a deny of "admin.example.com".
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[a-zA-Z0-9*]([-a-zA-Z0-9*]*[a-zA-Z0-9*])?(\.[a-zA-Z0-9*]([-a-zA-Z0-9*]*[a-zA-Z0-9*])?)*$`
	// +listType=set
	// +optional
	DeniedDNSNames []string `json:"deniedDNSNames,omitempty"`

	// requiredDNSNames, when set, are DNS names that every certificate must
	// carry: each must be one of its DNS subject alternative names, or be
	// covered by a wildcard one ("*.example.com" covers "www.example.com"),
	// as a client verifying the name would accept it. The common name does
	// not count. Use it for the public name of an ECHKeyRing
	// (spec.publicName): a client whose Encrypted Client Hello is rejected
	// authenticates the retry configs against the certificate of the public
	// name, so every certificate of the fleet must cover it. Names compare
	// case-insensitively; no wildcards.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[a-zA-Z0-9]([-a-zA-Z0-9]{0,61}[a-zA-Z0-9])?(\.[a-zA-Z0-9]([-a-zA-Z0-9]{0,61}[a-zA-Z0-9])?)*$`
	// +listType=set
	// +optional
	RequiredDNSNames []string `json:"requiredDNSNames,omitempty"`

	// allowedIPRanges, when set, are CIDRs that every IP address subject
	// alternative name of a certificate must lie in, e.g. "10.0.0.0/8" or
	// "fd00::/8". Omitted: any address.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="self.all(r, isCIDR(r))",message="allowedIPRanges must be CIDRs such as 10.0.0.0/8"
	// +listType=set
	// +optional
	AllowedIPRanges []string `json:"allowedIPRanges,omitempty"`

	// requireKeyRotation requires cert-manager Certificates to get a new
	// private key with each issuance: privateKey.rotationPolicy Always, or
	// unset, which means Always since cert-manager v1.18. It does not apply
	// to Secrets that no Certificate manages.
	// +optional
	RequireKeyRotation bool `json:"requireKeyRotation,omitempty"`

	// allowedSignerNames, when set, are the signers a PodCertificateRequest
	// may address: patterns, in which "*" matches any run of characters,
	// that its spec.signerName must match. With a namespaceSelector this
	// is the signers a namespace may use. Other kinds are not affected.
	// Enforced at admission too (docs/pod-certificates.md).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=571
	// +kubebuilder:validation:items:Pattern=`^[-a-zA-Z0-9.*/_:]+$`
	// +listType=set
	// +optional
	AllowedSignerNames []string `json:"allowedSignerNames,omitempty"`

	// maxExpirationSeconds is the longest lifetime a PodCertificateRequest
	// may ask for: its spec.maxExpirationSeconds (86400 when the pod sets
	// none) must not exceed it. Between 3600 and 7862400 (91 days), the
	// range Kubernetes allows. Other kinds are not affected; use
	// maxValidity for the lifetime of any issued certificate.
	// +kubebuilder:validation:Minimum=3600
	// +kubebuilder:validation:Maximum=7862400
	// +optional
	MaxExpirationSeconds *int32 `json:"maxExpirationSeconds,omitempty"`

	// refreshOverdueAfter is how long past its status.beginRefreshAt an
	// issued PodCertificateRequest may stay the newest of its pod and
	// signer before the kubelet's refresh counts as overdue (rule
	// refreshOverdue). The kubelet begins to refresh at beginRefreshAt;
	// a pod whose certificate is not refreshed by then plus this margin
	// has a kubelet, signer or node in trouble. At least 1m. For example
	// "30m". Other kinds are not affected.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="refreshOverdueAfter must be at least 1m"
	// +optional
	RefreshOverdueAfter *metav1.Duration `json:"refreshOverdueAfter,omitempty"`
}

// KeyAlgorithmRule allows one public key algorithm.
//
// +kubebuilder:validation:XValidation:rule="self.algorithm != 'Ed25519' || !has(self.minSize)",message="minSize does not apply to Ed25519"
// +kubebuilder:validation:XValidation:rule="self.algorithm != 'ECDSA' || !has(self.minSize) || self.minSize in [256, 384, 521]",message="minSize of ECDSA is a curve size: 256 (P-256), 384 (P-384) or 521 (P-521)"
// +kubebuilder:validation:XValidation:rule="self.algorithm != 'RSA' || !has(self.minSize) || self.minSize >= 1024",message="minSize of RSA is a modulus size of at least 1024 bits"
type KeyAlgorithmRule struct {
	// algorithm is RSA, ECDSA or Ed25519.
	// +required
	Algorithm KeyAlgorithm `json:"algorithm"`

	// minSize is the least key size: RSA modulus bits (e.g. 2048), or the
	// ECDSA curve size (256 allows P-256, P-384 and P-521; 384 allows P-384
	// and P-521). Omitted: any size. Not allowed for Ed25519.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16384
	// +optional
	MinSize int32 `json:"minSize,omitempty"`
}

// CertificateRef names a judged object.
type CertificateRef struct {
	// kind is Certificate (cert-manager), Secret (a kubernetes.io/tls
	// Secret that no Certificate manages), PodCertificateRequest or
	// ClusterTrustBundle (cluster-scoped: no namespace).
	Kind CertificateKind `json:"kind"`
	// namespace of the object; empty for a ClusterTrustBundle.
	Namespace string `json:"namespace"`
	// name of the object.
	Name string `json:"name"`
}

// Violation is one rule that one certificate breaks.
type Violation struct {
	CertificateRef `json:",inline"`
	// rule is the broken rule: a field of spec.rules (maxValidity,
	// minRemainingValidity, maxKeyAge, keyAlgorithms, allowedDNSNames,
	// deniedDNSNames, requiredDNSNames, allowedIPRanges,
	// requireKeyRotation, allowedSignerNames, maxExpirationSeconds),
	// "refreshOverdue" (a pod certificate not refreshed in time),
	// "issued" (a PodCertificateRequest its signer denied or failed),
	// "validity" (expired or not yet valid), "readable" (no parsable
	// certificate), or one of spec.caRules prefixed "ca" (caMaxValidity,
	// caMinValidity, caMinRemainingValidity, caKeyAlgorithms, and
	// caValidity: a CA expired or not yet valid).
	Rule string `json:"rule"`
	// message states the fact that broke the rule, e.g. "key is 97d old;
	// maxKeyAge is 90d". It never holds key material.
	Message string `json:"message"`
}

// KeyAgeRef names the certificate with the oldest key.
type KeyAgeRef struct {
	CertificateRef `json:",inline"`
	// since is when the key is first known to have existed; see
	// spec.rules.maxKeyAge for how that is determined.
	Since metav1.Time `json:"since"`
}

// ExpiryRef names the certificate that expires first.
type ExpiryRef struct {
	CertificateRef `json:",inline"`
	// notAfter is when the certificate expires.
	NotAfter metav1.Time `json:"notAfter"`
}

// CertificatePolicyStatus is the verdict on every selected certificate. It
// never holds key material.
type CertificatePolicyStatus struct {
	// conditions: Ready is True once the selected certificates have been
	// judged against the current generation; Compliant is True when none
	// breaks a rule.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// evaluated is how many certificates the policy selects.
	// +optional
	Evaluated int32 `json:"evaluated"`

	// compliant is how many of them obey every rule.
	// +optional
	Compliant int32 `json:"compliant"`

	// violating is how many of them break at least one rule.
	// +optional
	Violating int32 `json:"violating"`

	// oldestKey is the selected certificate whose key is the oldest.
	// +optional
	OldestKey *KeyAgeRef `json:"oldestKey,omitempty"`

	// soonestExpiry is the selected certificate that expires first.
	// +optional
	SoonestExpiry *ExpiryRef `json:"soonestExpiry,omitempty"`

	// violations lists broken rules, ordered by namespace, name, kind and
	// rule, at most 50; violationsOmitted counts the rest.
	// +optional
	// +listType=atomic
	Violations []Violation `json:"violations,omitempty"`

	// violationsOmitted is how many violations did not fit in violations.
	// +optional
	ViolationsOmitted int32 `json:"violationsOmitted,omitempty"`

	// podCertificates counts the selected PodCertificateRequests by state,
	// in the kubelet's words; omitted when the policy selects none.
	// +optional
	PodCertificates *PodCertificateStates `json:"podCertificates,omitempty"`
}

// PodCertificateStates counts PodCertificateRequests by state.
type PodCertificateStates struct {
	// pending: neither issued, denied nor failed yet.
	// +optional
	Pending int32 `json:"pending,omitempty"`
	// fresh: issued, valid, and not past its beginRefreshAt plus
	// rules.refreshOverdueAfter.
	// +optional
	Fresh int32 `json:"fresh,omitempty"`
	// overdueForRefresh: issued and still valid, but past its
	// beginRefreshAt plus rules.refreshOverdueAfter with no newer request
	// for its pod and signer.
	// +optional
	OverdueForRefresh int32 `json:"overdueForRefresh,omitempty"`
	// expired: issued, and past its notAfter.
	// +optional
	Expired int32 `json:"expired,omitempty"`
	// failed: its signer could not issue it.
	// +optional
	Failed int32 `json:"failed,omitempty"`
	// denied: its signer refused it.
	// +optional
	Denied int32 `json:"denied,omitempty"`
}

// CertificatePolicy selects certificates across the cluster (cert-manager
// Certificates and kubernetes.io/tls Secrets) and judges their validity,
// key age, key algorithm and names. In Audit mode it reports what breaks its
// rules; in Enforce mode it also has cert-manager re-issue certificates whose
// key or validity breaks them.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=cpol,categories=ringmaster
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Action",type=string,JSONPath=`.spec.action`
// +kubebuilder:printcolumn:name="Evaluated",type=integer,JSONPath=`.status.evaluated`
// +kubebuilder:printcolumn:name="Violating",type=integer,JSONPath=`.status.violating`
// +kubebuilder:printcolumn:name="Oldest Key",type=date,JSONPath=`.status.oldestKey.since`
// +kubebuilder:printcolumn:name="Soonest Expiry",type=string,JSONPath=`.status.soonestExpiry.notAfter`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CertificatePolicy struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec selects certificates and states the rules they must obey.
	// +required
	Spec CertificatePolicySpec `json:"spec"`

	// status is the verdict on the selected certificates. It never holds
	// key material.
	// +optional
	Status CertificatePolicyStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// CertificatePolicyList is a list of CertificatePolicies.
type CertificatePolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CertificatePolicy `json:"items"`
}

func init() {
	register(&CertificatePolicy{}, &CertificatePolicyList{})
}
