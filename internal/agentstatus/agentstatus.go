// Package agentstatus is the wire format of the agent's status endpoint:
// the JSON a pod serves at Path (pkg/agent's StatusHandler, the sidecar's
// status listener) and the operator reads to confirm a staged key. It holds
// key ids and times, never a key byte, and imports nothing of the agent, so
// that the operator can read it without depending on pkg/agent.
package agentstatus

import "time"

// Path is where a pod serves its Status, and where the operator asks it
// which keys it holds before it promotes a staged key (TicketKeyRing
// spec.confirmation).
const Path = "/ringmaster/v1/status"

// Status is what an agent serves, for health endpoints. It never holds key
// bytes.
type Status struct {
	// Ring is the ring's "<namespace>/<name>", or "<name>" for a
	// ClusterTicketKeyRing; empty without TicketKeys.
	Ring string `json:"ring,omitempty"`
	// Epoch is the epoch of the ring served; 0 without one.
	Epoch int64 `json:"epoch"`
	// ActiveKeyID is the id of the key encrypting new tickets; empty when
	// no key is usable and crypto/tls's own keys stand in.
	ActiveKeyID string `json:"activeKeyID,omitempty"`
	// Keys are the keys served, in the order crypto/tls tries them.
	Keys []KeyStatus `json:"keys,omitempty"`
	// ECH is the Encrypted Client Hello ring served; nil without echkeys.json.
	ECH *ECHStatus `json:"ech,omitempty"`
	// CertificateNotAfter is the expiry of the certificate served; zero
	// without Certificate.
	CertificateNotAfter time.Time `json:"certificateNotAfter,omitzero"`
	// ServingSince is when the config served was built.
	ServingSince time.Time `json:"servingSince"`
	// Swaps counts the configs published since New.
	Swaps uint64 `json:"swaps"`
	// LastError is why the latest read of the directory was rejected, empty
	// when it succeeded. The config served is then the last good one.
	LastError string `json:"lastError,omitempty"`
	// LastErrorTime is when LastError happened.
	LastErrorTime time.Time `json:"lastErrorTime,omitzero"`
}

// KeyStatus describes one served ticket key.
type KeyStatus struct {
	// ID is the key's public id.
	ID string `json:"id"`
	// State is "active", "staged" or "decrypt-only", as served.
	State string `json:"state"`
	// ActiveFrom is when the key starts or started to encrypt.
	ActiveFrom time.Time `json:"activeFrom"`
	// ExpiresAt is when the key is dropped.
	ExpiresAt time.Time `json:"expiresAt"`
	// AgeSeconds is the time since ActiveFrom; negative while staged.
	AgeSeconds float64 `json:"ageSeconds"`
}

// ECHStatus describes the ECH ring an agent serves: the config ids it holds,
// which the operator reads before it publishes a staged config to DNS.
type ECHStatus struct {
	// Ring is the ECHKeyRing's "<namespace>/<name>".
	Ring string `json:"ring"`
	// Epoch is the epoch of the ring served.
	Epoch int64 `json:"epoch"`
	// Configs are the configs served, in the order crypto/tls tries their
	// keys: published, then staged, then retired, each newest first.
	// Expired configs are not among them.
	Configs []ECHConfigStatus `json:"configs"`
}

// ECHConfigStatus describes one served ECH config.
type ECHConfigStatus struct {
	// ID is the config's config_id.
	ID uint8 `json:"id"`
	// State is "staged", "published" or "retired", as served.
	State string `json:"state"`
	// Retry tells whether the config is sent as a retry config to a client
	// whose ECH is rejected: the published configs; with none live, the
	// newest retired one; else the newest staged one that is due.
	Retry bool `json:"retry"`
	// ExpiresAt is when the agent drops the config, whatever its state: its
	// longest life from its creation, shortened at its retirement.
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
}
