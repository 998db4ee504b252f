package agent

import (
	"encoding/json"
	"net/http"
	"time"
)

// StatusPath is where a pod serves StatusHandler, and where the operator
// asks it which keys it holds before it promotes a staged key
// (TicketKeyRing spec.confirmation).
const StatusPath = "/ringmaster/v1/status"

// StatusHandler serves the agent's Status as JSON, to GET requests only: the
// ring's name, epoch and key ids with their states and times, and never a
// key byte. Serve it on a port of its own, declared on the container, that
// the operator may reach:
//
//	mux := http.NewServeMux()
//	mux.Handle(agent.StatusPath, a.StatusHandler())
//	go http.ListenAndServe(":9090", mux)
func (a *Agent) StatusHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(a.Status())
	})
}

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

// Status reports what the agent serves now. It takes no lock.
func (a *Agent) Status() Status { return a.statusOf(a.snap.Load()) }

// statusOf describes s, a snapshot the agent published, now.
func (a *Agent) statusOf(s *snapshot) Status {
	now := a.clock.Now()
	st := Status{ServingSince: s.at, Swaps: a.swaps.Load()}
	if s.hasRing {
		st.Ring, st.Epoch = s.ring, s.epoch
	}
	for _, k := range s.keys {
		st.Keys = append(st.Keys, KeyStatus{
			ID:         k.id,
			State:      string(k.state),
			ActiveFrom: k.activeFrom,
			ExpiresAt:  k.expiresAt,
			AgeSeconds: now.Sub(k.activeFrom).Seconds(),
		})
	}
	if len(s.keys) > 0 {
		st.ActiveKeyID = s.keys[0].id
	}
	if s.cert != nil {
		st.CertificateNotAfter = s.cert.notAfter
	}
	if f := a.lastErr.Load(); f != nil {
		st.LastError, st.LastErrorTime = f.msg, f.at
	}
	return st
}
