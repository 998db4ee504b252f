package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KindFleetRequest is the kind of a FleetRequest.
const KindFleetRequest = "FleetRequest"

// FleetAction is what a FleetRequest asks of every ring it selects.
// +kubebuilder:validation:Enum=Rotate;Revoke
type FleetAction string

// The actions of a FleetRequest.
const (
	// FleetRotate is a rotate-now of each ring selected: exactly what the
	// ring's ringmaster.io/rotate-requested-at annotation asks.
	FleetRotate FleetAction = "Rotate"
	// FleetRevoke is an emergency revoke of each ring selected: exactly
	// what the ring's ringmaster.io/revoke-requested-at annotation asks
	// (every key destroyed at once, a fresh key encrypting from now).
	FleetRevoke FleetAction = "Revoke"
)

// RingKind names a kind of ring a FleetRequest may select.
// +kubebuilder:validation:Enum=TicketKeyRing;ClusterTicketKeyRing
type RingKind string

// MaxFleetWaiting bounds status.waiting of a FleetRequest; the counts
// cover every ring.
const MaxFleetWaiting = 20

// FleetRequestSpec selects rings and says what to do to each. It is
// immutable: a request is a record of what was asked; ask again with a new
// FleetRequest.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a FleetRequest's spec is immutable: create a new FleetRequest to ask again"
type FleetRequestSpec struct {
	// action is what each ring selected does once: Rotate (a rotate-now,
	// as the ring's ringmaster.io/rotate-requested-at annotation asks) or
	// Revoke (an emergency revoke, as ringmaster.io/revoke-requested-at
	// asks: every key destroyed, tickets issued before no longer resume).
	// +required
	Action FleetAction `json:"action"`

	// namespaceSelector selects namespaced rings (TicketKeyRings) by the
	// labels of their namespace. When set, no cluster-scoped ring is
	// selected: a ClusterTicketKeyRing is in no namespace. When omitted,
	// rings of every namespace, and cluster-scoped rings, are selected.
	// The namespace kubernetes.io/metadata.name=<name> label selects one
	// namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// ringSelector selects rings by their own labels. When omitted, rings
	// of any labels are selected.
	// +optional
	RingSelector *metav1.LabelSelector `json:"ringSelector,omitempty"`

	// kinds are the kinds of ring selected; when omitted, every kind a
	// FleetRequest can select (TicketKeyRing, ClusterTicketKeyRing).
	// +kubebuilder:validation:MaxItems=2
	// +listType=set
	// +optional
	Kinds []RingKind `json:"kinds,omitempty"`

	// keySource selects the rings that mint from the ClusterKeySource of
	// this name (spec.sourceRef.name): after a key source was compromised,
	// every ring whose keys it minted. When omitted, rings of any key
	// source, and those minting in-cluster, are selected.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +optional
	KeySource string `json:"keySource,omitempty"`
}

// FleetWaiting is a ring a FleetRequest still waits on, and why.
type FleetWaiting struct {
	// kind of the ring.
	// +required
	Kind RingKind `json:"kind"`
	// namespace of the ring; empty for a cluster-scoped ring.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// name of the ring.
	// +required
	Name string `json:"name"`
	// reason the ring has not served the request's epoch yet: Pending
	// (queued), the reason its Ready condition is False for (a key source
	// that fails, a publication refused), or AwaitingPods (served, its pods
	// not all holding it yet).
	// +required
	Reason string `json:"reason"`
}

// FleetRequestStatus is how far a FleetRequest got. Only the operator
// writes it, from the rings' own statuses.
type FleetRequestStatus struct {
	// conditions: Complete is True once every ring selected has served an
	// epoch carrying out the request, and every pod of those that confirm
	// holds it.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// selected counts the rings the request selects: those that existed
	// when it was created, of the kinds, labels, namespaces and key source
	// it names.
	// +optional
	Selected int32 `json:"selected"`

	// served counts the selected rings that have published an epoch
	// carrying out the request.
	// +optional
	Served int32 `json:"served"`

	// podsTotal counts the pods of the served rings that confirm
	// (spec.confirmation).
	// +optional
	PodsTotal int32 `json:"podsTotal"`
	// podsConfirmed counts those of them that hold their ring's newest
	// key.
	// +optional
	PodsConfirmed int32 `json:"podsConfirmed"`

	// startedAt is when the operator first saw the request.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`

	// lastRingServedAt is when the last ring selected served the request;
	// set once every ring has.
	// +optional
	LastRingServedAt *metav1.Time `json:"lastRingServedAt,omitempty"`

	// lastPodConfirmedAt is when the last pod of the rings that confirm
	// was seen holding its ring's new key; set once every pod has.
	// +optional
	LastPodConfirmedAt *metav1.Time `json:"lastPodConfirmedAt,omitempty"`

	// notJudged counts the rings the request could not judge: their labels,
	// or their namespace's, are over what the operator keeps (a ring's 1
	// KiB, a namespace's 4 KiB), so that a selector that reads them cannot
	// tell whether it selects them. They are not rotated, and do not hold
	// the request up: the condition's message names the count; rotate or
	// revoke them by their annotations.
	// +optional
	NotJudged int32 `json:"notJudged,omitempty"`

	// waitingCount counts the selected rings not done yet.
	// +optional
	WaitingCount int32 `json:"waitingCount"`
	// waiting lists the first of the rings not done yet (at most 20), by
	// kind, namespace and name, each with why it waits.
	// +kubebuilder:validation:MaxItems=20
	// +listType=atomic
	// +optional
	Waiting []FleetWaiting `json:"waiting,omitempty"`
}

// FleetRequest asks, once, for a rotate-now or an emergency revoke of
// every ring it selects, across namespaces and kinds: a cluster
// administrator's incident tool, beside each ring's own annotations. It
// is cluster-scoped because it reaches rings of every namespace: only a
// cluster administrator (cluster-admin, or the ringmaster-fleet-operator
// ClusterRole) may create it. Each ring records the request it carried
// out (status.fleetRequest, and its snapshot), so that no ring carries it
// out twice, across operator restarts and leader changes.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=flr,categories=ringmaster
// +kubebuilder:printcolumn:name="Action",type=string,JSONPath=`.spec.action`
// +kubebuilder:printcolumn:name="Complete",type=string,JSONPath=`.status.conditions[?(@.type=="Complete")].status`
// +kubebuilder:printcolumn:name="Selected",type=integer,JSONPath=`.status.selected`
// +kubebuilder:printcolumn:name="Served",type=integer,JSONPath=`.status.served`
// +kubebuilder:printcolumn:name="Pods",type=string,JSONPath=`.status.podsConfirmed`
// +kubebuilder:printcolumn:name="Waiting",type=integer,JSONPath=`.status.waitingCount`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type FleetRequest struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec selects the rings and says what to do to them.
	// +required
	Spec FleetRequestSpec `json:"spec"`

	// status is how far the request got.
	// +optional
	Status FleetRequestStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// FleetRequestList is a list of FleetRequests.
type FleetRequestList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FleetRequest `json:"items"`
}

func init() {
	register(&FleetRequest{}, &FleetRequestList{})
}
