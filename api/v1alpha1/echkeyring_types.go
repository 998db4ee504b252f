package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KindECHKeyRing is the kind of an ECH key ring.
const KindECHKeyRing = "ECHKeyRing"

// ECHRingLabel names the ECHKeyRing a snapshot or projection Secret belongs
// to; the Secret is in the ring's namespace.
const ECHRingLabel = "ringmaster.io/ech-ring"

// ECHKEM is an HPKE key encapsulation mechanism Go's crypto/tls accepts in
// an ECHConfig.
// +kubebuilder:validation:Enum=X25519;P256;P384;P521
type ECHKEM string

// The KEMs of ECHKeyRing spec.kem.
const (
	// ECHKEMX25519 is DHKEM(X25519, HKDF-SHA256), HPKE KEM 0x0020.
	ECHKEMX25519 ECHKEM = "X25519"
	// ECHKEMP256 is DHKEM(P-256, HKDF-SHA256), HPKE KEM 0x0010.
	ECHKEMP256 ECHKEM = "P256"
	// ECHKEMP384 is DHKEM(P-384, HKDF-SHA384), HPKE KEM 0x0011.
	ECHKEMP384 ECHKEM = "P384"
	// ECHKEMP521 is DHKEM(P-521, HKDF-SHA512), HPKE KEM 0x0012.
	ECHKEMP521 ECHKEM = "P521"
)

// ID is the HPKE id of the KEM; 0 for none known.
func (k ECHKEM) ID() uint16 {
	switch k {
	case ECHKEMX25519, "":
		return 0x0020
	case ECHKEMP256:
		return 0x0010
	case ECHKEMP384:
		return 0x0011
	case ECHKEMP521:
		return 0x0012
	}
	return 0
}

// ECHKDF is an HPKE key derivation function.
// +kubebuilder:validation:Enum=HKDF-SHA256;HKDF-SHA384;HKDF-SHA512
type ECHKDF string

// ID is the HPKE id of the KDF; 0 for none known.
func (k ECHKDF) ID() uint16 {
	switch k {
	case "HKDF-SHA256":
		return 0x0001
	case "HKDF-SHA384":
		return 0x0002
	case "HKDF-SHA512":
		return 0x0003
	}
	return 0
}

// ECHAEAD is an HPKE authenticated encryption algorithm.
// +kubebuilder:validation:Enum=AES-128-GCM;AES-256-GCM;ChaCha20Poly1305
type ECHAEAD string

// ID is the HPKE id of the AEAD; 0 for none known.
func (a ECHAEAD) ID() uint16 {
	switch a {
	case "AES-128-GCM":
		return 0x0001
	case "AES-256-GCM":
		return 0x0002
	case "ChaCha20Poly1305":
		return 0x0003
	}
	return 0
}

// ECHCipherSuite is one HPKE symmetric cipher suite an ECHConfig offers.
type ECHCipherSuite struct {
	// kdf is the key derivation function.
	// +required
	KDF ECHKDF `json:"kdf"`
	// aead is the authenticated encryption algorithm.
	// +required
	AEAD ECHAEAD `json:"aead"`
}

// ECHConfigState is where an ECH config stands in its life.
// +kubebuilder:validation:Enum=staged;published;retired
type ECHConfigState string

// ECHKeyRing is a ring of Encrypted Client Hello (RFC 9849) keys shared by
// a fleet of servers in one namespace. Each config is staged (delivered to
// every pod, able to decrypt, not advertised), published once every
// selected pod confirms holding it or its confirmation ceiling has passed
// (written to the HTTPS record of spec.dns and seen in the authoritative
// answer), retired when the next one is published (out of DNS, still
// decrypting for the record's TTL plus spec.retirementMargin), then
// destroyed. Every config expires at the latest a fixed life after it is
// minted, by every pod's own clock. Its Secrets live in its own namespace,
// and nowhere else.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ekr,categories=ringmaster
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Epoch",type=integer,JSONPath=`.status.epoch`
// +kubebuilder:printcolumn:name="Published",type=integer,JSONPath=`.status.publishedConfig`
// +kubebuilder:printcolumn:name="DNS Verified",type=date,JSONPath=`.status.dnsVerifiedAt`
// +kubebuilder:printcolumn:name="Next Rotation",type=string,JSONPath=`.status.nextRotation`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63",message="metadata.name may be at most 63 characters: it is the value of a label on every Secret of the ring"
type ECHKeyRing struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the ECHConfig, the rotation schedule, the key source, the
	// fleet's confirmation and the DNS record of the ring.
	// +required
	Spec ECHKeyRingSpec `json:"spec"`

	// status is the observed state of the ring. It never holds key bytes.
	// +optional
	Status ECHKeyRingStatus `json:"status,omitempty"`
}

// ProjectionSecretName is the name of the projection Secret pods mount.
func (r *ECHKeyRing) ProjectionSecretName() string {
	if r.Spec.Distribution.SecretName != "" {
		return r.Spec.Distribution.SecretName
	}
	return r.Name + "-ech-keys"
}

// ECHKeyRingSpec is what an ECHConfig needs, the ring's timing, where its
// keys come from, which pods must hold a config before it is published, and
// the DNS record it is published in.
//
// +kubebuilder:validation:XValidation:rule="duration(self.deliveryDelay) < duration(self.rotationInterval)",message="deliveryDelay must be less than rotationInterval"
// +kubebuilder:validation:XValidation:rule="self.retainedConfigs * duration(self.rotationInterval).getSeconds() >= self.dns.ttl + duration(self.retirementMargin).getSeconds()",message="retainedConfigs x rotationInterval must be at least dns.ttl + retirementMargin: a retired config must outlive every DNS cache that may still hand it out, and the ring keeps at most retainedConfigs retired configs"
// +kubebuilder:validation:XValidation:rule="duration(self.deliveryDelay).getSeconds() + duration(self.rotationInterval).getSeconds() + 2 * (has(self.confirmation.maxDelay) ? duration(self.confirmation.maxDelay) : duration(self.confirmation.timeout)).getSeconds() + self.dns.ttl + duration(self.retirementMargin).getSeconds() <= 2592000",message="deliveryDelay + rotationInterval + 2 x confirmation.maxDelay (or confirmation.timeout when maxDelay is omitted) + dns.ttl + retirementMargin must not exceed 720h: it is the life of every ECH config (createdAt to expiresAt), and no ECH key may live longer than 30 days"
// +kubebuilder:validation:XValidation:rule="!has(self.confirmation.voterNamespaceSelector)",message="spec.confirmation.voterNamespaceSelector is for ClusterTicketKeyRings: an ECHKeyRing's voters are in its own namespace"
// +kubebuilder:validation:XValidation:rule="!has(self.confirmation.onTimeout) || self.confirmation.onTimeout == 'Wait'",message="spec.confirmation.onTimeout must be Wait: an ECH config is published before every pod holds it only at its ceiling, confirmation.maxDelay"
type ECHKeyRingSpec struct {
	// publicName is the ECHConfig's public_name: the name clients put in
	// the outer, unencrypted ClientHello, and the name the servers'
	// certificate must also cover, so that a client that fails to use ECH
	// can authenticate the retry configs. A DNS name of two labels or more
	// and at most 253 characters, not an IP address (Go's client skips a
	// config whose public name is not).
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)+[a-z]([-a-z0-9]*[a-z0-9])?$`
	// +required
	PublicName string `json:"publicName"`

	// kem is the HPKE KEM of the ring's keys: X25519 (the default), P256,
	// P384 or P521; those Go's crypto/tls accepts.
	// +kubebuilder:default=X25519
	// +optional
	KEM ECHKEM `json:"kem,omitempty"`

	// cipherSuites are the HPKE cipher suites each config offers, in order
	// of preference. When omitted: HKDF-SHA256 with AES-128-GCM, AES-256-GCM
	// and ChaCha20Poly1305.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=9
	// +listType=atomic
	// +optional
	CipherSuites []ECHCipherSuite `json:"cipherSuites,omitempty"`

	// maxNameLength is the ECHConfig's maximum_name_length: the longest
	// server name clients pad to, so that names of different lengths look
	// alike. 0 (the default) lets clients pad by their own rule.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=255
	// +optional
	MaxNameLength int32 `json:"maxNameLength,omitempty"`

	// rotationInterval is how long one config stays published before the
	// next replaces it. 24h by default, which fits DNS practice; at least
	// 10s, which only a test fleet with a TTL of seconds wants.
	// +kubebuilder:default="24h"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s')",message="rotationInterval must be at least 10s"
	// +optional
	RotationInterval metav1.Duration `json:"rotationInterval,omitempty"`

	// retainedConfigs is how many retired configs the ring keeps at once,
	// decrypting for clients whose DNS cache still holds them. 1 or 2: with
	// the staged and the published config, the ring holds at most 4
	// configs, which each server tries in turn.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2
	// +kubebuilder:default=1
	// +optional
	RetainedConfigs int32 `json:"retainedConfigs,omitempty"`

	// deliveryDelay is the least time a new config is staged (delivered to
	// every pod, decrypting, not advertised) before it is published. It
	// must exceed the delivery lag: about a second for a pod the operator
	// nudges (--nudge), up to the kubelet's own sync, about 1.5 minutes by
	// default, for one it cannot. The ring also waits for every selected
	// pod to confirm it (spec.confirmation).
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="deliveryDelay must be at least 0s"
	// +optional
	DeliveryDelay metav1.Duration `json:"deliveryDelay,omitempty"`

	// retirementMargin is how long a retired config keeps decrypting after
	// the record's TTL (spec.dns.ttl) has run out since it left DNS: for
	// resolvers that keep records past their TTL, and clock skew.
	// +kubebuilder:default="1h"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="retirementMargin must be at least 0s"
	// +optional
	RetirementMargin metav1.Duration `json:"retirementMargin,omitempty"`

	// sourceRef names the ClusterKeySource whose random bytes seed each
	// config's private key, for example one that asks Vault. An
	// ECHKeyRing may use it only if the source's namespaceSelector matches
	// the ring's namespace. When omitted, the operator draws seeds
	// in-cluster from crypto/rand.
	// +optional
	SourceRef *KeySourceReference `json:"sourceRef,omitempty"`

	// confirmation names the pods that must each hold a staged config
	// (their agents report its config_id) before it is published. It is
	// required: a config in DNS that some server cannot decrypt fails those
	// clients' handshakes. Past confirmation.timeout the ring reports a
	// staged config held back (ConfirmationOverdue True); at the ceiling,
	// confirmation.maxDelay (or timeout) past its due time, it is published
	// unconfirmed once DNS answers it (ConfirmationOverdue False, reason
	// PublishedUnconfirmed, and a Warning event naming the pods that lacked
	// it): a pod without it rejects ECH with retry configs and the client
	// succeeds on retry. Every config expires deliveryDelay + rotationInterval
	// + 2 x the ceiling + dns.ttl + retirementMargin after it is minted, by
	// every pod's own clock. onTimeout must be Wait.
	// +required
	Confirmation Confirmation `json:"confirmation"`

	// dns is the HTTPS record (RFC 9460) whose ech parameter the ring
	// publishes.
	// +required
	DNS ECHDNS `json:"dns"`

	// distribution says which Secret pods mount.
	// +optional
	Distribution ECHDistribution `json:"distribution,omitempty"`
}

// ECHDNS is where an ECHKeyRing publishes its configs.
type ECHDNS struct {
	// zoneRef names the ClusterDNSZone (a cluster administrator's) that
	// says which server receives the updates, with which TSIG key, and
	// which namespaces may publish which names.
	// +required
	ZoneRef DNSZoneReference `json:"zoneRef"`

	// name is the owner of the HTTPS record, a DNS name inside the zone
	// the zone allows for this namespace (with or without a trailing dot),
	// never a wildcard: one ring owns one name. The name belongs to one
	// ECHKeyRing at a time across the cluster, whatever zones allow it:
	// the first to claim it (a Lease in the operator's namespace records
	// each name's owner, and the zone that admitted it lists it in its
	// status); another ring claiming it, through any zone, publishes
	// nothing until the owner is deleted, renamed or no longer admitted,
	// and has released it. The record's other parameters (priority, target, alpn, port,
	// hints) are left as they are; an absent record is created as
	// "1 . ech=...".
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=254
	// +kubebuilder:validation:Pattern=`^([a-z0-9_]([-a-z0-9_]*[a-z0-9])?\.)*[a-z0-9]([-a-z0-9]*[a-z0-9])?\.?$`
	// +required
	Name string `json:"name"`

	// ttl is the record's TTL in seconds: how long resolvers may hand out
	// a config after it left DNS, which a retired config must outlive.
	// Between 1 and 86400; 300 by default. The zone bounds it: its maxTTL,
	// or 3600 when the zone sets none.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	// +kubebuilder:default=300
	// +optional
	TTL int32 `json:"ttl,omitempty"`
}

// DNSZoneReference names a ClusterDNSZone.
type DNSZoneReference struct {
	// name of the ClusterDNSZone.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// ECHDistribution says which Secret carries an ECHKeyRing to its pods.
type ECHDistribution struct {
	// secretName is the mutable projection Secret that pods mount (as
	// another source of the projected volume the agent reads, beside the
	// ticket keys and the certificate), holding echkeys.json. Defaults to
	// <ring name>-ech-keys. It may not end in -ech-e<number>, the form of
	// the ring's snapshot Secret names.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('-c?e[0-9]+$')",message="secretName may not end in -e<number> or -ce<number>: snapshot Secrets are named <ring>-ech-e<epoch>, and ticket rings' <ring>-e<epoch>"
	// +optional
	SecretName string `json:"secretName,omitempty"`
}

// ECHConfigStatus describes one config of the ring. It never holds key
// bytes.
type ECHConfigStatus struct {
	// id is the config's config_id, unique among the ring's live configs.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=255
	// +required
	ID int32 `json:"id"`
	// state is staged (delivered, decrypting, not in DNS), published (in
	// DNS, sent as a retry config) or retired (out of DNS, still
	// decrypting until expiresAt).
	// +required
	State ECHConfigState `json:"state"`
	// createdAt is when the config was minted and staged.
	// +required
	CreatedAt metav1.Time `json:"createdAt"`
	// publishedAt is when the authoritative servers were seen answering it.
	// +optional
	PublishedAt *metav1.Time `json:"publishedAt,omitempty"`
	// retiredAt is when it was seen gone from DNS.
	// +optional
	RetiredAt *metav1.Time `json:"retiredAt,omitempty"`
	// expiresAt is when it is destroyed, by the operator and by every
	// pod's own clock: set when it is minted, createdAt + deliveryDelay +
	// rotationInterval + 2 x the confirmation ceiling + dns.ttl +
	// retirementMargin, and shortened at retirement to retiredAt + dns.ttl
	// + retirementMargin when that is sooner; never extended.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
}

// ECHKeyRingStatus is the observed state of an ECHKeyRing. It never holds
// key bytes.
type ECHKeyRingStatus struct {
	// conditions: Ready is True when the newest epoch is delivered and DNS
	// answers the published config; ConfirmationOverdue is True while a
	// staged config waits for pods past confirmation.maxDelay.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// epoch is the newest epoch; it grows by one with each snapshot.
	// +optional
	Epoch int64 `json:"epoch,omitempty"`

	// snapshot is the immutable Secret holding the newest epoch.
	// +optional
	Snapshot string `json:"snapshot,omitempty"`

	// publishedConfig is the config_id DNS answers, if any.
	// +optional
	PublishedConfig *int32 `json:"publishedConfig,omitempty"`

	// nextRotation is when the staged config may next be published.
	// +optional
	NextRotation *metav1.Time `json:"nextRotation,omitempty"`

	// configs are the ring's live configs, newest first.
	// +kubebuilder:validation:MaxItems=4
	// +listType=atomic
	// +optional
	Configs []ECHConfigStatus `json:"configs,omitempty"`

	// echConfigList is the ech parameter (an ECHConfigList, base64) the
	// ring wants the HTTPS record to hold now: the published config, or the
	// staged one once it may replace it. It is public (ECHConfigs carry
	// public keys only). In a verify-only zone, it is what the system that
	// publishes the record is to write.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	ECHConfigList string `json:"echConfigList,omitempty"`

	// dnsVerifiedAt is when the authoritative servers last answered the
	// published configs exactly.
	// +optional
	DNSVerifiedAt *metav1.Time `json:"dnsVerifiedAt,omitempty"`

	// confirmation is what the selected pods report of the staged config.
	// +optional
	Confirmation *ConfirmationStatus `json:"confirmation,omitempty"`

	// dnsRecord is the ech value the ring had written into its HTTPS
	// record and last saw DNS answer: the value it removes, and the only
	// one, when it has nothing to publish or lets the name go.
	// +optional
	DNSRecord *ECHDNSRecord `json:"dnsRecord,omitempty"`
}

// ECHDNSRecord is an ech value a ring wrote into a record.
type ECHDNSRecord struct {
	// zone is the ClusterDNSZone the record is in.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Zone string `json:"zone"`
	// name is the record's owner name, lower case, without the final dot.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// echConfigList is the value written (an ECHConfigList, base64; public).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	// +required
	ECHConfigList string `json:"echConfigList"`
}

// +kubebuilder:object:root=true

// ECHKeyRingList is a list of ECHKeyRings.
type ECHKeyRingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ECHKeyRing `json:"items"`
}

func init() {
	register(&ECHKeyRing{}, &ECHKeyRingList{})
}
