package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterTicketKeyRingSpec is a ring's schedule, key source and delivery,
// and the namespaces it is delivered to.
//
// +kubebuilder:validation:XValidation:rule="!has(self.confirmation) || has(self.confirmation.voterNamespaceSelector)",message="confirmation.voterNamespaceSelector is required on a ClusterTicketKeyRing: the administrator chooses which namespaces' pods may hold its keys back ({} for every target namespace)"
type ClusterTicketKeyRingSpec struct {
	TicketKeyRingSpec `json:",inline"`

	// namespaceSelector chooses the namespaces that receive the ring's
	// projection Secret. Namespaces that start to match receive it; those
	// that stop matching lose it. {} selects every namespace.
	// +required
	NamespaceSelector metav1.LabelSelector `json:"namespaceSelector"`
}

// ClusterTicketKeyRing is one ring of TLS session ticket keys delivered to
// every namespace a selector matches, for a fleet that spans namespaces. Its
// snapshots live in the operator's namespace; each target namespace receives
// the projection Secret its pods mount. Being cluster-scoped, it is for
// cluster administrators: it writes into namespaces that did not ask for it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=ctkr,categories=ringmaster
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Epoch",type=integer,JSONPath=`.status.epoch`
// +kubebuilder:printcolumn:name="Active Key",type=string,JSONPath=`.status.activeKey.id`
// +kubebuilder:printcolumn:name="Key Age",type=date,JSONPath=`.status.activeKey.activeFrom`
// +kubebuilder:printcolumn:name="Next Rotation",type=string,JSONPath=`.status.nextRotation`
// +kubebuilder:printcolumn:name="Targets",type=integer,JSONPath=`.status.targets`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63",message="metadata.name may be at most 63 characters: it is the value of a label on every Secret of the ring"
type ClusterTicketKeyRing struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the rotation schedule, key source and delivery of the ring,
	// and the namespaces it is delivered to.
	// +required
	Spec ClusterTicketKeyRingSpec `json:"spec"`

	// status is the observed state of the ring. It never holds key bytes.
	// +optional
	Status TicketKeyRingStatus `json:"status,omitempty"`
}

// ProjectionSecretName is the name of the projection Secret pods mount.
func (r *ClusterTicketKeyRing) ProjectionSecretName() string {
	return projectionSecretName(r.Name, r.Spec.Distribution)
}

// +kubebuilder:object:root=true

// ClusterTicketKeyRingList is a list of ClusterTicketKeyRings.
type ClusterTicketKeyRingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterTicketKeyRing `json:"items"`
}

func init() {
	register(&ClusterTicketKeyRing{}, &ClusterTicketKeyRingList{})
}
