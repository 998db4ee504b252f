package agent

import (
	"context"
	"crypto/fips140"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/ringmaster-io/ringmaster/internal/echring"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

// Files says which material an Agent reads from its directory. Material not
// named is neither read nor required; the base config passed to TLSConfig
// supplies it.
type Files uint8

const (
	// TicketKeys is ticketkeys.json, the ring ringmaster distributes.
	TicketKeys Files = 1 << iota
	// Certificate is tls.crt (PEM chain, leaf first) and tls.key (PEM
	// private key), the layout of a kubernetes.io/tls Secret.
	Certificate
	// ECHKeys is echkeys.json, an ECHKeyRing's configs and keys. The agent
	// serves ECH whenever the file is in the directory; requiring it makes
	// New fail without it, and its absence a reload error.
	ECHKeys
)

// Errors returned by New, usable with errors.Is. The error New returns also
// wraps the underlying cause.
var (
	// ErrDirectory means Options.Dir is unset, missing, not a directory, or
	// kept changing while it was being read.
	ErrDirectory = errors.New("agent: directory missing or unreadable")
	// ErrTicketKeys means ticketkeys.json is missing, invalid, or holds
	// keys of which none is unexpired. A ring published without keys (every
	// key expired while the operator could mint none) is not an error: the
	// agent takes it and crypto/tls's own keys stand in until keys arrive.
	ErrTicketKeys = errors.New("agent: ticket key ring missing or unusable")
	// ErrCertificate means tls.crt or tls.key is missing or invalid, they do
	// not match, or the certificate has expired or is not valid yet.
	ErrCertificate = errors.New("agent: certificate missing or invalid")
	// ErrECHKeys means echkeys.json is invalid, holds no unexpired config,
	// or is missing while Options.Require names ECHKeys.
	ErrECHKeys = errors.New("agent: ECH key ring missing or unusable")

	// The errors below say more precisely why a ring or a certificate was
	// refused. Each is wrapped beside ErrTicketKeys or ErrCertificate, and
	// each has its own reason label in ringmaster_agent_reload_errors_total.

	// ErrForeignRing means ticketkeys.json holds another ring than the one
	// the agent serves: Options.Ring, or else the first ring it took; or
	// echkeys.json another ECH ring than Options.ECHRing, or else the
	// first it took (that error reads in ECH words, and is still
	// ErrForeignRing to errors.Is).
	ErrForeignRing = errors.New("agent: ticket key ring of another name")
	// ErrRollback means ticketkeys.json (or echkeys.json) holds an epoch
	// lower than the last one the agent took: an older snapshot, which may
	// bring back keys that were dropped on purpose.
	ErrRollback = errors.New("agent: ticket key ring epoch went back")
	// ErrEpochConflict means ticketkeys.json (or echkeys.json) holds the
	// epoch the agent serves with other content. The operator never
	// publishes one epoch twice.
	ErrEpochConflict = errors.New("agent: ticket key ring epoch reused with other content")
	// ErrTooManyKeys means the ring holds more than keyring.MaxKeys keys,
	// which no TicketKeyRing produces, and which would make every resumption
	// attempt with an unknown ticket try that many keys.
	ErrTooManyKeys = errors.New("agent: ticket key ring has too many keys")
	// ErrNotYetValid means the certificate's NotBefore is more than
	// CertificateSkew ahead of the agent's clock: served, it would fail
	// every new full handshake.
	ErrNotYetValid = errors.New("agent: certificate not valid yet")
)

// DefaultResyncPeriod is how often the directory is re-read when
// Options.ResyncPeriod is zero, as a fallback for a missed fsnotify event and
// to re-arm the watch after the directory itself was replaced.
const DefaultResyncPeriod = 10 * time.Second

// DefaultDebounce is how long the agent waits, when Options.Debounce is
// zero, between the first change it sees in the directory and the read
// that follows: every change within that window costs the one read. The
// kubelet's update of a volume raises several events in a few
// microseconds; a plain directory written file by file, a few more.
const DefaultDebounce = 100 * time.Millisecond

// CertificateSkew is how long before its NotBefore a certificate is taken:
// the clock skew tolerated between the issuer and this host. An issuer
// commonly dates a certificate from the instant it signs it, so a host
// whose clock lags a little would otherwise refuse a fresh certificate.
const CertificateSkew = 5 * time.Minute

// flapWindow is how long a cause of rejection stays quiet in the log once
// logged, when it goes away and comes back: a flapping input is logged once
// per window, not once per flip. A cause that persists is logged once
// however long it lasts.
const flapWindow = time.Minute

// Clock is the agent's source of time, for key activation and expiry,
// certificate validity, and the periodic re-read. (The debounce window is
// real time, whatever the Clock: it coalesces file-system activity.) Tests
// inject a fake; the default is the real clock.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// After returns a channel that receives once d has elapsed.
	After(d time.Duration) <-chan time.Time
}

// Options configure an Agent.
type Options struct {
	// Dir is the directory to read: a kubelet-managed volume (files behind a
	// ..data symlink), or a plain directory.
	Dir string
	// Require names the material read from Dir, all of which New demands.
	// Zero means TicketKeys. echkeys.json is read whenever it is present;
	// naming ECHKeys makes it required.
	Require Files
	// Ring is the ring the agent serves: "<namespace>/<name>" of a
	// TicketKeyRing, or "<name>" of a ClusterTicketKeyRing. A
	// ticketkeys.json holding another ring is refused, New included. Empty
	// means that the first ring taken pins its name.
	Ring string
	// ECHRing is the ECHKeyRing the agent serves ECH for:
	// "<namespace>/<name>". An echkeys.json holding another ring is refused
	// (reason ech_foreign), New included, and the name stays pinned through
	// Reset. Empty means that the first ECH ring taken pins its name.
	ECHRing string
	// Clock defaults to the real clock.
	Clock Clock
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// ResyncPeriod is the period of the fallback re-read; zero or negative
	// means DefaultResyncPeriod.
	ResyncPeriod time.Duration
	// Debounce is how long the agent waits after a change in Dir before it
	// reads Dir, so that a burst of writes costs one read; zero means
	// DefaultDebounce, negative reads at every change.
	Debounce time.Duration
	// OnSwap, if set, is called after each new config is published by Start,
	// with the status it now serves. It runs on the goroutine of Start, so it
	// must not block for long.
	OnSwap func(Status)
	// ClassicalResumption, if true, makes resumed TLS 1.3 handshakes use
	// classical X25519 alone for their key exchange, where Go's default is
	// the hybrid post-quantum X25519MLKEM768. Full handshakes keep the
	// hybrid. It is off by default: it trades some security for CPU.
	//
	// The gain: TLS 1.3 resumption still runs a fresh key exchange, and the
	// hybrid one costs most of what resumption would otherwise save. With
	// X25519, a resumed handshake costs the server about a quarter less CPU
	// (make bench; the README has the figures).
	//
	// The cost: a resumed session's keys mix the ticket's pre-shared key
	// with the X25519 exchange. The pre-shared key descends from a hybrid
	// handshake, so an attacker who records traffic today to decrypt it with
	// a quantum computer later is no better off. What is lost is
	// post-quantum forward secrecy should the pre-shared key leak: whoever
	// obtains a ticket key, or a client's session cache, and can later break
	// X25519 decrypts the resumed sessions it covers. Short key lifetimes
	// bound that exposure, which is why ringmaster's rings make the option
	// reasonable.
	//
	// The config is chosen from the ClientHello, before crypto/tls knows
	// whether the ticket decrypts. A client that offers a ticket the server
	// cannot use (under an expired key, from another ring or server) gets a
	// full handshake with X25519 alone: no post-quantum protection at all
	// for that session. ringmaster_agent_classical_full_handshakes_total
	// counts them.
	//
	// It applies to a ClientHello that offers a ticket (a pre_shared_key
	// extension) and lists X25519 among its groups. crypto/tls does not show
	// which key shares the client sent: one that sent only a hybrid share
	// gets a HelloRetryRequest, a round trip more, counted in
	// ringmaster_agent_hello_retry_requests_total. Go clients send an X25519
	// share beside the hybrid one; so do recent Chrome, Firefox and Safari,
	// by the browser ClientHellos that uTLS reproduces (not tested here).
	//
	// It has no effect on a TLSConfig whose base rules out X25519 or TLS 1.3
	// (CurvePreferences without X25519, MaxVersion below TLS 1.3), disables
	// session tickets; TLSConfig then logs why.
	//
	// New refuses it in FIPS 140-3 mode (GODEBUG=fips140=on or only, see
	// crypto/fips140.Enabled): the approved key exchanges there are the
	// hybrid and the NIST curves, and X25519 alone is not one of them.
	ClassicalResumption bool
	// TicketScopes widens the scope of tickets from one server name to a
	// named group: the key is the scope's name, the value the server names
	// that share it, each a DNS name or "*." and a DNS name (which matches
	// one label more, as a certificate's wildcard does). Names compare
	// without case and without a trailing dot. A name in no scope is a
	// scope of its own; a name in two is an error of New.
	//
	// Every ticket the agent's configs issue carries its scope: the ring
	// served, the scope of the server name the client asked for, and with
	// TicketScopeClientAuth the config's client authentication. A ticket
	// presented under another scope is ignored, and the handshake goes on
	// as a full one: it never fails for it. crypto/tls alone would resume
	// a ticket at any server name sharing the ring, skipping that name's
	// certificate. ringmaster_agent_ticket_scope_refusals_total counts the
	// tickets refused. docs/agent.md says what crypto/tls checks by itself.
	TicketScopes map[string][]string
	// TicketScopeClientAuth narrows the scope with the client
	// authentication of the config passed to TLSConfig: its ClientAuth mode
	// and the CAs of its ClientCAs. A ticket issued by a listener that asks
	// for no client certificate then never resumes at one that asks for
	// one, even where crypto/tls would take it (ClientAuth RequestClientCert
	// or VerifyClientCertIfGiven, the ticket holding no certificate); nor a
	// ticket of a listener trusting other CAs. VerifyPeerCertificate, which
	// crypto/tls does not run on resumption, cannot be told apart: give
	// listeners with different verifiers different rings or scopes.
	TicketScopeClientAuth bool
	// UnscopedTickets turns the scope binding off: a ticket resumes at
	// every server name that shares the ring, as with crypto/tls alone,
	// and tickets without a scope (issued by agents older than the
	// binding, or by plain crypto/tls servers on the ring's keys) resume
	// too. Only for a ring whose names are one trust scope.
	UnscopedTickets bool
	// EarlyData lets the tickets the agent's configs issue allow 0-RTT
	// (TLS 1.3 early data), which only QUIC servers (quic-go with
	// Allow0RTT) accept from crypto/tls. It is off by default: the agent
	// clears SessionState.EarlyData when it seals and when it opens a
	// ticket, so a server that asks for 0-RTT still gets none. Such a
	// server has told its clients they may send early data, which is then
	// rejected: a browser sends it again after the handshake, quic-go's
	// HTTP/3 client fails the request. So give a QUIC server a config
	// without Allow0RTT (the agent logs once when one allows it). Early
	// data can be replayed (RFC 8446, Section 8; RFC 9001,
	// Section 9.2), and a ring shared by every replica lets an attacker
	// replay it at each of them: no replica's anti-replay state sees the
	// others'. Set it only for requests that are safe to replay; see
	// docs/agent.md, "0-RTT".
	EarlyData bool
}

// Agent keeps the tls.Configs returned by TLSConfig serving the newest good
// material from its directory. Its methods are safe for concurrent use.
//
// Besides refusing bad input, it holds on to what it served: it refuses a
// ring of another name (see Options.Ring), an epoch lower than the one it
// serves, and the same epoch with other content. A ring deleted and created
// again starts over at epoch 1, so running agents refuse it as a rollback
// (reason ring_rollback) and go on serving the old ring's keys until they
// expire; restarting the pods, or calling Reset, makes them take it.
//
// It destroys keys: at a key's expiresAt it overwrites the agent's copies of
// the key's bytes and drops them, and from then on it never takes a key of
// that id again, whatever the clock or the file says later. The same holds
// for a key that a newer epoch dropped (an early removal). What Go does not
// let it overwrite (the keys crypto/tls derives inside a published config,
// the decoder's transient strings) becomes unreachable once no handshake
// holds the config, and is left to the garbage collector.
type Agent struct {
	dir      string
	require  Files
	expected string
	// expectedECH is Options.ECHRing.
	expectedECH string
	clock       Clock
	log         *slog.Logger
	resync      time.Duration
	debounce    time.Duration
	onSwap      func(Status)
	// classical is Options.ClassicalResumption.
	classical bool
	// tickets is what Options say of the tickets issued.
	tickets ticketPolicy
	// refused counts the tickets refused by their scope, by refusal.
	refused [numRefusals]atomic.Uint64
	// earlyWarned: earlyDataAsked has logged.
	earlyWarned atomic.Bool

	// mu serialises writers of fronts and snap, and every use of a
	// snapshot's secrets; readers of snap's other fields do not take it,
	// and neither does any handshake.
	mu     sync.Mutex
	fronts []*front
	snap   atomic.Pointer[snapshot]

	// The fields below are the agent's memory of what it read and served.
	// Only New and then Start's goroutine touch them.
	//
	// ring holds the unexpired keys of the last good ring, in a copy of the
	// agent's own whose bytes are overwritten when it is dropped.
	ring *keyring.Ring
	cert *certificate
	pin  pin
	// destroyed holds the ids of the keys that expired or that a newer
	// epoch dropped: never taken again.
	destroyed map[string]bool
	// ech holds the unexpired configs of the last good ECH ring, in a copy
	// whose keys are overwritten when dropped; echPin is what ECH rings are
	// held to; echDestroyed holds the keys (keyDigest) of the ECH configs
	// that expired or a newer epoch dropped, whatever bytes carried them.
	ech          *echring.Ring
	echPin       pin
	echDestroyed map[[sha256.Size]byte]bool
	// echDelay bounds the ECH ring's deliveryDelay from above: the least
	// time any config of the rings taken since New (or Reset) spent staged
	// before its publication; unknownDelay before any was published. A
	// staged config staged that long is due (see retryConfigs).
	echDelay time.Duration
	// causes are the causes of the last failed read; logged, when each was
	// last logged (see flapWindow); kept, the ids of destroyed keys last
	// seen back in the file.
	causes map[string]bool
	logged map[string]time.Time
	kept   string
	// evaluated is the instant the latest reload judged key times at. The
	// next timer is computed from it, not from the time the timer is armed,
	// so an activation or expiry falling between the two is never skipped.
	evaluated time.Time

	started atomic.Bool
	reset   atomic.Bool
	served  atomic.Bool // TLSConfig was called: handshakes are counted
	kick    chan struct{}
	swaps   atomic.Uint64
	lastErr atomic.Pointer[failure]
	full    atomic.Uint64
	resumed atomic.Uint64
	retries atomic.Uint64 // HelloRetryRequests sent
	// classicalFull counts the full handshakes that the resumed config
	// served: a ticket offered and not used.
	classicalFull atomic.Uint64
	// echAccepted and echRejected count the handshakes whose client
	// attempted ECH, by whether the server decrypted its inner hello.
	echAccepted, echRejected atomic.Uint64
	errorCounts              [numReasons]atomic.Uint64

	// readHook runs between resolving ..data and reading the files; tests
	// use it to race a swap against a read, or to hold a read.
	readHook func(attempt int)
	// parseHook runs when a read starts parsing what it read; tests use it
	// to hold a read there.
	parseHook func()
	// window opens the debounce window; tests replace it to close the
	// window when they choose.
	window func(time.Duration) <-chan time.Time
}

// pin is what the agent holds the rings it reads to: the ring's name, and
// the epoch and content of the last ring it took.
type pin struct {
	name   string
	epoch  int64
	digest [sha256.Size]byte
}

type failure struct {
	msg string
	at  time.Time
}

// New reads Options.Dir once and returns an agent serving what it found. It
// fails fast, with an error wrapping ErrDirectory, ErrTicketKeys or
// ErrCertificate (and the more precise errors above), when required
// material is missing or unusable.
func New(opts Options) (*Agent, error) {
	if opts.Dir == "" {
		return nil, fmt.Errorf("%w: Options.Dir is empty", ErrDirectory)
	}
	if opts.Require == 0 {
		opts.Require = TicketKeys
	}
	if opts.Require&^(TicketKeys|Certificate|ECHKeys) != 0 {
		return nil, fmt.Errorf("agent: Options.Require has unknown bits %#x", uint8(opts.Require))
	}
	if opts.Ring != "" && !keyring.ValidRingName(opts.Ring) {
		return nil, fmt.Errorf("agent: Options.Ring %s is not \"<namespace>/<name>\" or \"<name>\" of a ring", quote(opts.Ring))
	}
	if opts.ECHRing != "" && !echring.ValidRingName(opts.ECHRing) {
		return nil, fmt.Errorf("agent: Options.ECHRing %s is not \"<namespace>/<name>\" of an ECHKeyRing", quote(opts.ECHRing))
	}
	if opts.ClassicalResumption && fips140.Enabled() {
		return nil, errors.New("agent: Options.ClassicalResumption cannot be used in FIPS 140-3 mode (GODEBUG=fips140): it resumes TLS 1.3 sessions with X25519 alone, a key exchange FIPS 140-3 does not approve")
	}
	var sc *scopes
	if !opts.UnscopedTickets {
		var err error
		if sc, err = newScopes(opts.TicketScopes); err != nil {
			return nil, err
		}
	} else if len(opts.TicketScopes) > 0 || opts.TicketScopeClientAuth {
		return nil, errors.New("agent: Options.UnscopedTickets turns scopes off, and Options.TicketScopes or TicketScopeClientAuth asks for them")
	}
	if opts.Clock == nil {
		opts.Clock = realClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ResyncPeriod <= 0 {
		opts.ResyncPeriod = DefaultResyncPeriod
	}
	if opts.Debounce == 0 {
		opts.Debounce = DefaultDebounce
	}
	a := &Agent{
		dir:          filepath.Clean(opts.Dir),
		require:      opts.Require,
		expected:     opts.Ring,
		clock:        opts.Clock,
		log:          opts.Logger.With("dir", filepath.Clean(opts.Dir)),
		resync:       opts.ResyncPeriod,
		debounce:     opts.Debounce,
		onSwap:       opts.OnSwap,
		classical:    opts.ClassicalResumption,
		pin:          pin{name: opts.Ring},
		expectedECH:  opts.ECHRing,
		echPin:       pin{name: opts.ECHRing},
		destroyed:    map[string]bool{},
		echDestroyed: map[[sha256.Size]byte]bool{},
		echDelay:     unknownDelay,
		logged:       map[string]time.Time{},
		kick:         make(chan struct{}, 1),
		window:       time.After,
	}
	a.tickets = ticketPolicy{scopes: sc, clientAuth: opts.TicketScopeClientAuth, earlyData: opts.EarlyData, refused: &a.refused, earlyDataAsked: a.earlyDataAsked}
	now := a.clock.Now()
	l, _ := a.load(nil, nil)
	errs := a.accept(now, l)
	if len(errs) > 0 {
		wipe(a.ring)
		wipeECH(a.ech)
		joined := make([]error, len(errs))
		for i, e := range errs {
			joined[i] = fmt.Errorf("%w: %w", e.reason.sentinel(), e.err)
		}
		return nil, errors.Join(joined...)
	}
	a.evaluated = now
	s := newSnapshot(a.ring, a.ech, a.echDelay, a.cert, now)
	a.snap.Store(s)
	a.log.Info("Loaded TLS material", s.logAttrs()...)
	return a, nil
}

// NeedLeaderElection returns false, so that controller-runtime's manager
// runs an Agent added with mgr.Add on every replica, not only on the
// leader, as it does certwatcher: every replica serves TLS.
func (a *Agent) NeedLeaderElection() bool { return false }

// Reset makes the agent forget the epoch and content of the rings it
// serves (the ticket ring and the ECH ring), and the names it pinned
// unless Options.Ring and Options.ECHRing set them, and asks for a read:
// the next good ring is then taken whatever its epoch. It is the way to
// follow a ring that was deleted and created again, whose epochs start over.
// Keys that expired or were dropped stay refused. Reset returns at once; the
// read happens on Start's goroutine (at Start, if it has not run yet).
func (a *Agent) Reset() {
	a.reset.Store(true)
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// Start watches the directory until ctx ends, publishing a new config for
// every change and at every instant a key activates or expires. It returns
// nil once ctx ends, or an error if the watcher cannot be created. It may be
// called once.
//
// Reads run on a goroutine of their own, one at a time, so that keys
// expire on time whatever the file system does. On cancel, Start waits for
// a read that is parsing what it read (CPU alone, at most a fraction of a
// second for files at their size limit), and discards its result. A read
// still in the file system when Start returns may be stuck in the kernel
// (a hung network or FUSE file system): Start abandons it, and its
// goroutine ends when the kernel returns, parsing nothing. No other
// goroutine outlives Start.
func (a *Agent) Start(ctx context.Context) error {
	if !a.started.CompareAndSwap(false, true) {
		return errors.New("agent: Start called twice")
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("agent: create watcher: %w", err)
	}
	// Close waits for the watcher's own goroutine, so none outlives Start.
	defer w.Close()
	l := &watchLoop{a: a, w: w, results: make(chan loaded, 1), nextResync: a.clock.Now().Add(a.resync)}
	defer l.stop() // runs before the watcher's Close
	l.read()       // catch up with anything that changed since New
	for {
		l.arm()
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("agent: watcher closed")
			}
			l.changed(ev)
		case <-l.settle:
			l.settle = nil
			l.read()
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("agent: watcher closed")
			}
			// Events may have been lost (an overflow, say): read again.
			a.log.Warn("Watcher reported an error", "err", err)
			l.read()
		case <-a.kick:
			l.read()
		case r := <-l.results:
			l.loaded(r)
		case <-l.timer:
			l.tick()
		}
	}
}

// watchLoop is Start's state: the read in flight, the debounce window, and
// the timer of the next key to activate or expire, or of the next resync.
//
// The directory is watched, not the files: the kubelet replaces files by
// renaming ..data, which an inotify watch on a file would not follow but
// which the directory reports. The watch only needs re-arming when the
// directory itself goes away (fsnotify then drops it); every read does
// that first.
type watchLoop struct {
	a       *Agent
	w       *fsnotify.Watcher
	results chan loaded // one read in flight at most
	job     *readJob    // the read in flight
	again   bool        // read once more after the read in flight

	settle     <-chan time.Time // the debounce window, while open
	timer      <-chan time.Time
	timerAt    time.Time
	nextResync time.Time
}

// read starts a read on a goroutine of its own, or, while one is in
// flight, asks for another once it is done.
func (l *watchLoop) read() {
	if l.job != nil {
		l.again = true
		return
	}
	l.job = newReadJob()
	go func(j *readJob) {
		defer close(j.done)
		if r, ok := l.a.load(l.w, j); ok {
			l.results <- r
		}
	}(l.job)
}

// arm sets the timer to the next instant a key activates or expires, or
// to the next resync, whichever comes first.
func (l *watchLoop) arm() {
	wake := l.nextResync
	if t, ok := l.a.nextChange(); ok && t.Before(wake) {
		wake = t
	}
	if l.timer == nil || !wake.Equal(l.timerAt) {
		l.timer, l.timerAt = l.a.clock.After(wake.Sub(l.a.clock.Now())), wake
	}
}

// changed handles a file system event: a read, at once or once the
// debounce window closes.
func (l *watchLoop) changed(ev fsnotify.Event) {
	switch {
	case !l.a.relevant(ev):
	case l.a.debounce < 0:
		l.read()
	case l.settle == nil:
		l.settle = l.a.window(l.a.debounce)
	}
}

// loaded takes a read's result, and starts the read asked for meanwhile.
func (l *watchLoop) loaded(r loaded) {
	l.job = nil
	l.a.reload(r)
	l.nextResync = l.a.clock.Now().Add(l.a.resync)
	if l.again {
		l.again = false
		l.read()
	}
}

// tick handles the timer: keys activate and expire now, read or no read,
// and the files are read again.
func (l *watchLoop) tick() {
	l.timer = nil
	now := l.a.clock.Now()
	l.a.evaluate(now)
	if !now.Before(l.nextResync) {
		l.nextResync = now.Add(l.a.resync)
	}
	l.read()
}

// stop waits for a read that is parsing (CPU alone, bounded by the files'
// size limit), and abandons one still in the file system, which only the
// kernel can end, and which then ends without parsing. A result not taken
// is wiped.
func (l *watchLoop) stop() {
	if l.job != nil && !l.job.abandon() {
		<-l.job.done
	}
	select {
	case r := <-l.results:
		r.wipe()
	default:
	}
}

// nextChange is the next instant a key of the ring served activates or
// expires, or a config of the ECH ring served expires or falls due.
func (a *Agent) nextChange() (time.Time, bool) {
	var next time.Time
	var ok bool
	if a.ring != nil {
		next, ok = a.ring.NextChange(a.evaluated)
	}
	if t, echOK := a.nextECHChange(a.evaluated); echOK && (!ok || t.Before(next)) {
		next, ok = t, true
	}
	return next, ok
}

// watch arms the watch on the directory unless it is armed. A failure is not
// reported here: the directory is then missing or unreadable, which the
// read that follows reports, once.
func (a *Agent) watch(w *fsnotify.Watcher) {
	if len(w.WatchList()) == 0 {
		_ = w.Add(a.dir)
	}
}

// relevant reports whether ev can change what the agent reads. The kubelet's
// temporary names (..data_tmp, the timestamped directories) are skipped: the
// rename onto ..data that follows them is the event that matters.
func (a *Agent) relevant(ev fsnotify.Event) bool {
	if ev.Name == a.dir {
		return true
	}
	switch filepath.Base(ev.Name) {
	case dataDir, keyring.FileName, certFile, keyFile, echring.FileName:
		return true
	}
	return false
}

// reload judges what a read found at the current instant, keeps the last
// good material for whatever part failed, reports failures, and publishes
// a new config when what would be served differs from what is served.
// Only Start's goroutine calls it.
func (a *Agent) reload(l loaded) {
	now := a.clock.Now()
	if a.reset.Swap(false) {
		a.pin = pin{name: a.expected}
		a.echPin = pin{name: a.expectedECH}
		a.echDelay = unknownDelay
		a.log.Info("Reset the ring pin: the next good ring is taken whatever its epoch")
	}
	errs := a.accept(now, l)
	a.report(errs, now)
	a.evaluate(now)
}

// evaluate destroys the keys expired at now and publishes a new config if
// what would be served changed.
func (a *Agent) evaluate(now time.Time) {
	a.evaluated = now
	a.expire(now)
	a.expireECH(now)
	s := newSnapshot(a.ring, a.ech, a.echDelay, a.cert, now)
	if s.sum == a.snap.Load().sum {
		s.wipe()
		return
	}
	a.publish(s)
	a.swaps.Add(1)
	if a.ring != nil && len(s.keys) == 0 {
		a.log.Warn("Dropped every ticket key: all have expired; tickets now use crypto/tls's own per-process keys", s.logAttrs()...)
	} else {
		a.log.Info("Swapped TLS config", s.logAttrs()...)
	}
	if a.onSwap != nil {
		a.onSwap(a.Status())
	}
}

// report counts every failure and logs each cause that the previous attempt
// did not already have, so a persisting problem is logged once however many
// retries meet it, and a flapping one once per flapWindow.
func (a *Agent) report(errs []*loadError, now time.Time) {
	for cause, at := range a.logged {
		if d := now.Sub(at); d >= flapWindow || d < 0 {
			delete(a.logged, cause)
		}
	}
	causes := make(map[string]bool, len(errs))
	msgs := make([]error, 0, len(errs))
	for _, e := range errs {
		cause := e.reason.String() + ": " + e.err.Error()
		causes[cause] = true
		msgs = append(msgs, e.err)
		if !a.causes[cause] && a.quiet(cause, now) {
			a.log.Error("Rejected TLS material; the last good config keeps serving", "reason", e.reason.String(), "err", e.err)
		}
	}
	if len(errs) == 0 && len(a.causes) > 0 && a.quiet("", now) {
		a.log.Info("Read TLS material without errors again")
	}
	a.causes = causes
	if len(errs) == 0 {
		a.lastErr.Store(nil)
		return
	}
	a.lastErr.Store(&failure{msg: errors.Join(msgs...).Error(), at: now})
	// Counted last, so that whoever sees the counter rise also finds the
	// error in Status and the log line written.
	for _, e := range errs {
		a.errorCounts[e.reason].Add(1)
	}
}

// quiet reports whether cause may be logged at now, and if so records it.
func (a *Agent) quiet(cause string, now time.Time) bool {
	if _, ok := a.logged[cause]; ok {
		return false
	}
	a.logged[cause] = now
	return true
}

// publish builds one config per TLSConfig caller from s and stores them.
// Every field is set before the Store, and a stored config is never written
// again: the next change builds a new one. The secrets of the snapshot it
// replaces are overwritten: no config is built from it again.
func (a *Agent) publish(s *snapshot) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, f := range a.fronts {
		f.cur.Store(f.build(s))
	}
	if old := a.snap.Swap(s); old != nil && old != s {
		old.wipe()
	}
}

// TLSConfig returns a config for a server: a clone of base whose
// GetConfigForClient hands each handshake the current config built from
// base and the agent's material. Later changes to base are not seen. Call it
// once per server; each returned config stays current for the life of the
// agent.
//
// base's GetConfigForClient is not used. Its Certificates and GetCertificate
// are replaced when the agent reads Certificate, and its session ticket keys
// when it reads TicketKeys; without TicketKeys (or while every key has
// expired) crypto/tls rotates its own ticket keys on the returned config, as
// it would without the agent. A VerifyConnection in base still runs. ALPN is
// negotiated with base's NextProtos: set them (for example "h2" and
// "http/1.1"), because the protocols net/http adds to the outer config are
// not seen by the config GetConfigForClient returns.
//
// With Options.ClassicalResumption, each change builds two configs from
// the same material, the second with X25519 alone for the key exchange,
// and GetConfigForClient hands it to the ClientHellos that offer a ticket.
func (a *Agent) TLSConfig(base *tls.Config) *tls.Config {
	if base == nil {
		base = &tls.Config{}
	}
	classical := a.classical
	if classical {
		ok, why := classicalApplies(base)
		if !ok {
			a.log.Warn("ClassicalResumption has no effect on this TLS config: resumed handshakes keep the base config's key exchange", "why", why)
			classical = false
		}
	}
	f := newFront(base, classical, a.countHandshake)
	outer := base.Clone()
	outer.GetConfigForClient = f.getConfigForClient
	// crypto/tls decrypts an ECH hello with the outer config's keys, before
	// GetConfigForClient: they come from the config served now.
	outer.EncryptedClientHelloKeys = nil
	outer.GetEncryptedClientHelloKeys = f.getECHKeys
	settle(outer)
	f.outer = outer
	f.tickets = a.tickets
	if base.WrapSession != nil || base.UnwrapSession != nil {
		// The application seals its own tickets (a session store, say):
		// the agent neither replaces nor wraps what it does.
		f.tickets.own = true
		a.log.Warn("The base TLS config seals its own tickets (WrapSession or UnwrapSession): the agent binds no scope to them and leaves EarlyData as they set it")
	}
	a.served.Store(true)
	a.mu.Lock()
	f.cur.Store(f.build(a.snap.Load()))
	a.fronts = append(a.fronts, f)
	a.mu.Unlock()
	return outer
}

// countHandshake counts one handshake; resumedConfig says whether the
// config for resumptions (Options.ClassicalResumption) served it, ech
// whether the client attempted ECH.
func (a *Agent) countHandshake(cs tls.ConnectionState, resumedConfig, ech bool) {
	switch {
	case cs.ECHAccepted:
		a.echAccepted.Add(1)
	case ech:
		a.echRejected.Add(1)
	}
	if cs.DidResume {
		a.resumed.Add(1)
	} else {
		a.full.Add(1)
		if resumedConfig {
			a.classicalFull.Add(1)
		}
	}
	if cs.HelloRetryRequest {
		a.retries.Add(1)
	}
}

// earlyDataAsked logs, once, that a QUIC server allows 0-RTT while
// Options.EarlyData is off. It runs on a handshake's goroutine: one atomic
// operation after the first time.
func (a *Agent) earlyDataAsked() {
	if a.earlyWarned.CompareAndSwap(false, true) {
		a.log.Warn("A QUIC server allows 0-RTT (quic.Config.Allow0RTT, which http3.Server sets when its QUICConfig is nil) while Options.EarlyData is off: its tickets tell clients they may send early data, which the agent then rejects, and quic-go's HTTP/3 client fails such requests. Give the server a QUICConfig without Allow0RTT, or see docs/agent.md, \"0-RTT\"")
	}
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
