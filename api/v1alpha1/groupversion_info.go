// Package v1alpha1 holds the ringmaster.io/v1alpha1 API: TicketKeyRing and
// ClusterTicketKeyRing (rings of TLS session ticket keys), ClusterKeySource
// (where keys are minted) and CertificatePolicy (rules for certificates).
//
// +kubebuilder:object:generate=true
// +groupName=ringmaster.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "ringmaster.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this API with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Kinds of this API, for owner references, events and messages.
const (
	KindTicketKeyRing        = "TicketKeyRing"
	KindClusterTicketKeyRing = "ClusterTicketKeyRing"
	KindClusterKeySource     = "ClusterKeySource"
	KindCertificatePolicy    = "CertificatePolicy"
)
