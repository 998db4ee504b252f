package agent_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/echring"
	"github.com/ringmaster-io/ringmaster/internal/testing/atomicdir"
	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

// epochAt is one snapshot of an ECH ring and the instant it was written.
type epochAt struct {
	at   time.Time
	ring echring.Ring
}

// lifecycle runs echring's lifecycle as the operator runs it, DNS always
// answering, from start until the pass at or after until, and returns every
// epoch written. confirmed says whether the fleet reports holding the
// staged config of the newest epoch so far.
func lifecycle(t *testing.T, p echring.Policy, start, until time.Time, confirmed func(written []epochAt, staged echring.Config) bool) []epochAt {
	t.Helper()
	var (
		ring    echring.Ring
		written []epochAt
		minted  int
	)
	ring.Ring = "shop/web"
	for now, passes := start, 0; !now.After(until); passes++ {
		if passes > 1000 {
			t.Fatal("the lifecycle did not reach its end")
		}
		var held bool
		if s, ok := ring.Staged(); ok {
			held = confirmed(written, s)
		}
		pl := echring.Next(echring.Input{Now: now, Policy: p, Ring: ring, Confirmed: held, DNS: echring.DNS{Checked: true, Holds: true}})
		var c echring.Config
		if pl.Mint != nil {
			minted++
			seed := sha256.Sum256(fmt.Appendf(nil, "config %d", minted))
			var err error
			if c, err = echring.NewConfig(*pl.Mint, seed[:], echring.Params{PublicName: echPublicName, MaxNameLength: 32}); err != nil {
				t.Fatal(err)
			}
		}
		next, err := pl.Stage(now, c)
		if err != nil {
			t.Fatal(err)
		}
		if pl.Changed {
			ring = next
			written = append(written, epochAt{at: now, ring: next})
			continue // the operator looks again at once
		}
		if !pl.Next.After(now) {
			t.Fatalf("the lifecycle waits for nothing at %s", now)
		}
		now = pl.Next
	}
	return written
}

// TestECHFrozenPodSendsRetryConfigs is the frozen-pod sequence: a pod whose
// volume stops updating at the epoch that stages config N (the fleet then
// publishes N, confirmed, since the frozen pod holds it too) holds N only
// as staged. Its published config N-1 expires by its clock, and config N+1
// is published at its ceiling, unconfirmed, since the frozen pod lacks it.
// A client holding N+1 (what DNS serves) is rejected there, and must get a
// config the whole fleet holds to retry with: N, which the frozen pod
// holds staged and every other pod holds retired. It succeeds on retry at
// the frozen pod and at an up-to-date pod alike.
func TestECHFrozenPodSendsRetryConfigs(t *testing.T) {
	e := newECHSetup(t) // for its certificate and CA
	p := echring.Policy{RotationInterval: time.Hour, DeliveryDelay: 5 * time.Minute, TTL: 5 * time.Minute, RetirementMargin: 5 * time.Minute, MaxDelay: 30 * time.Minute}
	begin := e.t0.Add(-30 * time.Minute) // within the certificate's validity
	const n = 3                          // N: the config the pod freezes with staged
	frozenAt := -1                       // the frozen pod's last epoch
	epochs := lifecycle(t, p, begin, begin.Add(5*time.Hour), func(written []epochAt, staged echring.Config) bool {
		if frozenAt < 0 {
			if staged.ID == n {
				frozenAt = len(written) - 1
			}
			return true
		}
		return slices.ContainsFunc(written[frozenAt].ring.Configs, func(c echring.Config) bool { return c.ID == staged.ID })
	})
	if frozenAt < 0 {
		t.Fatal("config N was never staged")
	}
	frozen := epochs[frozenAt]
	// The epoch that publishes N+1, at its ceiling: the last one the
	// client's DNS answer comes from.
	pub := slices.IndexFunc(epochs, func(ep epochAt) bool {
		cs := ep.ring.Published()
		return len(cs) > 0 && cs[0].ID == n+1
	})
	if pub < 0 {
		t.Fatal("config N+1 was never published")
	}
	latest := epochs[pub]
	configOf := func(r echring.Ring, id uint8) echring.Config {
		t.Helper()
		i := slices.IndexFunc(r.Configs, func(c echring.Config) bool { return c.ID == id })
		if i < 0 {
			t.Fatalf("epoch %d holds no config %d", r.Epoch, id)
		}
		return r.Configs[i]
	}
	prev := configOf(frozen.ring, n-1)
	if prev.State != echring.Published || configOf(frozen.ring, n).State != echring.Staged {
		t.Fatalf("the frozen epoch %d: configs %v, want N-1 published and N staged", frozen.ring.Epoch, frozen.ring.Configs)
	}
	if configOf(latest.ring, n).State != echring.Retired {
		t.Fatalf("the latest epoch %d: configs %v, want N retired", latest.ring.Epoch, latest.ring.Configs)
	}
	// The sequence the issue describes: N-1 expires by the frozen pod's
	// clock before N+1 is published.
	if !prev.ExpiresAt.Before(latest.at) {
		t.Fatalf("N-1 expires at %s, after N+1's publication at %s: not the frozen-pod sequence", prev.ExpiresAt, latest.at)
	}

	// Two pods: the frozen one, and one that took every epoch.
	pod := func(r echring.Ring, at time.Time) (*agent.Agent, *fakeClock, string) {
		t.Helper()
		data, err := echring.Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		v := newVolume(t)
		if err := v.w.Write(map[string]atomicdir.File{echring.FileName: {Data: data}, "tls.crt": {Data: e.crt}, "tls.key": {Data: e.key}}); err != nil {
			t.Fatal(err)
		}
		clock := newFakeClock(at)
		a, err := agent.New(agent.Options{Dir: v.dir, Require: agent.Certificate, Clock: clock, ResyncPeriod: noResync})
		if err != nil {
			t.Fatal(err)
		}
		start(t, a)
		return a, clock, serve(t, a.TLSConfig(nil))
	}
	frozenPod, clock, frozenAddr := pod(frozen.ring, frozen.at)
	_, _, freshAddr := pod(latest.ring, latest.at)

	// While N-1 lives, the frozen pod sends it, as every pod sends its
	// published config.
	if st := frozenPod.Status(); !retrying(st, n-1) || retrying(st, n) {
		t.Fatalf("the frozen pod at its epoch sends %v as retry configs, want N-1 alone", st.ECH.Configs)
	}
	clock.Set(latest.at)
	eventually(t, "N-1 expired at the frozen pod", func() bool { st := frozenPod.Status(); return st.ECH != nil && len(st.ECH.Configs) == 1 })

	client := e.client(latest.ring.Published()...)
	retry := mustReject(t, frozenAddr, client, "a client holding N+1, at the frozen pod")
	if want := echring.ConfigList([]echring.Config{configOf(frozen.ring, n)}); !bytes.Equal(retry, want) {
		t.Fatalf("retry configs of the frozen pod: %d bytes, want config N alone (%d bytes)", len(retry), len(want))
	}
	if st := frozenPod.Status(); !retrying(st, n) {
		t.Errorf("Status does not report config N sent as a retry config: %+v", st.ECH)
	}
	client.EncryptedClientHelloConfigList = retry
	mustAccept(t, frozenAddr, client, "the retry at the frozen pod")
	mustAccept(t, freshAddr, client, "the retry at an up-to-date pod")
}

// retrying reports whether st shows config id sent as a retry config.
func retrying(st agent.Status, id uint8) bool {
	if st.ECH == nil {
		return false
	}
	return slices.ContainsFunc(st.ECH.Configs, func(c agent.ECHConfigStatus) bool { return c.ID == id && c.Retry })
}

// TestECHStagedConfigFallsDue: with no published config live, a staged
// config becomes a retry config at the instant it has been staged as long
// as the ring's configs waited to be published, by the agent's clock,
// with no new file.
func TestECHStagedConfigFallsDue(t *testing.T) {
	e := newECHSetup(t)
	// Config 2 was published 10 minutes after it was staged, and expires
	// a minute from now; config 3 was staged 5 minutes ago: due in 5.
	published := echConfig(t, 2, "c2", echring.Published, e.t0.Add(-2*time.Hour))
	published.PublishedAt, published.ExpiresAt = published.CreatedAt.Add(10*time.Minute), e.t0.Add(time.Minute)
	staged := echConfig(t, 3, "c3", echring.Staged, e.t0.Add(-5*time.Minute))
	e.write(t, encodeECH(t, 5, staged, published))
	clock := newFakeClock(e.t0)
	a := e.agent(t, clock, nil)
	addr := serve(t, a.TLSConfig(nil))

	clock.Set(published.ExpiresAt)
	eventually(t, "config 2 expired", func() bool { st := a.Status(); return st.ECH != nil && len(st.ECH.Configs) == 1 })
	if st := a.Status(); retrying(st, 3) {
		t.Fatalf("config 3, staged 6 minutes, is a retry config before it is due: %+v", st.ECH.Configs)
	}
	if retry := mustReject(t, addr, e.client(published), "expired config, nothing due"); len(retry) != 0 {
		t.Errorf("retry configs sent with nothing due: %d bytes", len(retry))
	}
	clock.Set(staged.CreatedAt.Add(10 * time.Minute))
	eventually(t, "config 3 due", func() bool { return retrying(a.Status(), 3) })
	retry := mustReject(t, addr, e.client(published), "expired config, config 3 due")
	if want := echring.ConfigList([]echring.Config{staged}); !bytes.Equal(retry, want) {
		t.Errorf("retry configs %d bytes, want config 3 alone", len(retry))
	}
}
