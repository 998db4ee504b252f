package sharedring_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/sharedring"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// hourly is the policy ringOf's times follow.
var hourly = sharedring.Policy{RotationInterval: time.Hour, RetainedKeys: 2, ActivationDelay: 3 * time.Minute}

// ringOf is the ring shop/web with one key per label, newest first, each
// active for an hour from t0 + its index hours back, kept two hours more.
func ringOf(epoch int64, labels ...string) keyring.Ring {
	r := keyring.Ring{Name: "shop/web", Epoch: epoch, IssuedAt: t0}
	for i, l := range labels {
		k := keyring.NewKey(keyring.Secret(sha256.Sum256([]byte(l))))
		k.ActiveFrom = t0.Add(-time.Duration(i) * time.Hour)
		k.RetireAt = k.ActiveFrom.Add(time.Hour)
		k.ExpiresAt = k.RetireAt.Add(2 * time.Hour)
		r.Keys = append(r.Keys, k)
	}
	return r
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	prev := &sharedring.Record{Version: 3, Ring: ringOf(3, "b", "a"), Requests: sharedring.Requests{Rotate: []string{"r1"}}}
	rec := prev.Next(ringOf(0, "c", "b"), hourly, "r2", "v1")
	if rec.Version != 4 || rec.Ring.Epoch != 4 {
		t.Fatalf("Next: version %d, ring epoch %d; want 4 and 4", rec.Version, rec.Ring.Epoch)
	}
	data, err := sharedring.Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	got, err := sharedring.Decode(data, "shop/web")
	if err != nil {
		t.Fatal(err)
	}
	if !sharedring.Same(got.Ring, rec.Ring) || got.Ring.Keys[0].Secret != rec.Ring.Keys[0].Secret {
		t.Errorf("the decoded ring differs from the encoded one")
	}
	if got.Policy == nil || len(got.Policy.Diff(hourly)) > 0 {
		t.Errorf("policy = %+v, want %+v", got.Policy, hourly)
	}
	if fmt.Sprint(got.Requests) != fmt.Sprint(sharedring.Requests{Rotate: []string{"r2", "r1"}, Revoke: []string{"v1"}}) {
		t.Errorf("requests = %+v", got.Requests)
	}
	if !got.Handled("r1") || !got.Handled("r2") || got.Handled("r3") || got.Handled("") || !got.Revoked("v1") || got.Revoked("r1") {
		t.Errorf("Handled/Revoked disagree with requests %+v", got.Requests)
	}
}

func TestDecodeRefuses(t *testing.T) {
	good, err := sharedring.Encode(sharedring.Record{Ring: ringOf(1, "a")})
	if err != nil {
		t.Fatal(err)
	}
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for k, v := range good {
			m[k] = v
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	many := `{"rotate":[` + strings.TrimSuffix(strings.Repeat(`"x",`, sharedring.MaxRequests+1), ",") + `]}`
	for _, tc := range []struct {
		name string
		data map[string]any
		ring string
		want string
		// hidden is a value read from the entry that the error must not
		// quote: any field of an entry may hold key bytes.
		hidden string
	}{
		{"unknown field", with("extra", "1"), "shop/web", "unknown field", "extra"},
		{"no ring", with(sharedring.RingField, nil), "shop/web", "missing or not a string", ""},
		{"ring not a string", with(sharedring.RingField, 42), "shop/web", "missing or not a string", ""},
		{"ring not JSON", with(sharedring.RingField, "{"), "shop/web", sharedring.RingField, ""},
		{"another ring", good, "shop/api", "holds another ring than shop/api", "shop/web"},
		{"requests not a string", with(sharedring.RequestsField, []any{"a"}), "shop/web", "is not a string", ""},
		{"requests with unknown fields", with(sharedring.RequestsField, `{"rotate":[],"other":1}`), "shop/web", "not a list of requests", ""},
		{"too many requests", with(sharedring.RequestsField, many), "shop/web", "more than 10 requests", ""},
		{"policy not a string", with(sharedring.PolicyField, 3), "shop/web", "policy.json is not a string", ""},
		{"policy not JSON", with(sharedring.PolicyField, "{"), "shop/web", "not a policy", ""},
		{"policy with unknown fields", with(sharedring.PolicyField, `{"rotationInterval":"1h","retainedKeys":1,"activationDelay":"1m","x":1}`), "shop/web", "not a policy", ""},
		{"policy interval not a duration", with(sharedring.PolicyField, `{"rotationInterval":"soon","retainedKeys":1,"activationDelay":"1m"}`), "shop/web", "rotationInterval is not a duration", "soon"},
		{"policy interval past a ticket's life", with(sharedring.PolicyField, `{"rotationInterval":"200h","retainedKeys":1,"activationDelay":"1m"}`), "shop/web", "rotationInterval", ""},
		{"policy retaining too many", with(sharedring.PolicyField, `{"rotationInterval":"1h","retainedKeys":17,"activationDelay":"1m"}`), "shop/web", "retainedKeys 17 is outside", ""},
		{"policy with an unknown onTimeout", with(sharedring.PolicyField, `{"rotationInterval":"1h","retainedKeys":1,"activationDelay":"1m","confirmation":{"timeout":"1m","onTimeout":"Never"}}`), "shop/web", "onTimeout is neither Wait nor Promote", "Never"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sharedring.Decode(tc.data, tc.ring)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Decode = %v, want an error containing %q", err, tc.want)
			}
			if tc.hidden != "" && strings.Contains(err.Error(), tc.hidden) {
				t.Fatalf("Decode = %v, which quotes %q read from the entry", err, tc.hidden)
			}
		})
	}
}

func TestNextRemembersBoundedRequests(t *testing.T) {
	var rec *sharedring.Record
	for i := range sharedring.MaxRequests + 3 {
		next := rec.Next(ringOf(0, "a"), hourly, fmt.Sprint("r", i), "")
		rec = &next
	}
	if rec.Version != sharedring.MaxRequests+3 {
		t.Errorf("version = %d, want %d", rec.Version, sharedring.MaxRequests+3)
	}
	if len(rec.Requests.Rotate) != sharedring.MaxRequests || rec.Requests.Rotate[0] != "r12" || rec.Handled("r2") || !rec.Handled("r3") {
		t.Errorf("requests = %v: want the newest %d, newest first", rec.Requests.Rotate, sharedring.MaxRequests)
	}
	again := rec.Next(ringOf(0, "a"), hourly, "r12", "")
	if len(again.Requests.Rotate) != sharedring.MaxRequests || again.Requests.Rotate[0] != "r12" {
		t.Errorf("a request remembered twice: %v", again.Requests.Rotate)
	}
}

func TestBase(t *testing.T) {
	local := sharedring.Local{Ring: ringOf(7, "b", "a"), Version: 5}
	other := hourly
	other.RotationInterval, other.RetainedKeys = 2*time.Hour, 3
	confirming := hourly
	confirming.Confirmation = &sharedring.Confirmation{Timeout: time.Minute}
	promoting := hourly
	promoting.Confirmation = &sharedring.Confirmation{Timeout: time.Minute, Promote: true}
	for _, tc := range []struct {
		name       string
		mine       sharedring.Policy
		entry      *sharedring.Record
		want       keyring.Ring
		wantErr    error
		wantFields []string
	}{
		{"no entry: the cluster's own ring seeds it", hourly, nil, local.Ring, nil, nil},
		{"the entry's ring", hourly, &sharedring.Record{Version: 6, Ring: ringOf(6, "c", "b"), Policy: &hourly}, ringOf(6, "c", "b"), nil, nil},
		{"the same version", hourly, &sharedring.Record{Version: 5, Ring: ringOf(5, "b", "a"), Policy: &hourly}, ringOf(5, "b", "a"), nil, nil},
		{"an entry that records no policy is planned from", other, &sharedring.Record{Version: 6, Ring: ringOf(6, "c", "b")}, ringOf(6, "c", "b"), nil, nil},
		{"a version deleted by hand: seed again", other, &sharedring.Record{Version: 9, Deleted: true}, local.Ring, nil, nil},
		{"an older version: refused", hourly, &sharedring.Record{Version: 4, Ring: ringOf(4, "a"), Policy: &hourly}, keyring.Ring{}, sharedring.ErrRolledBack, nil},
		{"an older version with another policy: rolled back first", other, &sharedring.Record{Version: 4, Ring: ringOf(4, "a"), Policy: &hourly}, keyring.Ring{}, sharedring.ErrRolledBack, nil},
		{"another interval and retention: refused, naming both", other, &sharedring.Record{Version: 6, Ring: ringOf(6, "c", "b"), Policy: &hourly}, keyring.Ring{}, sharedring.ErrPolicyMismatch, []string{"rotationInterval", "retainedKeys"}},
		{"another activation delay", sharedring.Policy{RotationInterval: time.Hour, RetainedKeys: 2, ActivationDelay: time.Minute}, &sharedring.Record{Version: 6, Ring: ringOf(6, "c"), Policy: &hourly}, keyring.Ring{}, sharedring.ErrPolicyMismatch, []string{"activationDelay"}},
		{"confirmation here, none in the entry", confirming, &sharedring.Record{Version: 6, Ring: ringOf(6, "c"), Policy: &hourly}, keyring.Ring{}, sharedring.ErrPolicyMismatch, []string{"confirmation"}},
		{"another confirmation timeout policy", promoting, &sharedring.Record{Version: 6, Ring: ringOf(6, "c"), Policy: &confirming}, keyring.Ring{}, sharedring.ErrPolicyMismatch, []string{"confirmation"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sharedring.Base(local, tc.mine, tc.entry)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			var m *sharedring.Mismatch
			if errors.As(err, &m) != (tc.wantFields != nil) || (m != nil && !slices.Equal(m.Fields, tc.wantFields)) {
				t.Fatalf("err = %v, want a mismatch of %v", err, tc.wantFields)
			}
			if !sharedring.Same(got, tc.want) {
				t.Errorf("Base gave keys %v, want %v", ids(got), ids(tc.want))
			}
		})
	}
}

func TestMismatchMessageNamesFieldsAndValues(t *testing.T) {
	mine := sharedring.Policy{RotationInterval: 2 * time.Hour, RetainedKeys: 2, ActivationDelay: 3 * time.Minute,
		Confirmation: &sharedring.Confirmation{Timeout: 5 * time.Minute, Promote: true}}
	_, err := sharedring.Base(sharedring.Local{}, mine, &sharedring.Record{Version: 1, Ring: ringOf(1, "a"), Policy: &hourly})
	want := "rotationInterval is 2h0m0s here and 1h0m0s in the entry, confirmation is {timeout 5m0s, onTimeout Promote} here and unset in the entry"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want it to contain %q", err, want)
	}
}

func TestPolicyOf(t *testing.T) {
	got := sharedring.PolicyOf(keyring.Policy{RotationInterval: time.Hour, RetainedKeys: 2, ActivationDelay: 3 * time.Minute,
		Confirm: &keyring.Confirm{Timeout: time.Minute, Promote: true}})
	want := sharedring.Policy{RotationInterval: time.Hour, RetainedKeys: 2, ActivationDelay: 3 * time.Minute,
		Confirmation: &sharedring.Confirmation{Timeout: time.Minute, Promote: true}}
	if d := got.Diff(want); len(d) > 0 {
		t.Errorf("PolicyOf differs in %v", d)
	}
	if d := sharedring.PolicyOf(keyring.Policy{RotationInterval: time.Hour, RetainedKeys: 2, ActivationDelay: 3 * time.Minute}).Diff(hourly); len(d) > 0 {
		t.Errorf("PolicyOf without confirmation differs in %v", d)
	}
}

func TestPolicyRoundTrip(t *testing.T) {
	for _, p := range []sharedring.Policy{
		hourly,
		{RotationInterval: 90 * time.Second, ActivationDelay: 0, Confirmation: &sharedring.Confirmation{Timeout: 10 * time.Minute}},
		{RotationInterval: 24 * time.Hour, RetainedKeys: 6, ActivationDelay: time.Hour, Confirmation: &sharedring.Confirmation{Timeout: time.Hour, Promote: true}},
	} {
		data, err := sharedring.Encode(sharedring.Record{Ring: ringOf(1, "a"), Policy: &p})
		if err != nil {
			t.Fatal(err)
		}
		got, err := sharedring.Decode(data, "shop/web")
		if err != nil {
			t.Fatal(err)
		}
		if got.Policy == nil || len(got.Policy.Diff(p)) > 0 {
			t.Errorf("policy %+v came back as %+v", p, got.Policy)
		}
	}
	legacy, err := sharedring.Encode(sharedring.Record{Ring: ringOf(1, "a")})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := legacy[sharedring.PolicyField]; ok {
		t.Errorf("a record without a policy was written with one")
	}
	if got, err := sharedring.Decode(legacy, "shop/web"); err != nil || got.Policy != nil {
		t.Errorf("an entry without a policy: %v, policy %+v", err, got.Policy)
	}
}

func TestDecide(t *testing.T) {
	entry := &sharedring.Record{Version: 2, Ring: ringOf(2, "c", "b"), Policy: &hourly}
	planned := ringOf(0, "c", "b")
	// A reader's view of the entry's times: the same keys, planned under
	// another schedule than the writer's.
	reread := ringOf(0, "c", "b")
	reread.Keys = slices.Clone(reread.Keys)
	reread.Keys[0].RetireAt = reread.Keys[0].RetireAt.Add(time.Hour)
	reread.Keys[0].ExpiresAt = reread.Keys[0].ExpiresAt.Add(3 * time.Hour)
	// rotate-now: the staged key activates sooner.
	moved := ringOf(0, "c", "b")
	moved.Keys = slices.Clone(moved.Keys)
	moved.Keys[0].ActiveFrom = moved.Keys[0].ActiveFrom.Add(-time.Minute)
	moved.Keys[1].RetireAt = moved.Keys[0].ActiveFrom
	for _, tc := range []struct {
		name      string
		next      keyring.Ring
		change    sharedring.Change
		entry     *sharedring.Record
		wantWrite bool
		wantServe keyring.Ring
	}{
		{"no entry yet: seed it", planned, sharedring.Change{Minted: 2}, nil, true, planned},
		{"no entry, no keys", keyring.Ring{}, sharedring.Change{}, nil, false, keyring.Ring{}},
		{"the entry was deleted by hand: seed it again", planned, sharedring.Change{}, &sharedring.Record{Version: 2, Deleted: true}, true, planned},
		{"the entry holds the plan", planned, sharedring.Change{}, entry, false, entry.Ring},
		{"a new key", ringOf(0, "d", "c", "b"), sharedring.Change{Minted: 1}, entry, true, ringOf(0, "d", "c", "b")},
		{"a key expired", ringOf(0, "c"), sharedring.Change{Dropped: 1}, entry, true, ringOf(0, "c")},
		{"rotate-now moved a key's times", moved, sharedring.Change{Request: true}, entry, true, moved},
		{"only the times moved: adopt the entry's, as written", reread, sharedring.Change{}, entry, false, entry.Ring},
		{"only the times moved, in an entry without a policy: adopt as written", reread, sharedring.Change{},
			&sharedring.Record{Version: 2, Ring: ringOf(2, "c", "b")}, false, ringOf(2, "c", "b")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			write, serve := sharedring.Decide(tc.next, tc.change, tc.entry)
			if write != tc.wantWrite {
				t.Errorf("write = %t, want %t", write, tc.wantWrite)
			}
			if !sharedring.Same(serve, tc.wantServe) {
				t.Errorf("serves %v, want %v", times(serve), times(tc.wantServe))
			}
		})
	}
}

// TestTwoSchedulesWriteOncePerRotation plays two clusters whose specs
// differ, sharing one entry, pass after pass over three rotation
// intervals: the one whose policy the entry records writes once per real
// rotation, the other never writes and never serves the entry's keys.
func TestTwoSchedulesWriteOncePerRotation(t *testing.T) {
	pa := keyring.Policy{RotationInterval: time.Minute, RetainedKeys: 1, ActivationDelay: 10 * time.Second}
	pb := keyring.Policy{RotationInterval: 2 * time.Minute, RetainedKeys: 1, ActivationDelay: 10 * time.Second}
	var entry *sharedring.Record
	writes, n := map[string]int{}, byte(0)
	for now := t0; now.Before(t0.Add(3*time.Minute + 30*time.Second)); now = now.Add(time.Second) {
		for _, c := range []struct {
			name   string
			policy keyring.Policy
		}{{"A", pa}, {"B", pb}} {
			mine := sharedring.PolicyOf(c.policy)
			base, err := sharedring.Base(sharedring.Local{Ring: keyring.Ring{Name: "shop/web"}}, mine, entry)
			if err != nil {
				if c.name == "A" {
					t.Fatalf("%s: cluster A refused the entry it wrote: %v", now, err)
				}
				continue
			}
			plan := keyring.Next(now, c.policy, base, keyring.Inputs{})
			next := plan.Ring
			if plan.Mint > 0 {
				secrets := make([]keyring.Secret, plan.Mint)
				for i := range secrets {
					n++
					secrets[i][0], secrets[i][1] = n, 1
				}
				if next, err = plan.Fill(secrets); err != nil {
					t.Fatal(err)
				}
			}
			write, _ := sharedring.Decide(next, sharedring.Change{Minted: plan.Mint, Dropped: len(plan.Expired)}, entry)
			if write {
				rec := entry.Next(next, mine, "", "")
				entry = &rec
				writes[c.name]++
			}
		}
	}
	// A seeds the entry (two keys) at t0, then mints one key per minute.
	if writes["B"] != 0 || writes["A"] != 4 || entry.Version != 4 {
		t.Errorf("writes %v, entry version %d: want A alone, 4 versions in 3.5 intervals", writes, entry.Version)
	}
}

func TestStale(t *testing.T) {
	current := ringOf(5, "c", "b")
	for _, tc := range []struct {
		name string
		old  keyring.Ring
		want bool
	}{
		{"holds only keys the ring still has", ringOf(4, "b"), false},
		{"holds a key the ring dropped", ringOf(3, "b", "a"), true},
		{"holds nothing", keyring.Ring{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sharedring.Stale(tc.old, current); got != tc.want {
				t.Errorf("Stale = %t, want %t", got, tc.want)
			}
		})
	}
}

func TestSyncPeriod(t *testing.T) {
	for _, tc := range []struct{ delay, want time.Duration }{
		{0, time.Second},
		{2 * time.Second, time.Second},
		{20 * time.Second, 5 * time.Second},
		{3 * time.Minute, 30 * time.Second},
		{time.Hour, 30 * time.Second},
	} {
		if got := sharedring.SyncPeriod(tc.delay); got != tc.want {
			t.Errorf("SyncPeriod(%s) = %s, want %s", tc.delay, got, tc.want)
		}
	}
}

func times(r keyring.Ring) []string {
	var out []string
	for _, k := range r.Keys {
		out = append(out, fmt.Sprintf("%s %s-%s-%s", k.ID, k.ActiveFrom.Format(time.TimeOnly), k.RetireAt.Format(time.TimeOnly), k.ExpiresAt.Format(time.TimeOnly)))
	}
	return out
}

func ids(r keyring.Ring) []string {
	out := make([]string, len(r.Keys))
	for i, k := range r.Keys {
		out[i] = k.ID
	}
	return out
}
