package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

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
)

// Errors returned by New, usable with errors.Is. The error New returns also
// wraps the underlying cause.
var (
	// ErrDirectory means Options.Dir is unset, missing, not a directory, or
	// kept changing while it was being read.
	ErrDirectory = errors.New("agent: directory missing or unreadable")
	// ErrTicketKeys means ticketkeys.json is missing, invalid, or holds no
	// unexpired key.
	ErrTicketKeys = errors.New("agent: ticket key ring missing or unusable")
	// ErrCertificate means tls.crt or tls.key is missing or invalid, they do
	// not match, or the certificate has expired.
	ErrCertificate = errors.New("agent: certificate missing or invalid")
)

// DefaultResyncPeriod is how often the directory is re-read when
// Options.ResyncPeriod is zero, as a fallback for a missed fsnotify event and
// to re-arm the watch after the directory itself was replaced.
const DefaultResyncPeriod = 10 * time.Second

// Clock is the agent's source of time, for key activation and expiry and for
// the periodic re-read. Tests inject a fake; the default is the real clock.
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
	// Zero means TicketKeys.
	Require Files
	// Clock defaults to the real clock.
	Clock Clock
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// ResyncPeriod is the period of the fallback re-read; zero or negative
	// means DefaultResyncPeriod.
	ResyncPeriod time.Duration
	// OnSwap, if set, is called after each new config is published by Start,
	// with the status it now serves. It runs on the goroutine of Start, so it
	// must not block for long.
	OnSwap func(Status)
}

// Agent keeps the tls.Configs returned by TLSConfig serving the newest good
// material from its directory. Its methods are safe for concurrent use.
type Agent struct {
	dir     string
	require Files
	clock   Clock
	log     *slog.Logger
	resync  time.Duration
	onSwap  func(Status)

	// mu serialises writers of fronts and snap; readers of snap do not take
	// it, and neither does any handshake.
	mu     sync.Mutex
	fronts []*front
	snap   atomic.Pointer[snapshot]

	// ring, cert and causes are the last good material and the causes of
	// the last failed read. Only New and then Start's goroutine touch them.
	ring   *keyring.Ring
	cert   *certificate
	causes map[string]bool
	// evaluated is the instant the latest reload judged key times at. The
	// next timer is computed from it, not from the time the timer is armed,
	// so an activation or expiry falling between the two is never skipped.
	evaluated time.Time

	started     atomic.Bool
	swaps       atomic.Uint64
	lastErr     atomic.Pointer[failure]
	full        atomic.Uint64
	resumed     atomic.Uint64
	errorCounts [numReasons]atomic.Uint64

	// readHook runs between resolving ..data and reading the files; tests
	// use it to race a swap against a read.
	readHook func(attempt int)
}

type failure struct {
	msg string
	at  time.Time
}

// New reads Options.Dir once and returns an agent serving what it found. It
// fails fast, with an error wrapping ErrDirectory, ErrTicketKeys or
// ErrCertificate, when required material is missing or unusable.
func New(opts Options) (*Agent, error) {
	if opts.Dir == "" {
		return nil, fmt.Errorf("%w: Options.Dir is empty", ErrDirectory)
	}
	if opts.Require == 0 {
		opts.Require = TicketKeys
	}
	if opts.Require&^(TicketKeys|Certificate) != 0 {
		return nil, fmt.Errorf("agent: Options.Require has unknown bits %#x", uint8(opts.Require))
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
	a := &Agent{
		dir:     filepath.Clean(opts.Dir),
		require: opts.Require,
		clock:   opts.Clock,
		log:     opts.Logger.With("dir", filepath.Clean(opts.Dir)),
		resync:  opts.ResyncPeriod,
		onSwap:  opts.OnSwap,
	}
	now := a.clock.Now()
	m, errs := a.read(now)
	if len(errs) > 0 {
		joined := make([]error, len(errs))
		for i, e := range errs {
			joined[i] = fmt.Errorf("%w: %w", e.reason.sentinel(), e.err)
		}
		return nil, errors.Join(joined...)
	}
	a.ring, a.cert, a.evaluated = m.ring, m.cert, now
	s := newSnapshot(a.ring, a.cert, now)
	a.snap.Store(s)
	a.log.Info("Loaded TLS material", s.logAttrs()...)
	return a, nil
}

// Start watches the directory until ctx ends, publishing a new config for
// every change and at every instant a key activates or expires. It returns
// nil once ctx ends, after its watcher and timers are gone, or an error if
// the watcher cannot be created. It may be called once.
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

	// The directory is watched, not the files: the kubelet replaces files
	// by renaming ..data, which an inotify watch on a file would not follow
	// but which the directory reports. The watch only needs re-arming when
	// the directory itself goes away (fsnotify then drops it); the resync
	// does that.
	a.watch(w)
	a.reload() // catch up with anything that changed since New
	nextResync := a.clock.Now().Add(a.resync)
	for {
		now := a.clock.Now()
		wake := nextResync
		if a.ring != nil {
			if t, ok := a.ring.NextChange(a.evaluated); ok && t.Before(wake) {
				wake = t
			}
		}
		timer := a.clock.After(wake.Sub(now))
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("agent: watcher closed")
			}
			if !a.relevant(ev) {
				continue
			}
			// One kubelet update raises several events; drain those
			// already queued so that it costs one reload.
			drain(w.Events)
			a.reload()
			nextResync = a.clock.Now().Add(a.resync)
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("agent: watcher closed")
			}
			// Events may have been lost (an overflow, say): read again.
			a.log.Warn("Watcher reported an error", "err", err)
			a.reload()
		case <-timer:
			a.watch(w)
			a.reload()
			nextResync = a.clock.Now().Add(a.resync)
		}
	}
}

// watch arms the watch on the directory unless it is armed. A failure is not
// reported here: the directory is then missing or unreadable, which the
// reload that follows reports, once.
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
	case dataDir, keyring.FileName, certFile, keyFile:
		return true
	}
	return false
}

func drain(ch <-chan fsnotify.Event) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// reload reads the directory, keeps the last good material for whatever part
// failed, reports failures, and publishes a new config when what would be
// served differs from what is served. Only New and Start's goroutine call it.
func (a *Agent) reload() {
	now := a.clock.Now()
	a.evaluated = now
	m, errs := a.read(now)
	if m.ring != nil {
		a.ring = m.ring
	}
	if m.cert != nil {
		a.cert = m.cert
	}
	a.report(errs, now)
	s := newSnapshot(a.ring, a.cert, now)
	if s.sum == a.snap.Load().sum {
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
// retries meet it.
func (a *Agent) report(errs []*loadError, now time.Time) {
	causes := make(map[string]bool, len(errs))
	msgs := make([]error, 0, len(errs))
	for _, e := range errs {
		cause := e.reason.String() + ": " + e.err.Error()
		causes[cause] = true
		msgs = append(msgs, e.err)
		if !a.causes[cause] {
			a.log.Error("Rejected TLS material; the last good config keeps serving", "reason", e.reason.String(), "err", e.err)
		}
	}
	if len(errs) == 0 && len(a.causes) > 0 {
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

// publish builds one config per TLSConfig caller from s and stores them.
// Every field is set before the Store, and a stored config is never written
// again: the next change builds a new one.
func (a *Agent) publish(s *snapshot) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, f := range a.fronts {
		f.cur.Store(f.build(s))
	}
	a.snap.Store(s)
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
func (a *Agent) TLSConfig(base *tls.Config) *tls.Config {
	if base == nil {
		base = &tls.Config{}
	}
	f := newFront(base, a.countHandshake)
	a.mu.Lock()
	f.cur.Store(f.build(a.snap.Load()))
	a.fronts = append(a.fronts, f)
	a.mu.Unlock()

	outer := base.Clone()
	outer.GetConfigForClient = f.getConfigForClient
	settle(outer)
	return outer
}

func (a *Agent) countHandshake(cs tls.ConnectionState) {
	if cs.DidResume {
		a.resumed.Add(1)
	} else {
		a.full.Add(1)
	}
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
