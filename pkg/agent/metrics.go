package agent

import "github.com/prometheus/client_golang/prometheus"

// The agent's metrics. Register the Agent itself, which is a
// prometheus.Collector; with several agents in one process, register each
// through prometheus.WrapRegistererWith and a distinguishing label.
//
// There is no ringmaster_agent_handshake_duration_seconds: a tls.Config's
// hooks cannot measure it honestly. The hooks that see a handshake begin
// (GetConfigForClient) and end (VerifyConnection) share no per-connection
// value, so pairing them would take a map shared by all handshakes, which is
// a lock on the handshake path; and VerifyConnection runs before the
// client's Finished arrives, so the span would miss the last flight anyway.
// Handshake latency belongs where the handshake is driven, around
// tls.Conn.HandshakeContext.
var (
	// handshakesDesc: ringmaster_agent_handshakes_total{resumed="true"|"false"};
	// exported once TLSConfig has been called.
	handshakesDesc = prometheus.NewDesc("ringmaster_agent_handshakes_total",
		"TLS handshakes served with the agent's configs, by whether the session was resumed from a ticket.",
		[]string{"resumed"}, nil)
	// helloRetriesDesc: ringmaster_agent_hello_retry_requests_total, no
	// labels; exported once TLSConfig has been called.
	helloRetriesDesc = prometheus.NewDesc("ringmaster_agent_hello_retry_requests_total",
		"TLS 1.3 handshakes served with the agent's configs in which the server sent a HelloRetryRequest: the client had sent no key share for the group chosen, and paid a round trip more.",
		nil, nil)
	// classicalFullDesc: ringmaster_agent_classical_full_handshakes_total,
	// no labels; exported once TLSConfig has been called.
	classicalFullDesc = prometheus.NewDesc("ringmaster_agent_classical_full_handshakes_total",
		"Full TLS 1.3 handshakes whose client offered a ticket the server could not use, served with X25519 alone under ClassicalResumption: no post-quantum key exchange protected them.",
		nil, nil)
	// echHandshakesDesc: ringmaster_agent_ech_handshakes_total{result=
	// "accepted"|"rejected"}; exported once TLSConfig has been called.
	echHandshakesDesc = prometheus.NewDesc("ringmaster_agent_ech_handshakes_total",
		"TLS handshakes whose client attempted Encrypted Client Hello, by result: accepted (the server decrypted the inner hello) or rejected (it did not, and sent the retry configs; GREASE ECH counts here).",
		[]string{"result"}, nil)
	// ticketScopeRefusalsDesc: ringmaster_agent_ticket_scope_refusals_total{
	// reason="other_scope"|"unscoped"}; exported once TLSConfig has been
	// called. Never labelled by server name or scope: their number is the
	// client's to choose.
	ticketScopeRefusalsDesc = prometheus.NewDesc("ringmaster_agent_ticket_scope_refusals_total",
		"Session tickets that decrypted under the ring but were not resumed because of their scope, by reason: other_scope (issued for another server name, named scope, ring or client authentication) or unscoped (issued by a server that binds no scope); each handshake went on as a full one.",
		[]string{"reason"}, nil)
	// echEpochDesc: ringmaster_agent_ech_epoch, no labels.
	echEpochDesc = prometheus.NewDesc("ringmaster_agent_ech_epoch",
		"Epoch of the ECH key ring served; 0 without one.",
		nil, nil)
	// swapsDesc: ringmaster_agent_swaps_total, no labels.
	swapsDesc = prometheus.NewDesc("ringmaster_agent_swaps_total",
		"Configs published after the first, one per change of ring, key order or certificate.",
		nil, nil)
	// epochDesc: ringmaster_agent_epoch, no labels.
	epochDesc = prometheus.NewDesc("ringmaster_agent_epoch",
		"Epoch of the ticket key ring served; 0 without a ring.",
		nil, nil)
	// activeKeyAgeDesc: ringmaster_agent_active_key_age_seconds, no labels.
	activeKeyAgeDesc = prometheus.NewDesc("ringmaster_agent_active_key_age_seconds",
		"Seconds since the ticket key encrypting new tickets became active; absent when no key is usable.",
		nil, nil)
	// certNotAfterDesc: ringmaster_agent_certificate_not_after_timestamp_seconds, no labels.
	certNotAfterDesc = prometheus.NewDesc("ringmaster_agent_certificate_not_after_timestamp_seconds",
		"Expiry of the certificate served, in Unix seconds; absent when the agent serves no certificate.",
		nil, nil)
	// reloadErrorsDesc: ringmaster_agent_reload_errors_total{reason}, reason
	// one of reasonNames (read.go), each explained in docs/agent.md.
	reloadErrorsDesc = prometheus.NewDesc("ringmaster_agent_reload_errors_total",
		"Reads of the directory whose material was rejected, by reason; the last good config kept serving.",
		[]string{"reason"}, nil)
)

// Describe implements prometheus.Collector.
func (a *Agent) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{handshakesDesc, helloRetriesDesc, classicalFullDesc, echHandshakesDesc, ticketScopeRefusalsDesc, echEpochDesc, swapsDesc, epochDesc, activeKeyAgeDesc, certNotAfterDesc, reloadErrorsDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. It takes no lock of the agent's.
func (a *Agent) Collect(ch chan<- prometheus.Metric) {
	s := a.snap.Load()
	// An agent that serves no config (the sidecar's, which hands the keys
	// to another server) sees no handshake: a count of 0 would mislead.
	if a.served.Load() {
		ch <- prometheus.MustNewConstMetric(handshakesDesc, prometheus.CounterValue, float64(a.resumed.Load()), "true")
		ch <- prometheus.MustNewConstMetric(handshakesDesc, prometheus.CounterValue, float64(a.full.Load()), "false")
		ch <- prometheus.MustNewConstMetric(helloRetriesDesc, prometheus.CounterValue, float64(a.retries.Load()))
		ch <- prometheus.MustNewConstMetric(classicalFullDesc, prometheus.CounterValue, float64(a.classicalFull.Load()))
		ch <- prometheus.MustNewConstMetric(echHandshakesDesc, prometheus.CounterValue, float64(a.echAccepted.Load()), "accepted")
		ch <- prometheus.MustNewConstMetric(echHandshakesDesc, prometheus.CounterValue, float64(a.echRejected.Load()), "rejected")
		for r := range numRefusals {
			ch <- prometheus.MustNewConstMetric(ticketScopeRefusalsDesc, prometheus.CounterValue, float64(a.refused[r].Load()), refusalNames[r])
		}
	}
	var echEpoch int64
	if s.ech != nil {
		echEpoch = s.ech.epoch
	}
	ch <- prometheus.MustNewConstMetric(echEpochDesc, prometheus.GaugeValue, float64(echEpoch))
	ch <- prometheus.MustNewConstMetric(swapsDesc, prometheus.CounterValue, float64(a.swaps.Load()))
	epoch := s.epoch
	ch <- prometheus.MustNewConstMetric(epochDesc, prometheus.GaugeValue, float64(epoch))
	if len(s.keys) > 0 {
		age := a.clock.Now().Sub(s.keys[0].activeFrom).Seconds()
		ch <- prometheus.MustNewConstMetric(activeKeyAgeDesc, prometheus.GaugeValue, age)
	}
	if s.cert != nil {
		ch <- prometheus.MustNewConstMetric(certNotAfterDesc, prometheus.GaugeValue, float64(s.cert.notAfter.Unix()))
	}
	// Every reason is exported from the start, so rate() sees the first one.
	for r := range numReasons {
		ch <- prometheus.MustNewConstMetric(reloadErrorsDesc, prometheus.CounterValue, float64(a.errorCounts[r].Load()), r.String())
	}
}
