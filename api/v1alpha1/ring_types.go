package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KeyFormat is a server's ticket key file format.
// +kubebuilder:validation:Enum=go;nginx;haproxy;envoy
type KeyFormat string

// KeyState is where a key stands in its life.
// +kubebuilder:validation:Enum=staged;active;decrypt-only
type KeyState string

// TicketKeyRingSpec is the rotation schedule, key source and delivery of one
// ring of TLS session ticket keys. ClusterTicketKeyRing shares it.
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
	// A key is destroyed retainedKeys x rotationInterval after it retires,
	// or sooner when rotate-now requests retire more than retainedKeys keys
	// within that time: the ring never holds more than retainedKeys retired
	// keys.
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

	// sourceRef names the ClusterKeySource that mints the ring's keys, for
	// example one that asks Vault. A TicketKeyRing may use it only if the
	// source's namespaceSelector matches the ring's namespace. When omitted,
	// the operator mints keys in-cluster from crypto/rand.
	// +optional
	SourceRef *KeySourceReference `json:"sourceRef,omitempty"`

	// distribution says how the keys reach the pods.
	// +kubebuilder:default={}
	// +optional
	Distribution Distribution `json:"distribution,omitempty"`
}

// KeySourceReference names a ClusterKeySource.
type KeySourceReference struct {
	// name of the ClusterKeySource.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// Distribution says how a ring's keys reach the pods.
type Distribution struct {
	// secretName is the mutable projection Secret that pods mount (as a
	// volume, without subPath) in every target namespace. It always holds the
	// newest epoch. Defaults to <ring name>-ticket-keys. It may not end in
	// -e<number> or -ce<number>, the form of snapshot Secret names.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('-c?e[0-9]+$')",message="secretName may not end in -e<number> or -ce<number>: snapshot Secrets are named <ring>-e<epoch> (<ring>-ce<epoch> for a ClusterTicketKeyRing)"
	// +optional
	SecretName string `json:"secretName,omitempty"`

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

// TargetFailure is a namespace that did not receive the ring's newest epoch.
type TargetFailure struct {
	// namespace that did not receive it.
	Namespace string `json:"namespace"`
	// reason is SecretConflict (a Secret the ring does not own holds the
	// projection's name) or PublishFailed (the API server refused the
	// write).
	Reason string `json:"reason"`
	// message says what went wrong.
	Message string `json:"message"`
}

// TicketKeyRingStatus is the observed state of a ring. It never holds key
// bytes. ClusterTicketKeyRing shares it.
type TicketKeyRingStatus struct {
	// conditions: Ready is True when the newest epoch is published to every
	// target namespace; RotationOverdue is True while a due rotation cannot
	// be minted.
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

	// targets is how many namespaces the ring is delivered to.
	// +optional
	Targets int32 `json:"targets,omitempty"`

	// failedTargets lists, in namespace order, the target namespaces that
	// did not receive the newest epoch and why (at most 20; the Ready
	// condition counts them all).
	// +kubebuilder:validation:MaxItems=20
	// +optional
	FailedTargets []TargetFailure `json:"failedTargets,omitempty"`

	// lastRotateRequestedAt echoes the last ringmaster.io/rotate-requested-at
	// annotation value that was handled.
	// +optional
	LastRotateRequestedAt string `json:"lastRotateRequestedAt,omitempty"`
}
