package agent

import (
	"crypto/sha256"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

// stoppedClock is a Clock that moves only when its field is set, and whose
// timers never fire: the test drives the agent by hand.
type stoppedClock struct{ now time.Time }

func (c *stoppedClock) Now() time.Time                       { return c.now }
func (c *stoppedClock) After(time.Duration) <-chan time.Time { return nil }

// TestExpiredKeyBytesOverwritten: at its expiresAt a key's bytes are
// overwritten in every buffer of the agent's that held them, not merely
// left out of the next config; and a read after the clock went back does
// not bring them back.
func TestExpiredKeyBytesOverwritten(t *testing.T) {
	t0 := time.Now().Truncate(time.Second)
	h := time.Hour
	key := func(seed string, af, ra, ea time.Time) keyring.Key {
		k := keyring.NewKey(keyring.Secret(sha256.Sum256([]byte(seed))))
		k.ActiveFrom, k.RetireAt, k.ExpiresAt = af, ra, ea
		return k
	}
	k0 := key("k0", t0.Add(-3*h), t0.Add(-h), t0.Add(h))
	k1 := key("k1", t0.Add(-h), t0.Add(2*h), t0.Add(4*h))
	data, err := keyring.Encode(keyring.Ring{Name: "shop/web", Epoch: 1, IssuedAt: t0, Keys: []keyring.Key{k1, k0}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, keyring.FileName), data, 0o644); err != nil {
		t.Fatal(err)
	}
	clock := &stoppedClock{now: t0}
	a, err := New(Options{Dir: dir, Clock: clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	a.TLSConfig(nil) // one config built from the snapshot's secrets

	// The buffers that hold k0 now.
	ringKeys := a.ring.Keys
	snapSecrets := a.snap.Load().secrets
	holds := func(where string, secrets [][32]byte) {
		t.Helper()
		for _, s := range secrets {
			if s == k0.Secret {
				t.Errorf("%s still holds the bytes of k0", where)
			}
		}
	}
	secretsOf := func(keys []keyring.Key) [][32]byte {
		out := make([][32]byte, len(keys))
		for i, k := range keys {
			out[i] = k.Secret
		}
		return out
	}
	if len(ringKeys) != 2 || len(snapSecrets) != 2 {
		t.Fatalf("%d keys in the ring, %d in the snapshot, want 2 and 2", len(ringKeys), len(snapSecrets))
	}

	clock.now = k0.ExpiresAt
	a.evaluate(clock.now)
	holds("the ring's old key array", secretsOf(ringKeys))
	holds("the replaced snapshot", snapSecrets)
	holds("the ring", secretsOf(a.ring.Keys))
	holds("the snapshot", a.snap.Load().secrets)
	if !a.destroyed[k0.ID] {
		t.Error("k0 is not recorded as destroyed")
	}
	if len(a.ring.Keys) != 1 || a.ring.Keys[0].Secret != k1.Secret {
		t.Errorf("ring keys %v, want k1 alone", len(a.ring.Keys))
	}

	// The clock goes back; the file, unchanged, still lists k0.
	clock.now = t0
	l, _ := a.load(nil, nil)
	a.reload(l)
	holds("the ring after a read at an earlier time", secretsOf(a.ring.Keys))
	holds("the snapshot after a read at an earlier time", a.snap.Load().secrets)
	if st := a.Status(); len(st.Keys) != 1 || st.ActiveKeyID != k1.ID {
		t.Errorf("status keys %+v, want k1 alone", st.Keys)
	}
}
