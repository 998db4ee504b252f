package sharedring_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/sharedring"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

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
	rec := prev.Next(ringOf(0, "c", "b"), "r2", "v1")
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
	}{
		{"unknown field", with("extra", "1"), "shop/web", `unknown field "extra"`},
		{"no ring", with(sharedring.RingField, nil), "shop/web", "missing or not a string"},
		{"ring not a string", with(sharedring.RingField, 42), "shop/web", "missing or not a string"},
		{"ring not JSON", with(sharedring.RingField, "{"), "shop/web", sharedring.RingField},
		{"another ring", good, "shop/api", `holds ring "shop/web", not "shop/api"`},
		{"requests not a string", with(sharedring.RequestsField, []any{"a"}), "shop/web", "is not a string"},
		{"requests with unknown fields", with(sharedring.RequestsField, `{"rotate":[],"other":1}`), "shop/web", "not a list of requests"},
		{"too many requests", with(sharedring.RequestsField, many), "shop/web", "more than 10 requests"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sharedring.Decode(tc.data, tc.ring)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Decode = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestNextRemembersBoundedRequests(t *testing.T) {
	var rec *sharedring.Record
	for i := range sharedring.MaxRequests + 3 {
		next := rec.Next(ringOf(0, "a"), fmt.Sprint("r", i), "")
		rec = &next
	}
	if rec.Version != sharedring.MaxRequests+3 {
		t.Errorf("version = %d, want %d", rec.Version, sharedring.MaxRequests+3)
	}
	if len(rec.Requests.Rotate) != sharedring.MaxRequests || rec.Requests.Rotate[0] != "r12" || rec.Handled("r2") || !rec.Handled("r3") {
		t.Errorf("requests = %v: want the newest %d, newest first", rec.Requests.Rotate, sharedring.MaxRequests)
	}
	again := rec.Next(ringOf(0, "a"), "r12", "")
	if len(again.Requests.Rotate) != sharedring.MaxRequests || again.Requests.Rotate[0] != "r12" {
		t.Errorf("a request remembered twice: %v", again.Requests.Rotate)
	}
}

func TestBase(t *testing.T) {
	local := sharedring.Local{Ring: ringOf(7, "b", "a"), Version: 5}
	for _, tc := range []struct {
		name    string
		entry   *sharedring.Record
		want    keyring.Ring
		wantErr error
	}{
		{"no entry: the cluster's own ring seeds it", nil, local.Ring, nil},
		{"the entry's ring", &sharedring.Record{Version: 6, Ring: ringOf(6, "c", "b")}, ringOf(6, "c", "b"), nil},
		{"the same version", &sharedring.Record{Version: 5, Ring: ringOf(5, "b", "a")}, ringOf(5, "b", "a"), nil},
		{"a version deleted by hand: seed again", &sharedring.Record{Version: 9, Deleted: true}, local.Ring, nil},
		{"an older version: refused", &sharedring.Record{Version: 4, Ring: ringOf(4, "a")}, keyring.Ring{}, sharedring.ErrRolledBack},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sharedring.Base(local, tc.entry)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if !sharedring.Same(got, tc.want) {
				t.Errorf("Base gave keys %v, want %v", ids(got), ids(tc.want))
			}
		})
	}
}

func TestMustWrite(t *testing.T) {
	next := ringOf(0, "c", "b")
	moved := next
	moved.Keys = append([]keyring.Key(nil), next.Keys...)
	moved.Keys[0].ActiveFrom = moved.Keys[0].ActiveFrom.Add(-time.Minute)
	for _, tc := range []struct {
		name  string
		next  keyring.Ring
		entry *sharedring.Record
		want  bool
	}{
		{"no entry yet", next, nil, true},
		{"no entry, no keys", keyring.Ring{}, nil, false},
		{"the entry holds it", next, &sharedring.Record{Version: 2, Ring: ringOf(2, "c", "b")}, false},
		{"a new key", next, &sharedring.Record{Version: 2, Ring: ringOf(2, "b")}, true},
		{"a key's times moved (rotate-now)", moved, &sharedring.Record{Version: 2, Ring: next}, true},
		{"the entry was deleted by hand", next, &sharedring.Record{Version: 2, Deleted: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sharedring.MustWrite(tc.next, tc.entry); got != tc.want {
				t.Errorf("MustWrite = %t, want %t", got, tc.want)
			}
		})
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

func ids(r keyring.Ring) []string {
	out := make([]string, len(r.Keys))
	for i, k := range r.Keys {
		out[i] = k.ID
	}
	return out
}
