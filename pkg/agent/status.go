package agent

import (
	"encoding/json"
	"github.com/ringmaster-io/ringmaster/internal/agentstatus"
	"net/http"
)

// StatusPath is where a pod serves StatusHandler, and where the operator
// asks it which keys it holds before it promotes a staged key
// (TicketKeyRing spec.confirmation).
const StatusPath = agentstatus.Path

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

// Status is what an agent serves, for health endpoints and the operator's
// confirmation: the wire type of package agentstatus.
type Status = agentstatus.Status

// KeyStatus describes one served ticket key.
type KeyStatus = agentstatus.KeyStatus

// ECHStatus describes the ECH ring served.
type ECHStatus = agentstatus.ECHStatus

// ECHConfigStatus describes one served ECH config.
type ECHConfigStatus = agentstatus.ECHConfigStatus

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
	st.ECH = echStatus(s.ech)
	if s.cert != nil {
		st.CertificateNotAfter = s.cert.notAfter
	}
	if f := a.lastErr.Load(); f != nil {
		st.LastError, st.LastErrorTime = f.msg, f.at
	}
	return st
}
