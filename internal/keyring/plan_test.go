package keyring_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

const (
	second = time.Second
	minute = time.Minute
	hour   = time.Hour
)

// idAt is the id ringOf gives the key activating at t0+d.
func idAt(d time.Duration) string { return keyring.KeyID(secretOf(at(d).Format(time.RFC3339))) }

// wantKey is an expected key of a plan; times are offsets from t0. An empty
// id is a key the plan mints.
type wantKey struct {
	id                         string
	activeFrom, retire, expire time.Duration
}

func (w wantKey) String() string {
	return fmt.Sprintf("{%q %v %v %v}", w.id, w.activeFrom, w.retire, w.expire)
}

func gotKeys(keys []keyring.Key) []wantKey {
	out := make([]wantKey, len(keys))
	for i, k := range keys {
		out[i] = wantKey{k.ID, k.ActiveFrom.Sub(t0), k.RetireAt.Sub(t0), k.ExpiresAt.Sub(t0)}
	}
	return out
}

// cloneRing deep-copies r, to check that Next leaves its input alone.
func cloneRing(r keyring.Ring) keyring.Ring {
	r.Keys = slices.Clone(r.Keys)
	return r
}

func sinceMap(m map[string]time.Time) func(string) (time.Time, bool) {
	return func(id string) (time.Time, bool) { t, ok := m[id]; return t, ok }
}

func TestNext(t *testing.T) {
	// The steady ring (std policy) published at t0: S staged for t0+1h,
	// A active from t0, D1..D3 decrypt-only; D3 expires at t0+1h.
	steady := steadyRing()
	S, A, D1, D2, D3 := idAt(hour), idAt(0), idAt(-hour), idAt(-2*hour), idAt(-3*hour)
	steadyKeys := []wantKey{{S, hour, 2 * hour, 5 * hour}, {A, 0, hour, 4 * hour}, {D1, -hour, 0, 3 * hour}, {D2, -2 * hour, -hour, 2 * hour}, {D3, -3 * hour, -2 * hour, hour}}

	// A ring whose oldest key expires between two activations: S was minted
	// by a late reconcile (at t0+1h17m, activating 3m later), so activations
	// no longer line up with expiries. Published at t0+1h20m when S activated.
	irregular := ringOf(std, 3, at(80*minute), at(140*minute), at(80*minute), t0, at(-hour), at(-2*hour))
	irregular.Keys[2].ExpiresAt = at(4 * hour) // A retired late: it still expires (retainedKeys+1) intervals after it activated

	// retainedKeys 10, operator last ran at t0: 12 keys = retainedKeys+2.
	p10 := keyring.Policy{RotationInterval: hour, RetainedKeys: 10, ActivationDelay: 3 * minute}
	var afs10 []time.Time
	for h := 1; h >= -10; h-- {
		afs10 = append(afs10, at(time.Duration(h)*hour))
	}
	ring10 := ringOf(p10, 20, t0, afs10...)

	// The steady ring, republished at t0+10m (say, for a spec change).
	republished := ringOf(std, 10, at(10*minute), at(hour), t0, at(-hour), at(-2*hour), at(-3*hour))
	// The ring after a rotate-now at t0+1m moved S to t0+3m.
	rotatedEarly := ringOf(std, 11, at(minute), at(3*minute), t0, at(-hour), at(-2*hour), at(-3*hour))

	r0 := keyring.Policy{RotationInterval: hour, RetainedKeys: 0, ActivationDelay: 3 * minute}
	r1 := keyring.Policy{RotationInterval: hour, RetainedKeys: 1, ActivationDelay: 3 * minute}
	r5 := keyring.Policy{RotationInterval: hour, RetainedKeys: 5, ActivationDelay: 3 * minute}
	d0 := keyring.Policy{RotationInterval: hour, RetainedKeys: 3, ActivationDelay: 0}

	tests := []struct {
		name string
		// rule is the DESIGN.md rule ("Rotation: staged keys, clock-based
		// activation") the case checks.
		rule        string
		policy      keyring.Policy
		current     keyring.Ring
		now         time.Time
		rotateNow   bool
		stagedSince map[string]time.Time

		wantMint     int
		wantChanged  bool
		wantEpoch    int64
		wantIssuedAt time.Duration
		wantKeys     []wantKey
		wantExpired  []string
		wantRequeue  time.Duration
		wantRotateAt time.Duration // 0: no rotate-now took effect
	}{
		{
			name:     "new ring",
			rule:     "ring creation: the first key is active at once; the staged key is minted when its predecessor becomes active; expiresAt = retireAt + retainedKeys × rotationInterval",
			policy:   std,
			current:  keyring.Ring{Name: "shop/web"},
			now:      at(123456789), // nanoseconds are dropped
			wantMint: 2, wantChanged: true, wantEpoch: 1, wantIssuedAt: 0,
			wantKeys:    []wantKey{{"", hour, 2 * hour, 5 * hour}, {"", 0, hour, 4 * hour}},
			wantRequeue: hour,
		},
		{
			name:     "steady state one second before the staged key activates",
			rule:     "the staged key is minted when its predecessor becomes active, not before",
			policy:   std,
			current:  steady,
			now:      at(hour - second),
			wantMint: 0, wantChanged: false, wantEpoch: 10, wantIssuedAt: 0,
			wantKeys:    steadyKeys,
			wantRequeue: hour,
		},
		{
			name:     "steady state exactly at the staged key's activeFrom",
			rule:     "the staged key is minted when its predecessor becomes active, to activate one rotationInterval later; a key past expiresAt is removed",
			policy:   std,
			current:  steady,
			now:      at(hour),
			wantMint: 1, wantChanged: true, wantEpoch: 11, wantIssuedAt: hour,
			wantKeys:    []wantKey{{"", 2 * hour, 3 * hour, 6 * hour}, {S, hour, 2 * hour, 5 * hour}, {A, 0, hour, 4 * hour}, {D1, -hour, 0, 3 * hour}, {D2, -2 * hour, -hour, 2 * hour}},
			wantExpired: []string{D3},
			wantRequeue: 2 * hour,
		},
		{
			name:     "steady state, reconcile 10 minutes late (with nanoseconds)",
			rule:     "the new staged key activates one rotationInterval after its predecessor, not after now, when that leaves activationDelay",
			policy:   std,
			current:  steady,
			now:      at(70*minute + 5),
			wantMint: 1, wantChanged: true, wantEpoch: 11, wantIssuedAt: 70 * minute,
			wantKeys:    []wantKey{{"", 2 * hour, 3 * hour, 6 * hour}, {S, hour, 2 * hour, 5 * hour}, {A, 0, hour, 4 * hour}, {D1, -hour, 0, 3 * hour}, {D2, -2 * hour, -hour, 2 * hour}},
			wantExpired: []string{D3},
			wantRequeue: 2 * hour,
		},
		{
			name:     "oldest key one second before its expiresAt, between activations",
			rule:     "a key stays until expiresAt",
			policy:   std,
			current:  irregular,
			now:      at(2*hour - second),
			wantMint: 0, wantChanged: false, wantEpoch: 3, wantIssuedAt: 80 * minute,
			wantKeys:    []wantKey{{idAt(140 * minute), 140 * minute, 200 * minute, 380 * minute}, {idAt(80 * minute), 80 * minute, 140 * minute, 320 * minute}, {A, 0, 80 * minute, 4 * hour}, {D1, -hour, 0, 3 * hour}, {D2, -2 * hour, -hour, 2 * hour}},
			wantRequeue: 2 * hour,
		},
		{
			name:     "oldest key exactly at its expiresAt, between activations",
			rule:     "a key past expiresAt is removed from every snapshot: a new epoch without it, and nothing minted",
			policy:   std,
			current:  irregular,
			now:      at(2 * hour),
			wantMint: 0, wantChanged: true, wantEpoch: 4, wantIssuedAt: 2 * hour,
			wantKeys:    []wantKey{{idAt(140 * minute), 140 * minute, 200 * minute, 380 * minute}, {idAt(80 * minute), 80 * minute, 140 * minute, 320 * minute}, {A, 0, 80 * minute, 4 * hour}, {D1, -hour, 0, 3 * hour}},
			wantExpired: []string{D2},
			wantRequeue: 140 * minute,
		},
		{
			name:     "catch-up after the operator was absent for 10 intervals",
			rule:     "catching up after the operator was down: never mint a burst of keys; one key, activating no sooner than now + activationDelay; expired keys dropped",
			policy:   p10,
			current:  ring10,
			now:      at(10*hour + 17*minute + 500*time.Millisecond),
			wantMint: 1, wantChanged: true, wantEpoch: 21, wantIssuedAt: 10*hour + 17*minute,
			// now has a fraction of a second: the bound counts from the next whole one.
			wantKeys:    []wantKey{{"", 10*hour + 20*minute + second, 11*hour + 20*minute + second, 21*hour + 20*minute + second}, {idAt(hour), hour, 10*hour + 20*minute + second, 12 * hour}, {A, 0, hour, 11 * hour}},
			wantExpired: []string{idAt(-hour), idAt(-2 * hour), idAt(-3 * hour), idAt(-4 * hour), idAt(-5 * hour), idAt(-6 * hour), idAt(-7 * hour), idAt(-8 * hour), idAt(-9 * hour), idAt(-10 * hour)},
			wantRequeue: 10*hour + 20*minute + second,
		},
		{
			// rotate-now retired A 40 minutes early, so D3 would stay beside
			// three younger retired keys until its expiresAt: retainedKeys
			// caps the count, and D3 goes now.
			name:        "rotate-now, staged key staged for at least activationDelay",
			rule:        "rotate-now promotes the staged key once it has been staged for activationDelay (here: at once), and mints a new staged key; at most retainedKeys retired keys stay",
			policy:      std,
			current:     steady,
			now:         at(20 * minute),
			rotateNow:   true,
			stagedSince: map[string]time.Time{S: t0},
			wantMint:    1, wantChanged: true, wantEpoch: 11, wantIssuedAt: 20 * minute,
			wantKeys:     []wantKey{{"", 80 * minute, 140 * minute, 320 * minute}, {S, 20 * minute, 80 * minute, 260 * minute}, {A, 0, 20 * minute, 200 * minute}, {D1, -hour, 0, 3 * hour}, {D2, -2 * hour, -hour, 2 * hour}},
			wantExpired:  []string{D3},
			wantRequeue:  80 * minute,
			wantRotateAt: 20 * minute,
		},
		{
			name:        "rotate-now, staged key staged for less than activationDelay",
			rule:        "rotate-now promotes the staged key only once it has been staged for activationDelay: activeFrom moves to stagedSince + activationDelay; nothing minted yet",
			policy:      std,
			current:     steady,
			now:         at(minute),
			rotateNow:   true,
			stagedSince: map[string]time.Time{S: t0},
			wantMint:    0, wantChanged: true, wantEpoch: 11, wantIssuedAt: minute,
			// The recorded publication time is truncated to the second: one
			// more second makes sure the key was staged for the whole delay.
			wantKeys:     []wantKey{{S, 3*minute + second, 63*minute + second, 243*minute + second}, {A, 0, 3*minute + second, 183*minute + second}, {D1, -hour, 0, 3 * hour}, {D2, -2 * hour, -hour, 2 * hour}, {D3, -3 * hour, -2 * hour, hour}},
			wantRequeue:  3*minute + second,
			wantRotateAt: 3*minute + second,
		},
		{
			name:     "after an early rotate-now, the reconcile at the moved activeFrom",
			rule:     "the staged key is minted when its predecessor becomes active, to activate one rotationInterval later; A retired early, so D3 is one retired key too many",
			policy:   std,
			current:  rotatedEarly,
			now:      at(3 * minute),
			wantMint: 1, wantChanged: true, wantEpoch: 12, wantIssuedAt: 3 * minute,
			wantKeys:    []wantKey{{"", 63 * minute, 123 * minute, 303 * minute}, {idAt(3 * minute), 3 * minute, 63 * minute, 243 * minute}, {A, 0, 3 * minute, 183 * minute}, {D1, -hour, 0, 3 * hour}, {D2, -2 * hour, -hour, 2 * hour}},
			wantExpired: []string{D3},
			wantRequeue: 63 * minute,
		},
		{
			name:        "rotate-now, stagedSince unknown: falls back to current.IssuedAt",
			rule:        "rotate-now: a key of unknown publication is taken as published at the ring's issuedAt, the latest it can have been",
			policy:      std,
			current:     republished,
			now:         at(11 * minute),
			rotateNow:   true,
			stagedSince: map[string]time.Time{}, // unknown
			wantMint:    0, wantChanged: true, wantEpoch: 11, wantIssuedAt: 11 * minute,
			wantKeys:     []wantKey{{S, 13*minute + second, 73*minute + second, 253*minute + second}, {A, 0, 13*minute + second, 193*minute + second}, {D1, -hour, 0, 3 * hour}, {D2, -2 * hour, -hour, 2 * hour}, {D3, -3 * hour, -2 * hour, hour}},
			wantRequeue:  13*minute + second,
			wantRotateAt: 13*minute + second,
		},
		{
			name:        "rotate-now never delays an activation",
			rule:        "rotate-now only ever brings the staged key's activation earlier",
			policy:      std,
			current:     steady,
			now:         at(59 * minute),
			rotateNow:   true,
			stagedSince: map[string]time.Time{S: at(58*minute + 30*second)},
			wantMint:    0, wantChanged: false, wantEpoch: 10, wantIssuedAt: 0,
			wantKeys:     steadyKeys,
			wantRequeue:  hour,
			wantRotateAt: hour,
		},
		{
			name:        "rotate-now without a staged key (reconcile after the staged key activated)",
			rule:        "rotate-now: without a staged key, one is minted to activate after activationDelay",
			policy:      std,
			current:     steady,
			now:         at(hour + 30*second),
			rotateNow:   true,
			stagedSince: map[string]time.Time{S: t0},
			wantMint:    1, wantChanged: true, wantEpoch: 11, wantIssuedAt: hour + 30*second,
			wantKeys:     []wantKey{{"", hour + 3*minute + 30*second, 2*hour + 3*minute + 30*second, 5*hour + 3*minute + 30*second}, {S, hour, hour + 3*minute + 30*second, 4*hour + 3*minute + 30*second}, {A, 0, hour, 4 * hour}, {D1, -hour, 0, 3 * hour}, {D2, -2 * hour, -hour, 2 * hour}},
			wantExpired:  []string{D3},
			wantRequeue:  hour + 3*minute + 30*second,
			wantRotateAt: hour + 3*minute + 30*second,
		},
		{
			name:     "spec change: retainedKeys 3 → 5",
			rule:     "expiresAt = retireAt + retainedKeys × rotationInterval: republished with new expiries, nothing minted",
			policy:   r5,
			current:  steady,
			now:      at(30 * minute),
			wantMint: 0, wantChanged: true, wantEpoch: 11, wantIssuedAt: 30 * minute,
			wantKeys:    []wantKey{{S, hour, 2 * hour, 7 * hour}, {A, 0, hour, 6 * hour}, {D1, -hour, 0, 5 * hour}, {D2, -2 * hour, -hour, 4 * hour}, {D3, -3 * hour, -2 * hour, 3 * hour}},
			wantRequeue: hour,
		},
		{
			name:     "spec change: retainedKeys 3 → 1",
			rule:     "expiresAt = retireAt + retainedKeys × rotationInterval; a key past expiresAt is removed",
			policy:   r1,
			current:  steady,
			now:      at(30 * minute),
			wantMint: 0, wantChanged: true, wantEpoch: 11, wantIssuedAt: 30 * minute,
			wantKeys:    []wantKey{{S, hour, 2 * hour, 3 * hour}, {A, 0, hour, 2 * hour}, {D1, -hour, 0, hour}},
			wantExpired: []string{D2, D3},
			wantRequeue: hour,
		},
		{
			name:     "retainedKeys 0: the active key expires as its successor activates",
			rule:     "expiresAt = retireAt + 0 × rotationInterval: no decrypt-only key is kept",
			policy:   r0,
			current:  ringOf(r0, 5, t0, at(hour), t0),
			now:      at(hour),
			wantMint: 1, wantChanged: true, wantEpoch: 6, wantIssuedAt: hour,
			wantKeys:    []wantKey{{"", 2 * hour, 3 * hour, 3 * hour}, {S, hour, 2 * hour, 2 * hour}},
			wantExpired: []string{A},
			wantRequeue: 2 * hour,
		},
		{
			name:     "every key expired: a fresh ring",
			rule:     "ring creation, after every key expired while nothing rotated",
			policy:   std,
			current:  steady,
			now:      at(5 * hour),
			wantMint: 2, wantChanged: true, wantEpoch: 11, wantIssuedAt: 5 * hour,
			wantKeys:    []wantKey{{"", 6 * hour, 7 * hour, 10 * hour}, {"", 5 * hour, 6 * hour, 9 * hour}},
			wantExpired: []string{S, A, D1, D2, D3},
			wantRequeue: 6 * hour,
		},
		{
			name:     "RequeueAt: an expiry before the next activation",
			rule:     "RequeueAt is the earliest future activation or expiry",
			policy:   std,
			current:  irregular,
			now:      at(90*minute + 999999999),
			wantMint: 0, wantChanged: false, wantEpoch: 3, wantIssuedAt: 80 * minute,
			wantKeys:    []wantKey{{idAt(140 * minute), 140 * minute, 200 * minute, 380 * minute}, {idAt(80 * minute), 80 * minute, 140 * minute, 320 * minute}, {A, 0, 80 * minute, 4 * hour}, {D1, -hour, 0, 3 * hour}, {D2, -2 * hour, -hour, 2 * hour}},
			wantRequeue: 2 * hour,
		},
		{
			name:     "catch-up with activationDelay 0",
			rule:     "catching up: one key, no sooner than activationDelay from now, and staged when published so that its successor is minted when it activates",
			policy:   d0,
			current:  steady,
			now:      at(150 * minute),
			wantMint: 1, wantChanged: true, wantEpoch: 11, wantIssuedAt: 150 * minute,
			wantKeys:    []wantKey{{"", 150*minute + second, 210*minute + second, 390*minute + second}, {S, hour, 150*minute + second, 5 * hour}, {A, 0, hour, 4 * hour}, {D1, -hour, 0, 3 * hour}},
			wantExpired: []string{D2, D3},
			wantRequeue: 150*minute + second,
		},
		{
			name:        "rotate-now with activationDelay 0, in the second the active key activated",
			rule:        "rotate-now promotes the staged key no sooner than is safe, and never to the active key's own activeFrom (keys strictly newest first)",
			policy:      d0,
			current:     steady,
			now:         at(999999999),
			rotateNow:   true,
			stagedSince: map[string]time.Time{S: t0},
			wantMint:    0, wantChanged: true, wantEpoch: 11, wantIssuedAt: 0,
			wantKeys:     []wantKey{{S, 2 * second, hour + 2*second, 4*hour + 2*second}, {A, 0, 2 * second, 3*hour + 2*second}, {D1, -hour, 0, 3 * hour}, {D2, -2 * hour, -hour, 2 * hour}, {D3, -3 * hour, -2 * hour, hour}},
			wantRequeue:  2 * second,
			wantRotateAt: 2 * second,
		},
		{
			name:        "rotate-now with activationDelay 0 and no staged key",
			rule:        "the staged key is minted when its predecessor becomes active: the ring is never published without a staged key",
			policy:      d0,
			current:     steady,
			now:         at(hour + 30*second),
			rotateNow:   true,
			stagedSince: map[string]time.Time{S: t0},
			wantMint:    1, wantChanged: true, wantEpoch: 11, wantIssuedAt: hour + 30*second,
			wantKeys:     []wantKey{{"", hour + 31*second, 2*hour + 31*second, 5*hour + 31*second}, {S, hour, hour + 31*second, 4*hour + 31*second}, {A, 0, hour, 4 * hour}, {D1, -hour, 0, 3 * hour}, {D2, -2 * hour, -hour, 2 * hour}},
			wantExpired:  []string{D3},
			wantRequeue:  hour + 31*second,
			wantRotateAt: hour + 31*second,
		},
		{
			name:        "rotate-now with retainedKeys 0: the retired key is dropped at once",
			rule:        "a key past expiresAt is removed from every snapshot (expiresAt = retireAt when retainedKeys is 0)",
			policy:      r0,
			current:     ringOf(r0, 5, t0, at(hour), t0),
			now:         at(20 * minute),
			rotateNow:   true,
			stagedSince: map[string]time.Time{S: t0},
			wantMint:    1, wantChanged: true, wantEpoch: 6, wantIssuedAt: 20 * minute,
			wantKeys:     []wantKey{{"", 80 * minute, 140 * minute, 140 * minute}, {S, 20 * minute, 80 * minute, 80 * minute}},
			wantExpired:  []string{A},
			wantRequeue:  80 * minute,
			wantRotateAt: 20 * minute,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Logf("rule: %s", tc.rule)
			if err := tc.policy.Validate(); err != nil {
				t.Fatalf("bad test policy: %v", err)
			}
			before := cloneRing(tc.current)
			since := sinceMap(tc.stagedSince)
			p := keyring.Next(tc.now, tc.policy, tc.current, keyring.Inputs{RotateNow: tc.rotateNow, StagedSince: since})

			if d := ringDiff(tc.current, before); d != "" {
				t.Errorf("Next modified its input ring: %s", d)
			}
			if p.Mint != tc.wantMint {
				t.Errorf("Mint = %d, want %d", p.Mint, tc.wantMint)
			}
			if p.Changed != tc.wantChanged {
				t.Errorf("Changed = %v, want %v", p.Changed, tc.wantChanged)
			}
			if p.Ring.Name != tc.current.Name {
				t.Errorf("Name = %q, want %q", p.Ring.Name, tc.current.Name)
			}
			if p.Ring.Epoch != tc.wantEpoch {
				t.Errorf("Epoch = %d, want %d", p.Ring.Epoch, tc.wantEpoch)
			}
			if got := p.Ring.IssuedAt.Sub(t0); got != tc.wantIssuedAt {
				t.Errorf("IssuedAt = t0%+v, want t0%+v", got, tc.wantIssuedAt)
			}
			if g, w := fmt.Sprint(gotKeys(p.Ring.Keys)), fmt.Sprint(tc.wantKeys); g != w {
				t.Errorf("keys:\n got %s\nwant %s", g, w)
			}
			gotExp, wantExp := slices.Sorted(slices.Values(p.Expired)), slices.Sorted(slices.Values(tc.wantExpired))
			if !slices.Equal(gotExp, wantExp) {
				t.Errorf("Expired = %v, want %v", gotExp, wantExp)
			}
			if got := p.RequeueAt.Sub(t0); got != tc.wantRequeue {
				t.Errorf("RequeueAt = t0%+v, want t0%+v", got, tc.wantRequeue)
			}
			wantRotateAt := time.Time{}
			if tc.wantRotateAt != 0 {
				wantRotateAt = at(tc.wantRotateAt)
			}
			if !p.RotateAt.Equal(wantRotateAt) {
				t.Errorf("RotateAt = %v, want %v", p.RotateAt, wantRotateAt)
			}

			// Times are whole seconds, as the snapshot and the API carry them.
			times := []time.Time{p.Ring.IssuedAt, p.RequeueAt, p.RotateAt}
			for _, k := range p.Ring.Keys {
				times = append(times, k.ActiveFrom, k.RetireAt, k.ExpiresAt)
			}
			for _, x := range times {
				if x.Nanosecond() != 0 {
					t.Errorf("time %v is not a whole second", x)
				}
			}

			if !tc.wantChanged {
				if d := ringDiff(p.Ring, tc.current); d != "" {
					t.Errorf("unchanged plan, but its ring differs from the current one: %s", d)
				}
				return
			}
			// The published ring is valid, encodable, and keeps the secret
			// of every key it carries over.
			secrets := make([]keyring.Secret, p.Mint)
			for i := range secrets {
				secrets[i] = secretOf(fmt.Sprint(tc.name, i))
			}
			r, err := p.Fill(secrets)
			if err != nil {
				t.Fatalf("Fill: %v", err)
			}
			if err := r.Validate(); err != nil {
				t.Fatalf("published ring is invalid: %v", err)
			}
			if _, err := keyring.Encode(r); err != nil {
				t.Fatalf("Encode: %v", err)
			}
			for _, k := range r.Keys[p.Mint:] {
				old, ok := tc.current.Key(k.ID)
				if !ok || old.Secret != k.Secret {
					t.Errorf("key %s: not carried over from the current ring with its secret", k.ID)
				}
			}
		})
	}
}

func TestPlanFill(t *testing.T) {
	newRing := keyring.Next(t0, std, keyring.Ring{Name: "shop/web"}, keyring.Inputs{}) // Mint 2
	rotation := keyring.Next(at(hour), std, steadyRing(), keyring.Inputs{})            // Mint 1
	quiet := keyring.Next(at(30*minute), std, steadyRing(), keyring.Inputs{})          // Mint 0
	s1, s2, s3 := secretOf("fill 1"), secretOf("fill 2"), secretOf("fill 3")
	existing := steadyRing().Keys[1].Secret // A, still in the ring after the rotation

	errTests := []struct {
		name    string
		plan    keyring.Plan
		secrets []keyring.Secret
	}{
		{"no secrets for 2", newRing, nil},
		{"1 secret for 2", newRing, []keyring.Secret{s1}},
		{"3 secrets for 2", newRing, []keyring.Secret{s1, s2, s3}},
		{"2 secrets for 1", rotation, []keyring.Secret{s1, s2}},
		{"1 secret for 0", quiet, []keyring.Secret{s1}},
		{"all-zero first secret", newRing, []keyring.Secret{{}, s2}},
		{"all-zero second secret", newRing, []keyring.Secret{s1, {}}},
		{"all-zero only secret", rotation, []keyring.Secret{{}}},
		{"repeated secret in one mint", newRing, []keyring.Secret{s1, s1}},
		{"secret of a key already in the ring", rotation, []keyring.Secret{existing}},
	}
	for _, tc := range errTests {
		t.Run(tc.name, func(t *testing.T) {
			before := cloneRing(tc.plan.Ring)
			r, err := tc.plan.Fill(tc.secrets)
			if !errors.Is(err, keyring.ErrBadSecret) {
				t.Fatalf("Fill: err = %v, want ErrBadSecret", err)
			}
			if len(r.Keys) != 0 || r.Epoch != 0 {
				t.Errorf("Fill returned a ring with its error")
			}
			if d := ringDiff(tc.plan.Ring, before); d != "" {
				t.Errorf("Fill modified the plan: %s", d)
			}
			for _, s := range tc.secrets {
				if s != (keyring.Secret{}) && strings.Contains(err.Error(), fmt.Sprintf("%x", s[:4])) {
					t.Errorf("error %q shows key bytes", err)
				}
			}
		})
	}

	okTests := []struct {
		name    string
		plan    keyring.Plan
		secrets []keyring.Secret
	}{
		{"new ring", newRing, []keyring.Secret{s1, s2}},
		{"rotation", rotation, []keyring.Secret{s3}},
		{"nothing to mint", quiet, nil},
	}
	for _, tc := range okTests {
		t.Run(tc.name, func(t *testing.T) {
			before := cloneRing(tc.plan.Ring)
			r, err := tc.plan.Fill(tc.secrets)
			if err != nil {
				t.Fatalf("Fill: %v", err)
			}
			if d := ringDiff(tc.plan.Ring, before); d != "" {
				t.Errorf("Fill modified the plan: %s", d)
			}
			for i, s := range tc.secrets {
				if r.Keys[i].Secret != s || r.Keys[i].ID != keyring.KeyID(s) {
					t.Errorf("key %d: id %q, want KeyID of secret %d = %q", i, r.Keys[i].ID, i, keyring.KeyID(s))
				}
			}
			for i := len(tc.secrets); i < len(r.Keys); i++ {
				if r.Keys[i] != before.Keys[i] {
					t.Errorf("key %d (%s) changed", i, r.Keys[i].ID)
				}
			}
			if r.Name != before.Name || r.Epoch != before.Epoch || !r.IssuedAt.Equal(before.IssuedAt) {
				t.Errorf("ring header changed: %s", ringDiff(r, before))
			}
			if err := r.Validate(); err != nil {
				t.Errorf("filled ring is invalid: %v", err)
			}
		})
	}
}

// TestNextSimulated drives a ring through 200 reconciles at random instants
// (on time, late, early, repeated, after long downtime), optionally with
// random rotate-now requests, and checks DESIGN.md's invariants after every
// step.
func TestNextSimulated(t *testing.T) {
	policies := []keyring.Policy{
		std,
		{RotationInterval: time.Minute, RetainedKeys: 0, ActivationDelay: 0},
		{RotationInterval: time.Minute, RetainedKeys: 2, ActivationDelay: 59 * time.Second},
		{RotationInterval: 10 * time.Minute, RetainedKeys: 16, ActivationDelay: 2 * time.Minute},
		{RotationInterval: 24 * time.Hour, RetainedKeys: 6, ActivationDelay: 0},
		{RotationInterval: time.Hour, RetainedKeys: 3, ActivationDelay: 3 * time.Minute, Confirm: &keyring.Confirm{Timeout: 10 * time.Minute}},
		{RotationInterval: 10 * time.Minute, RetainedKeys: 2, ActivationDelay: time.Minute, Confirm: &keyring.Confirm{Timeout: 5 * time.Minute, Promote: true}},
	}
	for _, rotate := range []bool{false, true} {
		for i, p := range policies {
			for seed := range uint64(4) {
				name := fmt.Sprintf("rotateNow=%v/%s,%d,%s/seed%d", rotate, p.RotationInterval, p.RetainedKeys, p.ActivationDelay, seed)
				t.Run(name, func(t *testing.T) {
					if err := p.Validate(); err != nil {
						t.Fatal(err)
					}
					simulate(t, p, rotate, rand.New(rand.NewPCG(seed, uint64(i))))
				})
			}
		}
	}
}

func simulate(t *testing.T, p keyring.Policy, rotate bool, rng *rand.Rand) {
	var (
		now     = t0.Add(time.Duration(rng.Int64N(int64(time.Second))))
		cur     = keyring.Ring{Name: "shop/web"}
		first   = map[string]time.Time{} // when each key id was first published
		fresh   = map[string]bool{}      // keys minted for a fresh ring
		rotated = map[string]bool{}      // keys whose activeFrom a rotate-now set
		gone    = map[string]bool{}      // keys dropped
		atBound = map[string]bool{}      // keys activating at their predecessor's bound
		requeue time.Time
		secrets int
	)
	stagedSince := func(id string) (time.Time, bool) { t, ok := first[id]; return t, ok }
	for step := range 200 {
		if step > 0 {
			now = advance(rng, now, requeue, p)
		}
		rotateNow := rotate && rng.IntN(100) < 15
		nowS := now.Truncate(time.Second)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("step %d at t0%+v (rotateNow %v): %s\ncurrent: %v", step, now.Sub(t0), rotateNow, fmt.Sprintf(format, args...), gotKeys(cur.Keys))
		}

		before := cloneRing(cur)
		confirmed := rng.IntN(100) < 50
		plan := keyring.Next(now, p, cur, keyring.Inputs{RotateNow: rotateNow, StagedSince: stagedSince, Confirmed: confirmed})
		if p.Confirm != nil && !p.Confirm.Promote && len(cur.Keys) > 1 && now.Before(cur.Keys[0].ActiveFrom) {
			// Under Wait, a held key activates before its ceiling (its
			// published ActiveFrom) only when confirmed.
			if k := plan.Ring.Keys; len(k) > 1 && k[1].ID == cur.Keys[0].ID && !nowS.Before(k[1].ActiveFrom) && !confirmed {
				fail("held key %s activated unconfirmed", k[1].ID)
			}
		}
		if d := ringDiff(cur, before); d != "" {
			fail("Next modified its input: %s", d)
		}

		// Expiry: every key past expiresAt is dropped and listed, every key
		// dropped is listed, and none comes back. (A key can also go by the
		// times the plan gives it, one retired early by rotate-now under
		// retainedKeys 0, or by the cap on retired keys.)
		var mustExpire []string
		for _, k := range cur.Keys {
			_, kept := plan.Ring.Key(k.ID)
			listed := slices.Contains(plan.Expired, k.ID)
			if kept == listed {
				fail("key %s: kept %v, listed as expired %v", k.ID, kept, listed)
			}
			if !nowS.Before(k.ExpiresAt) {
				mustExpire = append(mustExpire, k.ID)
				if kept {
					fail("key %s survives its expiresAt %v", k.ID, k.ExpiresAt)
				}
			}
		}
		for _, id := range plan.Expired {
			if _, ok := cur.Key(id); !ok {
				fail("Expired lists %s, not in the current ring", id)
			}
			gone[id] = true
		}

		// Never a burst: 2 keys only for a ring with no live key.
		allExpired := len(mustExpire) == len(cur.Keys)
		switch {
		case plan.Mint == 2 && !allExpired:
			fail("minted 2 keys with %d live keys", len(cur.Keys)-len(mustExpire))
		case plan.Mint > 2 || plan.Mint < 0:
			fail("Mint = %d", plan.Mint)
		case allExpired && plan.Mint != 2:
			fail("no live key, but Mint = %d", plan.Mint)
		}
		if plan.Mint > 0 && !plan.Changed {
			fail("minted %d keys without a change", plan.Mint)
		}
		if !plan.RequeueAt.After(nowS) {
			fail("RequeueAt %v is not after now", plan.RequeueAt)
		}

		if !plan.Changed {
			if d := ringDiff(plan.Ring, cur); d != "" {
				fail("unchanged plan with a different ring: %s", d)
			}
			requeue = plan.RequeueAt
			continue
		}

		// Publish.
		minted := make([]keyring.Secret, plan.Mint)
		for i := range minted {
			secrets++
			minted[i] = secretOf(fmt.Sprint("sim ", secrets))
		}
		next, err := plan.Fill(minted)
		if err != nil {
			fail("Fill: %v", err)
		}
		if err := next.Validate(); err != nil {
			fail("published an invalid ring: %v\nnext: %v", err, gotKeys(next.Keys))
		}
		if next.Epoch != cur.Epoch+1 || !next.IssuedAt.Equal(nowS) {
			fail("epoch %d issued %v after epoch %d", next.Epoch, next.IssuedAt, cur.Epoch)
		}
		data, err := keyring.Encode(next)
		if err != nil {
			fail("Encode: %v", err)
		}
		if back, err := keyring.Decode(data); err != nil || ringDiff(back, next) != "" {
			fail("round trip: %v %s", err, ringDiff(back, next))
		}
		for _, k := range next.Keys {
			if gone[k.ID] {
				fail("dropped key %s is back", k.ID)
			}
			if _, ok := first[k.ID]; !ok {
				first[k.ID] = nowS
				fresh[k.ID] = plan.Mint == 2
			}
		}
		if rotateNow && !plan.RotateAt.IsZero() {
			for _, k := range next.Keys {
				if k.ActiveFrom.Equal(plan.RotateAt) {
					rotated[k.ID] = true
				}
			}
		}

		// Right after a publish: every key unexpired, exactly one active
		// (the one Ring.Active picks), at least one staged.
		var active, staged int
		for _, k := range next.Keys {
			switch k.StateAt(now) {
			case keyring.Expired:
				fail("published key %s expired at %v\nnext: %v", k.ID, k.ExpiresAt, gotKeys(next.Keys))
			case keyring.Active:
				active++
				if a, _ := next.Active(now); a.ID != k.ID {
					fail("key %s is active but Ring.Active picks %s", k.ID, a.ID)
				}
			case keyring.Staged:
				staged++
			}
		}
		if active != 1 || staged < 1 {
			fail("published with %d active and %d staged keys\nnext: %v", active, staged, gotKeys(next.Keys))
		}

		// The bound: no key's times imply a life beyond (retainedKeys+1) x
		// rotationInterval plus the confirmation ceiling.
		for _, k := range next.Keys {
			if life := k.ExpiresAt.Sub(k.ActiveFrom); life > p.MaxKeyLife() {
				fail("key %s lives %s, more than %s\nnext: %v", k.ID, life, p.MaxKeyLife(), gotKeys(next.Keys))
			}
		}

		// Size: at most retainedKeys retired keys, the active and the
		// staged one, however many rotate-now requests came.
		if limit := p.RetainedKeys + 2; len(next.Keys) > limit {
			fail("%d keys, more than retainedKeys+2 = %d (%d activated early by rotate-now)", len(next.Keys), limit, len(rotated))
		}

		// Delivery: a key staged when first published was delivered at
		// least activationDelay before it activated; only a fresh ring's
		// first key activates at its publication.
		// The one exception: a key that replaces one at the end of its
		// life (the operator came back late) activates at that bound.
		for i, k := range next.Keys {
			fp := first[k.ID]
			if i+1 < len(next.Keys) && k.ActiveFrom.Equal(next.Keys[i+1].ActiveFrom.Add(p.MaxKeyLife())) {
				atBound[k.ID] = true
			}
			switch {
			case k.ActiveFrom.After(fp):
				if k.ActiveFrom.Sub(fp) < p.ActivationDelay && !atBound[k.ID] {
					fail("key %s published at t0%+v activates at t0%+v: staged less than activationDelay", k.ID, fp.Sub(t0), k.ActiveFrom.Sub(t0))
				}
			case k.ActiveFrom.Equal(fp) && fresh[k.ID]:
			default:
				fail("key %s published at t0%+v was never staged (activeFrom t0%+v)", k.ID, fp.Sub(t0), k.ActiveFrom.Sub(t0))
			}
		}

		want, ok := next.NextChange(nowS)
		if d := next.Due; d.After(nowS) && d.Before(want) {
			want = d // under confirmation, the held key's due time comes first
		}
		if !ok || !want.Equal(plan.RequeueAt) {
			fail("RequeueAt %v, but the ring's NextChange is %v, %v", plan.RequeueAt, want, ok)
		}
		cur, requeue = next, plan.RequeueAt
	}
}

// advance picks the next reconcile: mostly at or just after RequeueAt, as
// the controller requeues with jitter, sometimes early (a watch event or a
// rotate-now), at the same instant again, or after a long downtime.
func advance(rng *rand.Rand, now, requeue time.Time, p keyring.Policy) time.Time {
	ns := time.Duration(rng.Int64N(int64(time.Second)))
	var next time.Time
	switch n := rng.IntN(100); {
	case n < 35:
		next = requeue
	case n < 55:
		next = requeue.Add(time.Duration(rng.Int64N(int64(2*time.Minute))) + ns)
	case n < 75:
		next = now.Add(time.Duration(rng.Int64N(int64(p.RotationInterval))) + ns)
	case n < 88:
		next = now.Add(time.Duration(rng.Int64N(int64(p.ActivationDelay+5*time.Second))) + ns)
	case n < 94:
		next = now
	default:
		next = now.Add(time.Duration(rng.Int64N(int64(p.RetainedKeys+4) * int64(p.RotationInterval))))
	}
	if next.Before(now) {
		return now
	}
	return next
}

func TestPlanWithoutMint(t *testing.T) {
	p := keyring.Policy{RotationInterval: time.Hour, RetainedKeys: 1, ActivationDelay: time.Minute}
	// Keys at t0, t0+1h, t0+2h: at t0+2h the newest is active and its
	// successor is due; the oldest expires at t0+1h+1h = t0+2h.
	current := ringOf(p, 3, at(time.Hour), at(2*time.Hour), at(time.Hour), at(0))
	tests := []struct {
		name    string
		now     time.Time
		changed bool
		keys    int
	}{
		{"nothing expired: nothing to publish", at(2*time.Hour - time.Second), false, 3},
		{"the oldest key expired: dropped though nothing is minted", at(2 * time.Hour), true, 2},
		{"all but the active key expired", at(3 * time.Hour), true, 1},
		{"every key expired: published without keys, so no expired byte stays", at(10 * time.Hour), true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := keyring.Next(tt.now, p, current, keyring.Inputs{})
			fallback := plan.WithoutMint(tt.now, current)
			if fallback.Changed != tt.changed || len(fallback.Ring.Keys) != tt.keys || fallback.Mint != 0 {
				t.Fatalf("WithoutMint = changed %v, %d keys, mint %d; want changed %v, %d keys, mint 0",
					fallback.Changed, len(fallback.Ring.Keys), fallback.Mint, tt.changed, tt.keys)
			}
			if tt.changed {
				if fallback.Ring.Epoch != current.Epoch+1 || !fallback.Ring.IssuedAt.Equal(tt.now) {
					t.Errorf("epoch %d issued %v, want %d issued %v", fallback.Ring.Epoch, fallback.Ring.IssuedAt, current.Epoch+1, tt.now)
				}
				if err := fallback.Ring.Validate(); err != nil {
					t.Errorf("fallback ring invalid: %v", err)
				}
				for _, k := range fallback.Ring.Keys {
					if !tt.now.Before(k.ExpiresAt) {
						t.Errorf("key %s expired at %v is still published", k.ID, k.ExpiresAt)
					}
					if orig, _ := current.Key(k.ID); !orig.ExpiresAt.Equal(k.ExpiresAt) || !orig.ActiveFrom.Equal(k.ActiveFrom) {
						t.Errorf("key %s changed its times", k.ID)
					}
				}
				if len(fallback.Expired)+tt.keys != len(current.Keys) {
					t.Errorf("Expired = %v", fallback.Expired)
				}
				if tt.keys == 0 && (!fallback.Ring.Due.IsZero() || !fallback.RequeueAt.IsZero()) {
					t.Errorf("key-less ring: due %v, requeue %v; want neither", fallback.Ring.Due, fallback.RequeueAt)
				}
			}
		})
	}
	t.Run("a key-less ring stays as it is while nothing can be minted", func(t *testing.T) {
		now := at(10 * time.Hour)
		empty := keyring.Next(now, p, current, keyring.Inputs{}).WithoutMint(now, current).Ring
		later := now.Add(time.Hour)
		plan := keyring.Next(later, p, empty, keyring.Inputs{})
		if plan.Mint != 2 {
			t.Errorf("Next on a key-less ring mints %d keys, want 2 (a new ring)", plan.Mint)
		}
		if again := plan.WithoutMint(later, empty); again.Changed || len(again.Ring.Keys) != 0 || again.Ring.Epoch != empty.Epoch {
			t.Errorf("WithoutMint on a key-less ring = changed %v, epoch %d, %d keys; want it unchanged", again.Changed, again.Ring.Epoch, len(again.Ring.Keys))
		}
		data, err := keyring.Encode(empty)
		if err != nil {
			t.Fatalf("Encode key-less ring: %v", err)
		}
		back, err := keyring.Decode(data)
		if err != nil || len(back.Keys) != 0 || back.Epoch != empty.Epoch {
			t.Errorf("Decode(Encode(key-less ring)) = %d keys epoch %d, %v", len(back.Keys), back.Epoch, err)
		}
	})
}

// TestNextConfirmation follows a ring under confirmation: its staged key is
// held, activates once due and confirmed, and otherwise by the clock at its
// ceiling (under Promote, at the timeout), never later; and the times every
// replica goes by follow the decision.
func TestNextConfirmation(t *testing.T) {
	wait := std
	wait.Confirm = &keyring.Confirm{Timeout: 10 * minute, MaxDelay: 30 * minute}
	promote := std
	promote.Confirm = &keyring.Confirm{Timeout: 10 * minute, Promote: true}
	lowered := std
	lowered.Confirm = &keyring.Confirm{Timeout: 10 * minute, MaxDelay: 15 * minute}
	// slow stages each key 50m ahead: a reconcile that comes late mints a
	// successor due past the active key's interval.
	slow := keyring.Policy{RotationInterval: hour, RetainedKeys: 3, ActivationDelay: 50 * minute, Confirm: wait.Confirm}
	publish := func(p keyring.Plan) keyring.Ring {
		t.Helper()
		secrets := make([]keyring.Secret, p.Mint)
		for i := range secrets {
			secrets[i] = secretOf(fmt.Sprint(p.Ring.IssuedAt, i))
		}
		r, err := p.Fill(secrets)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// A new ring at t0 under each policy: A active, S held.
	held := publish(keyring.Next(t0, wait, keyring.Ring{Name: "shop/web"}, keyring.Inputs{}))
	heldP := publish(keyring.Next(t0, promote, keyring.Ring{Name: "shop/web"}, keyring.Inputs{}))
	heldSlow := publish(keyring.Next(t0, slow, keyring.Ring{Name: "shop/web"}, keyring.Inputs{}))
	S, A := held.Keys[0].ID, held.Keys[1].ID
	const ceiling = 30 * minute

	tests := []struct {
		name   string
		policy keyring.Policy
		ring   keyring.Ring
		now    time.Time
		in     keyring.Inputs

		wantMint                          int
		wantChanged, wantPromoted, wantAw bool
		wantUnconfirmed                   string
		wantDue                           time.Duration // 0: none
		wantKeys                          []wantKey     // ids "" are minted; only ActiveFrom is compared
		wantRequeue                       time.Duration
	}{
		{
			name: "a new ring: the staged key is held to its ceiling, maxDelay past its due time", policy: wait, ring: keyring.Ring{Name: "shop/web"}, now: t0,
			wantMint: 2, wantChanged: true, wantDue: hour,
			wantKeys: []wantKey{{activeFrom: hour + ceiling}, {activeFrom: 0}}, wantRequeue: hour,
		},
		{
			name: "not due yet: confirmed or not, nothing changes", policy: wait, ring: held, now: at(hour - second), in: keyring.Inputs{Confirmed: true},
			wantDue: hour, wantKeys: []wantKey{{id: S, activeFrom: hour + ceiling}, {id: A}}, wantRequeue: hour,
		},
		{
			name: "due and not confirmed: it waits, and the active key keeps encrypting", policy: wait, ring: held, now: at(hour),
			wantAw: true, wantDue: hour, wantKeys: []wantKey{{id: S, activeFrom: hour + ceiling}, {id: A}}, wantRequeue: hour + ceiling,
		},
		{
			name: "a second before its ceiling, unconfirmed: the hold is not pushed further", policy: wait, ring: held, now: at(hour + ceiling - second),
			wantAw: true, wantDue: hour, wantKeys: []wantKey{{id: S, activeFrom: hour + ceiling}, {id: A}}, wantRequeue: hour + ceiling,
		},
		{
			name: "at its ceiling, unconfirmed: it activated by the clock, the plan says so, and its successor is held", policy: wait, ring: held, now: at(hour + ceiling),
			wantMint: 1, wantChanged: true, wantUnconfirmed: S, wantDue: 2*hour + ceiling,
			wantKeys: []wantKey{{activeFrom: 2*hour + 2*ceiling}, {id: S, activeFrom: hour + ceiling}, {id: A}}, wantRequeue: 2*hour + ceiling,
		},
		{
			name: "found past its ceiling (the operator was down): the same", policy: wait, ring: held, now: at(2 * hour),
			wantMint: 1, wantChanged: true, wantUnconfirmed: S, wantDue: 2*hour + ceiling,
			wantKeys: []wantKey{{activeFrom: 2*hour + 2*ceiling}, {id: S, activeFrom: hour + ceiling}, {id: A}}, wantRequeue: 2*hour + ceiling,
		},
		{
			name: "due and confirmed: it activates now, and its successor is minted, held", policy: wait, ring: held, now: at(hour), in: keyring.Inputs{Confirmed: true},
			wantMint: 1, wantChanged: true, wantPromoted: true, wantDue: 2 * hour,
			wantKeys: []wantKey{{activeFrom: 2*hour + ceiling}, {id: S, activeFrom: hour}, {id: A}}, wantRequeue: 2 * hour,
		},
		{
			name: "confirmed late, under the ceiling: it activates when confirmed, and the next one falls due an interval later", policy: wait, ring: held, now: at(hour + 20*minute), in: keyring.Inputs{Confirmed: true},
			wantMint: 1, wantChanged: true, wantPromoted: true, wantDue: 2*hour + 20*minute,
			wantKeys: []wantKey{{activeFrom: 2*hour + 20*minute + ceiling}, {id: S, activeFrom: hour + 20*minute}, {id: A}}, wantRequeue: 2*hour + 20*minute,
		},
		{
			name: "under Promote, the held key activates by the clock at the timeout", policy: promote, ring: heldP, now: at(hour + 10*minute),
			wantMint: 1, wantChanged: true, wantUnconfirmed: heldP.Keys[0].ID, wantDue: 2*hour + 10*minute,
			wantKeys: []wantKey{{activeFrom: 2*hour + 20*minute}, {id: heldP.Keys[0].ID, activeFrom: hour + 10*minute}, {id: heldP.Keys[1].ID}}, wantRequeue: 2*hour + 10*minute,
		},
		{
			name: "rotate-now moves the due time, and the ceiling with it", policy: wait, ring: held, now: at(20 * minute),
			in:          keyring.Inputs{RotateNow: true, StagedSince: sinceMap(map[string]time.Time{S: t0})},
			wantChanged: true, wantAw: true, wantDue: 20 * minute,
			wantKeys: []wantKey{{id: S, activeFrom: 20*minute + ceiling}, {id: A}}, wantRequeue: 20*minute + ceiling,
		},
		{
			name: "rotate-now, confirmed: the staged key activates now", policy: wait, ring: held, now: at(20 * minute),
			in:       keyring.Inputs{RotateNow: true, Confirmed: true, StagedSince: sinceMap(map[string]time.Time{S: t0})},
			wantMint: 1, wantChanged: true, wantPromoted: true, wantDue: hour + 20*minute,
			wantKeys: []wantKey{{activeFrom: hour + 20*minute + ceiling}, {id: S, activeFrom: 20 * minute}, {id: A}}, wantRequeue: hour + 20*minute,
		},
		{
			name: "a lowered maxDelay brings the held key back under the new ceiling", policy: lowered, ring: held, now: at(30 * minute),
			wantChanged: true, wantDue: hour,
			wantKeys: []wantKey{{id: S, activeFrom: hour + 15*minute}, {id: A}}, wantRequeue: hour,
		},
		{
			name: "a lowered maxDelay already past: the held key activates now, unconfirmed", policy: lowered, ring: held, now: at(hour + 20*minute),
			wantMint: 1, wantChanged: true, wantUnconfirmed: S, wantDue: 2*hour + 20*minute,
			wantKeys: []wantKey{{activeFrom: 2*hour + 35*minute}, {id: S, activeFrom: hour + 20*minute}, {id: A}}, wantRequeue: 2*hour + 20*minute,
		},
		{
			name: "a successor minted late eats into its own hold, not into the active key's bound", policy: slow, ring: heldSlow, now: at(hour + ceiling + 20*minute),
			// S activated at 1h30m; staged 50m from now, its successor is
			// due at 2h40m, past S's interval: held to 1h30m + 1h + 30m.
			wantMint: 1, wantChanged: true, wantUnconfirmed: heldSlow.Keys[0].ID, wantDue: 2*hour + 40*minute,
			wantKeys: []wantKey{{activeFrom: 3 * hour}, {id: heldSlow.Keys[0].ID, activeFrom: hour + ceiling}, {id: heldSlow.Keys[1].ID}}, wantRequeue: 2*hour + 40*minute,
		},
		{
			name: "confirmation turned on: an unheld staged key with time to spare is held", policy: wait, ring: steadyRing(), now: at(30 * minute),
			wantChanged: true, wantDue: hour,
			wantKeys: []wantKey{{id: idAt(hour), activeFrom: hour + ceiling}, {id: idAt(0)}, {id: idAt(-hour)}, {id: idAt(-2 * hour)}, {id: idAt(-3 * hour)}}, wantRequeue: hour,
		},
		{
			name: "confirmation turned on too late to reach every replica: the staged key activates as published", policy: wait, ring: steadyRing(), now: at(58 * minute),
			wantKeys: steadyKeysByActivation(), wantRequeue: hour,
		},
		{
			name: "confirmation turned off: a held key falls back on its due time", policy: std, ring: held, now: at(30 * minute),
			wantChanged: true, wantKeys: []wantKey{{id: S, activeFrom: hour}, {id: A}}, wantRequeue: hour,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := keyring.Next(tc.now, tc.policy, tc.ring, tc.in)
			if p.Mint != tc.wantMint || p.Changed != tc.wantChanged || p.Promoted != tc.wantPromoted || p.Awaiting != tc.wantAw {
				t.Errorf("Mint %d Changed %v Promoted %v Awaiting %v; want %d %v %v %v", p.Mint, p.Changed, p.Promoted, p.Awaiting, tc.wantMint, tc.wantChanged, tc.wantPromoted, tc.wantAw)
			}
			if p.Unconfirmed != tc.wantUnconfirmed {
				t.Errorf("Unconfirmed = %q, want %q", p.Unconfirmed, tc.wantUnconfirmed)
			}
			var wantDue time.Time
			if tc.wantDue != 0 {
				wantDue = at(tc.wantDue)
			}
			if !p.Ring.Due.Equal(wantDue) {
				t.Errorf("Due = %v, want %v", p.Ring.Due, wantDue)
			}
			if len(p.Ring.Keys) != len(tc.wantKeys) {
				t.Fatalf("keys %v, want %v", gotKeys(p.Ring.Keys), tc.wantKeys)
			}
			for i, w := range tc.wantKeys {
				k := p.Ring.Keys[i]
				if k.ID != w.id || (i == 0 || w.activeFrom != 0) && !k.ActiveFrom.Equal(at(w.activeFrom)) {
					t.Errorf("key %d = %s from t0%+v, want %q from t0%+v", i, k.ID, k.ActiveFrom.Sub(t0), w.id, w.activeFrom)
				}
				if life := k.ExpiresAt.Sub(k.ActiveFrom); life > tc.policy.MaxKeyLife() {
					t.Errorf("key %d lives %s, more than %s", i, life, tc.policy.MaxKeyLife())
				}
			}
			if got := p.RequeueAt.Sub(t0); got != tc.wantRequeue {
				t.Errorf("RequeueAt = t0%+v, want t0%+v", got, tc.wantRequeue)
			}
			if tc.wantChanged {
				if _, err := keyring.Encode(publishOrFail(t, p)); err != nil {
					t.Errorf("the ring is not publishable: %v", err)
				}
			}
		})
	}
}

// steadyKeysByActivation are steadyRing's keys, compared by id.
func steadyKeysByActivation() []wantKey {
	return []wantKey{{id: idAt(hour), activeFrom: hour}, {id: idAt(0)}, {id: idAt(-hour)}, {id: idAt(-2 * hour)}, {id: idAt(-3 * hour)}}
}

func publishOrFail(t *testing.T, p keyring.Plan) keyring.Ring {
	t.Helper()
	secrets := make([]keyring.Secret, p.Mint)
	for i := range secrets {
		secrets[i] = secretOf(fmt.Sprint("publish ", p.Ring.IssuedAt, i))
	}
	r, err := p.Fill(secrets)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestNextRevoke: a revoke destroys every key at once, whatever the ring
// held, and a fresh key encrypts from now.
func TestNextRevoke(t *testing.T) {
	steady := steadyRing()
	all := ids(steady.Keys)
	for _, tc := range []struct {
		name   string
		policy keyring.Policy
		in     keyring.Inputs
	}{
		{"a revoke", std, keyring.Inputs{Revoke: true}},
		{"a revoke beside a rotate-now: the revoke wins", std, keyring.Inputs{Revoke: true, RotateNow: true, StagedSince: sinceMap(nil)}},
		{"a revoke under confirmation: the fresh key encrypts at once, its successor is held", keyring.Policy{RotationInterval: hour, RetainedKeys: 3, ActivationDelay: 3 * minute, Confirm: &keyring.Confirm{Timeout: minute}}, keyring.Inputs{Revoke: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := keyring.Next(at(30*minute), tc.policy, steady, tc.in)
			if !slices.Equal(p.Revoked, all) || !slices.Equal(slices.Sorted(slices.Values(p.Expired)), slices.Sorted(slices.Values(all))) {
				t.Errorf("Revoked %v, Expired %v; want every key %v", p.Revoked, p.Expired, all)
			}
			if p.Mint != 2 || !p.Changed || p.Ring.Epoch != steady.Epoch+1 || len(p.Ring.Keys) != 2 {
				t.Fatalf("Mint %d Changed %v epoch %d keys %v", p.Mint, p.Changed, p.Ring.Epoch, gotKeys(p.Ring.Keys))
			}
			if active := p.Ring.Keys[1]; !active.ActiveFrom.Equal(at(30 * minute)) {
				t.Errorf("the fresh key encrypts from t0%+v, want at once (t0+30m)", active.ActiveFrom.Sub(t0))
			}
			r := publishOrFail(t, p)
			for _, k := range r.Keys {
				if slices.Contains(all, k.ID) {
					t.Errorf("revoked key %s is back", k.ID)
				}
			}
		})
	}
}
