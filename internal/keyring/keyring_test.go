package keyring_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

// t0 is the reference instant of the tests: a whole second, in UTC.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// at returns t0 shifted by d.
func at(d time.Duration) time.Time { return t0.Add(d) }

// std is the policy of DESIGN.md's example: 1h / 3 / 3m.
var std = keyring.Policy{RotationInterval: time.Hour, RetainedKeys: 3, ActivationDelay: 3 * time.Minute}

// secretOf returns a deterministic, non-zero secret named by label.
func secretOf(label string) keyring.Secret { return keyring.Secret(sha256.Sum256([]byte(label))) }

// ringOf builds the ring DESIGN.md describes for keys activating at afs
// (newest first): each key retires when the next one activates (the newest
// one interval after its own activation) and expires retainedKeys intervals
// after it retires. Secrets are derived from the activation instant, so the
// same instant always gives the same key.
func ringOf(p keyring.Policy, epoch int64, issuedAt time.Time, afs ...time.Time) keyring.Ring {
	r := keyring.Ring{Name: "shop/web", Epoch: epoch, IssuedAt: issuedAt}
	retain := time.Duration(p.RetainedKeys) * p.RotationInterval
	for i, af := range afs {
		k := keyring.NewKey(secretOf(af.Format(time.RFC3339)))
		k.ActiveFrom = af
		k.RetireAt = af.Add(p.RotationInterval)
		if i > 0 {
			k.RetireAt = afs[i-1]
		}
		k.ExpiresAt = k.RetireAt.Add(retain)
		r.Keys = append(r.Keys, k)
	}
	return r
}

// steadyRing is the std ring just published at t0, when its key "A"
// activated: staged S (t0+1h), active A (t0), decrypt-only D1, D2, D3.
// D3 retired at t0-2h and expires at t0+1h, when S activates.
func steadyRing() keyring.Ring {
	return ringOf(std, 10, t0, at(time.Hour), t0, at(-time.Hour), at(-2*time.Hour), at(-3*time.Hour))
}

// ids returns the ids of keys, in order.
func ids(keys []keyring.Key) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.ID
	}
	return out
}

// ringDiff describes how a and b differ, comparing instants with Equal; it
// is empty when they are the same ring. It never prints key bytes.
func ringDiff(a, b keyring.Ring) string {
	var d []string
	if a.Name != b.Name {
		d = append(d, fmt.Sprintf("name %q != %q", a.Name, b.Name))
	}
	if a.Epoch != b.Epoch {
		d = append(d, fmt.Sprintf("epoch %d != %d", a.Epoch, b.Epoch))
	}
	if !a.IssuedAt.Equal(b.IssuedAt) {
		d = append(d, fmt.Sprintf("issuedAt %v != %v", a.IssuedAt, b.IssuedAt))
	}
	if len(a.Keys) != len(b.Keys) {
		return strings.Join(append(d, fmt.Sprintf("keys %v != %v", ids(a.Keys), ids(b.Keys))), "; ")
	}
	for i := range a.Keys {
		x, y := a.Keys[i], b.Keys[i]
		switch {
		case x.ID != y.ID:
			d = append(d, fmt.Sprintf("key %d: id %s != %s", i, x.ID, y.ID))
		case x.Secret != y.Secret:
			d = append(d, fmt.Sprintf("key %d (%s): secrets differ", i, x.ID))
		case !x.ActiveFrom.Equal(y.ActiveFrom) || !x.RetireAt.Equal(y.RetireAt) || !x.ExpiresAt.Equal(y.ExpiresAt):
			d = append(d, fmt.Sprintf("key %d (%s): times %v/%v/%v != %v/%v/%v", i, x.ID,
				x.ActiveFrom, x.RetireAt, x.ExpiresAt, y.ActiveFrom, y.RetireAt, y.ExpiresAt))
		}
	}
	return strings.Join(d, "; ")
}

func TestKeyStateAt(t *testing.T) {
	k := keyring.Key{ActiveFrom: t0, RetireAt: at(time.Hour), ExpiresAt: at(4 * time.Hour)}
	// retainedKeys 0: the key is destroyed the instant it retires.
	k0 := keyring.Key{ActiveFrom: t0, RetireAt: at(time.Hour), ExpiresAt: at(time.Hour)}
	tests := []struct {
		name string
		key  keyring.Key
		now  time.Time
		want keyring.State
	}{
		{"long before activeFrom", k, at(-24 * time.Hour), keyring.Staged},
		{"one second before activeFrom", k, at(-time.Second), keyring.Staged},
		{"one nanosecond before activeFrom", k, at(-time.Nanosecond), keyring.Staged},
		{"exactly at activeFrom", k, t0, keyring.Active},
		{"one second before retireAt", k, at(time.Hour - time.Second), keyring.Active},
		{"exactly at retireAt", k, at(time.Hour), keyring.DecryptOnly},
		{"one second before expiresAt", k, at(4*time.Hour - time.Second), keyring.DecryptOnly},
		{"exactly at expiresAt", k, at(4 * time.Hour), keyring.Expired},
		{"long after expiresAt", k, at(100 * time.Hour), keyring.Expired},
		{"retainedKeys 0: one second before retireAt", k0, at(time.Hour - time.Second), keyring.Active},
		{"retainedKeys 0: retireAt = expiresAt", k0, at(time.Hour), keyring.Expired},
		{"another location, same instant as activeFrom", k, t0.In(time.FixedZone("UTC+5", 5*3600)), keyring.Active},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.key.StateAt(tc.now); got != tc.want {
				t.Errorf("StateAt(%v) = %s, want %s", tc.now, got, tc.want)
			}
		})
	}
}

func TestRingActive(t *testing.T) {
	r := steadyRing() // S t0+1h, A t0, D1 t0-1h, D2 t0-2h, D3 t0-3h (expires t0+1h)
	S, A, D1, D3 := r.Keys[0], r.Keys[1], r.Keys[2], r.Keys[4]
	tests := []struct {
		name   string
		ring   keyring.Ring
		now    time.Time
		want   keyring.Key
		wantOK bool
	}{
		{"exactly at the active key's activeFrom", r, t0, A, true},
		{"one second before the active key's activeFrom", r, at(-time.Second), D1, true},
		{"one second before the staged key activates", r, at(time.Hour - time.Second), A, true},
		{"exactly at the staged key's activeFrom", r, at(time.Hour), S, true},
		{"newest key past its retireAt still encrypts: no successor yet", r, at(2*time.Hour + 30*time.Minute), S, true},
		{"one second before the newest key expires", r, S.ExpiresAt.Add(-time.Second), S, true},
		{"clock lag: before every activeFrom, the oldest unexpired key stands in", r, at(-3*time.Hour - time.Second), D3, true},
		{"clock lag: long before every activeFrom", r, at(-100 * time.Hour), D3, true},
		{"every key expired", r, S.ExpiresAt, keyring.Key{}, false},
		{"empty ring", keyring.Ring{}, t0, keyring.Key{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.ring.Active(tc.now)
			if ok != tc.wantOK || got.ID != tc.want.ID {
				t.Errorf("Active(%v) = %q, %v; want %q, %v", tc.now, got.ID, ok, tc.want.ID, tc.wantOK)
			}
		})
	}
}

func TestRingTicketKeys(t *testing.T) {
	r := steadyRing()
	S, A, D1, D2, D3 := r.Keys[0], r.Keys[1], r.Keys[2], r.Keys[3], r.Keys[4]
	tests := []struct {
		name string
		now  time.Time
		want []keyring.Key
	}{
		{"steady: active, staged, decrypt-only newest to oldest", at(30 * time.Minute), []keyring.Key{A, S, D1, D2, D3}},
		{"exactly at the active key's activeFrom", t0, []keyring.Key{A, S, D1, D2, D3}},
		{"two staged keys by a lagging clock: soonest first", at(-30 * time.Minute), []keyring.Key{D1, A, S, D2, D3}},
		{"one second before D3 expires", at(time.Hour - time.Second), []keyring.Key{A, S, D1, D2, D3}},
		{"exactly at D3's expiresAt (and S's activeFrom): D3 excluded", at(time.Hour), []keyring.Key{S, A, D1, D2}},
		{"clock lag before every activeFrom: oldest first, then staged soonest first", at(-4 * time.Hour), []keyring.Key{D3, D2, D1, A, S}},
		{"only the newest key left", S.ExpiresAt.Add(-time.Second), []keyring.Key{S}},
		{"every key expired", S.ExpiresAt, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := r.TicketKeys(tc.now)
			if g, w := strings.Join(ids(got), ","), strings.Join(ids(tc.want), ","); g != w {
				t.Errorf("TicketKeys(%v) = [%s], want [%s]", tc.now, g, w)
			}
		})
	}
}

func TestRingNextChange(t *testing.T) {
	r := steadyRing() // activations t0-3h..t0+1h; expiries t0+1h (D3), +2h (D2), +3h (D1), +4h (A), +5h (S)
	tests := []struct {
		name   string
		ring   keyring.Ring
		now    time.Time
		want   time.Time
		wantOK bool
	}{
		{"before the active key activates", r, at(-30 * time.Minute), t0, true},
		{"exactly at an activation: the next one, strictly after now", r, t0, at(time.Hour), true},
		{"one second before the staged key activates", r, at(time.Hour - time.Second), at(time.Hour), true},
		{"after the last activation: the next expiry", r, at(time.Hour), at(2 * time.Hour), true},
		{"one second before the last expiry", r, at(5*time.Hour - time.Second), at(5 * time.Hour), true},
		{"at the last expiry: nothing scheduled", r, at(5 * time.Hour), time.Time{}, false},
		{"empty ring", keyring.Ring{}, t0, time.Time{}, false},
		// An expiry that comes before the next activation.
		{"expiry before activation", ringOf(std, 3, t0, at(2*time.Hour+20*time.Minute), at(80*time.Minute), t0, at(-time.Hour), at(-2*time.Hour)),
			at(90 * time.Minute), at(2 * time.Hour), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.ring.NextChange(tc.now)
			if ok != tc.wantOK || !got.Equal(tc.want) {
				t.Errorf("NextChange(%v) = %v, %v; want %v, %v", tc.now, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestRingKey(t *testing.T) {
	r := steadyRing()
	for _, k := range r.Keys {
		got, ok := r.Key(k.ID)
		if !ok || got.ID != k.ID || got.Secret != k.Secret {
			t.Errorf("Key(%s) = %s, %v", k.ID, got.ID, ok)
		}
	}
	if _, ok := r.Key("00000000"); ok {
		t.Errorf("Key of an absent id found")
	}
}

func TestKeyIDGolden(t *testing.T) {
	var s keyring.Secret
	for i := range s {
		s[i] = byte(i)
	}
	tests := []struct {
		name   string
		secret keyring.Secret
		want   string
	}{
		// Computed once from this implementation and pinned: a change means
		// every replica and every published snapshot disagrees on ids.
		{"bytes 0..31", s, "1ef6b674"},
		{"sha256(\"ringmaster\")", secretOf("ringmaster"), "b363eac4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := keyring.KeyID(tc.secret); got != tc.want {
				t.Errorf("KeyID = %q, want %q", got, tc.want)
			}
			if got := keyring.NewKey(tc.secret); got.ID != tc.want || got.Secret != tc.secret {
				t.Errorf("NewKey: id %q, want %q (secret kept: %v)", got.ID, tc.want, got.Secret == tc.secret)
			}
		})
	}
}

func TestKeyIDRevealsNothing(t *testing.T) {
	seen := map[string]bool{}
	for i := range 64 {
		s := secretOf(fmt.Sprint("key-id ", i))
		id := keyring.KeyID(s)
		if len(id) != 8 {
			t.Fatalf("KeyID = %q: want 8 characters", id)
		}
		if _, err := hex.DecodeString(id); err != nil || strings.ToLower(id) != id {
			t.Fatalf("KeyID = %q: want lower-case hex", id)
		}
		if keyring.KeyID(s) != id {
			t.Fatalf("KeyID not deterministic")
		}
		if seen[id] {
			t.Fatalf("KeyID %q repeats for different secrets", id)
		}
		seen[id] = true

		// The id is no part of any encoding of the secret (so no prefix of
		// one either), nor of any key derived from it.
		encodings := map[string]string{
			"hex":       hex.EncodeToString(s[:]),
			"HEX":       strings.ToUpper(hex.EncodeToString(s[:])),
			"base64":    base64.StdEncoding.EncodeToString(s[:]),
			"base64url": base64.RawURLEncoding.EncodeToString(s[:]),
		}
		for _, f := range []keyring.Format{keyring.FormatNginx, keyring.FormatHAProxy, keyring.FormatEnvoy} {
			d, err := keyring.DeriveKey(s, f)
			if err != nil {
				t.Fatal(err)
			}
			encodings[string(f)+" hex"] = hex.EncodeToString(d[:])
			encodings[string(f)+" base64"] = base64.StdEncoding.EncodeToString(d[:])
		}
		for name, enc := range encodings {
			if strings.Contains(enc, id) {
				t.Errorf("KeyID %s occurs in the %s encoding", id, name)
			}
			for n := 1; n <= len(enc); n++ {
				if enc[:n] == id {
					t.Errorf("KeyID %s is a prefix of the %s encoding", id, name)
				}
			}
		}
	}
}

func TestStateOfLaggingClock(t *testing.T) {
	older := keyring.Key{ID: "a", ActiveFrom: t0, RetireAt: t0.Add(time.Hour), ExpiresAt: t0.Add(2 * time.Hour)}
	newer := keyring.Key{ID: "b", ActiveFrom: t0.Add(time.Hour), RetireAt: t0.Add(2 * time.Hour), ExpiresAt: t0.Add(3 * time.Hour)}
	r := keyring.Ring{Keys: []keyring.Key{newer, older}}
	tests := []struct {
		name string
		key  keyring.Key
		now  time.Time
		want keyring.State
	}{
		{"a clock behind every activation makes the oldest key active", older, t0.Add(-time.Minute), keyring.Active},
		{"and leaves the newer one staged", newer, t0.Add(-time.Minute), keyring.Staged},
		{"an in-step clock sees the plain states", older, t0.Add(90 * time.Minute), keyring.DecryptOnly},
		{"the newest activated key", newer, t0.Add(90 * time.Minute), keyring.Active},
		{"an expired key stays expired", older, t0.Add(2 * time.Hour), keyring.Expired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := r.StateOf(tt.key, tt.now); got != tt.want {
				t.Fatalf("StateOf(%s) = %s, want %s", tt.key.ID, got, tt.want)
			}
		})
	}
}
