// Package agent hot-swaps the certificate and the session ticket keys of a
// running Go TLS server, from a directory the kubelet keeps up to date (a
// projected volume holding ringmaster's ticketkeys.json and, optionally, a
// kubernetes.io/tls Secret's tls.crt and tls.key).
//
// It is shaped like controller-runtime's certwatcher:
//
//	a, err := agent.New(agent.Options{Dir: "/var/run/ringmaster"}) // reads once, fails fast
//	if err != nil { ... }
//	go a.Start(ctx)                             // watches until ctx ends
//	srv.TLSConfig = a.TLSConfig(base)           // serves the newest material
//	prometheus.MustRegister(a)                  // optional metrics
//
// # How a change is served
//
// On every change (fsnotify on the directory, a periodic re-read, or a timer
// at the instant a staged key activates or a key expires) the agent reads the
// directory through the ..data symlink resolved once, validates everything,
// and builds one complete *tls.Config per TLSConfig caller: a Clone of the
// caller's base, the certificate set, SetSessionTicketKeys called with the
// ring ordered active, staged, then decrypt-only newest to oldest. Only then
// is the config published with atomic.Pointer.Store.
//
// The config returned by TLSConfig has a GetConfigForClient that performs a
// single atomic load. crypto/tls then takes only the read lock of the loaded
// config, whose keys were set before publication and are never written
// again, so that lock never meets a writer: rotation costs handshakes
// nothing, unlike calling SetSessionTicketKeys on a config that is serving.
//
// # Tickets bound to their scope
//
// crypto/tls resumes any ticket its keys decrypt, whatever server name the
// client asks for now. A ring shared by several names would let a ticket
// issued for one resume at another, skipping its certificate. Every config
// the agent builds sets WrapSession and UnwrapSession: each ticket carries
// its scope (the ring and the server name, Options.TicketScopes to share a
// scope between names, Options.TicketScopeClientAuth to add the listener's
// client authentication) inside its encrypted state, and a ticket presented
// under another scope is ignored, so the handshake goes on as a full one.
// ringmaster_agent_ticket_scope_refusals_total counts them. The same hooks
// keep 0-RTT off unless Options.EarlyData is set.
//
// # HTTP/3
//
// quic-go's http3.Server clones the config it is given when it starts, so
// SetSessionTicketKeys on that config afterwards reaches no handshake;
// the config TLSConfig returns carries GetConfigForClient, which the clone
// keeps, and so serves the current keys over QUIC too. Give http3.Server
// a QUICConfig without Allow0RTT (its default with a nil QUICConfig allows
// 0-RTT, which the agent's tickets refuse).
//
// # Resumption with classical X25519
//
// A Go server resumes a TLS 1.3 session only with a fresh key exchange,
// by default the hybrid post-quantum X25519MLKEM768, so a resumed handshake
// pays most of a full one. With Options.ClassicalResumption, each change
// also builds a second config from the same material, with X25519 alone,
// and GetConfigForClient hands it to the ClientHellos that offer a ticket
// (a pre_shared_key extension) and support X25519: still one atomic load,
// and a scan of the ClientHello's extension ids and groups. Full
// handshakes keep the hybrid. The option is off by default; its doc
// comment states what it costs in security.
//
// # Bad input
//
// A truncated ring, an unknown version, a wrong key length, duplicate ids, a
// ring whose keys have all expired, a certificate that does not match its key
// or has expired, a directory that disappears, a ..data swap racing the read:
// none of them replaces what is serving. The ticket key ring and the
// certificate are judged separately, so a good new ring is taken even when
// the certificate beside it is bad. Each failed attempt increments
// ringmaster_agent_reload_errors_total{reason}, and each distinct cause is
// logged once, not on every retry; a cause that comes and goes is logged at
// most once a minute.
//
// Nor do these, each under a reason of its own:
//
//   - a file that is not a regular file (a named pipe, a device): it is
//     opened without blocking and refused (ring_invalid,
//     certificate_invalid);
//   - a symlink that leads out of the directory at any hop: ..data must name
//     a directory beside it, itself no symlink (directory), and every file
//     is opened through an os.Root of the directory, so a file that is a
//     symlink, or a chain of them, leaving it is refused with the link named
//     (ring_invalid, certificate_invalid);
//   - a symlink to nothing: ..data naming a directory that does not exist
//     (directory), a file's link whose target is gone (ring_missing,
//     certificate_missing, ech_missing), each named as such;
//   - echkeys.json gone while an ECH ring is served (ech_missing): its
//     configs keep serving until each expires by its own expiresAt;
//   - ticketkeys.json that keyring.Decode refuses: besides the above, a
//     field name in another case, a field given twice, invalid UTF-8, a ring
//     name the API cannot produce (ring_invalid);
//   - a ring of more than keyring.MaxKeys keys, more than any TicketKeyRing
//     holds (ring_too_large);
//   - a ring of another name than Options.Ring, or than the first ring taken
//     (ring_foreign); an epoch lower than the one served (ring_rollback); the
//     same epoch with other content (ring_epoch_conflict);
//   - a certificate whose NotBefore is more than CertificateSkew ahead
//     (certificate_not_yet_valid). It is taken once its time comes.
//
// A ring deleted and created again starts over at epoch 1, which running
// agents refuse as a rollback until the pods restart or Agent.Reset is
// called.
//
// # Encrypted Client Hello
//
// When the directory holds echkeys.json, the configs the agent builds
// serve ECH from it through GetEncryptedClientHelloKeys, from the same
// snapshot. A client whose ECH is rejected always gets retry configs while
// the server holds a config the fleet very likely holds: the published
// ones, or with none live the newest retired one, or else the newest
// staged one staged at least as long as the ring's configs waited to be
// published (see docs/agent.md). A config expired or dropped is destroyed
// by key, and never taken again under any bytes.
//
// Reads run on a goroutine of their own: Start returns promptly on cancel,
// and keys expire on time, whatever the file system does. A burst of changes
// within Options.Debounce costs one read.
//
// The one exception is time: a key past its expiresAt is dropped at that
// instant even if no new file arrives, because forward secrecy depends on
// destroying keys on schedule. Its bytes are overwritten in the agent's
// memory, and its id is never taken again, even if the clock steps back or
// a file lists the key again. When every key has expired, tickets fall back
// to crypto/tls's own per-process keys until a usable ring arrives. The
// operator then publishes the ring without keys if it cannot mint new ones:
// the agent takes that epoch (New included), destroys every key it held,
// whatever its clock says, and goes on with crypto/tls's keys.
//
// # Running under controller-runtime
//
// An Agent is a manager.Runnable that needs no leader election
// (NeedLeaderElection returns false), so mgr.Add(a) runs it on every
// replica, as controller-runtime's certwatcher.
//
// # Servers not written in Go
//
// Agent.ExportTicketKeys hands out the keys served, secrets included, in
// serving order, for a program that feeds them to another TLS server: the
// ringmaster-agent sidecar (cmd/ringmaster-agent) does so for nginx,
// HAProxy and Envoy, under exactly the refusals, pins and expiry above.
//
// # Metrics
//
// The Agent is a prometheus.Collector exporting
// ringmaster_agent_handshakes_total{resumed},
// ringmaster_agent_hello_retry_requests_total and
// ringmaster_agent_classical_full_handshakes_total (these three once
// TLSConfig has been called), ringmaster_agent_swaps_total,
// ringmaster_agent_epoch, ringmaster_agent_active_key_age_seconds,
// ringmaster_agent_certificate_not_after_timestamp_seconds and
// ringmaster_agent_reload_errors_total{reason}. Handshakes are counted from
// VerifyConnection with atomic counters, adding no lock. There is no
// handshake duration histogram: a tls.Config's hooks cannot measure one
// honestly (see metrics.go); time tls.Conn.HandshakeContext where the
// handshake is driven instead.
//
// # Secrets
//
// Key bytes never appear in a log line, an error, Status or a metric; keys
// are named by their id, a one-way hash. An error about ticketkeys.json
// names the field and the problem, never what the file holds there (a
// corrupt or hostile file may hold key bytes in any field), and names a
// ring other than the one served without its name. TicketKey, its Secret
// and the Agent show no key byte in any fmt verb, in log/slog, logr or
// encoding/json: a key shows as its id, a secret as [redacted].
package agent
