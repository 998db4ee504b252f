package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// KeyFormat is a server's ticket key file format.
// +kubebuilder:validation:Enum=go;nginx;haproxy;envoy;cilium
type KeyFormat string

// KeyState is where a key stands in its life.
// +kubebuilder:validation:Enum=staged;active;decrypt-only
type KeyState string

// TicketKeyRingSpec is the rotation schedule, key source and delivery of one
// ring of TLS session ticket keys. ClusterTicketKeyRing shares it.
//
// +kubebuilder:validation:XValidation:rule="duration(self.rotationInterval) >= duration('1m')",message="rotationInterval must be at least 1m"
// +kubebuilder:validation:XValidation:rule="duration(self.activationDelay) >= duration('0s') && duration(self.activationDelay) < duration(self.rotationInterval)",message="activationDelay must be at least 0s and less than rotationInterval"
// +kubebuilder:validation:XValidation:rule="duration(self.rotationInterval).getSeconds() * (self.retainedKeys + 1) + (has(self.confirmation) ? (has(self.confirmation.maxDelay) ? duration(self.confirmation.maxDelay) : duration(self.confirmation.timeout)).getSeconds() : 0) <= 604800",message="(retainedKeys + 1) x rotationInterval, plus confirmation.maxDelay (or confirmation.timeout when maxDelay is omitted), must not exceed 168h: no key may live longer, and no session ticket may outlive 7 days (RFC 8446)"
// +kubebuilder:validation:XValidation:rule="!has(self.confirmation) || (has(self.confirmation.maxDelay) ? duration(self.confirmation.maxDelay) : duration(self.confirmation.timeout)) <= duration(self.rotationInterval)",message="confirmation.maxDelay (or confirmation.timeout when maxDelay is omitted) must not exceed rotationInterval: no fleet may hold a key back longer than one interval"
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
	// keys. Whatever happens, no key lives longer than (retainedKeys + 1) x
	// rotationInterval (plus confirmation.maxDelay under confirmation) from
	// its activation: a key that retires late (the operator was down) is
	// kept decrypt-only for less.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=16
	// +kubebuilder:default=3
	// +optional
	RetainedKeys int32 `json:"retainedKeys"`

	// activationDelay is the least time a new key is delivered to every pod
	// before it encrypts anything. It must exceed the delivery lag plus
	// clock skew: about a second for a pod the operator nudges (--nudge),
	// but up to the kubelet's own sync, about 1.5 minutes by default, for
	// one it cannot; the default covers both. Under spec.confirmation a key
	// also waits for every voter, and a short delay is safe. It bounds how
	// soon a rotate-now request takes effect. One
	// exception: an operator back so late that waiting activationDelay
	// would keep the active key past its bound (see retainedKeys) stages
	// the next key for less, to activate at that bound.
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

	// confirmation, when set, activates each staged key once every pod
	// that votes reports holding it, and never sooner than it would by the
	// clock; nor later than confirmation.maxDelay past that time, whatever
	// the pods say. Without it, a staged key activates by the clock,
	// activationDelay after it was delivered, whether or not every pod has
	// it.
	// +optional
	Confirmation *Confirmation `json:"confirmation,omitempty"`
}

// ConfirmationTimeoutPolicy is what a ring does when its fleet does not
// confirm a staged key in time.
// +kubebuilder:validation:Enum=Wait;Promote
type ConfirmationTimeoutPolicy string

const (
	// ConfirmationWait keeps the active key encrypting past the timeout,
	// saying so in the ConfirmationOverdue condition, an event and a
	// metric, until every voter confirms or maxDelay has passed since the
	// key fell due; then the key activates by the clock.
	ConfirmationWait ConfirmationTimeoutPolicy = "Wait"
	// ConfirmationPromote activates the staged key at the timeout anyway:
	// a pod that still lacks it cannot resume tickets issued under it.
	ConfirmationPromote ConfirmationTimeoutPolicy = "Promote"
)

// Confirmation says which pods must confirm a staged key, how the operator
// asks them, and how long a ring may wait for them.
//
// +kubebuilder:validation:XValidation:rule="!has(self.timeout) || duration(self.timeout) >= duration('0s')",message="confirmation.timeout must be at least 0s"
// +kubebuilder:validation:XValidation:rule="!has(self.maxDelay) || duration(self.maxDelay) >= (has(self.timeout) ? duration(self.timeout) : duration('0s'))",message="confirmation.maxDelay must be at least confirmation.timeout: it is the ceiling the timeout falls under"
type Confirmation struct {
	// podSelector selects the ring's pods: in the ring's namespace for a
	// TicketKeyRing; for a ClusterTicketKeyRing, in those of its target
	// namespaces that voterNamespaceSelector matches. Of the pods it
	// selects, only those that vote are asked: pods that are ready, not on
	// the host network, and mount the ring's projection Secret
	// (spec.distribution.secretName) in a container, through a secret
	// volume or a projected volume source. A selected pod that does not
	// mount it holds none of the ring's keys, and does not count.
	// +required
	PodSelector metav1.LabelSelector `json:"podSelector"`

	// port is the name or number of the container port on which each pod
	// serves what its agent holds (pkg/agent's StatusHandler, at
	// /ringmaster/v1/status, plain HTTP, read-only, no key bytes). A name is
	// looked up in the pod's containers and native sidecars (init
	// containers with restartPolicy Always), where the ringmaster-agent
	// sidecar runs.
	// +kubebuilder:validation:XIntOrString
	// +required
	Port intstr.IntOrString `json:"port"`

	// timeout is how long after a staged key falls due the ring waits for
	// every voter before onTimeout decides. At least 0s, at most maxDelay.
	// +kubebuilder:default="10m"
	// +optional
	Timeout metav1.Duration `json:"timeout,omitempty"`

	// onTimeout is Promote (the staged key activates at the timeout) or
	// Wait (past the timeout the ring reports ConfirmationOverdue and the
	// active key keeps encrypting, until every voter confirms or maxDelay
	// runs out).
	// +kubebuilder:default=Wait
	// +optional
	OnTimeout ConfirmationTimeoutPolicy `json:"onTimeout,omitempty"`

	// maxDelay is the ceiling no vote can lift: the longest a staged key
	// may be held past the time it falls due. Each staged key is published
	// with an activeFrom at most maxDelay past its due time, so every pod
	// activates it by its own clock by then, even if the operator is
	// stopped, whatever the fleet says. A key that activates so reports
	// the ConfirmationOverdue condition with reason ActivatedUnconfirmed
	// naming the pods that lacked it, a Warning event and
	// ringmaster_ticketkeyring_unconfirmed_activations_total. Waiting
	// longer lets a lagging pod keep resuming tickets; it also lets the
	// active key encrypt longer, and stay longer, for every pod: the ring's
	// keys live up to (retainedKeys + 1) x rotationInterval + maxDelay. At
	// least timeout, at most rotationInterval, and within the 7-day bound.
	// When omitted, it is timeout: under Wait, set it above timeout to wait
	// past the timeout at all.
	// +optional
	MaxDelay *metav1.Duration `json:"maxDelay,omitempty"`

	// voterNamespaceSelector chooses, among a ClusterTicketKeyRing's target
	// namespaces, those whose pods vote. It is the cluster administrator's
	// choice, not the tenants': every voter can hold a key back up to
	// maxDelay. Required on a ClusterTicketKeyRing with confirmation ({}
	// lets every target namespace vote); a TicketKeyRing may not set it,
	// its voters being in its own namespace. Were it missing (a ring stored
	// before the rule), no namespace votes and each staged key activates
	// when due, as without confirmation.
	// +optional
	VoterNamespaceSelector *metav1.LabelSelector `json:"voterNamespaceSelector,omitempty"`
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
	// first encrypts), "haproxy" (haproxy.keys for tls-ticket-keys),
	// "envoy" (envoy.N.key) and "cilium" (Cilium's layout for Envoy:
	// tls.sessionticket.key, the key that encrypts, then
	// tls.sessionticket.key.1 to .9, the staged key first, then the
	// decrypt-only keys newest first; ordered as of the epoch's publication,
	// and the operator publishes an epoch whenever a key activates or
	// expires). Each derived format uses keys of its own, derived with
	// HKDF-SHA256.
	// +kubebuilder:default={go}
	// +kubebuilder:validation:MaxItems=5
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
	// +listType=atomic
	Keys []KeyStatus `json:"keys,omitempty"`

	// targets is how many namespaces the ring is delivered to.
	// +optional
	Targets int32 `json:"targets,omitempty"`

	// failedTargets lists, in namespace order, the target namespaces that
	// did not receive the newest epoch and why (at most 20; the Ready
	// condition counts them all).
	// +kubebuilder:validation:MaxItems=20
	// +optional
	// +listType=atomic
	FailedTargets []TargetFailure `json:"failedTargets,omitempty"`

	// lastRotateRequestedAt echoes the last ringmaster.io/rotate-requested-at
	// annotation value that was handled.
	// +optional
	LastRotateRequestedAt string `json:"lastRotateRequestedAt,omitempty"`

	// confirmation is what the selected pods report of the staged key,
	// under spec.confirmation.
	// +optional
	Confirmation *ConfirmationStatus `json:"confirmation,omitempty"`

	// lastRevokeRequestedAt echoes the last ringmaster.io/revoke-requested-at
	// annotation value that was handled.
	// +optional
	LastRevokeRequestedAt string `json:"lastRevokeRequestedAt,omitempty"`

	// revocations record the ring's emergency revokes, newest first (the
	// last 10).
	// +kubebuilder:validation:MaxItems=10
	// +optional
	// +listType=atomic
	Revocations []Revocation `json:"revocations,omitempty"`

	// shared is what this cluster last saw of the ring's shared entry in
	// Vault, when its key source shares rings across clusters.
	// +optional
	Shared *SharedRingStatus `json:"shared,omitempty"`

	// fleetRequest is the last FleetRequest the ring carried out: the ring
	// carries out each FleetRequest that selects it once, oldest first,
	// and none older than this one.
	// +optional
	FleetRequest *FleetRequestRecord `json:"fleetRequest,omitempty"`
}

// FleetRequestRecord is a FleetRequest a ring carried out.
type FleetRequestRecord struct {
	// name of the FleetRequest.
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// uid of the FleetRequest, which the snapshot of the epoch that
	// carried it out records too (ringmaster.io/fleet-request).
	// +kubebuilder:validation:MaxLength=64
	// +required
	UID string `json:"uid"`
	// createdAt is the FleetRequest's creation time: requests are carried
	// out in the order of their creation (then of their names).
	// +required
	CreatedAt metav1.Time `json:"createdAt"`
	// action the request asked for.
	// +required
	Action FleetAction `json:"action"`
	// epoch that carried it out.
	// +required
	Epoch int64 `json:"epoch"`
	// servedAt is when that epoch was published.
	// +optional
	ServedAt *metav1.Time `json:"servedAt,omitempty"`
}

// SharedRingStatus is a ring's view of its entry in Vault's KV v2 engine.
type SharedRingStatus struct {
	// path is the entry: <mount>/<path>/namespaces/<namespace>/<name> or
	// <mount>/<path>/cluster/<name>.
	Path string `json:"path"`
	// version is the entry's version whose keys this cluster serves: the
	// shared epoch, the same in every cluster.
	// +optional
	Version int64 `json:"version,omitempty"`
	// versionTime is when Vault recorded that version.
	// +optional
	VersionTime *metav1.Time `json:"versionTime,omitempty"`
	// lastSyncTime is when the operator last read the entry. While Vault
	// cannot be read it stays behind, and Ready says why.
	// +optional
	LastSyncTime *metav1.Time `json:"lastSyncTime,omitempty"`
	// propagationDelay is how long after Vault recorded the version this
	// cluster published it: 0s when this cluster wrote it.
	// +optional
	PropagationDelay *metav1.Duration `json:"propagationDelay,omitempty"`
	// writer says whether this cluster wrote the version ("Local") or
	// adopted it from another cluster's operator ("Adopted").
	// +kubebuilder:validation:Enum=Local;Adopted
	// +optional
	Writer string `json:"writer,omitempty"`
}

// ConfirmationStatus is what the ring's pods report of its staged key.
type ConfirmationStatus struct {
	// stagedKey is the id of the key the pods are asked about.
	StagedKey string `json:"stagedKey"`
	// due is when the staged key falls due: it activates once due and
	// confirmed.
	// +optional
	Due *metav1.Time `json:"due,omitempty"`
	// pods counts the selected, ready pods.
	Pods int32 `json:"pods"`
	// holding counts those that report holding the staged key.
	Holding int32 `json:"holding"`
	// missing names, in order, the pods that do not (at most 20), and why.
	// +kubebuilder:validation:MaxItems=20
	// +optional
	// +listType=atomic
	Missing []PodReport `json:"missing,omitempty"`
	// checkedAt is when the pods were last asked.
	CheckedAt metav1.Time `json:"checkedAt"`
	// note says what the counts do not: for one, that the ring selects
	// more pods than the operator asks (--confirmation-max-pods), so none
	// was asked and the key is not confirmed.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Note string `json:"note,omitempty"`
}

// PodReport is a pod that did not confirm the staged key.
type PodReport struct {
	// namespace of the pod.
	Namespace string `json:"namespace"`
	// name of the pod.
	Name string `json:"name"`
	// node the pod runs on.
	// +optional
	Node string `json:"node,omitempty"`
	// reason says what the pod reported, or why it could not be asked.
	Reason string `json:"reason"`
}

// Revocation is one emergency revoke.
type Revocation struct {
	// requestedAt is the ringmaster.io/revoke-requested-at value handled.
	RequestedAt string `json:"requestedAt"`
	// requestedBy is the field manager that set the annotation (for
	// kubectl, "kubectl-annotate"; the API server's audit log says which
	// user).
	// +optional
	RequestedBy string `json:"requestedBy,omitempty"`
	// epoch is the epoch that dropped the keys.
	Epoch int64 `json:"epoch"`
	// keys are the ids of the keys destroyed.
	// +listType=atomic
	Keys []string `json:"keys"`
}
