package agent

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
)

// A ticket's scope is where it may resume. crypto/tls seals a ticket with
// the config's keys and, on resumption, checks the TLS version, the cipher
// suite, the ticket's age and the client certificates it carries against
// the config's ClientAuth and ClientCAs; it never looks at the server name
// (see docs/agent.md, "Scope-bound tickets"). With one ring shared by
// several names, a ticket issued for one name would resume at any other,
// skipping that name's certificate. So every ticket the agent's configs
// issue carries its scope in the sealed session state (SessionState.Extra),
// and a ticket presented under another scope is ignored: crypto/tls then
// runs a full handshake.

// scopeTag starts the agent's entry in SessionState.Extra. crypto/tls asks
// that an entry be recognisable among others (QUIC's, HTTP/3's), by an id
// and a version.
const scopeTag = "ringmaster.io/ticket-scope/v1\x00"

// refusal is why a ticket that decrypted was not resumed.
type refusal int

const (
	// refusedOtherScope: the ticket was issued under another scope.
	refusedOtherScope refusal = iota
	// refusedUnscoped: the ticket carries no scope (issued by a server
	// without the binding, such as an agent with UnscopedTickets or an
	// older agent on the same ring).
	refusedUnscoped
	numRefusals
)

// refusalNames are the reason labels of
// ringmaster_agent_ticket_scope_refusals_total.
var refusalNames = [numRefusals]string{"other_scope", "unscoped"}

// scopes maps server names to the scope their tickets carry: a named scope
// (Options.TicketScopes) or, for a name in none, the name itself.
type scopes struct {
	// exact maps a lowercase server name to "=" + its scope's name. A
	// server name never starts with "=", so a scope's name and a server
	// name never collide.
	exact map[string]string
	// wildcard maps the parent of a "*." pattern ("example.com" of
	// "*.example.com") to "=" + its scope's name.
	wildcard map[string]string
}

// newScopes validates Options.TicketScopes.
func newScopes(named map[string][]string) (*scopes, error) {
	s := &scopes{exact: map[string]string{}, wildcard: map[string]string{}}
	owner := map[string]string{}
	for _, scope := range slices.Sorted(maps.Keys(named)) {
		if scope == "" || strings.ContainsRune(scope, 0) {
			return nil, fmt.Errorf("agent: Options.TicketScopes has a scope named %q: want a non-empty name without NUL", scope)
		}
		if len(named[scope]) == 0 {
			return nil, fmt.Errorf("agent: Options.TicketScopes[%q] names no server name", scope)
		}
		for _, name := range named[scope] {
			n := normalizeName(name)
			parent, wild := strings.CutPrefix(n, "*.")
			if n == "" || strings.ContainsAny(parent, "*\x00") || strings.HasPrefix(n, "=") || strings.Contains(n, "..") {
				return nil, fmt.Errorf("agent: Options.TicketScopes[%q] has server name %q: want a DNS name, or \"*.\" and a DNS name", scope, name)
			}
			if other, ok := owner[n]; ok && other != scope {
				return nil, fmt.Errorf("agent: Options.TicketScopes names %q in scopes %q and %q: a name has one scope", name, other, scope)
			}
			owner[n] = scope
			if wild {
				s.wildcard[parent] = "=" + scope
			} else {
				s.exact[n] = "=" + scope
			}
		}
	}
	return s, nil
}

// of returns the scope of serverName (the SNI the client sent; empty
// without one). A name matches "*.example.com" when it is one label under
// example.com, as a certificate's wildcard does.
func (s *scopes) of(serverName string) string {
	n := normalizeName(serverName)
	if id, ok := s.exact[n]; ok {
		return id
	}
	if _, parent, ok := strings.Cut(n, "."); ok {
		if id, ok := s.wildcard[parent]; ok {
			return id
		}
	}
	return n
}

// normalizeName lowercases a server name and drops a trailing dot: DNS
// names are case-insensitive, and crypto/tls passes the SNI as sent.
func normalizeName(name string) string {
	return strings.TrimSuffix(strings.ToLower(name), ".")
}

// binder seals and opens the tickets of one generation of configs. Its
// methods are the configs' WrapSession and UnwrapSession: they run on the
// handshake's goroutine, take no lock of the agent's, and write nothing
// shared but an atomic counter.
type binder struct {
	// keys is the config whose ticket keys seal tickets: the built config
	// when the ring has usable keys, else the outer config, whose own keys
	// crypto/tls rotates (as it would without the agent).
	keys *tls.Config
	// prefix is scopeTag, the ring and the client-auth binding: the part of
	// a ticket's scope that is the same for every handshake of the config.
	// nil: tickets are not scoped (Options.UnscopedTickets).
	prefix []byte
	scopes *scopes
	// earlyData is Options.EarlyData.
	earlyData      bool
	earlyDataAsked func()
	refused        *[numRefusals]atomic.Uint64
}

// ticketPolicy is what the Options say of tickets, for every front.
type ticketPolicy struct {
	// scopes is nil with Options.UnscopedTickets.
	scopes     *scopes
	clientAuth bool
	earlyData  bool
	refused    *[numRefusals]atomic.Uint64
	// own: the front's base has its own WrapSession or UnwrapSession,
	// which the agent leaves alone.
	own bool
	// earlyDataAsked is called when a QUIC server asks for a ticket that
	// allows 0-RTT while earlyData is off.
	earlyDataAsked func()
}

// binder returns the binder of a config built for ring, sealing with keys,
// for base's handshakes.
func (p ticketPolicy) binder(ring string, base, keys *tls.Config) *binder {
	b := &binder{keys: keys, scopes: p.scopes, earlyData: p.earlyData, refused: p.refused, earlyDataAsked: p.earlyDataAsked}
	if p.scopes != nil {
		b.prefix = scopePrefix(ring, base, p.clientAuth)
	}
	return b
}

// scopePrefix is a binder's prefix for ring, and, when clientAuth is set,
// base's client authentication: its ClientAuth mode and the CAs of its
// ClientCAs.
func scopePrefix(ring string, base *tls.Config, clientAuth bool) []byte {
	p := append([]byte(scopeTag), ring...)
	p = append(p, 0)
	if clientAuth {
		p = binary.BigEndian.AppendUint32(p, uint32(base.ClientAuth)+1)
		if base.ClientCAs != nil {
			h := sha256.New()
			//nolint:staticcheck // Subjects is deprecated for a system pool only, whose roots it leaves out; ClientCAs is the application's own pool.
			for _, s := range base.ClientCAs.Subjects() {
				h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(s))))
				h.Write(s)
			}
			p = h.Sum(p)
		}
	}
	return append(p, 0)
}

// wrap is WrapSession: the session's scope appended to its Extra, sealed
// as crypto/tls would seal it.
func (b *binder) wrap(cs tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
	if !b.earlyData && ss.EarlyData {
		// A QUIC server allowing 0-RTT asked for it. crypto/tls has told
		// the client already (max_early_data_size in NewSessionTicket
		// follows the server's wish, not this flag): its early data will
		// be rejected.
		ss.EarlyData = false
		if b.earlyDataAsked != nil {
			b.earlyDataAsked()
		}
	}
	if b.prefix != nil {
		scope := b.scopes.of(cs.ServerName)
		entry := make([]byte, 0, len(b.prefix)+len(scope))
		ss.Extra = append(ss.Extra, append(append(entry, b.prefix...), scope...))
	}
	return b.keys.EncryptTicket(cs, ss)
}

// unwrap is UnwrapSession: a ticket the keys open and whose scope is the
// handshake's is returned; any other is ignored, (nil, nil), and the
// handshake goes on as a full one.
func (b *binder) unwrap(identity []byte, cs tls.ConnectionState) (*tls.SessionState, error) {
	ss, err := b.keys.DecryptTicket(identity, cs)
	if ss == nil || err != nil {
		// DecryptTicket returns no error; a ticket it cannot open is nil.
		return nil, nil //nolint:nilerr // an unusable ticket means a full handshake, never a failed one
	}
	if !b.earlyData {
		ss.EarlyData = false
	}
	if b.prefix == nil {
		return ss, nil
	}
	scope := b.scopes.of(cs.ServerName)
	found := false
	for _, e := range ss.Extra {
		if !bytes.HasPrefix(e, []byte(scopeTag)) {
			continue
		}
		found = true
		if len(e) == len(b.prefix)+len(scope) && bytes.HasPrefix(e, b.prefix) && string(e[len(b.prefix):]) == scope {
			return ss, nil
		}
	}
	if found {
		b.refused[refusedOtherScope].Add(1)
	} else {
		b.refused[refusedUnscoped].Add(1)
	}
	return nil, nil
}
