package agent_test

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

// mkfifo replaces path with a named pipe, in one rename.
func mkfifo(t *testing.T, path string) {
	t.Helper()
	tmp := path + ".fifo"
	if err := syscall.Mkfifo(tmp, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// newAgent runs New on its own goroutine, so that a New that blocks fails
// the test instead of hanging it.
func newAgent(t *testing.T, opts agent.Options) (*agent.Agent, error) {
	t.Helper()
	type result struct {
		a   *agent.Agent
		err error
	}
	done := make(chan result, 1)
	go func() {
		a, err := agent.New(opts)
		done <- result{a, err}
	}()
	select {
	case r := <-done:
		return r.a, r.err
	case <-time.After(10 * time.Second):
		t.Fatal("New blocked")
		return nil, nil
	}
}

// TestFIFONeverBlocks: a named pipe in place of ticketkeys.json (possible
// in a plain directory) neither hangs New nor Start. Start refuses it,
// counted and logged, keeps serving, still destroys a key at its
// expiresAt, takes a good file after it, and returns on cancel.
func TestFIFONeverBlocks(t *testing.T) {
	s := newSchedule(time.Now())
	h := time.Hour
	// k0 is decrypt-only and expires at t0+h; k1 is active.
	k0 := newKey("k0", s.t0.Add(-3*h), s.t0.Add(-h), s.t0.Add(h))
	k1 := newKey("k1", s.t0.Add(-h), s.t0.Add(2*h), s.t0.Add(4*h))

	t.Run("New", func(t *testing.T) {
		dir := t.TempDir()
		mkfifo(t, filepath.Join(dir, keyring.FileName))
		_, err := newAgent(t, agent.Options{Dir: dir})
		if !errors.Is(err, agent.ErrTicketKeys) || !strings.Contains(fmtErr(err), "named pipe") {
			t.Fatalf("New = %v, want ErrTicketKeys naming the pipe", err)
		}
	})

	t.Run("Start", func(t *testing.T) {
		p := newPKI(t)
		cert := p.valid()
		dir := t.TempDir()
		path := filepath.Join(dir, keyring.FileName)
		if err := os.WriteFile(path, encodeRing(t, 1, k1, k0), 0o644); err != nil {
			t.Fatal(err)
		}
		clock := newFakeClock(s.t0)
		var logs logBuffer
		// Unscoped: the k0 tickets below come from a plain crypto/tls
		// server, whose tickets carry no scope.
		a, err := newAgent(t, agent.Options{Dir: dir, Clock: clock, Logger: logs.logger(), ResyncPeriod: noResync, UnscopedTickets: true})
		if err != nil {
			t.Fatal(err)
		}
		start(t, a)
		base := &tls.Config{Certificates: []tls.Certificate{cert.tlsCertificate(t)}}
		addr := serve(t, a.TLSConfig(base))
		underK1 := p.client(tls.VersionTLS13)
		handshake(t, addr, underK1)
		// A ticket under k0, from a replica where k0 still encrypts.
		underK0 := p.client(tls.VersionTLS13)
		handshake(t, staticServer(t, cert.tlsCertificate(t), k0), underK0)

		mkfifo(t, path)
		eventually(t, "the pipe refused", func() bool {
			return metrics(t, a)["ringmaster_agent_reload_errors_total{reason=ring_invalid}"] >= 1
		})
		if n := len(logs.records(t, map[string]string{"msg": rejectedMsg, "reason": "ring_invalid"})); n != 1 {
			t.Errorf("pipe logged %d times, want 1", n)
		}
		if !strings.Contains(a.Status().LastError, "named pipe") {
			t.Errorf("LastError %q does not name the pipe", a.Status().LastError)
		}
		if !handshake(t, addr, underK1).DidResume {
			t.Error("ticket under k1 did not resume after the pipe")
		}
		handshake(t, addr, p.client(tls.VersionTLS13)) // a full handshake

		// The timer still fires: k0 goes at its expiresAt.
		if !handshake(t, addr, underK0).DidResume {
			t.Fatal("control: ticket under k0 did not resume before its expiry")
		}
		handshake(t, staticServer(t, cert.tlsCertificate(t), k0), underK0) // a fresh k0 ticket
		clock.Set(k0.ExpiresAt)
		eventually(t, "k0 destroyed", func() bool { return len(a.Status().Keys) == 1 })
		if handshake(t, addr, underK0).DidResume {
			t.Error("ticket under k0 resumed after its expiry")
		}

		// A regular file again is taken.
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, encodeRing(t, 2, k1), 0o644); err != nil {
			t.Fatal(err)
		}
		eventually(t, "epoch 2", func() bool { st := a.Status(); return st.Epoch == 2 && st.LastError == "" })
	})
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestStartReturnsWhileReadHangs: a read that never returns (a hung
// network or FUSE file system) keeps neither the expiry of a key nor the
// cancel of Start waiting.
func TestStartReturnsWhileReadHangs(t *testing.T) {
	s := newSchedule(time.Now())
	h := time.Hour
	k0 := newKey("k0", s.t0.Add(-3*h), s.t0.Add(-h), s.t0.Add(h))
	v := newVolume(t)
	v.write(encodeRing(t, 1, s.k2, s.k1, k0), nil, nil)
	clock := newFakeClock(s.t0)
	a, err := agent.New(agent.Options{Dir: v.dir, Clock: clock, ResyncPeriod: noResync})
	if err != nil {
		t.Fatal(err)
	}
	var reads atomic.Int32
	hung, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	agent.SetReadHook(a, func(int) {
		if reads.Add(1) == 2 { // the first read after Start's catch-up
			close(hung)
			<-release
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Start(ctx) }()
	eventually(t, "the catch-up read", func() bool { return reads.Load() >= 1 })
	v.write(encodeRing(t, 2, s.k2, s.k1, k0), nil, nil)
	select {
	case <-hung:
	case <-time.After(10 * time.Second):
		t.Fatal("no read after the write")
	}

	clock.Set(k0.ExpiresAt)
	eventually(t, "k0 destroyed during the hung read", func() bool {
		st := a.Status()
		return len(st.Keys) == 2 && st.Epoch == 1
	})

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Start returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return while a read hung")
	}
	once.Do(func() { close(release) }) // the kernel returns at last
}

// TestStartWaitsForAParse: Start, cancelled while a read is parsing what
// it read (here a ring of more keys than a ring holds; one of 1 MiB, the
// size limit, costs about a fifth of a second of CPU), returns only once
// that read has ended: no goroutine of its outlives it. (A read still in the file system is abandoned instead: see
// TestStartReturnsWhileReadHangs.)
func TestStartWaitsForAParse(t *testing.T) {
	s := newSchedule(time.Now())
	v := newVolume(t)
	v.write(s.ring(t, 1), nil, nil)
	a, err := agent.New(agent.Options{Dir: v.dir, Clock: newFakeClock(s.t0), ResyncPeriod: noResync})
	if err != nil {
		t.Fatal(err)
	}
	v.write(encodeOversized(t, 2, manyKeys(s.t0, 2*keyring.MaxKeys)...), nil, nil)
	entered, release := make(chan struct{}), make(chan struct{})
	var parses atomic.Int32
	var ended atomic.Bool
	agent.SetParseHook(a, func() {
		if parses.Add(1) == 1 { // Start's catch-up read, of the oversized ring
			close(entered)
			<-release
			ended.Store(true)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Start(ctx) }()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no read parsed")
	}
	cancel()
	// A Start that does not wait returns at once: give it the time to.
	select {
	case err := <-done:
		close(release)
		t.Fatalf("Start returned (%v) while a read was parsing", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Start returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return once the read ended")
	}
	if !ended.Load() {
		t.Error("Start returned before the read it started ended")
	}
	// The read's result, never judged, changed nothing.
	if st := a.Status(); st.Epoch != 1 || st.LastError != "" {
		t.Errorf("Status after Start returned: epoch %d, LastError %q", st.Epoch, st.LastError)
	}
}

// TestCertificateNotYetValid: New refuses a certificate whose NotBefore
// is more than CertificateSkew ahead, takes one within it, and a running
// agent takes a refused one by itself once its time comes.
func TestCertificateNotYetValid(t *testing.T) {
	p := newPKI(t)
	s := newSchedule(time.Now())
	now := time.Now()
	soon := p.issue(now.Add(agent.CertificateSkew-time.Minute), now.Add(48*time.Hour))
	later := p.issue(now.Add(agent.CertificateSkew+time.Hour), now.Add(48*time.Hour))

	t.Run("New", func(t *testing.T) {
		v := newVolume(t)
		v.write(s.ring(t, 1), later.crt, later.key)
		_, err := agent.New(agent.Options{Dir: v.dir, Require: agent.TicketKeys | agent.Certificate})
		if !errors.Is(err, agent.ErrCertificate) || !errors.Is(err, agent.ErrNotYetValid) {
			t.Fatalf("New = %v, want ErrCertificate and ErrNotYetValid", err)
		}
		v.write(s.ring(t, 1), soon.crt, soon.key)
		a, err := agent.New(agent.Options{Dir: v.dir, Require: agent.TicketKeys | agent.Certificate})
		if err != nil {
			t.Fatalf("New refused a certificate within the skew: %v", err)
		}
		if !a.Status().CertificateNotAfter.Equal(soon.cert.NotAfter) {
			t.Error("not serving the certificate within the skew")
		}
	})

	t.Run("taken when due", func(t *testing.T) {
		current := p.valid()
		v := newVolume(t)
		v.write(s.ring(t, 1), current.crt, current.key)
		clock := newFakeClock(now)
		a, err := agent.New(agent.Options{Dir: v.dir, Require: agent.TicketKeys | agent.Certificate, Clock: clock, ResyncPeriod: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		start(t, a)
		addr := serve(t, a.TLSConfig(nil))
		v.write(s.ring(t, 1), later.crt, later.key)
		eventually(t, "refused", func() bool {
			return metrics(t, a)["ringmaster_agent_reload_errors_total{reason=certificate_not_yet_valid}"] >= 1
		})
		if got := handshake(t, addr, p.client(tls.VersionTLS13)).PeerCertificates[0].SerialNumber; got.Cmp(current.cert.SerialNumber) != 0 {
			t.Fatalf("served serial %v, want %v", got, current.cert.SerialNumber)
		}
		// The resync finds the same file valid once the clock reaches
		// NotBefore - CertificateSkew.
		clock.Set(later.cert.NotBefore.Add(-agent.CertificateSkew))
		eventually(t, "the certificate taken", func() bool { return a.Status().CertificateNotAfter.Equal(later.cert.NotAfter) })
	})
}

// TestRingPinning: Options.Ring names the ring served; New refuses
// another, and a bad name. A ring created again (epochs start over) is
// refused as a rollback until Reset, after which it is taken; a key that
// expired stays out even then.
func TestRingPinning(t *testing.T) {
	s := newSchedule(time.Now())

	t.Run("New", func(t *testing.T) {
		v := newVolume(t)
		v.write(s.ring(t, 1), nil, nil)
		_, err := agent.New(agent.Options{Dir: v.dir, Ring: "shop/api"})
		if !errors.Is(err, agent.ErrTicketKeys) || !errors.Is(err, agent.ErrForeignRing) {
			t.Errorf("New = %v, want ErrTicketKeys and ErrForeignRing", err)
		}
		if _, err := agent.New(agent.Options{Dir: v.dir, Ring: "Shop/Web"}); err == nil || !strings.Contains(err.Error(), "Options.Ring") {
			t.Errorf("New with a bad Options.Ring = %v", err)
		}
		a, err := agent.New(agent.Options{Dir: v.dir, Ring: "shop/web"})
		if err != nil || a.Status().Ring != "shop/web" {
			t.Errorf("New with the right ring: %v", err)
		}
		// A ClusterTicketKeyRing's name has no namespace.
		v.write(renameRing(t, s.ring(t, 1), "edge"), nil, nil)
		if a, err := agent.New(agent.Options{Dir: v.dir, Ring: "edge"}); err != nil || a.Status().Ring != "edge" {
			t.Errorf("New with a cluster-scoped ring: %v", err)
		}
	})

	t.Run("ring created again", func(t *testing.T) {
		p := newPKI(t)
		cert := p.valid()
		h := time.Hour
		old := newKey("old", s.t0.Add(-3*h), s.t0.Add(-h), s.t0.Add(30*time.Minute))
		v := newVolume(t)
		v.write(encodeRing(t, 9, s.k2, s.k1, old), cert.crt, cert.key)
		clock := newFakeClock(s.t0)
		var logs logBuffer
		a, err := agent.New(agent.Options{Dir: v.dir, Require: agent.TicketKeys | agent.Certificate, Ring: "shop/web", Clock: clock, Logger: logs.logger(), ResyncPeriod: noResync})
		if err != nil {
			t.Fatal(err)
		}
		start(t, a)
		addr := serve(t, a.TLSConfig(nil))
		client := p.client(tls.VersionTLS13)
		handshake(t, addr, client)
		clock.Set(old.ExpiresAt)
		eventually(t, "old destroyed", func() bool { return len(a.Status().Keys) == 2 })

		// The ring is deleted and created again: epoch 1, new keys, but
		// (as an operator's restored state might) also the expired key.
		n1 := newKey("n1", s.t0.Add(-time.Minute), s.t0.Add(h), s.t0.Add(4*h))
		v.write(encodeRing(t, 1, n1, old), cert.crt, cert.key)
		eventually(t, "refused as a rollback", func() bool {
			return metrics(t, a)["ringmaster_agent_reload_errors_total{reason=ring_rollback}"] >= 1
		})
		if !handshake(t, addr, client).DidResume {
			t.Error("ticket of the served ring did not resume after the refusal")
		}

		a.Reset()
		eventually(t, "epoch 1 taken after Reset", func() bool { st := a.Status(); return st.Epoch == 1 && st.LastError == "" })
		st := a.Status()
		if len(st.Keys) != 1 || st.ActiveKeyID != n1.ID {
			t.Errorf("keys %+v, want only %s: the expired key stays out", st.Keys, n1.ID)
		}
		fresh := p.client(tls.VersionTLS13)
		handshake(t, addr, fresh)
		if !handshake(t, addr, fresh).DidResume {
			t.Error("ticket under the new ring did not resume")
		}
		// The name stays pinned by Options.Ring through a Reset.
		v.write(renameRing(t, encodeRing(t, 2, n1), "other/web"), cert.crt, cert.key)
		eventually(t, "another ring refused after Reset", func() bool {
			return metrics(t, a)["ringmaster_agent_reload_errors_total{reason=ring_foreign}"] >= 1
		})
	})
}

// TestClockSteppingBackNeverResurrects: once a key is past its expiresAt
// it is destroyed; when the clock then steps back (an NTP correction, a VM
// restored from a snapshot) and the file, or a newer epoch, still lists
// the key, the agent does not take it back: its tickets get a full
// handshake, while tickets under the other keys resume.
func TestClockSteppingBackNeverResurrects(t *testing.T) {
	p := newPKI(t)
	cert := p.valid()
	s := newSchedule(time.Now())
	h := time.Hour
	k0 := newKey("k0", s.t0.Add(-3*h), s.t0.Add(-h), s.t0.Add(h))
	ring := encodeRing(t, 2, s.k2, s.k1, k0)
	v := newVolume(t)
	v.write(ring, cert.crt, cert.key)
	clock := newFakeClock(s.t0)
	var logs logBuffer
	a, err := agent.New(agent.Options{Dir: v.dir, Require: agent.TicketKeys | agent.Certificate, Clock: clock, Logger: logs.logger(), ResyncPeriod: noResync})
	if err != nil {
		t.Fatal(err)
	}
	start(t, a)
	addr := serve(t, a.TLSConfig(nil))
	// Tickets under k0, from a replica where it still encrypted, and under
	// k1 from this one.
	victims := []*tls.Config{p.client(tls.VersionTLS13), p.client(tls.VersionTLS13)}
	for _, c := range victims {
		handshake(t, staticServer(t, cert.tlsCertificate(t), k0), c)
	}
	control := p.client(tls.VersionTLS13)
	handshake(t, addr, control)

	clock.Set(k0.ExpiresAt)
	eventually(t, "k0 destroyed", func() bool { return len(a.Status().Keys) == 2 })
	if handshake(t, addr, victims[0]).DidResume {
		t.Fatal("ticket under k0 resumed after its expiry")
	}

	// The clock steps back an hour, and the same file is read again, then
	// a newer epoch that still lists k0.
	clock.Set(s.t0)
	v.write(ring, cert.crt, cert.key) // unchanged: the kubelet writes nothing
	a.Reset()                         // a read, and the pinned epoch forgotten too
	v.write(encodeRing(t, 3, s.k2, s.k1, k0), cert.crt, cert.key)
	eventually(t, "epoch 3", func() bool { return a.Status().Epoch == 3 })

	st := a.Status()
	for _, k := range st.Keys {
		if k.ID == k0.ID {
			t.Fatalf("k0 is back: %+v", st.Keys)
		}
	}
	if len(st.Keys) != 2 || st.ActiveKeyID != s.k1.ID || st.LastError != "" {
		t.Errorf("status %+v, want k1 active and k2, no error", st)
	}
	if handshake(t, addr, victims[1]).DidResume {
		t.Error("ticket under k0 resumed after the clock stepped back")
	}
	if !handshake(t, addr, control).DidResume {
		t.Error("ticket under k1 did not resume")
	}
	if n := len(logs.records(t, map[string]string{"msg": "Kept destroyed ticket keys out of the ring read; the clock may have gone back"})); n != 1 {
		t.Errorf("%d log lines about k0 kept out, want 1", n)
	}
	if n := len(logs.records(t, map[string]string{"msg": "Destroyed expired ticket key", "keyID": k0.ID})); n != 1 {
		t.Errorf("%d log lines about destroying k0, want 1", n)
	}
}

// TestDroppedKeyNeverReturns: a key that a newer epoch left out before its
// expiry (an early removal) is not taken back from a later epoch.
func TestDroppedKeyNeverReturns(t *testing.T) {
	p := newPKI(t)
	cert := p.valid()
	s := newSchedule(time.Now())
	v := newVolume(t)
	v.write(s.ring(t, 1), cert.crt, cert.key)
	a, err := agent.New(agent.Options{Dir: v.dir, Require: agent.TicketKeys | agent.Certificate, Clock: newFakeClock(s.t0), ResyncPeriod: noResync})
	if err != nil {
		t.Fatal(err)
	}
	start(t, a)
	addr := serve(t, a.TLSConfig(nil))
	victim := p.client(tls.VersionTLS13)
	handshake(t, addr, victim) // under k1

	v.write(encodeRing(t, 2, s.k2), cert.crt, cert.key) // k1 removed
	eventually(t, "epoch 2", func() bool { return a.Status().Epoch == 2 })
	v.write(encodeRing(t, 3, s.k2, s.k1), cert.crt, cert.key) // and listed again
	eventually(t, "epoch 3", func() bool { return a.Status().Epoch == 3 })
	if st := a.Status(); len(st.Keys) != 1 || st.ActiveKeyID != s.k2.ID {
		t.Errorf("keys %+v, want k2 alone", st.Keys)
	}
	if handshake(t, addr, victim).DidResume {
		t.Error("ticket under the removed key resumed")
	}
}

// TestLargestRing: a ring of keyring.MaxKeys keys, the most a
// TicketKeyRing holds, is taken; one more is refused (see
// TestBadInputKeepsLastGood).
func TestLargestRing(t *testing.T) {
	s := newSchedule(time.Now())
	v := newVolume(t)
	v.write(encodeRing(t, 1, manyKeys(s.t0, keyring.MaxKeys)...), nil, nil)
	a, err := agent.New(agent.Options{Dir: v.dir, Clock: newFakeClock(s.t0)})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(a.Status().Keys); n != keyring.MaxKeys {
		t.Errorf("%d keys served, want %d", n, keyring.MaxKeys)
	}
	v.write(encodeOversized(t, 1, manyKeys(s.t0, keyring.MaxKeys+1)...), nil, nil)
	if _, err := agent.New(agent.Options{Dir: v.dir, Clock: newFakeClock(s.t0)}); !errors.Is(err, agent.ErrTooManyKeys) {
		t.Errorf("New = %v, want ErrTooManyKeys", err)
	}
}

// TestBurstIsOneRead: writes within the debounce window cost one read,
// which takes the last of them, and one swap.
func TestBurstIsOneRead(t *testing.T) {
	s := newSchedule(time.Now())
	v := newVolume(t)
	v.write(s.ring(t, 1), nil, nil)
	a, err := agent.New(agent.Options{Dir: v.dir, Clock: newFakeClock(s.t0), ResyncPeriod: noResync})
	if err != nil {
		t.Fatal(err)
	}
	var reads atomic.Int32
	agent.SetReadHook(a, func(attempt int) {
		if attempt == 0 {
			reads.Add(1)
		}
	})
	windows := make(chan chan time.Time, 10)
	agent.SetWindow(a, func(time.Duration) <-chan time.Time {
		c := make(chan time.Time, 1)
		windows <- c
		return c
	})
	// Written before Start, so no event: only Start's first read can take
	// it, which tells when that read is over.
	v.write(s.ring(t, 2), nil, nil)
	start(t, a)
	eventually(t, "the catch-up read", func() bool { return a.Status().Epoch == 2 })

	for epoch := int64(3); epoch <= 7; epoch++ {
		v.write(s.ring(t, epoch), nil, nil)
	}
	var window chan time.Time
	select {
	case window = <-windows:
	case <-time.After(10 * time.Second):
		t.Fatal("no debounce window opened")
	}
	if n := reads.Load(); n != 1 {
		t.Fatalf("%d reads while the window was open, want only the catch-up", n)
	}
	window <- time.Now()
	eventually(t, "epoch 7", func() bool { return a.Status().Epoch == 7 })
	if n, st := reads.Load(), a.Status(); n != 2 || st.Swaps != 2 {
		t.Errorf("%d reads and %d swaps with a burst of 5 writes, want 2 and 2 (the catch-up's, the burst's)", n, st.Swaps)
	}
}

// TestFlappingLoggedOncePerWindow: an input that turns bad and good again
// and again is counted every time, but each cause is logged once per
// window, and so is the recovery.
func TestFlappingLoggedOncePerWindow(t *testing.T) {
	s := newSchedule(time.Now())
	v := newVolume(t)
	good := s.ring(t, 1)
	v.write(good, nil, nil)
	clock := newFakeClock(s.t0)
	var logs logBuffer
	a, err := agent.New(agent.Options{Dir: v.dir, Clock: clock, Logger: logs.logger(), ResyncPeriod: noResync, Debounce: -1})
	if err != nil {
		t.Fatal(err)
	}
	start(t, a)
	counter := "ringmaster_agent_reload_errors_total{reason=ring_invalid}"
	flip := func(n int) {
		t.Helper()
		for range n {
			want := metrics(t, a)[counter] + 1
			v.write(good[:len(good)/2], nil, nil)
			eventually(t, "bad", func() bool { return metrics(t, a)[counter] >= want })
			v.write(good, nil, nil)
			eventually(t, "good", func() bool { return a.Status().LastError == "" })
		}
	}
	rejected := func() int {
		return len(logs.records(t, map[string]string{"msg": rejectedMsg, "reason": "ring_invalid"}))
	}
	recovered := func() int {
		return len(logs.records(t, map[string]string{"msg": "Read TLS material without errors again"}))
	}

	flip(4)
	if got := metrics(t, a)[counter]; got < 4 {
		t.Errorf("counted %v failures, want every one of 4", got)
	}
	if r, g := rejected(), recovered(); r != 1 || g != 1 {
		t.Errorf("logged %d rejections and %d recoveries in one window, want 1 and 1", r, g)
	}
	clock.Set(s.t0.Add(2 * time.Minute)) // a new window; no key changes yet
	flip(2)
	if r, g := rejected(), recovered(); r != 2 || g != 2 {
		t.Errorf("logged %d rejections and %d recoveries over two windows, want 2 and 2", r, g)
	}
	if a.Status().Swaps != 0 {
		t.Errorf("%d swaps for a flapping input whose good state never changed", a.Status().Swaps)
	}
}

// TestNeedLeaderElection: with controller-runtime, mgr.Add(agent) runs the
// agent on every replica. The interface is spelled out here rather than
// imported: pkg/agent does not depend on controller-runtime.
func TestNeedLeaderElection(t *testing.T) {
	s := newSchedule(time.Now())
	v := newVolume(t)
	v.write(s.ring(t, 1), nil, nil)
	a, err := agent.New(agent.Options{Dir: v.dir})
	if err != nil {
		t.Fatal(err)
	}
	var runnable interface {
		Start(context.Context) error
		NeedLeaderElection() bool
	} = a
	if runnable.NeedLeaderElection() {
		t.Error("NeedLeaderElection() = true: only the leader replica would serve fresh keys")
	}
}
