package agent_test

import (
	"crypto/fips140"
	"crypto/tls"
	"fmt"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

// Tests of Options.ClassicalResumption. Each asserts what a client sees of
// its handshake (resumed or not, the group negotiated, whether a
// HelloRetryRequest came) and what the agent counted.

// hsWant is what a handshake must show.
type hsWant struct {
	resumed bool
	group   tls.CurveID
	retry   bool
}

func checkHandshake(t *testing.T, what string, cs tls.ConnectionState, want hsWant) {
	t.Helper()
	got := hsWant{resumed: cs.DidResume, group: cs.CurveID, retry: cs.HelloRetryRequest}
	if got != want {
		t.Errorf("%s: resumed %v, group %v, HelloRetryRequest %v; want resumed %v, group %v, HelloRetryRequest %v",
			what, got.resumed, got.group, got.retry, want.resumed, want.group, want.retry)
	}
	if cs.Version != tls.VersionTLS13 {
		t.Errorf("%s: %s, want TLS 1.3", what, tls.VersionName(cs.Version))
	}
}

// checkCounts compares the agent's handshake counters with want, keyed by
// short names.
func checkCounts(t *testing.T, name string, a *agent.Agent, want map[string]float64) {
	t.Helper()
	m := metrics(t, a)
	got := map[string]float64{
		"full":          m["ringmaster_agent_handshakes_total{resumed=false}"],
		"resumed":       m["ringmaster_agent_handshakes_total{resumed=true}"],
		"retries":       m["ringmaster_agent_hello_retry_requests_total"],
		"classicalFull": m["ringmaster_agent_classical_full_handshakes_total"],
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s = %v, want %v (all: %v)", name, k, got[k], v, got)
		}
	}
}

// TestClassicalResumption: with the option on, a full handshake keeps the
// hybrid group and a resumed one uses X25519, with no HelloRetryRequest for
// a Go client, on another replica and across a rotation; without it,
// resumption keeps the hybrid group.
func TestClassicalResumption(t *testing.T) {
	skipInFIPS(t)
	p := newPKI(t)
	cert := p.valid()
	s := newSchedule(time.Now())
	clock := newFakeClock(s.t0)
	v := newVolume(t)
	v.write(s.ring(t, 1), cert.crt, cert.key)
	newReplica := func(classical bool) (*agent.Agent, string) {
		t.Helper()
		a, err := agent.New(agent.Options{Dir: v.dir, Require: agent.TicketKeys | agent.Certificate, Clock: clock,
			ClassicalResumption: classical})
		if err != nil {
			t.Fatal(err)
		}
		start(t, a)
		return a, serve(t, a.TLSConfig(&tls.Config{MinVersion: tls.VersionTLS12}))
	}
	a, addrA := newReplica(true)
	b, addrB := newReplica(true)
	plain, addrPlain := newReplica(false)

	hybrid := hsWant{group: tls.X25519MLKEM768}
	client := p.client(tls.VersionTLS13)
	checkHandshake(t, "first handshake, on A", handshake(t, addrA, client), hybrid)
	checkHandshake(t, "resumption on B", handshake(t, addrB, client), hsWant{resumed: true, group: tls.X25519})
	checkHandshake(t, "resumption on A", handshake(t, addrA, client), hsWant{resumed: true, group: tls.X25519})
	checkHandshake(t, "full handshake on B", handshake(t, addrB, p.client(tls.VersionTLS13)), hybrid)

	// Epoch 2 at k2's activation: k2 encrypts, k1 is decrypt-only.
	h := time.Hour
	k3 := newKey("k3", s.t0.Add(2*h), s.t0.Add(3*h), s.t0.Add(5*h))
	clock.Set(s.t0.Add(h + time.Minute))
	v.write(encodeRing(t, 2, k3, s.k2, s.k1), cert.crt, cert.key)
	for _, ag := range []*agent.Agent{a, b, plain} {
		eventually(t, "epoch 2 with k2 active", func() bool {
			st := ag.Status()
			return st.Epoch == 2 && st.ActiveKeyID == s.k2.ID
		})
	}
	checkHandshake(t, "resumption on B of a ticket under k1, after the rotation", handshake(t, addrB, client), hsWant{resumed: true, group: tls.X25519})
	checkHandshake(t, "resumption on A of a ticket under k2", handshake(t, addrA, client), hsWant{resumed: true, group: tls.X25519})

	checkCounts(t, "A", a, map[string]float64{"full": 1, "resumed": 2, "retries": 0, "classicalFull": 0})
	checkCounts(t, "B", b, map[string]float64{"full": 1, "resumed": 2, "retries": 0, "classicalFull": 0})

	// Without the option, resumption pays the hybrid key exchange.
	control := p.client(tls.VersionTLS13)
	checkHandshake(t, "first handshake, option off", handshake(t, addrPlain, control), hybrid)
	checkHandshake(t, "resumption, option off", handshake(t, addrPlain, control), hsWant{resumed: true, group: tls.X25519MLKEM768})
	// A ticket issued where the option is on resumes where it is off, and
	// the other way round: the option changes no ticket.
	checkHandshake(t, "resumption, option off, of a ticket from A", handshake(t, addrPlain, client), hsWant{resumed: true, group: tls.X25519MLKEM768})
	checkHandshake(t, "resumption on A of a ticket from the agent without the option", handshake(t, addrA, client), hsWant{resumed: true, group: tls.X25519})
	checkCounts(t, "option off", plain, map[string]float64{"full": 1, "resumed": 2, "retries": 0, "classicalFull": 0})
}

// TestClassicalResumptionClients: what clients other than Go's default get
// from an agent with the option on, and what the agent counts of them.
func TestClassicalResumptionClients(t *testing.T) {
	skipInFIPS(t)
	p := newPKI(t)
	cert := p.valid()
	s := newSchedule(time.Now())
	v := newVolume(t)
	v.write(s.ring(t, 1), cert.crt, cert.key)
	serveOne := func() (*agent.Agent, string) {
		t.Helper()
		a, err := agent.New(agent.Options{Dir: v.dir, Require: agent.TicketKeys | agent.Certificate,
			Clock: newFakeClock(s.t0), ClassicalResumption: true})
		if err != nil {
			t.Fatal(err)
		}
		return a, serve(t, a.TLSConfig(nil))
	}

	t.Run("ticket the server cannot use", func(t *testing.T) {
		a, addr := serveOne()
		// A ticket from a server of another ring: offered, not decrypted.
		other := staticServer(t, cert.tlsCertificate(t), newKey("elsewhere", s.t0.Add(-time.Hour), s.t0.Add(time.Hour), s.t0.Add(2*time.Hour)))
		client := p.client(tls.VersionTLS13)
		handshake(t, other, client)
		// The documented cost: the config was chosen before the ticket
		// failed to decrypt, so the full handshake has X25519 alone.
		checkHandshake(t, "full handshake after an unusable ticket", handshake(t, addr, client), hsWant{group: tls.X25519})
		checkHandshake(t, "resumption of the ticket it issued then", handshake(t, addr, client), hsWant{resumed: true, group: tls.X25519})
		checkCounts(t, "agent", a, map[string]float64{"full": 1, "resumed": 1, "retries": 0, "classicalFull": 1})
	})

	t.Run("no X25519 share", func(t *testing.T) {
		a, addr := serveOne()
		// Supports X25519 but sends its share only for SecP256r1MLKEM768:
		// crypto/tls does not show key shares, so the resumed config asks
		// for X25519 with a HelloRetryRequest.
		client := p.client(tls.VersionTLS13)
		client.CurvePreferences = []tls.CurveID{tls.SecP256r1MLKEM768, tls.X25519}
		checkHandshake(t, "full handshake", handshake(t, addr, client), hsWant{group: tls.SecP256r1MLKEM768})
		checkHandshake(t, "resumption", handshake(t, addr, client), hsWant{resumed: true, group: tls.X25519, retry: true})
		checkCounts(t, "agent", a, map[string]float64{"full": 1, "resumed": 1, "retries": 1, "classicalFull": 0})
	})

	t.Run("no X25519 at all", func(t *testing.T) {
		a, addr := serveOne()
		// Offers a ticket but not X25519: the full config serves it, or
		// the handshake would fail.
		client := p.client(tls.VersionTLS13)
		client.CurvePreferences = []tls.CurveID{tls.X25519MLKEM768}
		checkHandshake(t, "full handshake", handshake(t, addr, client), hsWant{group: tls.X25519MLKEM768})
		checkHandshake(t, "resumption", handshake(t, addr, client), hsWant{resumed: true, group: tls.X25519MLKEM768})
		checkCounts(t, "agent", a, map[string]float64{"full": 1, "resumed": 1, "retries": 0, "classicalFull": 0})
	})

	t.Run("TLS 1.2", func(t *testing.T) {
		a, addr := serveOne()
		// A TLS 1.2 ticket travels in session_ticket, not pre_shared_key:
		// the full config serves it, and TLS 1.2 has no hybrid group.
		client := p.client(tls.VersionTLS12)
		if cs := handshake(t, addr, client); cs.DidResume || cs.CurveID != tls.X25519 {
			t.Errorf("TLS 1.2 full handshake: resumed %v, group %v", cs.DidResume, cs.CurveID)
		}
		if cs := handshake(t, addr, client); !cs.DidResume {
			t.Error("TLS 1.2 ticket did not resume")
		}
		checkCounts(t, "agent", a, map[string]float64{"full": 1, "resumed": 1, "retries": 0, "classicalFull": 0})
	})
}

// TestClassicalResumptionConfigs: both configs are built once per change and
// never written after; the one handed out depends only on the ClientHello's
// pre_shared_key and groups.
func TestClassicalResumptionConfigs(t *testing.T) {
	skipInFIPS(t)
	p := newPKI(t)
	cert := p.valid()
	s := newSchedule(time.Now())
	v := newVolume(t)
	v.write(s.ring(t, 1), cert.crt, cert.key)
	a, err := agent.New(agent.Options{Dir: v.dir, Require: agent.TicketKeys | agent.Certificate,
		Clock: newFakeClock(s.t0), ClassicalResumption: true})
	if err != nil {
		t.Fatal(err)
	}
	start(t, a)
	outer := a.TLSConfig(&tls.Config{NextProtos: []string{"h2"}})
	const psk = 41
	hellos := map[string]*tls.ClientHelloInfo{
		"ticket":             {Extensions: []uint16{0, 10, psk}, SupportedCurves: []tls.CurveID{tls.X25519MLKEM768, tls.X25519}},
		"no ticket":          {Extensions: []uint16{0, 10, 43}, SupportedCurves: []tls.CurveID{tls.X25519MLKEM768, tls.X25519}},
		"ticket, no X25519":  {Extensions: []uint16{psk}, SupportedCurves: []tls.CurveID{tls.X25519MLKEM768, tls.CurveP256}},
		"no ticket, X25519 ": {Extensions: nil, SupportedCurves: []tls.CurveID{tls.X25519}},
	}
	get := func(name string) *tls.Config {
		t.Helper()
		c, err := outer.GetConfigForClient(hellos[name])
		if err != nil || c == nil {
			t.Fatalf("%s: GetConfigForClient returned %v, %v", name, c, err)
		}
		return c
	}
	resumed, full := get("ticket"), get("no ticket")
	if resumed == full {
		t.Fatal("one config for ClientHellos with and without a ticket")
	}
	for _, name := range []string{"ticket, no X25519", "no ticket, X25519 "} {
		if get(name) != full {
			t.Errorf("%s: not the full config", name)
		}
	}
	if fmt.Sprint(resumed.CurvePreferences) != fmt.Sprint([]tls.CurveID{tls.X25519}) || full.CurvePreferences != nil {
		t.Errorf("CurvePreferences: resumed %v, full %v; want [X25519] and Go's default", resumed.CurvePreferences, full.CurvePreferences)
	}
	if resumed.SessionTicketKey == ([32]byte{}) || resumed.SessionTicketKey != full.SessionTicketKey {
		t.Error("the resumed config is not settled like the full one")
	}
	if len(resumed.NextProtos) != 1 || len(resumed.Certificates) != 1 || resumed.VerifyConnection == nil {
		t.Error("the resumed config lost the base's settings, the certificate or the handshake count")
	}

	addr := serve(t, outer)
	client := p.client(tls.VersionTLS13)
	handshake(t, addr, client)
	handshake(t, addr, client)
	if get("ticket") != resumed || get("no ticket") != full {
		t.Error("GetConfigForClient returned other configs without a change")
	}
	keyBefore := resumed.SessionTicketKey
	agent.ForceSwap(a)
	if get("ticket") == resumed || get("no ticket") == full {
		t.Error("a swap did not publish new configs for both paths")
	}
	if resumed.SessionTicketKey != keyBefore || len(resumed.CurvePreferences) != 1 {
		t.Error("a published config was written")
	}
}

// TestClassicalResumptionDoesNotApply: a base that rules out X25519 or TLS
// 1.3, or tickets, keeps its own key exchange for resumptions, and the agent
// says why.
func TestClassicalResumptionDoesNotApply(t *testing.T) {
	skipInFIPS(t)
	p := newPKI(t)
	cert := p.valid()
	s := newSchedule(time.Now())
	v := newVolume(t)
	v.write(s.ring(t, 1), cert.crt, cert.key)
	for _, tc := range []struct {
		name    string
		base    *tls.Config
		version uint16
		group   tls.CurveID // of the resumed handshake; 0: none resumes
	}{
		{"CurvePreferences without X25519", &tls.Config{CurvePreferences: []tls.CurveID{tls.X25519MLKEM768, tls.CurveP256}}, tls.VersionTLS13, tls.X25519MLKEM768},
		{"MaxVersion TLS 1.2", &tls.Config{MaxVersion: tls.VersionTLS12}, tls.VersionTLS12, tls.X25519},
		{"SessionTicketsDisabled", &tls.Config{SessionTicketsDisabled: true}, tls.VersionTLS13, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs logBuffer
			a, err := agent.New(agent.Options{Dir: v.dir, Require: agent.TicketKeys | agent.Certificate,
				Clock: newFakeClock(s.t0), Logger: logs.logger(), ClassicalResumption: true})
			if err != nil {
				t.Fatal(err)
			}
			addr := serve(t, a.TLSConfig(tc.base))
			if n := len(logs.records(t, map[string]string{"level": "WARN", "msg": "ClassicalResumption has no effect on this TLS config: resumed handshakes keep the base config's key exchange"})); n != 1 {
				t.Errorf("%d warnings that the option has no effect, want 1:\n%s", n, logs.String())
			}
			client := p.client(tc.version)
			handshake(t, addr, client)
			cs := handshake(t, addr, client)
			if cs.DidResume != (tc.group != 0) || (tc.group != 0 && cs.CurveID != tc.group) {
				t.Errorf("second handshake: resumed %v, group %v; want group %v", cs.DidResume, cs.CurveID, tc.group)
			}
		})
	}
}

// skipInFIPS skips a ClassicalResumption test in FIPS 140-3 mode, where New
// refuses the option (TestFIPSRefusesClassical).
func skipInFIPS(t *testing.T) {
	t.Helper()
	if fips140.Enabled() {
		t.Skip("FIPS 140-3 mode forbids X25519 alone, so New refuses ClassicalResumption")
	}
}
