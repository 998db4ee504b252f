package agent_test

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/echring"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/testing/atomicdir"
	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

const echPublicName = "public.example.test"

// echConfig mints config id from a seed derived from name, in state; it
// expires 6 hours after createdAt, or 4 hours after its retirement.
func echConfig(t testing.TB, id uint8, name string, state echring.State, createdAt time.Time) echring.Config {
	t.Helper()
	return echConfigWith(t, id, name, state, createdAt, echring.Params{PublicName: echPublicName, MaxNameLength: 32})
}

// echConfigWith is echConfig with other parameters: the same name gives
// the same key whatever the parameters.
func echConfigWith(t testing.TB, id uint8, name string, state echring.State, createdAt time.Time, p echring.Params) echring.Config {
	t.Helper()
	seed := sha256.Sum256([]byte(name))
	c, err := echring.NewConfig(id, seed[:], p)
	if err != nil {
		t.Fatal(err)
	}
	c.State, c.CreatedAt, c.ExpiresAt = state, createdAt, createdAt.Add(6*time.Hour)
	switch state {
	case echring.Published:
		c.PublishedAt = createdAt.Add(time.Minute)
	case echring.Retired:
		c.PublishedAt, c.RetiredAt = createdAt.Add(time.Minute), createdAt.Add(time.Hour)
		c.ExpiresAt = c.RetiredAt.Add(4 * time.Hour)
	}
	return c
}

func encodeECH(t testing.TB, epoch int64, configs ...echring.Config) []byte {
	t.Helper()
	b, err := echring.Encode(echring.Ring{Ring: "shop/web", Epoch: epoch, IssuedAt: time.Unix(1_700_000_000, 0), Configs: configs})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// echSetup is a volume with a ticket ring, a certificate for localhost and
// the public name, and an ECH ring: staged 3, published 2, retired 1
// (expiring two hours after t0).
type echSetup struct {
	t0                         time.Time
	staged, published, retired echring.Config
	ca                         *testpki.CA
	crt, key                   []byte
	ticketRing                 []byte
	v                          *volume
}

func newECHSetup(t *testing.T) *echSetup {
	t.Helper()
	ca, err := testpki.NewCA("ringmaster ech test CA")
	if err != nil {
		t.Fatal(err)
	}
	is, err := ca.Issue(testpki.Leaf{DNSNames: []string{"localhost", echPublicName}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Truncate(time.Second)
	s := newSchedule(t0)
	e := &echSetup{
		t0:         t0,
		staged:     echConfig(t, 3, "c3", echring.Staged, t0.Add(-time.Minute)),
		published:  echConfig(t, 2, "c2", echring.Published, t0.Add(-2*time.Hour)),
		retired:    echConfig(t, 1, "c1", echring.Retired, t0.Add(-3*time.Hour)),
		ca:         ca,
		crt:        is.CertPEM,
		key:        is.KeyPEM,
		ticketRing: s.ring(t, 1),
		v:          newVolume(t),
	}
	e.write(t, encodeECH(t, 5, e.staged, e.published, e.retired))
	return e
}

// write projects the ticket ring, the certificate and ech (left out when
// nil).
func (e *echSetup) write(t *testing.T, ech []byte) {
	t.Helper()
	files := map[string]atomicdir.File{keyring.FileName: {Data: e.ticketRing}, "tls.crt": {Data: e.crt}, "tls.key": {Data: e.key}}
	if ech != nil {
		files[echring.FileName] = atomicdir.File{Data: ech}
	}
	if err := e.v.w.Write(files); err != nil {
		t.Fatal(err)
	}
}

// client returns a client that attempts ECH with the configs given.
func (e *echSetup) client(configs ...echring.Config) *tls.Config {
	return &tls.Config{
		RootCAs:                        e.ca.Pool(),
		ServerName:                     "localhost",
		MinVersion:                     tls.VersionTLS13,
		EncryptedClientHelloConfigList: echring.ConfigList(configs),
	}
}

// dialECH handshakes with addr and reads the server's byte.
func dialECH(addr string, cfg *tls.Config) (tls.ConnectionState, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		return tls.ConnectionState{}, err
	}
	return c.ConnectionState(), nil
}

func mustAccept(t *testing.T, addr string, cfg *tls.Config, what string) {
	t.Helper()
	cs, err := dialECH(addr, cfg)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if !cs.ECHAccepted || cs.ServerName != "localhost" {
		t.Fatalf("%s: ECHAccepted %t, server name %q: want ECH accepted for localhost", what, cs.ECHAccepted, cs.ServerName)
	}
}

// mustReject dials with cfg, expects the server to reject ECH, and returns
// the retry configs it sent.
func mustReject(t *testing.T, addr string, cfg *tls.Config, what string) []byte {
	t.Helper()
	_, err := dialECH(addr, cfg)
	var rej *tls.ECHRejectionError
	if !errors.As(err, &rej) {
		t.Fatalf("%s: %v, want an ECH rejection", what, err)
	}
	return rej.RetryConfigList
}

func (e *echSetup) agent(t *testing.T, clock agent.Clock, logs *logBuffer) *agent.Agent {
	t.Helper()
	opts := agent.Options{Dir: e.v.dir, Require: agent.TicketKeys | agent.Certificate, Clock: clock, ResyncPeriod: noResync}
	if logs != nil {
		opts.Logger = logs.logger()
	}
	a, err := agent.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	start(t, a)
	return a
}

// TestECHServed: a client holding the newest config, a published one or an
// older live one is accepted; one holding a config the server never had is
// rejected with the published configs alone as retry configs, and succeeds
// with them. Status and metrics say so.
func TestECHServed(t *testing.T) {
	e := newECHSetup(t)
	a := e.agent(t, newFakeClock(e.t0), nil)
	addr := serve(t, a.TLSConfig(nil))

	mustAccept(t, addr, e.client(e.staged), "newest (staged) config")
	mustAccept(t, addr, e.client(e.published), "published config")
	mustAccept(t, addr, e.client(e.retired), "older (retired, live) config")

	unknown := echConfig(t, 2, "another ring's", echring.Published, e.t0)
	retry := mustReject(t, addr, e.client(unknown), "unknown config")
	if want := echring.ConfigList([]echring.Config{e.published}); !bytes.Equal(retry, want) {
		t.Fatalf("retry configs are not the published config alone")
	}
	retried := e.client()
	retried.EncryptedClientHelloConfigList = retry
	mustAccept(t, addr, retried, "retry with the retry configs")

	// A client without ECH is served as before, and is not counted.
	if cs, err := dialECH(addr, &tls.Config{RootCAs: e.ca.Pool(), ServerName: "localhost"}); err != nil || cs.ECHAccepted {
		t.Fatalf("client without ECH: %v, ECHAccepted %t", err, cs.ECHAccepted)
	}

	st := a.Status()
	// In the order keys are tried: published, staged, retired.
	want := []agent.ECHConfigStatus{
		{ID: 2, State: "published", Retry: true, ExpiresAt: e.published.ExpiresAt},
		{ID: 3, State: "staged", ExpiresAt: e.staged.ExpiresAt},
		{ID: 1, State: "retired", ExpiresAt: e.retired.ExpiresAt},
	}
	if st.ECH == nil || st.ECH.Ring != "shop/web" || st.ECH.Epoch != 5 || len(st.ECH.Configs) != len(want) {
		t.Fatalf("Status().ECH = %+v, want ring shop/web epoch 5 with configs %+v", st.ECH, want)
	}
	for i, w := range want {
		if g := st.ECH.Configs[i]; g.ID != w.ID || g.State != w.State || g.Retry != w.Retry || !g.ExpiresAt.Equal(w.ExpiresAt) {
			t.Errorf("config %d = %+v, want %+v", i, g, w)
		}
	}
	// A client gives up on a rejection as soon as it has checked the
	// server's certificate, maybe before the server has counted it.
	eventually(t, "the rejection counted", func() bool { return metrics(t, a)["ringmaster_agent_ech_handshakes_total{result=rejected}"] >= 1 })
	m := metrics(t, a)
	if got := m["ringmaster_agent_ech_handshakes_total{result=accepted}"]; got != 4 {
		t.Errorf("accepted ECH handshakes = %v, want 4", got)
	}
	if got := m["ringmaster_agent_ech_handshakes_total{result=rejected}"]; got != 1 {
		t.Errorf("rejected ECH handshakes = %v, want 1", got)
	}
	if got := m["ringmaster_agent_ech_epoch"]; got != 5 {
		t.Errorf("ECH epoch = %v, want 5", got)
	}
	// No text the agent gives shows a private key.
	texts := map[string]string{"status": mustStatusJSON(t, a), "metrics": metricsText(t, a)}
	for where, text := range texts {
		for _, c := range []echring.Config{e.staged, e.published, e.retired} {
			for _, enc := range []string{base64.StdEncoding.EncodeToString(c.PrivateKey), hex.EncodeToString(c.PrivateKey), decimal(c.PrivateKey)} {
				if strings.Contains(text, enc) {
					t.Errorf("%s shows config %d's private key", where, c.ID)
				}
			}
		}
	}
}

// TestECHConfigExpires: at a retired config's expiresAt, with no new file,
// the agent drops it; a client holding it is then rejected, gets the
// published config to retry with, and succeeds.
func TestECHConfigExpires(t *testing.T) {
	e := newECHSetup(t)
	clock := newFakeClock(e.t0)
	var logs logBuffer
	a := e.agent(t, clock, &logs)
	addr := serve(t, a.TLSConfig(nil))
	old := e.client(e.retired)
	mustAccept(t, addr, old, "retired config before its expiry")

	clock.Set(e.retired.ExpiresAt)
	eventually(t, "config 1 dropped", func() bool { st := a.Status(); return st.ECH != nil && len(st.ECH.Configs) == 2 })
	retry := mustReject(t, addr, old, "expired config")
	if want := echring.ConfigList([]echring.Config{e.published}); !bytes.Equal(retry, want) {
		t.Fatalf("retry configs are not the published config alone")
	}
	old.EncryptedClientHelloConfigList = retry
	mustAccept(t, addr, old, "retry after expiry")
	if len(logs.records(t, map[string]string{"msg": "Destroyed expired ECH config"})) != 1 {
		t.Errorf("no log line for the destroyed config:\n%s", logs.String())
	}

	// A file listing the expired config again (a clock gone back, an old
	// file) does not bring it back, even once the clock is earlier.
	clock.Set(e.t0)
	e.write(t, encodeECH(t, 6, e.staged, e.published, e.retired))
	eventually(t, "epoch 6", func() bool { st := a.Status(); return st.ECH != nil && st.ECH.Epoch == 6 })
	if st := a.Status(); len(st.ECH.Configs) != 2 {
		t.Errorf("configs after re-listing the destroyed one: %+v", st.ECH.Configs)
	}
	mustReject(t, addr, e.client(e.retired), "destroyed config listed again")
}

// TestECHDestroyedKeyNeverReturns: a config destroyed at its expiresAt,
// or left out by a newer epoch, stays destroyed when a later file lists
// its key again under config bytes one byte different (another
// maximum_name_length or public_name): destruction is remembered by key,
// not by the config's bytes.
func TestECHDestroyedKeyNeverReturns(t *testing.T) {
	e := newECHSetup(t)
	clock := newFakeClock(e.t0)
	a := e.agent(t, clock, nil)
	addr := serve(t, a.TLSConfig(nil))
	reencoded := func(c echring.Config, name string, p echring.Params) echring.Config {
		t.Helper()
		again := echConfigWith(t, c.ID, name, c.State, c.CreatedAt, p)
		again.PublishedAt, again.RetiredAt, again.ExpiresAt = c.PublishedAt, c.RetiredAt, c.ExpiresAt
		if bytes.Equal(again.Config, c.Config) || !bytes.Equal(again.PrivateKey, c.PrivateKey) || len(again.Config) != len(c.Config) {
			t.Fatal("the re-encoded config is not the same key under other bytes of the same length")
		}
		return again
	}
	retired := reencoded(e.retired, "c1", echring.Params{PublicName: echPublicName, MaxNameLength: 33})
	// One letter's case: another public_name, which the certificate still
	// covers, so that the client sees the rejection.
	published := reencoded(e.published, "c2", echring.Params{PublicName: "public.example.tesT", MaxNameLength: 32})

	// Destroyed at its expiresAt; then the clock goes back and epoch 6
	// lists its key again, one byte different.
	clock.Set(e.retired.ExpiresAt)
	eventually(t, "config 1 destroyed", func() bool { st := a.Status(); return st.ECH != nil && len(st.ECH.Configs) == 2 })
	clock.Set(e.t0)
	e.write(t, encodeECH(t, 6, e.staged, e.published, retired))
	eventually(t, "epoch 6", func() bool { st := a.Status(); return st.ECH != nil && st.ECH.Epoch == 6 })
	if st := a.Status(); len(st.ECH.Configs) != 2 {
		t.Errorf("configs after the destroyed key came back under other bytes: %+v", st.ECH.Configs)
	}
	mustReject(t, addr, e.client(retired), "destroyed key under other bytes")

	// Left out by epoch 7, back in epoch 8 under other bytes.
	e.write(t, encodeECH(t, 7, e.staged))
	eventually(t, "epoch 7", func() bool { st := a.Status(); return st.ECH != nil && st.ECH.Epoch == 7 })
	e.write(t, encodeECH(t, 8, e.staged, published))
	eventually(t, "epoch 8", func() bool { st := a.Status(); return st.ECH != nil && st.ECH.Epoch == 8 })
	if st := a.Status(); len(st.ECH.Configs) != 1 || st.ECH.Configs[0].ID != e.staged.ID {
		t.Errorf("configs after a dropped key came back under other bytes: %+v", st.ECH.Configs)
	}
	mustReject(t, addr, e.client(published), "dropped key under other bytes")
	mustAccept(t, addr, e.client(e.staged), "the staged config")
}

// TestECHPublishedConfigExpires: a published config expires by the agent's
// own clock too, with no new file (the operator stopped): at its expiresAt
// the agent drops it, a client holding it is rejected, and it is no longer
// sent as a retry config. The staged config, staged far longer than any
// config of the ring waited to be published, is sent instead (the rule of
// TestECHFrozenPodSendsRetryConfigs), and the client succeeds with it.
func TestECHPublishedConfigExpires(t *testing.T) {
	e := newECHSetup(t)
	if !e.published.ExpiresAt.After(e.retired.ExpiresAt) || !e.staged.ExpiresAt.After(e.published.ExpiresAt) {
		t.Fatal("the setup's configs do not expire retired, published, staged in turn")
	}
	clock := newFakeClock(e.t0)
	var logs logBuffer
	a := e.agent(t, clock, &logs)
	addr := serve(t, a.TLSConfig(nil))
	pub := e.client(e.published)
	mustAccept(t, addr, pub, "published config before its expiry")

	clock.Set(e.published.ExpiresAt)
	eventually(t, "configs 1 and 2 dropped", func() bool { st := a.Status(); return st.ECH != nil && len(st.ECH.Configs) == 1 })
	if st := a.Status(); st.ECH.Configs[0].ID != 3 || st.ECH.Epoch != 5 {
		t.Fatalf("configs served after the published one expired: epoch %d %+v, want epoch 5 with config 3 alone", st.ECH.Epoch, st.ECH.Configs)
	}
	retry := mustReject(t, addr, pub, "expired published config")
	if want := echring.ConfigList([]echring.Config{e.staged}); !bytes.Equal(retry, want) {
		t.Errorf("retry configs after the published config expired: %d bytes, want the staged config alone", len(retry))
	}
	pub.EncryptedClientHelloConfigList = retry
	mustAccept(t, addr, pub, "the retry with the staged config")
	if got := len(logs.records(t, map[string]string{"msg": "Destroyed expired ECH config"})); got != 2 {
		t.Errorf("%d log lines for destroyed configs, want 2:\n%s", got, logs.String())
	}
}

// TestECHBadFileKeepsLastGood: a corrupt, rolled-back or foreign
// echkeys.json is counted and logged once, and the last good keys keep
// serving.
func TestECHBadFileKeepsLastGood(t *testing.T) {
	e := newECHSetup(t)
	var logs logBuffer
	a := e.agent(t, newFakeClock(e.t0), &logs)
	addr := serve(t, a.TLSConfig(nil))
	good := encodeECH(t, 5, e.staged, e.published, e.retired)
	for _, tc := range []struct {
		name, reason string
		data         []byte
	}{
		{"corrupt", "ech_invalid", good[:len(good)/2]},
		{"key of another config", "ech_invalid", bytes.Replace(good, []byte(base64.StdEncoding.EncodeToString(e.staged.PrivateKey)), []byte(base64.StdEncoding.EncodeToString(e.published.PrivateKey)), 1)},
		{"rollback", "ech_rollback", encodeECH(t, 4, e.staged, e.published)},
		{"epoch conflict", "ech_epoch_conflict", encodeECH(t, 5, e.staged, e.published)},
		{"another ring", "ech_foreign", func() []byte {
			b, err := echring.Encode(echring.Ring{Ring: "shop/api", Epoch: 6, IssuedAt: e.t0, Configs: []echring.Config{e.staged, e.published}})
			if err != nil {
				t.Fatal(err)
			}
			return b
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "ringmaster_agent_reload_errors_total{reason=" + tc.reason + "}"
			before := metrics(t, a)[key]
			match := map[string]string{"msg": rejectedMsg, "reason": tc.reason}
			lines := len(logs.records(t, match))
			e.write(t, tc.data)
			eventually(t, tc.reason, func() bool { return metrics(t, a)[key] > before })
			mustAccept(t, addr, e.client(e.staged), "staged config after a bad file")
			mustAccept(t, addr, e.client(e.retired), "retired config after a bad file")
			if st := a.Status(); st.ECH == nil || st.ECH.Epoch != 5 || !strings.Contains(st.LastError, echring.FileName) {
				t.Errorf("Status: ECH %+v, LastError %q", st.ECH, st.LastError)
			}
			// In ECH words: nothing of the ticket ring's.
			if st := a.Status(); !strings.Contains(st.LastError, "ECH") || strings.Contains(strings.ToLower(st.LastError), "ticket") {
				t.Errorf("LastError %q does not speak of the ECH ring alone", st.LastError)
			}
			if n := len(logs.records(t, match)) - lines; n != 1 {
				t.Errorf("%d log lines for %s, want 1", n, tc.reason)
			}
		})
	}
	for _, c := range []echring.Config{e.staged, e.published, e.retired} {
		assertNoECHKey(t, "log", logs.String(), c)
		assertNoECHKey(t, "status", mustStatusJSON(t, a), c)
	}

}

// TestECHFileGone: echkeys.json vanishing from the volume while the ticket
// ring stays, or left as a symlink to nothing, is a reload error
// (ech_missing), counted, shown and logged once; the last good configs keep
// serving until each expires by its own expiresAt, and only then does ECH
// stop. New refuses a symlink to nothing, as any file present and bad.
func TestECHFileGone(t *testing.T) {
	const key = "ringmaster_agent_reload_errors_total{reason=ech_missing}"
	match := map[string]string{"msg": rejectedMsg, "reason": "ech_missing"}
	stillServed := func(t *testing.T, e *echSetup, a *agent.Agent, addr string) {
		t.Helper()
		for _, c := range []echring.Config{e.staged, e.published, e.retired} {
			mustAccept(t, addr, e.client(c), fmt.Sprintf("config %d with echkeys.json gone", c.ID))
		}
		if st := a.Status(); st.ECH == nil || st.ECH.Epoch != 5 || len(st.ECH.Configs) != 3 {
			t.Errorf("Status().ECH = %+v, want epoch 5 with its 3 configs", st.ECH)
		}
	}

	t.Run("vanished", func(t *testing.T) {
		e := newECHSetup(t)
		clock := newFakeClock(e.t0)
		var logs logBuffer
		a := e.agent(t, clock, &logs)
		addr := serve(t, a.TLSConfig(nil))
		e.write(t, nil) // the kubelet's projection without the ECH Secret
		eventually(t, "ech_missing counted", func() bool { return metrics(t, a)[key] >= 1 })
		stillServed(t, e, a, addr)
		if st := a.Status(); !strings.Contains(st.LastError, echring.FileName) || !strings.Contains(st.LastError, "gone") {
			t.Errorf("LastError %q does not say that echkeys.json is gone", st.LastError)
		}
		// More reads meet the same cause: counted, not logged again.
		before := metrics(t, a)[key]
		e.write(t, nil)
		a.Reset() // a read, whatever fsnotify says
		eventually(t, "ech_missing counted again", func() bool { return metrics(t, a)[key] > before })
		if n := len(logs.records(t, match)); n != 1 {
			t.Errorf("ech_missing logged %d times, want 1:\n%s", n, logs.String())
		}

		// Each config goes at its own expiresAt; ECH stops with the last.
		clock.Set(e.published.ExpiresAt)
		eventually(t, "configs 1 and 2 expired", func() bool { st := a.Status(); return st.ECH != nil && len(st.ECH.Configs) == 1 })
		mustAccept(t, addr, e.client(e.staged), "the last live config")
		clock.Set(e.staged.ExpiresAt)
		// (The ticket ring's keys have expired by then, which LastError
		// may say; it says no more of echkeys.json.)
		eventually(t, "ECH stopped", func() bool {
			st := a.Status()
			return st.ECH == nil && !strings.Contains(st.LastError, echring.FileName)
		})
		if _, err := dialECH(addr, e.client(e.staged)); err == nil {
			t.Fatal("ECH accepted once every config expired")
		}
		if len(logs.records(t, map[string]string{"msg": "Stopped serving ECH: " + echring.FileName + " is gone and its last config expired"})) != 1 {
			t.Errorf("no log line for ECH stopping:\n%s", logs.String())
		}
	})

	t.Run("dangling symlink", func(t *testing.T) {
		e := newECHSetup(t)
		a := e.agent(t, newFakeClock(e.t0), nil)
		addr := serve(t, a.TLSConfig(nil))
		// The kubelet swapped in a generation without the file, and the
		// visible link to it stayed behind (or was put back).
		e.write(t, nil)
		link := filepath.Join(e.v.dir, echring.FileName)
		if err := os.Symlink("..data/"+echring.FileName, link); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the dangling link refused", func() bool {
			return metrics(t, a)[key] >= 1 && strings.Contains(a.Status().LastError, "is a symlink to")
		})
		stillServed(t, e, a, addr)
		if st := a.Status(); !strings.Contains(st.LastError, "which does not exist") {
			t.Errorf("LastError %q does not name the dangling link", st.LastError)
		}
		_, err := agent.New(agent.Options{Dir: e.v.dir, Require: agent.TicketKeys | agent.Certificate, Clock: newFakeClock(e.t0)})
		if !errors.Is(err, agent.ErrECHKeys) || !strings.Contains(err.Error(), "which does not exist") {
			t.Errorf("New with a dangling echkeys.json = %v, want ErrECHKeys naming the link", err)
		}
	})
}

func assertNoECHKey(t *testing.T, where, text string, c echring.Config) {
	t.Helper()
	for _, enc := range []string{base64.StdEncoding.EncodeToString(c.PrivateKey), base64.RawStdEncoding.EncodeToString(c.PrivateKey), hex.EncodeToString(c.PrivateKey), decimal(c.PrivateKey)} {
		if strings.Contains(text, enc) {
			t.Errorf("%s shows config %d's private key", where, c.ID)
		}
	}
}

// TestECHRequired: with ECHKeys required, New refuses a directory without
// echkeys.json or with a bad one; without, it serves no ECH.
func TestECHRequired(t *testing.T) {
	e := newECHSetup(t)
	e.write(t, nil)
	_, err := agent.New(agent.Options{Dir: e.v.dir, Require: agent.Certificate | agent.ECHKeys})
	if !errors.Is(err, agent.ErrECHKeys) {
		t.Errorf("New without echkeys.json = %v, want ErrECHKeys", err)
	}
	a, err := agent.New(agent.Options{Dir: e.v.dir, Require: agent.Certificate})
	if err != nil {
		t.Fatal(err)
	}
	a.TLSConfig(nil)
	if a.Status().ECH != nil {
		t.Errorf("ECH served without echkeys.json: %+v", a.Status().ECH)
	}
	if err := os.WriteFile(filepath.Join(e.v.dir, "..data", echring.FileName), []byte(`{"version":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.New(agent.Options{Dir: e.v.dir, Require: agent.Certificate}); !errors.Is(err, agent.ErrECHKeys) {
		t.Errorf("New with a bad echkeys.json = %v, want ErrECHKeys", err)
	}
}

// TestECHResumes: a client attempting ECH resumes its session, and with
// ClassicalResumption the resumed config serves it, ECH still accepted.
func TestECHResumes(t *testing.T) {
	for _, classical := range []bool{false, true} {
		e := newECHSetup(t)
		a, err := agent.New(agent.Options{Dir: e.v.dir, Require: agent.TicketKeys | agent.Certificate, Clock: newFakeClock(e.t0), ResyncPeriod: noResync, ClassicalResumption: classical})
		if err != nil {
			t.Fatal(err)
		}
		start(t, a)
		addr := serve(t, a.TLSConfig(nil))
		c := e.client(e.published)
		c.ClientSessionCache = tls.NewLRUClientSessionCache(4)
		mustAccept(t, addr, c, "first handshake")
		cs, err := dialECH(addr, c)
		if err != nil || !cs.DidResume || !cs.ECHAccepted {
			t.Fatalf("classical %t: second handshake: %v, resumed %t, ECH accepted %t", classical, err, cs.DidResume, cs.ECHAccepted)
		}
		m := metrics(t, a)
		if m["ringmaster_agent_ech_handshakes_total{result=accepted}"] != 2 || m["ringmaster_agent_handshakes_total{resumed=true}"] != 1 {
			t.Errorf("classical %t: metrics %v", classical, m)
		}
	}
}

// TestECHReportedOnlyWhenServed: an agent that serves no config (the
// sidecar's, which hands ticket keys to another server) reports no ECH
// configs, so that the operator never publishes a config on its word; once
// TLSConfig serves, it reports them.
func TestECHReportedOnlyWhenServed(t *testing.T) {
	e := newECHSetup(t)
	a, err := agent.New(agent.Options{Dir: e.v.dir, Require: agent.TicketKeys | agent.Certificate | agent.ECHKeys})
	if err != nil {
		t.Fatal(err)
	}
	if st := a.Status(); st.ECH != nil {
		t.Errorf("agent serving no config reports ECH %+v", st.ECH)
	}
	a.TLSConfig(nil)
	if st := a.Status(); st.ECH == nil || len(st.ECH.Configs) != 3 {
		t.Errorf("agent serving reports ECH %+v, want 3 configs", st.ECH)
	}
}

// plantedECH is the key the hostile ECH files carry, in every field
// position.
var plantedECH = keyring.Secret(sha256.Sum256([]byte("planted in a hostile echkeys.json")))

// TestNoECHKeyInAnyText: whatever field of echkeys.json holds a key, no
// text the agent produces shows 16 characters of it: not New's error, not
// Status, the status handler, the metrics or the log of a running agent
// that refuses the file.
func TestNoECHKeyInAnyText(t *testing.T) {
	e := newECHSetup(t)
	good := encodeECH(t, 5, e.staged, e.published, e.retired)
	p64 := base64.StdEncoding.EncodeToString(plantedECH[:])
	phex := hex.EncodeToString(plantedECH[:])
	edit := func(f func(m map[string]any)) []byte { return editRing(t, good, f) }
	config0 := func(m map[string]any) map[string]any { return m["configs"].([]any)[0].(map[string]any) }
	var hostiles []hostile
	add := func(name string, data []byte) { hostiles = append(hostiles, hostile{name, data}) }
	for form, text := range map[string]string{"base64": p64, "hex": phex} {
		for _, field := range []string{"version", "ring", "epoch", "issuedAt", "configs"} {
			add(field+" holds the key in "+form, edit(func(m map[string]any) { m[field] = text }))
		}
		for _, field := range []string{"id", "state", "config", "privateKey", "createdAt", "publishedAt", "retiredAt", "expiresAt"} {
			add("config "+field+" holds the key in "+form, edit(func(m map[string]any) { config0(m)[field] = text }))
		}
		add("a config is the key in "+form, edit(func(m map[string]any) { m["configs"].([]any)[0] = text }))
		add("unknown field named by the key in "+form, replaceOnce(t, good, `"epoch"`, `"`+text+`": 1, "epoch"`))
		add("unknown config field named by the key in "+form, replaceFirst(good, `"createdAt"`, `"`+text+`": 1, "createdAt"`))
		add("the whole file the key in "+form, []byte(text))
		add("the key unquoted in "+form, replaceOnce(t, good, `"shop/web"`, text))
		add("truncated in the key in "+form, []byte(`{"version": 1, "ring": "`+text))
	}
	add("ring name of hex", edit(func(m map[string]any) { m["ring"] = "shop/" + phex[:60] }))
	add("the key as a private key of another config", edit(func(m map[string]any) { config0(m)["privateKey"] = p64 }))
	add("the key in URL-safe base64", edit(func(m map[string]any) { config0(m)["privateKey"] = base64.URLEncoding.EncodeToString(plantedECH[:]) }))
	add("the key unpadded", edit(func(m map[string]any) { config0(m)["privateKey"] = strings.TrimRight(p64, "=") }))
	add("the raw key", append([]byte(`{"ring": "`), append(plantedECH[:], `"}`...)...))
	for _, h := range hostiles {
		t.Run(h.name, func(t *testing.T) {
			e.write(t, h.data)
			var newLogs logBuffer
			// A ring name of hex is valid, and the first ring taken pins
			// its name: New takes it, as it takes a ticket ring so named
			// without Options.Ring. The running agent below refuses it.
			if _, err := agent.New(agent.Options{Dir: e.v.dir, Require: agent.TicketKeys | agent.Certificate, Clock: newFakeClock(e.t0), Logger: newLogs.logger()}); err != nil {
				assertNoFragment(t, "New's error", err.Error(), plantedECH)
				assertNoFragment(t, "New's log", newLogs.String(), plantedECH)
			} else if h.name != "ring name of hex" {
				t.Errorf("New took the hostile file")
			}

			e.write(t, good)
			var logs logBuffer
			a, err := agent.New(agent.Options{Dir: e.v.dir, Require: agent.TicketKeys | agent.Certificate, Clock: newFakeClock(e.t0), Logger: logs.logger(), ResyncPeriod: noResync, Debounce: -1})
			if err != nil {
				t.Fatal(err)
			}
			a.TLSConfig(nil)
			start(t, a)
			e.write(t, h.data)
			eventually(t, "the hostile file refused", func() bool { return a.Status().LastError != "" })
			assertNoFragment(t, "Status", mustStatusJSON(t, a), plantedECH)
			rec := httptest.NewRecorder()
			a.StatusHandler().ServeHTTP(rec, httptest.NewRequest("GET", agent.StatusPath, nil))
			body, _ := io.ReadAll(rec.Body)
			assertNoFragment(t, "the status handler", string(body), plantedECH)
			assertNoFragment(t, "the metrics", metricsText(t, a), plantedECH)
			assertNoFragment(t, "the log", logs.String(), plantedECH)
			for _, c := range []echring.Config{e.staged, e.published, e.retired} {
				assertNoECHKey(t, "the log", logs.String(), c)
			}
		})
	}
}

// TestECHRingPinned: Options.ECHRing pins the ECH ring's name: New refuses
// an echkeys.json of another ring (ErrECHKeys and ErrForeignRing, in ECH
// words) and a name that is no ECHKeyRing's; a running agent refuses
// another ring (ech_foreign), keeps serving the last good keys, and the
// pin outlives Reset.
func TestECHRingPinned(t *testing.T) {
	e := newECHSetup(t)
	opts := func(ring string) agent.Options {
		return agent.Options{Dir: e.v.dir, Require: agent.TicketKeys | agent.Certificate, ECHRing: ring, Clock: newFakeClock(e.t0), ResyncPeriod: noResync}
	}
	_, err := agent.New(opts("shop/api"))
	if !errors.Is(err, agent.ErrECHKeys) || !errors.Is(err, agent.ErrForeignRing) {
		t.Errorf("New with echkeys.json of another ring = %v, want ErrECHKeys and ErrForeignRing", err)
	} else if msg := err.Error(); !strings.Contains(msg, "ECH key ring of another name") || !strings.Contains(msg, "Options.ECHRing") || strings.Contains(msg, "ticket") {
		t.Errorf("New = %q, want it in ECH words, naming Options.ECHRing", msg)
	}
	for _, bad := range []string{"web", "Shop/Web", "shop/"} {
		if _, err := agent.New(opts(bad)); err == nil || !strings.Contains(err.Error(), "Options.ECHRing") {
			t.Errorf("New with Options.ECHRing %q = %v, want it refused", bad, err)
		}
	}

	var logs logBuffer
	o := opts("shop/web")
	o.Logger = logs.logger()
	a, err := agent.New(o)
	if err != nil {
		t.Fatal(err)
	}
	start(t, a)
	addr := serve(t, a.TLSConfig(nil))
	other := func(epoch int64) []byte {
		b, err := echring.Encode(echring.Ring{Ring: "shop/api", Epoch: epoch, IssuedAt: e.t0, Configs: []echring.Config{e.staged, e.published}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	const key = "ringmaster_agent_reload_errors_total{reason=ech_foreign}"
	e.write(t, other(6))
	eventually(t, "another ECH ring refused", func() bool { return metrics(t, a)[key] >= 1 })
	mustAccept(t, addr, e.client(e.retired), "the last good ring's config")
	if st := a.Status(); st.ECH == nil || st.ECH.Ring != "shop/web" || !strings.Contains(st.LastError, "Options.ECHRing") {
		t.Errorf("Status: ECH %+v, LastError %q", st.ECH, st.LastError)
	}
	before := metrics(t, a)[key]
	a.Reset()
	eventually(t, "another ECH ring refused after Reset", func() bool { return metrics(t, a)[key] > before })
	if st := a.Status(); st.ECH == nil || st.ECH.Ring != "shop/web" {
		t.Errorf("Status after Reset: ECH %+v", st.ECH)
	}
}
