package keyring

import "fmt"

// What each server does with the keys it is given. The formats derive the
// keys (derive.go); the rules below say which of them a server can hold, in
// which order, so that the operator (Ring.Files, and its report of what each
// format keeps) and the ringmaster-agent sidecar agree.

// HAProxySlots is how many ticket keys HAProxy holds per tls-ticket-keys
// file: its TLS_TICKETS_NO build option, 3 in every packaged build. It
// refuses to start on a file of fewer lines, keeps the last 3 of a longer
// one, and encrypts with the middle one of those it keeps.
const HAProxySlots = 3

// HAProxyKeys returns the keys HAProxy holds, from the keys served in
// serving order (Ring.TicketKeys: the active key, then staged keys soonest
// first, then decrypt-only keys newest first). They come in the order of the
// tls-ticket-keys file's last three lines, which is also the order "show
// tls-keys <ref>" lists them:
//
//	[0] the oldest slot, decrypt-only: the newest decrypt-only key;
//	[1] the key HAProxy encrypts with: the active key;
//	[2] the next slot: the staged key (the soonest, if several).
//
// HAProxy's runtime API rotates the slots as appending a line to the file
// would: "set ssl tls-key" overwrites [0] with the new key, and the old [2]
// then encrypts. So [2] holds the key due to encrypt next, and a rotation
// costs one command when that key comes in with the next staged key.
//
// A slot with no key of its own repeats the active key: a new ring has no
// decrypt-only key, and once a staged key has activated the ring has no
// staged key until the operator's next epoch arrives. A repeat adds no key
// material: HAProxy then holds exactly the ring's keys, decrypts exactly
// what they decrypt, and the repeat goes away with the key. HAProxy looks a
// ticket's key name up from the encrypting slot on, so the repeat is never
// the one that matches. (A random filler would be a key no other replica
// holds, and a fixed one a key anyone could forge tickets under.) In the
// next slot the repeat is also the safe successor: if a command were ever
// lost, HAProxy would go on encrypting with the active key.
//
// ok is false when served is empty.
func HAProxyKeys(served []Key) (keys [HAProxySlots]Key, ok bool) {
	if len(served) == 0 {
		return keys, false
	}
	active := served[0]
	keys = [HAProxySlots]Key{active, active, active}
	var haveStaged, haveOlder bool
	for _, k := range served[1:] {
		switch {
		case k.ActiveFrom.After(active.ActiveFrom) && !haveStaged:
			keys[2], haveStaged = k, true
		case !k.ActiveFrom.After(active.ActiveFrom) && !haveOlder:
			keys[0], haveOlder = k, true
		}
	}
	return keys, true
}

// CiliumSlots is how many ticket keys Cilium reads from one Secret into
// Envoy's session_ticket_keys: tls.sessionticket.key and .1 to .9
// (pkg/envoy's secret syncer). Envoy encrypts with the first and decrypts
// with every one of them, whatever their order.
const CiliumSlots = 10

// CiliumFileName is the Secret key of Cilium's slot i:
// tls.sessionticket.key for 0, the key Envoy encrypts with, and
// tls.sessionticket.key.<i> for the others.
func CiliumFileName(i int) string {
	if i == 0 {
		return "tls.sessionticket.key"
	}
	return fmt.Sprintf("tls.sessionticket.key.%d", i)
}

// CiliumKeys returns the keys Cilium's layout holds, from the keys served
// in serving order (Ring.TicketKeys), in the order of its slots: the
// active key first, which Envoy encrypts with, then the staged keys,
// soonest first, then the decrypt-only keys, newest first, as many as
// CiliumSlots holds. The staged key is there one interval before it
// encrypts, so every Envoy decrypts its tickets before any issues one;
// the key that encrypted until the last activation is next after the
// staged key, so tickets issued under it resume after the rotation. Past
// CiliumSlots, the oldest decrypt-only keys are left out.
//
// The order is taken at one instant (the epoch's IssuedAt for a
// projection): Cilium has no clock of its own for the keys. The operator
// publishes an epoch at every activation and expiry (Plan.RequeueAt), so
// the projection changes when the order does.
func CiliumKeys(served []Key) []Key {
	return served[:min(len(served), CiliumSlots)]
}

// DecryptOnlyKeys is how many decrypt-only keys a server fed format f
// keeps, besides the active and the staged key; -1 means every key it is
// given.
//
//   - go: pkg/agent serves every key of the ring.
//   - nginx: every ssl_session_ticket_key its configuration lists; the
//     ringmaster-agent sidecar lists every key of the ring.
//   - envoy: every key of its session_ticket_keys.
//   - haproxy: 1. Of its 3 slots, one encrypts and one holds the staged key,
//     which must be there before any replica encrypts with it.
//   - cilium: 8, for the same reason: 10 slots, one active, one staged.
func (f Format) DecryptOnlyKeys() int {
	switch f {
	case FormatHAProxy:
		return HAProxySlots - 2
	case FormatCilium:
		return CiliumSlots - 2
	}
	return -1
}

// Shortfall is a format whose server keeps fewer decrypt-only keys than a
// ring retains: tickets issued under the keys it drops do not resume there.
type Shortfall struct {
	Format Format
	// Keeps is how many decrypt-only keys the server keeps.
	Keeps int
}

// Shortfalls returns the formats among formats whose server keeps fewer
// decrypt-only keys than retainedKeys, in the order given, each once.
func Shortfalls(formats []Format, retainedKeys int) []Shortfall {
	var out []Shortfall
	for i, f := range formats {
		seen := false
		for _, g := range formats[:i] {
			seen = seen || g == f
		}
		if n := f.DecryptOnlyKeys(); !seen && n >= 0 && n < retainedKeys {
			out = append(out, Shortfall{Format: f, Keeps: n})
		}
	}
	return out
}
