package agent_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/testing/atomicdir"
	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

func TestMain(m *testing.M) {
	// Agents built without a Logger log through the default; keep that out
	// of failure output, where the tests' own logs matter.
	slog.SetDefault(slog.New(slog.DiscardHandler))
	// No goroutine of the agent's, the watcher's, or the tests' servers may
	// outlive the tests.
	goleak.VerifyTestMain(m)
}

// noResync is a resync period no test's fake clock reaches, so that only
// the timers at key activation and expiry can fire.
const noResync = 1000 * time.Hour

// schedule is a ring in steady state around t0: k1 active since an hour,
// k2 staged, activating in an hour.
type schedule struct {
	t0     time.Time
	k1, k2 keyring.Key
}

func newSchedule(t0 time.Time) schedule {
	h := time.Hour
	return schedule{
		t0: t0,
		k1: newKey("k1", t0.Add(-h), t0.Add(h), t0.Add(3*h)),
		k2: newKey("k2", t0.Add(h), t0.Add(2*h), t0.Add(4*h)),
	}
}

// ring returns epoch n of the schedule: k2 staged, k1 active.
func (s schedule) ring(t *testing.T, epoch int64) []byte { return encodeRing(t, epoch, s.k2, s.k1) }

func TestNewFailsFast(t *testing.T) {
	p := newPKI(t)
	s := newSchedule(time.Now())
	good, other := p.valid(), p.valid()
	expired := p.issue(time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
	h := time.Hour
	old := newKey("old", s.t0.Add(-3*h), s.t0.Add(-2*h), s.t0.Add(-h))

	tests := []struct {
		name    string
		require agent.Files
		setup   func(t *testing.T, dir string) // nil: a good ring and certificate
		want    error
		alsoIs  error
		wantKey string // active key id on success
	}{
		{name: "keys and certificate", require: agent.TicketKeys | agent.Certificate, wantKey: s.k1.ID},
		{name: "keys by default, certificate absent", setup: func(t *testing.T, dir string) {
			write(t, dir, s.ring(t, 1), nil, nil)
		}, wantKey: s.k1.ID},
		{name: "certificate only, ring absent", require: agent.Certificate, setup: func(t *testing.T, dir string) {
			write(t, dir, nil, good.crt, good.key)
		}},
		{name: "directory missing", setup: func(t *testing.T, dir string) {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
		}, want: agent.ErrDirectory},
		{name: "directory is a file", setup: func(t *testing.T, dir string) {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dir, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}, want: agent.ErrDirectory},
		{name: "ring missing", setup: func(t *testing.T, dir string) {
			write(t, dir, nil, good.crt, good.key)
		}, want: agent.ErrTicketKeys},
		{name: "ring truncated", setup: func(t *testing.T, dir string) {
			r := s.ring(t, 1)
			write(t, dir, r[:len(r)/2], nil, nil)
		}, want: agent.ErrTicketKeys, alsoIs: keyring.ErrInvalidRing},
		{name: "ring every key expired", setup: func(t *testing.T, dir string) {
			write(t, dir, encodeRing(t, 1, old), nil, nil)
		}, want: agent.ErrTicketKeys},
		{name: "ring published without keys: taken, crypto/tls's keys stand in", setup: func(t *testing.T, dir string) {
			write(t, dir, encodeRing(t, 7), nil, nil)
		}, wantKey: ""},
		{name: "certificate missing", require: agent.TicketKeys | agent.Certificate, setup: func(t *testing.T, dir string) {
			write(t, dir, s.ring(t, 1), nil, nil)
		}, want: agent.ErrCertificate},
		{name: "certificate and key mismatch", require: agent.Certificate, setup: func(t *testing.T, dir string) {
			write(t, dir, nil, good.crt, other.key)
		}, want: agent.ErrCertificate},
		{name: "certificate expired", require: agent.Certificate, setup: func(t *testing.T, dir string) {
			write(t, dir, nil, expired.crt, expired.key)
		}, want: agent.ErrCertificate},
		{name: "both broken reports both", require: agent.TicketKeys | agent.Certificate, setup: func(t *testing.T, dir string) {
			write(t, dir, []byte("{"), expired.crt, expired.key)
		}, want: agent.ErrTicketKeys, alsoIs: agent.ErrCertificate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "vol")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if tt.setup == nil {
				write(t, dir, s.ring(t, 1), good.crt, good.key)
			} else {
				tt.setup(t, dir)
			}
			var logs logBuffer
			a, err := agent.New(agent.Options{Dir: dir, Require: tt.require, Logger: logs.logger()})
			if tt.want == nil {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				if got := a.Status().ActiveKeyID; got != tt.wantKey {
					t.Errorf("active key %q, want %q", got, tt.wantKey)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("New error %v, want errors.Is %v", err, tt.want)
			}
			if tt.alsoIs != nil && !errors.Is(err, tt.alsoIs) {
				t.Errorf("New error %v, want errors.Is %v too", err, tt.alsoIs)
			}
			if a != nil {
				t.Error("New returned an agent with its error")
			}
			assertNoSecrets(t, "error", err.Error(), s.k1, s.k2, old)
		})
	}
}

func write(t *testing.T, dir string, ring, crt, key []byte) {
	t.Helper()
	w, err := atomicdir.NewWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	v := &volume{t: t, dir: dir, w: w}
	v.write(ring, crt, key)
}

// TestTicketResumesAcrossEpochs: a ticket issued under epoch n resumes
// after the swap to epoch n+1, in which its key has become decrypt-only.
func TestTicketResumesAcrossEpochs(t *testing.T) {
	for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		t.Run(tls.VersionName(version), func(t *testing.T) {
			p := newPKI(t)
			cert := p.valid()
			s := newSchedule(time.Now())
			clock := newFakeClock(s.t0)
			v := newVolume(t)
			v.write(s.ring(t, 7), cert.crt, cert.key)
			a, err := agent.New(agent.Options{Dir: v.dir, Require: agent.TicketKeys | agent.Certificate, Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			start(t, a)
			addr := serve(t, a.TLSConfig(nil))

			client := p.client(version)
			if cs := handshake(t, addr, client); cs.DidResume {
				t.Fatal("first handshake resumed")
			}

			// Epoch 8, as the operator publishes it once k2 is active: k3
			// staged, k2 active, k1 decrypt-only.
			h := time.Hour
			k3 := newKey("k3", s.t0.Add(2*h), s.t0.Add(3*h), s.t0.Add(5*h))
			clock.Set(s.t0.Add(h + time.Minute))
			v.write(encodeRing(t, 8, k3, s.k2, s.k1), cert.crt, cert.key)
			eventually(t, "epoch 8 with k2 active", func() bool {
				st := a.Status()
				return st.Epoch == 8 && st.ActiveKeyID == s.k2.ID
			})

			if cs := handshake(t, addr, client); !cs.DidResume {
				t.Fatal("ticket from epoch 7 did not resume under epoch 8")
			}
			m := metrics(t, a)
			if m["ringmaster_agent_handshakes_total{resumed=true}"] != 1 || m["ringmaster_agent_handshakes_total{resumed=false}"] != 1 {
				t.Errorf("handshake counters %v, want one full and one resumed", m)
			}
		})
	}
}

// TestPeerTicketUnderStagedKey: an agent whose clock has already activated
// the staged key issues tickets that an agent still before the activation
// resumes, because it holds the staged key too.
func TestPeerTicketUnderStagedKey(t *testing.T) {
	for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		t.Run(tls.VersionName(version), func(t *testing.T) {
			p := newPKI(t)
			cert := p.valid()
			s := newSchedule(time.Now())
			v := newVolume(t)
			v.write(s.ring(t, 3), cert.crt, cert.key)
			opts := agent.Options{Dir: v.dir, Require: agent.TicketKeys | agent.Certificate}

			opts.Clock = newFakeClock(s.t0.Add(time.Hour + time.Second)) // early
			early, err := agent.New(opts)
			if err != nil {
				t.Fatal(err)
			}
			opts.Clock = newFakeClock(s.t0) // late
			late, err := agent.New(opts)
			if err != nil {
				t.Fatal(err)
			}
			if early.Status().ActiveKeyID != s.k2.ID || late.Status().ActiveKeyID != s.k1.ID {
				t.Fatalf("active keys early %s late %s, want %s and %s",
					early.Status().ActiveKeyID, late.Status().ActiveKeyID, s.k2.ID, s.k1.ID)
			}
			earlyAddr := serve(t, early.TLSConfig(nil))
			lateAddr := serve(t, late.TLSConfig(nil))
			// A replica that never received k2: the control.
			withoutK2 := staticServer(t, cert.tlsCertificate(t), s.k1)

			for _, target := range []struct {
				name   string
				addr   string
				resume bool
			}{
				{"late agent", lateAddr, true},
				{"replica without the staged key", withoutK2, false},
			} {
				client := p.client(version)
				handshake(t, earlyAddr, client)
				if cs := handshake(t, target.addr, client); cs.DidResume != target.resume {
					t.Errorf("%s: resumed %v, want %v", target.name, cs.DidResume, target.resume)
				}
			}
		})
	}
}

// TestStagedKeyActivatesOnTime: with no new file, the timer at the staged
// key's activeFrom republishes the ring reordered, and new tickets are
// encrypted under the newly active key.
func TestStagedKeyActivatesOnTime(t *testing.T) {
	p := newPKI(t)
	cert := p.valid()
	s := newSchedule(time.Now())
	clock := newFakeClock(s.t0)
	v := newVolume(t)
	v.write(s.ring(t, 5), cert.crt, cert.key)
	swaps := make(chan agent.Status, 10)
	a, err := agent.New(agent.Options{
		Dir: v.dir, Require: agent.TicketKeys | agent.Certificate, Clock: clock,
		// Moving the clock must fire only the activation timer, not a
		// resync.
		ResyncPeriod: noResync,
		OnSwap:       func(st agent.Status) { swaps <- st },
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []agent.KeyStatus{
		{ID: s.k1.ID, State: "active", ActiveFrom: s.k1.ActiveFrom, ExpiresAt: s.k1.ExpiresAt, AgeSeconds: 3600},
		{ID: s.k2.ID, State: "staged", ActiveFrom: s.k2.ActiveFrom, ExpiresAt: s.k2.ExpiresAt, AgeSeconds: -3600},
	}
	assertKeys(t, a.Status().Keys, want)
	start(t, a)
	addr := serve(t, a.TLSConfig(nil))
	before := p.client(tls.VersionTLS13)
	handshake(t, addr, before)

	clock.Set(s.k2.ActiveFrom)
	var st agent.Status
	select {
	case st = <-swaps:
	case <-time.After(10 * time.Second):
		t.Fatal("no swap at the staged key's activeFrom")
	}
	if st.ActiveKeyID != s.k2.ID || st.Epoch != 5 {
		t.Fatalf("after activation: active %s epoch %d, want %s epoch 5", st.ActiveKeyID, st.Epoch, s.k2.ID)
	}
	assertKeys(t, st.Keys, []agent.KeyStatus{
		{ID: s.k2.ID, State: "active", ActiveFrom: s.k2.ActiveFrom, ExpiresAt: s.k2.ExpiresAt, AgeSeconds: 0},
		{ID: s.k1.ID, State: "decrypt-only", ActiveFrom: s.k1.ActiveFrom, ExpiresAt: s.k1.ExpiresAt, AgeSeconds: 7200},
	})

	// A new ticket is under k2: a replica holding only k2 resumes it, one
	// holding only k1 does not.
	after := p.client(tls.VersionTLS13)
	handshake(t, addr, after)
	onlyK2 := staticServer(t, cert.tlsCertificate(t), s.k2)
	if !handshake(t, onlyK2, after).DidResume {
		t.Error("ticket issued after activation is not under k2")
	}
	// The ticket from before, under k1, still resumes: k1 is decrypt-only.
	if !handshake(t, addr, before).DidResume {
		t.Error("ticket under the now decrypt-only key did not resume")
	}

	m := metrics(t, a)
	for name, want := range map[string]float64{
		"ringmaster_agent_swaps_total":                             1,
		"ringmaster_agent_epoch":                                   5,
		"ringmaster_agent_active_key_age_seconds":                  0,
		"ringmaster_agent_certificate_not_after_timestamp_seconds": float64(cert.cert.NotAfter.Unix()),
	} {
		if got, ok := m[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
}

func assertKeys(t *testing.T, got, want []agent.KeyStatus) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("keys %+v, want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.ID != w.ID || g.State != w.State || !g.ActiveFrom.Equal(w.ActiveFrom) || !g.ExpiresAt.Equal(w.ExpiresAt) || g.AgeSeconds != w.AgeSeconds {
			t.Errorf("key %d = %+v, want %+v", i, g, w)
		}
	}
}

// TestExpiredKeyDoesNotResume: a key is dropped at its expiresAt with no new
// file, and a ticket under it then gets a full handshake.
func TestExpiredKeyDoesNotResume(t *testing.T) {
	p := newPKI(t)
	cert := p.valid()
	t0 := time.Now()
	h := time.Hour
	k0 := newKey("k0", t0.Add(-3*h), t0.Add(-h), t0.Add(h))
	k1 := newKey("k1", t0.Add(-h), t0.Add(h), t0.Add(3*h))
	clock := newFakeClock(t0.Add(-2 * h)) // k0 active, k1 staged
	v := newVolume(t)
	v.write(encodeRing(t, 2, k1, k0), cert.crt, cert.key)
	a, err := agent.New(agent.Options{Dir: v.dir, Require: agent.TicketKeys | agent.Certificate, Clock: clock, ResyncPeriod: noResync})
	if err != nil {
		t.Fatal(err)
	}
	start(t, a)
	addr := serve(t, a.TLSConfig(nil))
	control, victim := p.client(tls.VersionTLS13), p.client(tls.VersionTLS13)
	handshake(t, addr, control)
	handshake(t, addr, victim)

	clock.Set(t0) // k1 active, k0 decrypt-only
	eventually(t, "k1 active", func() bool { return a.Status().ActiveKeyID == k1.ID })
	if !handshake(t, addr, control).DidResume {
		t.Fatal("control: ticket under decrypt-only k0 did not resume")
	}

	clock.Set(k0.ExpiresAt)
	eventually(t, "k0 dropped", func() bool { return len(a.Status().Keys) == 1 })
	if handshake(t, addr, victim).DidResume {
		t.Fatal("ticket under expired k0 resumed")
	}
}

// TestEveryKeyExpiredFallsBack: when the last key expires and no new ring
// arrives, no expired key serves; crypto/tls's own keys stand in, and the
// reason is visible.
func TestEveryKeyExpiredFallsBack(t *testing.T) {
	p := newPKI(t)
	cert := p.valid()
	s := newSchedule(time.Now())
	clock := newFakeClock(s.t0)
	v := newVolume(t)
	v.write(s.ring(t, 4), cert.crt, cert.key)
	var logs logBuffer
	a, err := agent.New(agent.Options{Dir: v.dir, Require: agent.TicketKeys | agent.Certificate, Clock: clock, Logger: logs.logger(), ResyncPeriod: noResync})
	if err != nil {
		t.Fatal(err)
	}
	start(t, a)
	addr := serve(t, a.TLSConfig(nil))
	client := p.client(tls.VersionTLS13)
	handshake(t, addr, client)

	clock.Set(s.k2.ExpiresAt)
	// The keys drop at the timer; the read that follows it reports why.
	eventually(t, "every key dropped, and the read after", func() bool {
		st := a.Status()
		return st.ActiveKeyID == "" && st.LastError != ""
	})
	st := a.Status()
	if len(st.Keys) != 0 || st.Epoch != 4 || !strings.Contains(st.LastError, "every key has expired") {
		t.Errorf("status %+v, want epoch 4, no keys, an expiry error", st)
	}
	if handshake(t, addr, client).DidResume {
		t.Error("ticket under an expired ring resumed")
	}
	// Tickets still work within this replica, under crypto/tls's keys.
	if !handshake(t, addr, client).DidResume {
		t.Error("ticket under crypto/tls's fallback keys did not resume")
	}
	if n := len(logs.records(t, map[string]string{"reason": "ring_expired"})); n != 1 {
		t.Errorf("ring_expired logged %d times, want 1", n)
	}
}

// TestKeylessRingDestroysEveryKey: the operator publishes a ring without
// keys once every key has expired and none can be minted. An agent whose
// clock lags still holds the last key; the key-less epoch destroys it at
// once: a ticket under it no longer resumes, the key never comes back with
// an older epoch, and crypto/tls's own keys serve meanwhile.
func TestKeylessRingDestroysEveryKey(t *testing.T) {
	p := newPKI(t)
	cert := p.valid()
	s := newSchedule(time.Now())
	clock := newFakeClock(s.t0) // k1 active by this agent's clock
	v := newVolume(t)
	v.write(s.ring(t, 4), cert.crt, cert.key)
	var logs logBuffer
	a, err := agent.New(agent.Options{Dir: v.dir, Require: agent.TicketKeys | agent.Certificate, Clock: clock, Logger: logs.logger(), ResyncPeriod: noResync})
	if err != nil {
		t.Fatal(err)
	}
	start(t, a)
	addr := serve(t, a.TLSConfig(nil))
	victim := p.client(tls.VersionTLS13)
	handshake(t, addr, victim)
	if !handshake(t, addr, victim).DidResume {
		t.Fatal("control: ticket under k1 did not resume")
	}

	v.write(encodeRing(t, 5), cert.crt, cert.key)
	eventually(t, "the key-less epoch taken", func() bool { return a.Status().Epoch == 5 })
	st := a.Status()
	if len(st.Keys) != 0 || st.ActiveKeyID != "" || st.LastError != "" {
		t.Errorf("status %+v, want epoch 5, no keys, no error", st)
	}
	if handshake(t, addr, victim).DidResume {
		t.Error("ticket under k1 resumed after the key-less epoch")
	}
	if !handshake(t, addr, victim).DidResume {
		t.Error("ticket under crypto/tls's own keys did not resume")
	}

	v.write(s.ring(t, 4), cert.crt, cert.key) // an older epoch, say from a restore
	eventually(t, "the rollback refused", func() bool { return strings.Contains(a.Status().LastError, "epoch went back") })
	if st := a.Status(); st.Epoch != 5 || len(st.Keys) != 0 {
		t.Errorf("status %+v after a rollback, want epoch 5 and no keys", st)
	}
	// A newer epoch with a fresh key, listing k1 again (a forged or stale
	// file): the fresh key serves, k1 never again.
	k3 := newKey("k3", s.t0.Add(-time.Minute), s.t0.Add(time.Hour), s.t0.Add(2*time.Hour))
	v.write(encodeRing(t, 6, k3, s.k1), cert.crt, cert.key)
	eventually(t, "epoch 6 taken", func() bool { return a.Status().Epoch == 6 })
	if st := a.Status(); st.ActiveKeyID != k3.ID || len(st.Keys) != 1 {
		t.Errorf("status %+v, want k3 alone: k1 was destroyed by the key-less epoch", st)
	}
	assertNoSecrets(t, "logs", logs.String(), s.k1, s.k2, k3)
}

// TestCertificateSwap: a new certificate is served to new full handshakes,
// and sessions resumed from earlier tickets go on resuming.
func TestCertificateSwap(t *testing.T) {
	p := newPKI(t)
	c1, c2 := p.valid(), p.valid()
	s := newSchedule(time.Now())
	v := newVolume(t)
	v.write(s.ring(t, 1), c1.crt, c1.key)
	// The fake clock never fires the resync: only fsnotify can see the swap.
	a, err := agent.New(agent.Options{Dir: v.dir, Require: agent.TicketKeys | agent.Certificate, Clock: newFakeClock(s.t0)})
	if err != nil {
		t.Fatal(err)
	}
	start(t, a)
	addr := serve(t, a.TLSConfig(nil))
	old := p.client(tls.VersionTLS13)
	if got := handshake(t, addr, old).PeerCertificates[0].SerialNumber; got.Cmp(c1.cert.SerialNumber) != 0 {
		t.Fatalf("served serial %v, want %v", got, c1.cert.SerialNumber)
	}

	v.write(s.ring(t, 1), c2.crt, c2.key)
	eventually(t, "certificate 2 served", func() bool { return a.Status().CertificateNotAfter.Equal(c2.cert.NotAfter) && a.Status().Swaps == 1 })
	if got := handshake(t, addr, p.client(tls.VersionTLS13)).PeerCertificates[0].SerialNumber; got.Cmp(c2.cert.SerialNumber) != 0 {
		t.Errorf("new handshake got serial %v, want %v", got, c2.cert.SerialNumber)
	}
	if !handshake(t, addr, old).DidResume {
		t.Error("session from before the certificate swap did not resume")
	}
}

// TestCertificateOnly: without TicketKeys the agent swaps certificates and
// leaves tickets to crypto/tls, whose keys outlive the swap.
func TestCertificateOnly(t *testing.T) {
	p := newPKI(t)
	c1, c2 := p.valid(), p.valid()
	v := newVolume(t)
	v.write(nil, c1.crt, c1.key)
	a, err := agent.New(agent.Options{Dir: v.dir, Require: agent.Certificate})
	if err != nil {
		t.Fatal(err)
	}
	start(t, a)
	addr := serve(t, a.TLSConfig(&tls.Config{MinVersion: tls.VersionTLS12}))
	client := p.client(tls.VersionTLS13)
	handshake(t, addr, client)
	v.write(nil, c2.crt, c2.key)
	eventually(t, "certificate 2 served", func() bool {
		st := a.Status()
		return st.CertificateNotAfter.Equal(c2.cert.NotAfter) && st.Swaps == 1
	})
	if got := handshake(t, addr, p.client(tls.VersionTLS13)).PeerCertificates[0].SerialNumber; got.Cmp(c2.cert.SerialNumber) != 0 {
		t.Errorf("served serial %v, want %v", got, c2.cert.SerialNumber)
	}
	if !handshake(t, addr, client).DidResume {
		t.Error("session did not survive a certificate swap")
	}
	if st := a.Status(); st.Epoch != 0 || st.ActiveKeyID != "" {
		t.Errorf("status %+v names a ring", st)
	}
}

// TestBadInputKeepsLastGood: every kind of bad input leaves the last good
// config serving over real TLS (a ticket from before resumes, a new client
// gets a full handshake with the last good certificate), counts an error
// per attempt under its own reason, logs once per cause, and is recovered
// from when good input returns.
func TestBadInputKeepsLastGood(t *testing.T) {
	p := newPKI(t)
	c1, other := p.valid(), p.valid()
	expiredCert := p.issue(time.Now().Add(-2*time.Hour), time.Now().Add(-time.Minute))
	futureCert := p.issue(time.Now().Add(agent.CertificateSkew+time.Hour), time.Now().Add(48*time.Hour))
	s := newSchedule(time.Now())
	h := time.Hour
	k3 := newKey("k3", s.t0.Add(2*h), s.t0.Add(3*h), s.t0.Add(5*h))
	// The agent starts on epoch 5 and recovers to epoch 6.
	good := s.ring(t, 5)
	r6 := encodeRing(t, 6, k3, s.k2, s.k1)
	dead1 := newKey("dead1", s.t0.Add(-4*h), s.t0.Add(-3*h), s.t0.Add(-2*h))
	dead2 := newKey("dead2", s.t0.Add(-5*h), s.t0.Add(-4*h), s.t0.Add(-3*h))
	many := manyKeys(s.t0, keyring.MaxKeys+1)
	secrets := append([]keyring.Key{s.k1, s.k2, k3, dead1, dead2}, many...)

	type input struct{ ring, crt, key []byte }
	tests := []struct {
		name   string
		reason string
		// bad is written in place of the good files; gone removes the
		// directory instead; apply does something else to it.
		bad   input
		gone  bool
		apply func(t *testing.T, v *volume)
	}{
		{name: "truncated ring", reason: "ring_invalid", bad: input{r6[:len(r6)/2], c1.crt, c1.key}},
		{name: "unknown version", reason: "ring_invalid", bad: input{editRing(t, r6, func(m map[string]any) { m["version"] = 2 }), c1.crt, c1.key}},
		{name: "wrong key length", reason: "ring_invalid", bad: input{editRing(t, r6, func(m map[string]any) {
			m["keys"].([]any)[0].(map[string]any)["secret"] = base64.StdEncoding.EncodeToString(make([]byte, 16))
		}), c1.crt, c1.key}},
		{name: "duplicate ids", reason: "ring_invalid", bad: input{editRing(t, r6, func(m map[string]any) {
			keys := m["keys"].([]any)
			m["keys"] = append([]any{keys[0]}, keys...)
		}), c1.crt, c1.key}},
		{name: "every key expired", reason: "ring_expired", bad: input{encodeRing(t, 6, dead1, dead2), c1.crt, c1.key}},
		{name: "ring missing", reason: "ring_missing", bad: input{nil, c1.crt, c1.key}},
		// The strict codec: what encoding/json alone would take.
		{name: "field name in another case", reason: "ring_invalid", bad: input{replaceOnce(t, r6, `"epoch": 6`, `"Epoch": 6`), c1.crt, c1.key}},
		{name: "field given twice", reason: "ring_invalid", bad: input{replaceOnce(t, r6, `"epoch": 6,`, `"epoch": 6, "epoch": 7,`), c1.crt, c1.key}},
		{name: "invalid UTF-8", reason: "ring_invalid", bad: input{replaceOnce(t, r6, `"shop/web"`, "\"shop/w\xffb\""), c1.crt, c1.key}},
		// Bounds of the API.
		{name: "ring name the API cannot produce", reason: "ring_invalid", bad: input{editRing(t, r6, func(m map[string]any) {
			m["ring"] = "shop/web\n\x1b[2J" + strings.Repeat("w", 4096)
		}), c1.crt, c1.key}},
		{name: "more keys than a ring holds", reason: "ring_too_large", bad: input{encodeOversized(t, 6, many...), c1.crt, c1.key}},
		// Pinning.
		{name: "another ring", reason: "ring_foreign", bad: input{renameRing(t, r6, "other/web"), c1.crt, c1.key}},
		{name: "lower epoch", reason: "ring_rollback", bad: input{s.ring(t, 4), c1.crt, c1.key}},
		{name: "same epoch, other content", reason: "ring_epoch_conflict", bad: input{encodeRing(t, 5, k3, s.k2, s.k1), c1.crt, c1.key}},
		// Certificates.
		{name: "certificate does not match key", reason: "certificate_invalid", bad: input{good, c1.crt, other.key}},
		{name: "certificate not PEM", reason: "certificate_invalid", bad: input{good, []byte("garbage"), c1.key}},
		{name: "certificate expired", reason: "certificate_expired", bad: input{good, expiredCert.crt, expiredCert.key}},
		{name: "certificate not valid yet", reason: "certificate_not_yet_valid", bad: input{good, futureCert.crt, futureCert.key}},
		{name: "certificate missing", reason: "certificate_missing", bad: input{good, nil, nil}},
		// The directory.
		{name: "directory gone", reason: "directory", gone: true},
		{name: "..data pointing out of the directory", reason: "directory", apply: func(t *testing.T, v *volume) {
			// A newer epoch elsewhere: served, it would be taken.
			elsewhere := newVolume(t)
			elsewhere.write(r6, c1.crt, c1.key)
			target, err := os.Readlink(filepath.Join(elsewhere.dir, "..data"))
			if err != nil {
				t.Fatal(err)
			}
			tmp := filepath.Join(v.dir, "..data_tmp")
			if err := os.Symlink(filepath.Join(elsewhere.dir, target), tmp); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "..data through a second symlink out of the directory", reason: "directory", apply: func(t *testing.T, v *volume) {
			// ..data -> ..hop -> a newer epoch elsewhere: each hop checked.
			// (Not r6, which the recovery below writes: the writer would
			// find it in place through ..hop, and write nothing.)
			elsewhere := newVolume(t)
			elsewhere.write(encodeRing(t, 7, k3, s.k2, s.k1), c1.crt, c1.key)
			target, err := os.Readlink(filepath.Join(elsewhere.dir, "..data"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(elsewhere.dir, target), filepath.Join(v.dir, "..hop")); err != nil {
				t.Fatal(err)
			}
			tmp := filepath.Join(v.dir, "..data_tmp")
			if err := os.Symlink("..hop", tmp); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := newVolume(t)
			v.write(good, c1.crt, c1.key)
			var logs logBuffer
			a, err := agent.New(agent.Options{
				Dir: v.dir, Require: agent.TicketKeys | agent.Certificate,
				Logger: logs.logger(), ResyncPeriod: 5 * time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			start(t, a)
			addr := serve(t, a.TLSConfig(nil))
			client := p.client(tls.VersionTLS13)
			handshake(t, addr, client)
			before := a.Status()

			switch {
			case tt.gone:
				// One rename, as an unmount would: no half-removed state.
				if err := os.Rename(v.dir, v.dir+".gone"); err != nil {
					t.Fatal(err)
				}
				if err := os.RemoveAll(v.dir + ".gone"); err != nil {
					t.Fatal(err)
				}
			case tt.apply != nil:
				tt.apply(t, v)
			default:
				v.write(tt.bad.ring, tt.bad.crt, tt.bad.key)
			}
			// Several failed attempts, so "once per cause" is tested
			// against retries.
			counter := "ringmaster_agent_reload_errors_total{reason=" + tt.reason + "}"
			eventually(t, "three failed attempts", func() bool { return metrics(t, a)[counter] >= 3 })

			st := a.Status()
			if st.Epoch != before.Epoch || st.ActiveKeyID != before.ActiveKeyID || !st.CertificateNotAfter.Equal(before.CertificateNotAfter) || st.Swaps != 0 {
				t.Errorf("status %+v, want the last good %+v", st, before)
			}
			if st.LastError == "" {
				t.Error("status has no LastError")
			}
			if len(st.LastError) > 1000 || strings.ContainsFunc(st.LastError, func(c rune) bool { return c < ' ' }) {
				t.Errorf("LastError is %d bytes or holds control characters: %q", len(st.LastError), st.LastError)
			}
			if !handshake(t, addr, client).DidResume {
				t.Error("ticket from the last good ring no longer resumes")
			}
			if got := handshake(t, addr, p.client(tls.VersionTLS13)).PeerCertificates[0].SerialNumber; got.Cmp(c1.cert.SerialNumber) != 0 {
				t.Errorf("full handshake served serial %v, want the last good %v", got, c1.cert.SerialNumber)
			}
			for name, v := range metrics(t, a) {
				if strings.HasPrefix(name, "ringmaster_agent_reload_errors_total") && name != counter && v != 0 {
					t.Errorf("counted under another reason too: %s = %v", name, v)
				}
			}
			// One line per cause, and a cause is the error as read: a read
			// between the kubelet's ..data swap and its removal of the
			// stale visible links meets the same fault as a dangling link,
			// and the one after as an absent file. Retries log nothing more
			// (below: no cause twice).
			if n := len(logs.records(t, map[string]string{"msg": rejectedMsg, "reason": tt.reason})); n == 0 {
				t.Errorf("no log line for %s:\n%s", tt.reason, logs.String())
			}
			seen := map[string]bool{}
			for _, r := range logs.records(t, map[string]string{"msg": rejectedMsg}) {
				cause := r["reason"].(string) + r["err"].(string)
				if seen[cause] {
					t.Errorf("cause logged twice: %s", cause)
				}
				seen[cause] = true
			}
			assertNoSecrets(t, "log", logs.String(), secrets...)
			assertNoSecrets(t, "status", mustStatusJSON(t, a), secrets...)
			assertNoSecrets(t, "metrics", metricsText(t, a), secrets...)

			// Good input again: taken, and the error clears.
			if tt.gone {
				if err := os.Mkdir(v.dir, 0o755); err != nil {
					t.Fatal(err)
				}
				w, err := atomicdir.NewWriter(v.dir)
				if err != nil {
					t.Fatal(err)
				}
				v.w = w
			}
			v.write(r6, c1.crt, c1.key)
			eventually(t, "recovery to epoch 6", func() bool { st := a.Status(); return st.Epoch == 6 && st.LastError == "" })
		})
	}
}

// manyKeys returns n valid keys, newest first, all usable around t0.
func manyKeys(t0 time.Time, n int) []keyring.Key {
	keys := make([]keyring.Key, n)
	for i := range keys {
		af := t0.Add(time.Hour - time.Duration(i)*time.Minute)
		keys[i] = newKey(fmt.Sprint("many", i), af, af.Add(time.Minute), t0.Add(3*time.Hour))
	}
	keys[0].RetireAt = keys[0].ActiveFrom.Add(time.Hour)
	return keys
}

// renameRing returns ring under another name.
func renameRing(t *testing.T, ring []byte, name string) []byte {
	t.Helper()
	r, err := keyring.Decode(ring)
	if err != nil {
		t.Fatal(err)
	}
	r.Name = name
	b, err := keyring.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// replaceOnce replaces the one occurrence of old in data.
func replaceOnce(t *testing.T, data []byte, old, new string) []byte {
	t.Helper()
	if n := bytes.Count(data, []byte(old)); n != 1 {
		t.Fatalf("%q occurs %d times", old, n)
	}
	return bytes.Replace(data, []byte(old), []byte(new), 1)
}

// TestPartiallyWrittenPlainFile: in a plain directory (no ..data), a file
// caught half written is rejected and the complete one then taken.
func TestPartiallyWrittenPlainFile(t *testing.T) {
	s := newSchedule(time.Now())
	dir := t.TempDir()
	path := filepath.Join(dir, keyring.FileName)
	if err := os.WriteFile(path, s.ring(t, 1), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Options{Dir: dir, ResyncPeriod: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	start(t, a)
	r2 := encodeRing(t, 2, s.k2, s.k1)
	if err := os.WriteFile(path, r2[:len(r2)-10], 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "partial file rejected", func() bool { return metrics(t, a)["ringmaster_agent_reload_errors_total{reason=ring_invalid}"] >= 1 })
	if st := a.Status(); st.Epoch != 1 {
		t.Fatalf("epoch %d after a partial write, want 1", st.Epoch)
	}
	if err := os.WriteFile(path, r2, 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "complete file taken", func() bool { return a.Status().Epoch == 2 })
}

// TestSwapDuringRead races a kubelet swap against the agent's read: the
// agent must serve one generation whole, never a mix, and retry for the
// newest.
func TestSwapDuringRead(t *testing.T) {
	p := newPKI(t)
	s := newSchedule(time.Now())
	certs := []leaf{p.valid(), p.valid(), p.valid(), p.valid()}

	t.Run("one swap is retried", func(t *testing.T) {
		v := newVolume(t)
		v.write(s.ring(t, 1), certs[0].crt, certs[0].key)
		var logs logBuffer
		a, err := agent.New(agent.Options{Dir: v.dir, Require: agent.TicketKeys | agent.Certificate, Logger: logs.logger(), Clock: newFakeClock(s.t0)})
		if err != nil {
			t.Fatal(err)
		}
		var once atomic.Bool
		agent.SetReadHook(a, func(int) {
			// Generation 2 lands after ..data was resolved to generation
			// 1, whose directory the kubelet then deletes.
			if once.CompareAndSwap(false, true) {
				v.write(s.ring(t, 2), certs[1].crt, certs[1].key)
			}
		})
		start(t, a)
		eventually(t, "generation 2", func() bool { return a.Status().Epoch == 2 })
		if st := a.Status(); !st.CertificateNotAfter.Equal(certs[1].cert.NotAfter) || st.LastError != "" {
			t.Errorf("status %+v, want generation 2 whole and no error", st)
		}
		addr := serve(t, a.TLSConfig(nil))
		if got := handshake(t, addr, p.client(tls.VersionTLS13)).PeerCertificates[0].SerialNumber; got.Cmp(certs[1].cert.SerialNumber) != 0 {
			t.Errorf("served serial %v, want %v", got, certs[1].cert.SerialNumber)
		}
		for name, v := range metrics(t, a) {
			if strings.HasPrefix(name, "ringmaster_agent_reload_errors_total") && v != 0 {
				t.Errorf("a single race counted as an error: %s = %v", name, v)
			}
		}
		if n := len(logs.records(t, map[string]string{"msg": rejectedMsg})); n != 0 {
			t.Errorf("a single race was logged as a rejection:\n%s", logs.String())
		}
	})

	t.Run("endless swaps keep the last good", func(t *testing.T) {
		v := newVolume(t)
		v.write(s.ring(t, 1), certs[0].crt, certs[0].key)
		var logs logBuffer
		a, err := agent.New(agent.Options{Dir: v.dir, Require: agent.TicketKeys | agent.Certificate, Logger: logs.logger(), Clock: newFakeClock(s.t0)})
		if err != nil {
			t.Fatal(err)
		}
		var churn atomic.Bool
		churn.Store(true)
		gen := 1
		agent.SetReadHook(a, func(int) {
			if churn.Load() {
				gen++
				v.write(s.ring(t, int64(gen)), certs[gen%4].crt, certs[gen%4].key)
			}
		})
		start(t, a)
		eventually(t, "an inconsistent read", func() bool {
			return metrics(t, a)["ringmaster_agent_reload_errors_total{reason=inconsistent_read}"] >= 1
		})
		if st := a.Status(); st.Epoch != 1 || !st.CertificateNotAfter.Equal(certs[0].cert.NotAfter) || !strings.Contains(st.LastError, "changed during") {
			t.Errorf("status %+v, want generation 1 and an inconsistency error", st)
		}
		if n := len(logs.records(t, map[string]string{"msg": rejectedMsg, "reason": "inconsistent_read"})); n != 1 {
			t.Errorf("inconsistent_read logged %d times, want 1", n)
		}
		churn.Store(false)
		// The churn's own writes raise events; the last generation
		// written is then read whole.
		eventually(t, "the last generation", func() bool { return a.Status().Epoch > 1 && a.Status().LastError == "" })
	})
}

// TestWatchRearmedAfterDirectoryReplaced: after the directory is removed
// and created again, the resync re-arms the watch, and fsnotify alone then
// delivers the next change.
func TestWatchRearmedAfterDirectoryReplaced(t *testing.T) {
	s := newSchedule(time.Now())
	clock := newFakeClock(s.t0)
	v := newVolume(t)
	v.write(s.ring(t, 1), nil, nil)
	a, err := agent.New(agent.Options{Dir: v.dir, Clock: clock, ResyncPeriod: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	start(t, a)
	if err := os.RemoveAll(v.dir); err != nil {
		t.Fatal(err)
	}
	eventually(t, "directory error", func() bool { return metrics(t, a)["ringmaster_agent_reload_errors_total{reason=directory}"] >= 1 })
	if err := os.Mkdir(v.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := atomicdir.NewWriter(v.dir)
	if err != nil {
		t.Fatal(err)
	}
	v.w = w
	v.write(s.ring(t, 2), nil, nil)
	// Only the resync can see this directory: the old watch died with the
	// old one.
	tick := s.t0
	eventually(t, "epoch 2 after resync", func() bool {
		tick = tick.Add(time.Minute)
		clock.Set(tick)
		return a.Status().Epoch == 2
	})
	// Now without moving the clock: only the re-armed watch can deliver.
	v.write(s.ring(t, 3), nil, nil)
	eventually(t, "epoch 3 through fsnotify", func() bool { return a.Status().Epoch == 3 })
}

// TestStartReturnsOnCancel: Start returns promptly once its context ends
// and leaves no goroutine behind.
func TestStartReturnsOnCancel(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := newSchedule(time.Now())
	v := newVolume(t)
	v.write(s.ring(t, 1), nil, nil)
	a, err := agent.New(agent.Options{Dir: v.dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Start(ctx) }()
	// Wait until Start is watching: a change is seen.
	v.write(s.ring(t, 2), nil, nil)
	eventually(t, "epoch 2", func() bool { return a.Status().Epoch == 2 })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Start returned %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Start did not return after cancel")
	}
	if err := a.Start(context.Background()); err == nil {
		t.Error("second Start succeeded")
	}
}

// TestPublishedConfigsAreNeverWritten: a config, once returned by
// GetConfigForClient, is never changed: not by handshakes, not by swaps;
// and base is left untouched.
func TestPublishedConfigsAreNeverWritten(t *testing.T) {
	p := newPKI(t)
	c1, c2 := p.valid(), p.valid()
	s := newSchedule(time.Now())
	v := newVolume(t)
	v.write(s.ring(t, 1), c1.crt, c1.key)
	a, err := agent.New(agent.Options{Dir: v.dir, Require: agent.TicketKeys | agent.Certificate, Clock: newFakeClock(s.t0)})
	if err != nil {
		t.Fatal(err)
	}
	start(t, a)
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	outer := a.TLSConfig(base)
	if base.GetConfigForClient != nil || base.Certificates != nil || base.SessionTicketKey != ([32]byte{}) || base.VerifyConnection != nil {
		t.Fatal("TLSConfig modified base")
	}
	first, err := outer.GetConfigForClient(nil)
	if err != nil {
		t.Fatal(err)
	}
	ticketKeyBefore := first.SessionTicketKey
	leafBefore := first.Certificates[0].Leaf.SerialNumber

	addr := serve(t, outer)
	client := p.client(tls.VersionTLS13)
	handshake(t, addr, client)
	handshake(t, addr, client)
	if again, _ := outer.GetConfigForClient(nil); again != first {
		t.Error("GetConfigForClient returned another config without a change")
	}
	v.write(s.ring(t, 2), c2.crt, c2.key)
	eventually(t, "swap", func() bool { return a.Status().Epoch == 2 })
	second, _ := outer.GetConfigForClient(nil)
	if second == first {
		t.Fatal("no new config after a change")
	}
	if first.SessionTicketKey != ticketKeyBefore || first.Certificates[0].Leaf.SerialNumber != leafBefore || len(first.Certificates) != 1 {
		t.Error("a published config was written after publication")
	}
	if second.Certificates[0].Leaf.SerialNumber.Cmp(c2.cert.SerialNumber) != 0 || len(second.NextProtos) != 1 || second.MinVersion != tls.VersionTLS12 {
		t.Errorf("new config lost base settings or the new certificate")
	}
}

// TestConsecutiveKubeletSwaps: the watch on the directory survives every
// ..data swap. The fake clock never fires the resync, so each epoch can only
// arrive through fsnotify.
func TestConsecutiveKubeletSwaps(t *testing.T) {
	s := newSchedule(time.Now())
	v := newVolume(t)
	v.write(s.ring(t, 1), nil, nil)
	a, err := agent.New(agent.Options{Dir: v.dir, Clock: newFakeClock(s.t0)})
	if err != nil {
		t.Fatal(err)
	}
	start(t, a)
	for epoch := int64(2); epoch <= 6; epoch++ {
		v.write(s.ring(t, epoch), nil, nil)
		eventually(t, fmt.Sprintf("epoch %d", epoch), func() bool { return a.Status().Epoch == epoch })
	}
	if got := a.Status().Swaps; got != 5 {
		t.Errorf("%d swaps for 5 new epochs", got)
	}
}
