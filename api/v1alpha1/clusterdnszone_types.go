package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterDNSZoneSpec says where an ECHKeyRing's HTTPS record lives, how
// the operator writes and checks it, and which rings may use the zone.
//
// +kubebuilder:validation:XValidation:rule="has(self.primary) || has(self.servers)",message="a verify-only zone (no primary) needs servers: the authoritative servers whose answers are checked"
// +kubebuilder:validation:XValidation:rule="!has(self.primary) || has(self.tsigSecretRef)",message="tsigSecretRef is required with primary: updates are signed with TSIG"
// +kubebuilder:validation:XValidation:rule="has(self.primary) || !has(self.tsigSecretRef)",message="tsigSecretRef needs primary: a verify-only zone sends no update"
// +kubebuilder:validation:XValidation:rule="self.allowedNames.all(n, n == self.zone || n.endsWith('.' + self.zone))",message="allowedNames must be inside zone"
type ClusterDNSZoneSpec struct {
	// zone is the DNS zone the records are in, e.g. example.com, written
	// in lower case without the final dot. The primary receives updates
	// for it (RFC 2136: the update names the zone).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^([a-z0-9_]([-a-z0-9_]*[a-z0-9])?\.)*[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +required
	Zone string `json:"zone"`

	// primary is the host:port of the server that takes RFC 2136 dynamic
	// updates for the zone, signed with the TSIG key of tsigSecretRef
	// (e.g. ns1.example.com:53, 192.0.2.1:53, [2001:db8::1]:53). The
	// operator merges the ech parameter into the HTTPS record there,
	// leaving its other parameters as they are. When omitted the zone is
	// verify-only: another system publishes the record (a DNS provider
	// without RFC 2136, say) and the operator only checks that servers
	// answer it before a ring moves on.
	// +kubebuilder:validation:MaxLength=261
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*|\[[0-9a-fA-F:.]+\]):[0-9]{1,5}$`
	// +kubebuilder:validation:XValidation:rule="int(self.substring(self.lastIndexOf(':') + 1)) >= 1 && int(self.substring(self.lastIndexOf(':') + 1)) <= 65535",message="primary's port must be between 1 and 65535"
	// +optional
	Primary string `json:"primary,omitempty"`

	// servers are the host:port of the zone's authoritative servers,
	// which the operator asks directly (no recursion, UDP then TCP) after
	// each change: a config counts as published only once every one of
	// them answers it. Defaults to primary alone; list the secondaries
	// too, so that no client is handed a config a secondary has not yet
	// transferred.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=261
	// +kubebuilder:validation:items:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*|\[[0-9a-fA-F:.]+\]):[0-9]{1,5}$`
	// +listType=set
	// +optional
	Servers []string `json:"servers,omitempty"`

	// tsigSecretRef names the Secret, in the operator's namespace (its
	// --cluster-resource-namespace), holding the TSIG key that signs
	// updates: key "name" (the key's DNS name), "secret" (its base64
	// text, as tsig-keygen or keymgr print it) and, optionally,
	// "algorithm" (hmac-sha256 by default; hmac-sha224, hmac-sha384,
	// hmac-sha512). Required with primary, refused without it. No ring
	// ever reads it.
	// +optional
	TSIGSecretRef *SecretReference `json:"tsigSecretRef,omitempty"`

	// namespaceSelector chooses the namespaces whose ECHKeyRings may
	// publish to this zone. When omitted no ECHKeyRing may; {} allows
	// every namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// allowedNames are the owner names whose HTTPS record an ECHKeyRing of
	// a selected namespace may write: each a DNS name inside zone, lower
	// case without the final dot (shop.example.com, or the zone itself),
	// or a pattern "*.<name>", which allows every name below <name>, at
	// any depth, but not <name> itself.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^(\*\.)?([a-z0-9_]([-a-z0-9_]*[a-z0-9])?\.)*[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +listType=set
	// +required
	AllowedNames []string `json:"allowedNames"`

	// maxTTL is the longest TTL, in seconds, a ring may give its record
	// (its spec.dns.ttl); a ring asking more is refused. When omitted, 3600:
	// every ECH config must outlive the TTL in DNS caches, so the TTL adds
	// to the life of each private key, and an hour keeps that within the
	// usual retirementMargin; raise it deliberately.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	// +optional
	MaxTTL *int32 `json:"maxTTL,omitempty"`
}

// SecretReference names a Secret in the operator's namespace.
type SecretReference struct {
	// name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// ClusterDNSZoneStatus is what the operator last saw of the zone.
type ClusterDNSZoneStatus struct {
	// conditions: Ready is True when the zone can be used: its TSIG Secret
	// exists and holds a well-formed key (or the zone is verify-only);
	// False with a reason (TSIGSecretNotFound, TSIGSecretInvalid) and a
	// message saying what to fix otherwise. Whether its servers answer is
	// each ECHKeyRing's own condition. NamesOverlap is True (reason
	// ZonesOverlap) while another ClusterDNSZone allows some of the names
	// this one allows, and names it: allowed, and safe, since a name has
	// one owner whichever zone admitted it.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// names are the first 64 names, by name, whose owner was admitted
	// through this zone, each with its one owner: the only ring whose
	// configs the operator writes into that name's HTTPS record, and the
	// only one it ever removes them for. A name has one owner across the
	// cluster, whatever zones allow it: its record, a Lease in the
	// operator's namespace labelled ringmaster.io/component=dns-name, says
	// who, and nameCounts counts every name of the zone. The first
	// admitted ring to claim a name owns it; another claiming it, through
	// this zone or any other, publishes nothing (Ready False,
	// DNSNameClaimed). A name passes on only once its owner is deleted,
	// renamed or no longer admitted, and has released it: the ech value it
	// wrote removed from DNS, then the record's TTL plus the ring's
	// retirementMargin waited out.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Names []DNSNameOwner `json:"names,omitempty"`

	// nameCounts counts the names whose owner was admitted through this
	// zone, by state, and the rings this zone admits that wait for their
	// name. Unset until the operator has recorded every name this status
	// listed before names had records of their own (an upgrade).
	// +optional
	NameCounts *DNSNameCounts `json:"nameCounts,omitempty"`
}

// DNSNameCounts counts the names of a ClusterDNSZone and the rings
// waiting for one.
type DNSNameCounts struct {
	// owned counts the names owned through the zone (state Owned).
	// +kubebuilder:validation:Minimum=0
	// +required
	Owned int32 `json:"owned"`
	// releasing counts the names whose owner, admitted through the zone,
	// lets them go (state Releasing).
	// +kubebuilder:validation:Minimum=0
	// +required
	Releasing int32 `json:"releasing"`
	// waiting counts the ECHKeyRings the zone admits whose name another
	// ring owns, through this zone or another, or has no owner yet.
	// +kubebuilder:validation:Minimum=0
	// +required
	Waiting int32 `json:"waiting"`
}

// DNSNameState is where a DNS name stands with its owner.
// +kubebuilder:validation:Enum=Owned;Releasing
type DNSNameState string

// The states of a DNS name of a ClusterDNSZone.
const (
	// DNSNameOwned: the ring writes the name's record.
	DNSNameOwned DNSNameState = "Owned"
	// DNSNameReleasing: the ring was deleted, renamed or is no longer
	// admitted; the ech value it wrote is being removed, and the name
	// passes on at releaseAt.
	DNSNameReleasing DNSNameState = "Releasing"
)

// DNSNameOwner is a DNS name of a zone and the ECHKeyRing that owns it.
type DNSNameOwner struct {
	// name is the owner name of the HTTPS record, lower case, without the
	// final dot.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// ring is the ECHKeyRing that owns it.
	// +required
	Ring ECHKeyRingReference `json:"ring"`
	// state is Owned, or Releasing once the ring lets the name go.
	// +required
	State DNSNameState `json:"state"`
	// since is when the ring took the name.
	// +required
	Since metav1.Time `json:"since"`
	// releaseAt, while Releasing, is when the name passes on: the record's
	// TTL plus the ring's retirementMargin after DNS was seen holding no
	// ech value of the ring's. Unset while that removal waits for DNS.
	// +optional
	ReleaseAt *metav1.Time `json:"releaseAt,omitempty"`
	// waiting counts the other ECHKeyRings that claim the name, through
	// any zone.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Waiting int32 `json:"waiting,omitempty"`
}

// ECHKeyRingReference names an ECHKeyRing, and which one by its UID.
type ECHKeyRingReference struct {
	// namespace of the ECHKeyRing.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +required
	Namespace string `json:"namespace"`
	// name of the ECHKeyRing.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +required
	Name string `json:"name"`
	// uid of the ECHKeyRing: a ring deleted and created again under the
	// name is another ring.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=36
	// +required
	UID string `json:"uid"`
}

// ClusterDNSZone is a DNS zone ECHKeyRings publish their configs to, named
// in an ECHKeyRing's spec.dns.zoneRef: the server that takes updates, the
// TSIG key that signs them (in the operator's namespace), the servers that
// are asked to confirm, and which namespaces may publish which names. It
// is cluster-scoped, on the model of ClusterKeySource: cluster
// administrators write it, and a ring never chooses where the operator's
// credentials go or which names they may change.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=cdz,categories=ringmaster
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Zone",type=string,JSONPath=`.spec.zone`
// +kubebuilder:printcolumn:name="Primary",type=string,JSONPath=`.spec.primary`
// +kubebuilder:printcolumn:name="Names",type=integer,JSONPath=`.status.nameCounts.owned`
// +kubebuilder:printcolumn:name="Waiting",type=integer,JSONPath=`.status.nameCounts.waiting`,priority=1
// +kubebuilder:printcolumn:name="Overlap",type=string,JSONPath=`.status.conditions[?(@.type=="NamesOverlap")].status`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterDNSZone struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says where the records live and who may write them.
	// +required
	Spec ClusterDNSZoneSpec `json:"spec"`

	// status is what the operator last saw of the zone.
	// +optional
	Status ClusterDNSZoneStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ClusterDNSZoneList is a list of ClusterDNSZones.
type ClusterDNSZoneList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterDNSZone `json:"items"`
}

func init() {
	register(&ClusterDNSZone{}, &ClusterDNSZoneList{})
}
