package keyring_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

// TestNextCeilingSilentFleet sweeps the confirmation settings the API
// accepts, at its edges, and follows each ring over up to 30 simulated days
// of reconciles while its fleet never confirms a key. However the operator
// is scheduled, no snapshot implies a key life beyond (retainedKeys+1) x
// rotationInterval + the ceiling, no held key activates later than its
// ceiling past its due time, and rotation goes on: the silent fleet delays
// each key by at most the ceiling.
func TestNextCeilingSilentFleet(t *testing.T) {
	var policies []keyring.Policy
	seen := map[string]bool{}
	for _, interval := range []time.Duration{time.Minute, 5 * time.Minute, time.Hour, 24 * time.Hour} {
		for _, delay := range []time.Duration{0, interval / 2, interval - time.Second} {
			for _, timeout := range []time.Duration{0, interval / 3, interval} {
				for _, maxDelay := range []time.Duration{0, timeout, (timeout + interval) / 2, interval} {
					for _, promote := range []bool{false, true} {
						c := &keyring.Confirm{Timeout: timeout, MaxDelay: maxDelay, Promote: promote}
						// The most retained keys the 7-day rule allows, and
						// a few less.
						most := int((keyring.MaxTicketLifetime-c.Ceiling())/interval) - 1
						for _, retained := range []int{0, 1, min(most, keyring.MaxRetainedKeys)} {
							p := keyring.Policy{RotationInterval: interval, RetainedKeys: retained, ActivationDelay: delay, Confirm: c}
							// Settings that hold keys alike are swept once.
							key := fmt.Sprint(interval, delay, retained, promote, timeout, c.Ceiling())
							if p.Validate() == nil && !seen[key] {
								seen[key] = true
								policies = append(policies, p)
							}
						}
					}
				}
			}
		}
	}
	// The edge itself: 24h x (6+1) + 0 is 168h exactly.
	edge := keyring.Policy{RotationInterval: 24 * time.Hour, RetainedKeys: 6, ActivationDelay: time.Hour, Confirm: &keyring.Confirm{Timeout: 0}}
	if err := edge.Validate(); err != nil {
		t.Fatalf("the edge of the 7-day rule: %v", err)
	}
	over := keyring.Policy{RotationInterval: 24 * time.Hour, RetainedKeys: 6, ActivationDelay: time.Hour, Confirm: &keyring.Confirm{Timeout: time.Second}}
	if over.Validate() == nil {
		t.Fatal("24h x (6+1) + 1s passes Validate")
	}
	if len(policies) < 100 {
		t.Fatalf("only %d policies in the sweep", len(policies))
	}
	for i, p := range policies {
		name := fmt.Sprintf("%s,%d,%s/timeout=%s,maxDelay=%s,promote=%v", p.RotationInterval, p.RetainedKeys, p.ActivationDelay,
			p.Confirm.Timeout, p.Confirm.MaxDelay, p.Confirm.Promote)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			silentFleet(t, p, rand.New(rand.NewPCG(uint64(i), 21)))
		})
	}
}

func silentFleet(t *testing.T, p keyring.Policy, rng *rand.Rand) {
	t.Helper()
	ceiling, life := p.Confirm.Ceiling(), p.MaxKeyLife()
	horizon := min(30*24*time.Hour, 200*p.RotationInterval)
	var (
		now        = t0
		cur        = keyring.Ring{Name: "shop/web"}
		first      = map[string]time.Time{}
		due        = map[string]time.Time{} // each held key's due time, when first held
		activated  int
		secrets    int
		lastActive string
	)
	stagedSince := func(id string) (time.Time, bool) { t, ok := first[id]; return t, ok }
	for step := 0; now.Before(t0.Add(horizon)); step++ {
		plan := keyring.Next(now, p, cur, keyring.Inputs{StagedSince: stagedSince})
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("step %d at t0%+v: %s\nring: %v (due t0%+v)", step, now.Sub(t0), fmt.Sprintf(format, args...), gotKeys(plan.Ring.Keys), plan.Ring.Due.Sub(t0))
		}
		if plan.Promoted {
			fail("promoted a key the fleet never confirmed")
		}
		next := plan.Ring
		if plan.Changed {
			minted := make([]keyring.Secret, plan.Mint)
			for i := range minted {
				secrets++
				minted[i] = secretOf(fmt.Sprint("silent ", secrets))
			}
			var err error
			if next, err = plan.Fill(minted); err != nil {
				fail("Fill: %v", err)
			}
			if _, err := keyring.Encode(next); err != nil {
				fail("not publishable: %v", err)
			}
		}
		nowS := now.Truncate(time.Second)
		for _, k := range next.Keys {
			if _, ok := first[k.ID]; !ok {
				first[k.ID] = nowS
			}
			if l := k.ExpiresAt.Sub(k.ActiveFrom); l > life {
				fail("key %s lives %s, more than (retainedKeys+1) x rotationInterval + ceiling = %s", k.ID, l, life)
			}
		}
		if len(next.Keys) > 1 && !next.Due.IsZero() && nowS.Before(next.Keys[0].ActiveFrom) {
			staged := next.Keys[0]
			if _, ok := due[staged.ID]; !ok {
				due[staged.ID] = next.Due
			}
			if late := staged.ActiveFrom.Sub(due[staged.ID]); late > ceiling {
				fail("held key %s activates %s past its due time, more than its ceiling %s", staged.ID, late, ceiling)
			}
			if p.Confirm.Promote && staged.ActiveFrom.Sub(due[staged.ID]) > p.Confirm.Timeout {
				fail("under Promote, held key %s activates past its timeout", staged.ID)
			}
		}
		if a, ok := next.Active(nowS); ok && a.ID != lastActive {
			activated++
			lastActive = a.ID
		}
		cur = next

		// The controller's schedule: at RequeueAt plus a second and up to 1%
		// jitter; every few seconds while a due key awaits its fleet; now
		// and then late (a slow API server, a restart).
		wake := plan.RequeueAt.Add(time.Second + time.Duration(rng.Int64N(int64(plan.RequeueAt.Sub(nowS))/100+1)))
		if plan.Awaiting {
			wake = earliest(wake, now.Add(max(5*time.Second, p.RotationInterval/10)))
		}
		if rng.IntN(100) < 3 {
			wake = wake.Add(time.Duration(rng.Int64N(int64(p.RotationInterval))))
		}
		now = wake.Add(time.Duration(rng.Int64N(int64(time.Second))))
	}
	// Each key encrypts at most rotationInterval + ceiling, give or take
	// the operator's lateness: the fleet never freezes rotation.
	if want := int(horizon/(p.RotationInterval+ceiling)) * 3 / 4; activated < want {
		t.Errorf("%d keys activated in %s, want at least %d", activated, horizon, want)
	}
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
