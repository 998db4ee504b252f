package agent_test

import (
	"crypto/fips140"
	"crypto/tls"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

// fipsTests are the agent's TLS tests run again in FIPS 140-3 mode by
// TestFIPSMode: every one but the ClassicalResumption ones, whose X25519
// alone FIPS 140-3 forbids (TestFIPSRefusesClassical checks that instead).
var fipsTests = []string{
	"TestFIPSRefusesClassical",
	"TestNewFailsFast",
	"TestTicketResumesAcrossEpochs",
	"TestPeerTicketUnderStagedKey",
	"TestStagedKeyActivatesOnTime",
	"TestExpiredKeyDoesNotResume",
	"TestEveryKeyExpiredFallsBack",
	"TestKeylessRingDestroysEveryKey",
	"TestCertificateSwap",
	"TestCertificateOnly",
	"TestBadInputKeepsLastGood",
	"TestSwapDuringRead",
	"TestPublishedConfigsAreNeverWritten",
	"TestConsecutiveKubeletSwaps",
	"TestECHServed",
	"TestECHConfigExpires",
	"TestECHBadFileKeepsLastGood",
}

// TestFIPSMode re-executes this test binary with GODEBUG=fips140=on and
// runs fipsTests there: the agent serves, rotates and resumes under FIPS
// 140-3 mode, and refuses ClassicalResumption.
func TestFIPSMode(t *testing.T) {
	if fips140.Enabled() {
		t.Skip("already in FIPS 140-3 mode: this is the re-executed binary")
	}
	if testing.Short() {
		t.Skip("re-runs the TLS tests in FIPS 140-3 mode")
	}
	run := "^(" + strings.Join(fipsTests, "|") + ")$"
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run", run, "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "GODEBUG=fips140=on")
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the TLS tests in FIPS 140-3 mode: %v\n%s", err, out)
	}
	// Each test must have run and passed, not skipped or gone unmatched.
	for _, name := range fipsTests {
		if !strings.Contains(string(out), "--- PASS: "+name+" ") {
			t.Errorf("%s did not pass in FIPS 140-3 mode:\n%s", name, out)
		}
	}
}

// TestFIPSRefusesClassical runs in FIPS 140-3 mode only (TestFIPSMode
// starts it there): New refuses ClassicalResumption, naming the option and
// the reason, and accepts the same options without it.
func TestFIPSRefusesClassical(t *testing.T) {
	if !fips140.Enabled() {
		t.Skip("needs FIPS 140-3 mode (GODEBUG=fips140=on); TestFIPSMode runs it there")
	}
	p := newPKI(t)
	cert := p.valid()
	s := newSchedule(time.Now())
	v := newVolume(t)
	v.write(s.ring(t, 1), cert.crt, cert.key)
	opts := agent.Options{Dir: v.dir, Require: agent.TicketKeys | agent.Certificate, Clock: newFakeClock(s.t0)}
	classical := opts
	classical.ClassicalResumption = true
	_, err := agent.New(classical)
	if err == nil {
		t.Fatal("New accepted ClassicalResumption in FIPS 140-3 mode")
	}
	for _, want := range []string{"ClassicalResumption", "FIPS 140-3", "X25519"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	a, err := agent.New(opts)
	if err != nil {
		t.Fatalf("New without ClassicalResumption: %v", err)
	}
	// And its config serves and resumes in FIPS 140-3 mode.
	addr := serve(t, a.TLSConfig(nil))
	client := p.client(tls.VersionTLS13)
	handshake(t, addr, client)
	if cs := handshake(t, addr, client); !cs.DidResume {
		t.Error("second handshake in FIPS 140-3 mode did not resume")
	}
}
