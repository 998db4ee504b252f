package v1alpha1

// Condition types of every kind, in one place.
const (
	// ConditionReady summarises an object. A ring: its newest epoch is
	// published to every target namespace. A key source: the operator
	// logged in with it. A policy: every selected certificate was judged.
	ConditionReady = "Ready"
	// ConditionRotationOverdue (rings) is True while a rotation is due but
	// its key cannot be minted. Keys still expire on time meanwhile: forward
	// secrecy comes before resumption.
	ConditionRotationOverdue = "RotationOverdue"
	// ConditionConfirmationOverdue (rings under spec.confirmation) is True
	// while a staged key has waited for its fleet longer than the timeout,
	// and the active key keeps encrypting. It is False with reason
	// ActivatedUnconfirmed, naming the voters that lacked the key, from
	// the moment a held key activated by the clock unconfirmed (at its
	// ceiling, spec.confirmation.maxDelay, or under Promote at the timeout)
	// until the next staged key falls due.
	ConditionConfirmationOverdue = "ConfirmationOverdue"
	// ConditionRetentionLimited (rings) is True when a format listed in
	// spec.distribution.formats is read by a server that keeps fewer
	// decrypt-only keys than spec.retainedKeys (HAProxy keeps 1): tickets
	// under the keys it drops do not resume on that server.
	ConditionRetentionLimited = "RetentionLimited"
	// ConditionRequestRefused (ticket rings) is True while a rotate or
	// revoke request annotation holds something other than an RFC 3339
	// time of at most 64 characters: it is not carried out, and its value
	// is not shown. Absent otherwise.
	ConditionRequestRefused = "RequestRefused"
	// ConditionCompliant (policies) is True when every certificate the
	// policy selects obeys every rule.
	ConditionCompliant = "Compliant"
	// ConditionMinting (key sources) is the outcome of the last mint from
	// the key source since the operator started: True after a success,
	// False with the reason and the whole error after a failure, which the
	// rings' own status shows only as a reason and the key source's name.
	ConditionMinting = "Minting"
	// ConditionNamesOverlap (ClusterDNSZones) is True while another
	// ClusterDNSZone allows some of the names this one allows (their
	// allowedNames overlap): the message names those zones. Overlapping is
	// allowed and safe, since a DNS name has one owner across the cluster
	// whichever zone admitted it; the condition shows the administrator
	// that two zones hand out the same names.
	ConditionNamesOverlap = "NamesOverlap"
)

// Reasons of a ring's conditions.
const (
	// ReasonPublished: the newest epoch is in its snapshot and every
	// projection.
	ReasonPublished = "Published"
	// ReasonSecretConflict: a Secret ringmaster must write exists and is not
	// the ring's. It is left untouched.
	ReasonSecretConflict = "SecretConflict"
	// ReasonDistributionFailed: the newest epoch could not be written into
	// some target namespaces (status.failedTargets names them); the others
	// have it, and expired keys were destroyed all the same.
	ReasonDistributionFailed = "DistributionFailed"
	// ReasonNamespaceLabelsNotKept (a target failure of a
	// ClusterTicketKeyRing): the namespace's labels are over what the
	// operator keeps, so its selector cannot be judged there; the ring
	// delivers there as it did before.
	ReasonNamespaceLabelsNotKept = "NamespaceLabelsNotKept"
	// ReasonMintFailed: the key source did not produce a key; nothing new
	// was published and the current keys keep serving.
	ReasonMintFailed = "MintFailed"
	// ReasonKeySourceNotFound: spec.sourceRef names no ClusterKeySource.
	ReasonKeySourceNotFound = "KeySourceNotFound"
	// ReasonKeySourceNotAllowed: the ClusterKeySource does not allow rings
	// of this namespace (its spec.namespaceSelector).
	ReasonKeySourceNotAllowed = "KeySourceNotAllowed"
	// ReasonInvalidSnapshot: the newest snapshot Secret cannot be read.
	ReasonInvalidSnapshot = "InvalidSnapshot"
	// ReasonInvalidSpec: the spec breaks a rule the API server should have
	// enforced (its CRD is out of date).
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonPublishFailed: the API server refused a write; retried.
	ReasonPublishFailed = "PublishFailed"
	// ReasonOnSchedule: RotationOverdue (or ConfirmationOverdue) is False;
	// nothing is overdue.
	ReasonOnSchedule = "OnSchedule"
	// ReasonAwaitingPods: ConfirmationOverdue is True; the message names the
	// pods that do not hold the staged key. Also a FleetRequest's
	// status.waiting reason: a ring that served the request and whose pods
	// do not all hold its newest key yet.
	ReasonAwaitingPods = "AwaitingPods"
	// ReasonActivatedUnconfirmed: ConfirmationOverdue is False, and the
	// Warning event of the same reason says so: a held staged key
	// activated by the clock without every voter confirming it; the
	// message names the voters that lacked it when last asked.
	ReasonActivatedUnconfirmed = "ActivatedUnconfirmed"
	// ReasonPublishedUnconfirmed: an ECHKeyRing's ConfirmationOverdue is
	// False, and the Warning event of the same reason says so: a staged
	// config was published to DNS at its ceiling without every pod
	// reporting it; the message names the pods that lacked it when last
	// asked. Those pods reject ECH under it with their retry configs, and
	// clients succeed on retry.
	ReasonPublishedUnconfirmed = "PublishedUnconfirmed"
	// ReasonRevoked: the event of an emergency revoke.
	ReasonRevoked = "Revoked"
	// ReasonFormatKeepsFewerKeys: RetentionLimited is True; its message
	// names each format and how many decrypt-only keys its server keeps.
	ReasonFormatKeepsFewerKeys = "FormatKeepsFewerKeys"
	// ReasonFormatsKeepRetainedKeys: RetentionLimited is False; every
	// format listed keeps every retained key.
	ReasonFormatsKeepRetainedKeys = "FormatsKeepRetainedKeys"
	// ReasonInvalidRequest: RequestRefused is True; its message names the
	// annotations refused.
	ReasonInvalidRequest = "InvalidRequest"
	// ReasonRingDeleting: Ready is False (and RotationOverdue True once a
	// rotation falls due) while a ticket ring is being deleted but held by
	// a finalizer (an orphan delete waiting for the garbage collector,
	// another controller's): it stages no new key, carries out no
	// rotate-now or revoke and writes nothing to a shared entry, and still
	// destroys each key at its expiresAt. The message names the
	// finalizers that hold it.
	ReasonRingDeleting = "RingDeleting"
)

// Reasons of a key source's failures, on the key source's Ready condition
// and on the rings that mint from it.
const (
	// ReasonLoggedIn: the key source's Ready is True; the operator logged in
	// and its token answers.
	ReasonLoggedIn = "LoggedIn"
	// ReasonMinted: the key source's Minting is True; its last mint
	// succeeded.
	ReasonMinted = "Minted"
	// ReasonVaultUnavailable: Vault could not be reached, answered 5xx, or
	// did not answer within the operator's deadline.
	ReasonVaultUnavailable = "VaultUnavailable"
	// ReasonVaultPermissionDenied: Vault refused the login or the request.
	ReasonVaultPermissionDenied = "VaultPermissionDenied"
	// ReasonVaultBadResponse: Vault answered something that is not a fresh
	// 32-byte key.
	ReasonVaultBadResponse = "VaultBadResponse"
	// ReasonVaultConfig: the Vault settings or a Secret they reference are
	// missing or invalid.
	ReasonVaultConfig = "VaultConfigInvalid"
	// ReasonSharedRingRolledBack: the ring's shared entry in Vault is older
	// than the version this cluster already serves (Vault lost data or was
	// restored from a backup): the cluster keeps its keys and publishes
	// nothing new.
	ReasonSharedRingRolledBack = "SharedRingRolledBack"
	// ReasonSharedRingUnsupported: the ring's spec asks for something a
	// shared ring cannot do (spec.confirmation, which one cluster's fleet
	// cannot give for all).
	ReasonSharedRingUnsupported = "SharedRingUnsupported"
	// ReasonSharedRingPolicyMismatch: the ring's policy (rotationInterval,
	// retainedKeys, activationDelay, confirmation) differs from the one its
	// shared entry in Vault records, which another cluster wrote. The
	// cluster writes nothing to the entry, adopts none of its keys and
	// publishes nothing new; its expired keys are still destroyed. The
	// message names the fields that differ.
	ReasonSharedRingPolicyMismatch = "SharedRingPolicyMismatch"
)

// Reasons of a ClusterDNSZone's Ready condition.
const (
	// ReasonZoneReady: the zone can be used (its TSIG Secret holds a
	// well-formed key, or the zone is verify-only).
	ReasonZoneReady = "ZoneReady"
	// ReasonTSIGSecretNotFound: spec.tsigSecretRef names no Secret in the
	// operator's namespace.
	ReasonTSIGSecretNotFound = "TSIGSecretNotFound"
	// ReasonTSIGSecretInvalid: the TSIG Secret lacks name or secret, its
	// secret is not base64, or its algorithm is not one the operator
	// signs with.
	ReasonTSIGSecretInvalid = "TSIGSecretInvalid"
	// ReasonDNSNameAssigned: the event of a name taking an owner admitted
	// through the zone (the name's record; status.names).
	ReasonDNSNameAssigned = "DNSNameAssigned"
	// ReasonDNSNameReleased: the event of a name of the zone released by
	// its owner.
	ReasonDNSNameReleased = "DNSNameReleased"
	// ReasonZonesOverlap: NamesOverlap is True, and the Warning event of
	// the same reason says so when it turns True or names other zones:
	// other ClusterDNSZones allow some of this zone's names.
	ReasonZonesOverlap = "ZonesOverlap"
	// ReasonNoOverlap: NamesOverlap is False; no other ClusterDNSZone
	// allows a name this one allows.
	ReasonNoOverlap = "NoOverlap"
	// ReasonDNSNameOwnerNotWatched: the Warning event, on the zone that
	// admitted it, of a name whose recorded owner is in a namespace the
	// operator does not watch (--watch-namespaces): the record is left as
	// it is, and the name waits, until that namespace is watched again or
	// an administrator deletes the record.
	ReasonDNSNameOwnerNotWatched = "DNSNameOwnerNotWatched"
	// ReasonDNSNameRecordConflict: the Warning event, on the zones of the
	// rings claiming a name, of a name whose record's object is another
	// name's (two names whose hashes agree): the record is left as it is,
	// and the name waits.
	ReasonDNSNameRecordConflict = "DNSNameRecordConflict"
)

// Reasons of a CertificatePolicy's conditions. It also uses ReasonInvalidSpec.
const (
	// ReasonEvaluated: Ready. Every selected certificate the operator can
	// see was judged against the current generation of the policy.
	ReasonEvaluated = "Evaluated"
	// ReasonNoViolations: Compliant. No selected certificate breaks a rule.
	ReasonNoViolations = "NoViolations"
	// ReasonViolationsFound: not Compliant. status.violations lists them.
	ReasonViolationsFound = "ViolationsFound"
)

// Event reasons of a CertificatePolicy and of the certificates it enforces.
const (
	// ReasonRenewalTriggered: Enforce set a Certificate's Issuing condition,
	// as `cmctl renew` does, so that cert-manager re-issues it.
	ReasonRenewalTriggered = "RenewalTriggered"
	// ReasonCannotEnforce: a certificate breaks a rule that re-issuing
	// cannot mend (a Secret no Certificate manages, a key kept by
	// rotationPolicy Never, a requested duration the rule forbids, a renewal
	// that did not help). It is reported and left untouched.
	ReasonCannotEnforce = "CannotEnforce"

	// IssuingReason is the reason of the Issuing condition that Enforce sets
	// on a cert-manager Certificate; the condition's message names the
	// policy and the rule. cmctl renew uses "ManuallyTriggered".
	IssuingReason = "CertificatePolicy"
)

// Reasons of an ECHKeyRing's conditions. It also uses ReasonPublished,
// ReasonSecretConflict, ReasonMintFailed, ReasonKeySourceNotFound,
// ReasonKeySourceNotAllowed, ReasonInvalidSnapshot, ReasonInvalidSpec,
// ReasonPublishFailed, ReasonOnSchedule and ReasonAwaitingPods.
const (
	// ReasonDNSUnavailable: the ring's DNS server did not take the update,
	// or its authoritative servers did not answer the configs it wrote.
	// Nothing new is published and no config is destroyed before its
	// time; the published config keeps serving.
	ReasonDNSUnavailable = "DNSUnavailable"
	// ReasonDNSZoneNotFound: spec.dns.zoneRef names no ClusterDNSZone.
	ReasonDNSZoneNotFound = "DNSZoneNotFound"
	// ReasonDNSNameNotAllowed: the ClusterDNSZone does not select the
	// ring's namespace, or does not allow spec.dns.name there, or its
	// maxTTL is below spec.dns.ttl.
	ReasonDNSNameNotAllowed = "DNSNameNotAllowed"
	// ReasonAwaitingDNS: Ready is False while the first config waits to be
	// published: staged, delivered, waiting for its fleet or for DNS.
	ReasonAwaitingDNS = "AwaitingDNS"
	// ReasonECHConfigInvalid: the ECHConfig the spec describes cannot be
	// built (the KEM, a cipher suite or the public name).
	ReasonECHConfigInvalid = "ECHConfigInvalid"
	// ReasonDNSNameClaimed: another ECHKeyRing owns spec.dns.name,
	// admitted through this ring's zone or another that allows the name;
	// this ring stages and publishes nothing, and changes nothing in DNS,
	// until the owner releases it.
	ReasonDNSNameClaimed = "DNSNameClaimed"
	// ReasonDNSNameReleasing: the ring lets its DNS name go (it is being
	// deleted, was renamed or is no longer admitted): the ech value it
	// wrote is removed from DNS, and its configs keep decrypting for the
	// record's TTL plus its retirementMargin before the name passes on and
	// a deleted ring goes.
	ReasonDNSNameReleasing = "DNSNameReleasing"
)

// The condition of a FleetRequest, and its reasons.
const (
	// ConditionComplete (FleetRequests) is True once every ring the
	// request selects has served an epoch carrying it out, and every pod
	// of those rings that confirm (spec.confirmation) holds it.
	ConditionComplete = "Complete"
	// ReasonInProgress: some selected rings have not served the request,
	// or their pods do not all hold it yet (status.waiting says which).
	ReasonInProgress = "InProgress"
	// ReasonCompleted: every selected ring served the request and every
	// pod that confirms holds it; also the Normal event the request gets
	// then, its one event.
	ReasonCompleted = "Completed"
	// ReasonPending: a ring selected that has not carried out the request
	// yet, and reports no problem (a status.waiting reason).
	ReasonPending = "Pending"
	// ReasonRingLabelsNotKept: a ring whose labels the operator could not
	// keep (over 1 KiB), which a FleetRequest's spec.ringSelector
	// therefore cannot judge (counted in its status.notJudged).
	ReasonRingLabelsNotKept = "RingLabelsNotKept"
)
