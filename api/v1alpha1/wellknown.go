package v1alpha1

// Labels and annotations ringmaster sets or reads.
const (
	// RingLabel names the TicketKeyRing a snapshot or projection Secret
	// belongs to; the Secret is in the ring's namespace.
	RingLabel = "ringmaster.io/ring"
	// ClusterRingLabel names the ClusterTicketKeyRing a snapshot or
	// projection Secret belongs to.
	ClusterRingLabel = "ringmaster.io/cluster-ring"
	// EpochLabel is the epoch of a snapshot Secret.
	EpochLabel = "ringmaster.io/epoch"
	// ComponentLabel tells a snapshot Secret from a projection Secret.
	ComponentLabel = "ringmaster.io/component"
	// EpochAnnotation on a projection Secret names the epoch it carries.
	EpochAnnotation = "ringmaster.io/epoch"

	// DueAnnotation on a snapshot Secret is when its staged key fell or falls
	// due, while the ring holds it for its fleet to confirm (RFC 3339).
	DueAnnotation = "ringmaster.io/due"

	// PublishedUnconfirmedAnnotation on an ECH ring's snapshot Secret is the
	// config_id of its published config when that config was published at
	// its ceiling without every pod reporting it.
	PublishedUnconfirmedAnnotation = "ringmaster.io/published-unconfirmed"

	// ExpiresAtAnnotation on a snapshot or projection Secret is when the
	// first key it holds expires (RFC 3339): the time by which the Secret
	// must be gone (a live ring rewrites or deletes it then), even when no
	// ring controls it any more (an orphan delete, a ring removed while the
	// operator was down). It is on the Secret's metadata so that the
	// operator need not read its keys to know it.
	ExpiresAtAnnotation = "ringmaster.io/expires-at"

	// SharedVersionAnnotation on a snapshot Secret is the version of the
	// ring's shared entry in Vault that the epoch serves, for a ring whose
	// key source shares rings across clusters.
	SharedVersionAnnotation = "ringmaster.io/shared-version"

	// RotateRequestedAtAnnotation asks for a rotation now. Set it to the
	// current time (RFC 3339); each new value is handled once and echoed in
	// status.lastRotateRequestedAt, as `cmctl renew` and Flux's
	// reconcile.fluxcd.io/requestedAt do.
	RotateRequestedAtAnnotation = "ringmaster.io/rotate-requested-at"

	// RevokeRequestedAtAnnotation asks for an emergency revoke: every key of
	// the ring is destroyed at once and a fresh key encrypts from now, so
	// that no ticket issued before resumes. Set it to the current time
	// (RFC 3339); each new value is handled once, echoed in
	// status.lastRevokeRequestedAt and recorded in status.revocations.
	RevokeRequestedAtAnnotation = "ringmaster.io/revoke-requested-at"

	// FleetRequestAnnotation on a snapshot Secret is the UID of the
	// FleetRequest the epoch carried out, if any: the record by which a
	// ring carries out each FleetRequest once, even when its status was
	// not written (an operator restart, a leader change).
	FleetRequestAnnotation = "ringmaster.io/fleet-request"

	// DeliveredAnnotation is the one annotation the operator sets on a pod
	// (and the only change it may make to one, under the admission guard of
	// config/admission/pods.yaml): the projection Secret it last wrote a new
	// epoch into that the pod mounts, as "<secret>=<epoch>". Any change to a
	// pod makes its kubelet sync it, and re-mount its Secret volumes, at
	// once, rather than on its periodic sync (up to about 90 s).
	DeliveredAnnotation = "ringmaster.io/delivered"
)

// ECHDNSFinalizer is on an ECHKeyRing while it owns a DNS name it may
// have written: its deletion waits until the name is released (the ech
// value it wrote removed from DNS, and the record's TTL plus its
// retirementMargin passed), since DNS is outside the cluster and nothing
// else would clean it up.
const ECHDNSFinalizer = "ringmaster.io/dns-record"

// Values of ComponentLabel.
const (
	ComponentSnapshot   = "snapshot"
	ComponentProjection = "projection"
	// ComponentDNSName labels the record of a DNS name's owner: a
	// coordination.k8s.io Lease in the operator's namespace.
	ComponentDNSName = "dns-name"
)

// The labels and annotations of a DNS name's record (a Lease labelled
// ComponentLabel ComponentDNSName in the operator's namespace, named
// ringmaster-dns-<the first 32 hex digits of the SHA-256 of the name>).
// Its spec.holderIdentity is the owner ring's <namespace>/<name>, its
// spec.acquireTime when the ring took the name.
const (
	// DNSNameAnnotation is the DNS name the record is of, canonical (lower
	// case, without the final dot); it is checked on every read, so that
	// two names whose hashes agree are a conflict, never an overwrite.
	DNSNameAnnotation = "ringmaster.io/dns-name"
	// DNSZoneAnnotation names the ClusterDNSZone through which the owner
	// was admitted: its primary and TSIG key remove the owner's value when
	// it lets the name go.
	DNSZoneAnnotation = "ringmaster.io/dns-zone"
	// DNSZoneLabel is that ClusterDNSZone's name, when it fits in a label
	// value (63 characters), else "sha256-" and the first 32 hex digits of
	// its SHA-256: kubectl get lease -l ringmaster.io/dns-zone=<zone>
	// lists a zone's records.
	DNSZoneLabel = "ringmaster.io/dns-zone"
	// DNSOwnerUIDLabel is the UID of the ECHKeyRing that owns the name.
	DNSOwnerUIDLabel = "ringmaster.io/ech-ring-uid"
	// DNSStateAnnotation is the name's state: Owned, or Releasing.
	DNSStateAnnotation = "ringmaster.io/dns-state"
	// DNSReleaseAtAnnotation is when a Releasing name passes on (RFC
	// 3339); absent while the owner's value waits to leave DNS.
	DNSReleaseAtAnnotation = "ringmaster.io/release-at"
)

// Limits that the API's validation enforces and the operator relies on.
const (
	// MaxRingNameLength bounds the name of a TicketKeyRing or
	// ClusterTicketKeyRing: the name is the value of a label on every
	// Secret of the ring, and label values hold at most 63 characters.
	MaxRingNameLength = 63
)
