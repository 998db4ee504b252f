package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels and annotations ringmaster sets or reads.
const (
	// RingLabel names the TicketKeyRing a snapshot or projection Secret
	// belongs to.
	RingLabel = "ringmaster.io/ring"
	// RingNamespaceLabel names the namespace of that TicketKeyRing, for the
	// projection copies in other namespaces.
	RingNamespaceLabel = "ringmaster.io/ring-namespace"
	// EpochLabel is the epoch of a snapshot Secret.
	EpochLabel = "ringmaster.io/epoch"
	// ComponentLabel tells a snapshot Secret from a projection Secret.
	ComponentLabel = "ringmaster.io/component"
	// EpochAnnotation on a projection Secret names the epoch it carries.
	EpochAnnotation = "ringmaster.io/epoch"

	// RotateRequestedAtAnnotation asks for a rotation now. Set it to the
	// current time (RFC 3339); each new value is handled once and echoed in
	// status.lastRotateRequestedAt, as `cmctl renew` and Flux's
	// reconcile.fluxcd.io/requestedAt do.
	RotateRequestedAtAnnotation = "ringmaster.io/rotate-requested-at"

	// CleanupFinalizer lets the operator remove the projection copies in
	// other namespaces, which owner references cannot reach.
	CleanupFinalizer = "ringmaster.io/cleanup"
)

// Values of ComponentLabel.
const (
	ComponentSnapshot   = "snapshot"
	ComponentProjection = "projection"
)

// Condition types and reasons of a TicketKeyRing.
const (
	// ConditionReady summarises the ring: its newest epoch is published to
	// every target namespace.
	ConditionReady = "Ready"

	// ReasonPublished: the newest epoch is in its snapshot and every projection.
	ReasonPublished = "Published"
	// ReasonSecretConflict: a Secret ringmaster must write exists and is not
	// ringmaster's. It is left untouched.
	ReasonSecretConflict = "SecretConflict"
	// ReasonMintFailed: the key source did not produce a key; nothing new was
	// published and the current keys keep serving.
	ReasonMintFailed = "MintFailed"
	// ReasonInvalidSnapshot: the newest snapshot Secret cannot be read.
	ReasonInvalidSnapshot = "InvalidSnapshot"
	// ReasonInvalidSpec: the spec breaks a rule the API server should have
	// enforced (its CRD is out of date).
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonPublishFailed: the API server refused a write; retried.
	ReasonPublishFailed = "PublishFailed"
)

// KeyFormat is a server's ticket key file format.
// +kubebuilder:validation:Enum=go;nginx;haproxy;envoy
type KeyFormat string

// KeyState is where a key stands in its life.
// +kubebuilder:validation:Enum=staged;active;decrypt-only
type KeyState string

// TicketKeyRingSpec is the rotation schedule and delivery of one ring of TLS
// session ticket keys.
//
// +kubebuilder:validation:XValidation:rule="duration(self.rotationInterval) >= duration('1m')",message="rotationInterval must be at least 1m"
// +kubebuilder:validation:XValidation:rule="duration(self.activationDelay) >= duration('0s') && duration(self.activationDelay) < duration(self.rotationInterval)",message="activationDelay must be at least 0s and less than rotationInterval"
// +kubebuilder:validation:XValidation:rule="duration(self.rotationInterval).getSeconds() * (self.retainedKeys + 1) <= 604800",message="(retainedKeys + 1) x rotationInterval must not exceed 168h: no session ticket may outlive 7 days (RFC 8446)"
type TicketKeyRingSpec struct {
	// rotationInterval is how long one key encrypts new tickets before the
	// next key takes over. At least 1m. Shorter intervals bound how much
	// traffic one stolen key exposes.
	// +kubebuilder:default="1h"
	// +optional
	RotationInterval metav1.Duration `json:"rotationInterval,omitempty"`

	// retainedKeys is how many retired keys stay, decrypt-only, after a key
	// stops encrypting, so that clients holding older tickets still resume.
	// A key is destroyed retainedKeys x rotationInterval after it retires.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=16
	// +kubebuilder:default=3
	// +optional
	RetainedKeys int32 `json:"retainedKeys"`

	// activationDelay is the least time a new key is delivered to every pod
	// before it encrypts anything. It must exceed the delivery lag (kubelet
	// sync period plus its cache TTL, about 1-2 minutes by default) plus clock
	// skew. It bounds how soon a rotate-now request takes effect.
	// +kubebuilder:default="3m"
	// +optional
	ActivationDelay metav1.Duration `json:"activationDelay,omitempty"`

	// source says where keys are minted. When omitted, the operator mints
	// them in-cluster from crypto/rand.
	// +optional
	Source KeySource `json:"source,omitempty"`

	// distribution says where the keys are delivered and in which formats.
	// +kubebuilder:default={}
	// +optional
	Distribution Distribution `json:"distribution,omitempty"`
}

// Distribution says where a ring's keys are delivered.
type Distribution struct {
	// secretName is the mutable projection Secret that pods mount (as a
	// volume, without subPath) in every target namespace. It always holds the
	// newest epoch. Defaults to <ring name>-ticket-keys.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	SecretName string `json:"secretName,omitempty"`

	// namespaces also receive a copy of the projection Secret, besides the
	// ring's own namespace. Copies are removed when the ring is deleted or a
	// namespace is dropped from this list.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +listType=set
	// +optional
	Namespaces []string `json:"namespaces,omitempty"`

	// formats are written beside ticketkeys.json: "go" (ticketkeys.json
	// alone, read by pkg/agent), "nginx" (nginx.N.key, 80 bytes each, the
	// first encrypts), "haproxy" (haproxy.keys for tls-ticket-keys) and
	// "envoy" (envoy.N.key). Each derived format uses keys of its own, derived
	// with HKDF-SHA256.
	// +kubebuilder:default={go}
	// +kubebuilder:validation:MaxItems=4
	// +listType=set
	// +optional
	Formats []KeyFormat `json:"formats,omitempty"`
}

// KeyStatus describes one key of the ring. It never holds key bytes.
type KeyStatus struct {
	// id is the key's public identifier: a hash that reveals nothing of the
	// key.
	ID string `json:"id"`
	// state is staged (delivered, not encrypting yet), active (encrypting)
	// or decrypt-only (retired).
	State KeyState `json:"state"`
	// activeFrom is when the key starts to encrypt new tickets.
	ActiveFrom metav1.Time `json:"activeFrom"`
	// retireAt is when the next key takes over.
	RetireAt metav1.Time `json:"retireAt"`
	// expiresAt is when the key is destroyed.
	ExpiresAt metav1.Time `json:"expiresAt"`
}

// ActiveKey names the key that encrypts new tickets.
type ActiveKey struct {
	// id is the active key's public identifier.
	ID string `json:"id"`
	// activeFrom is when it started to encrypt.
	ActiveFrom metav1.Time `json:"activeFrom"`
}

// TicketKeyRingStatus is the observed state of a ring. It never holds key
// bytes.
type TicketKeyRingStatus struct {
	// conditions: Ready is True when the newest epoch is published to every
	// target namespace.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// epoch is the newest published epoch; it grows by one with each
	// snapshot.
	// +optional
	Epoch int64 `json:"epoch,omitempty"`

	// snapshot is the immutable Secret holding the newest epoch.
	// +optional
	Snapshot string `json:"snapshot,omitempty"`

	// activeKey is the key that encrypts new tickets now.
	// +optional
	ActiveKey *ActiveKey `json:"activeKey,omitempty"`

	// nextRotation is when the staged key starts to encrypt.
	// +optional
	NextRotation *metav1.Time `json:"nextRotation,omitempty"`

	// keys are the ring's keys, newest first.
	// +optional
	Keys []KeyStatus `json:"keys,omitempty"`

	// lastRotateRequestedAt echoes the last ringmaster.io/rotate-requested-at
	// annotation value that was handled.
	// +optional
	LastRotateRequestedAt string `json:"lastRotateRequestedAt,omitempty"`
}

// TicketKeyRing is a ring of TLS session ticket keys shared by a fleet of
// servers: minted, rotated on a schedule with the next key delivered before
// it encrypts, kept decrypt-only for a while, then destroyed.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tkr,categories=ringmaster
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Epoch",type=integer,JSONPath=`.status.epoch`
// +kubebuilder:printcolumn:name="Active Key",type=string,JSONPath=`.status.activeKey.id`
// +kubebuilder:printcolumn:name="Key Age",type=date,JSONPath=`.status.activeKey.activeFrom`
// +kubebuilder:printcolumn:name="Next Rotation",type=string,JSONPath=`.status.nextRotation`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TicketKeyRing struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the rotation schedule and delivery of the ring.
	// +kubebuilder:default={rotationInterval:"1h",retainedKeys:3,activationDelay:"3m",distribution:{formats:{"go"}}}
	// +optional
	Spec TicketKeyRingSpec `json:"spec,omitempty"`

	// status is the observed state of the ring. It never holds key bytes.
	// +optional
	Status TicketKeyRingStatus `json:"status,omitempty"`
}

// ProjectionSecretName is the name of the projection Secret pods mount.
func (r *TicketKeyRing) ProjectionSecretName() string {
	if r.Spec.Distribution.SecretName != "" {
		return r.Spec.Distribution.SecretName
	}
	return r.Name + "-ticket-keys"
}

// +kubebuilder:object:root=true

// TicketKeyRingList is a list of TicketKeyRings.
type TicketKeyRingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TicketKeyRing `json:"items"`
}

func init() {
	SchemeBuilder.Register(&TicketKeyRing{}, &TicketKeyRingList{})
}
