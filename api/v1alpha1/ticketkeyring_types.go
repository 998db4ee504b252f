package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TicketKeyRing is a ring of TLS session ticket keys shared by a fleet of
// servers in one namespace: minted, rotated on a schedule with the next key
// delivered before it encrypts, kept decrypt-only for a while, then
// destroyed. Its Secrets live in its own namespace, and nowhere else; a
// ClusterTicketKeyRing delivers one ring to many namespaces.
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
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63",message="metadata.name may be at most 63 characters: it is the value of a label on every Secret of the ring"
// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !has(self.spec.confirmation) || !has(self.spec.confirmation.voterNamespaceSelector)",message="spec.confirmation.voterNamespaceSelector is for ClusterTicketKeyRings: a TicketKeyRing's voters are in its own namespace"
type TicketKeyRing struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the rotation schedule, key source and delivery of the ring.
	// +kubebuilder:default={rotationInterval:"1h",retainedKeys:3,activationDelay:"3m",distribution:{formats:{"go"}}}
	// +optional
	Spec TicketKeyRingSpec `json:"spec,omitempty"`

	// status is the observed state of the ring. It never holds key bytes.
	// +optional
	Status TicketKeyRingStatus `json:"status,omitempty"`
}

// ProjectionSecretName is the name of the projection Secret pods mount.
func (r *TicketKeyRing) ProjectionSecretName() string {
	return projectionSecretName(r.Name, r.Spec.Distribution)
}

func projectionSecretName(ring string, d Distribution) string {
	if d.SecretName != "" {
		return d.SecretName
	}
	return ring + "-ticket-keys"
}

// +kubebuilder:object:root=true

// TicketKeyRingList is a list of TicketKeyRings.
type TicketKeyRingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TicketKeyRing `json:"items"`
}

func init() {
	register(&TicketKeyRing{}, &TicketKeyRingList{})
}
