// Package v1alpha1 holds the ringmaster.io/v1alpha1 API: TicketKeyRing and
// ClusterTicketKeyRing (rings of TLS session ticket keys), ClusterKeySource
// (where keys are minted) and CertificatePolicy (rules for certificates).
//
// +kubebuilder:object:generate=true
// +groupName=ringmaster.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "ringmaster.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this API with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme

	// knownTypes are the kinds and lists each types file registers.
	knownTypes []runtime.Object
)

// register adds kinds to the API; each types file calls it from init.
func register(objs ...runtime.Object) { knownTypes = append(knownTypes, objs...) }

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, knownTypes...)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// Kinds of this API, for owner references, events and messages.
const (
	KindTicketKeyRing        = "TicketKeyRing"
	KindClusterTicketKeyRing = "ClusterTicketKeyRing"
	KindClusterKeySource     = "ClusterKeySource"
	KindCertificatePolicy    = "CertificatePolicy"
	KindClusterDNSZone       = "ClusterDNSZone"
)
