package keyring_test

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

var derivedFormats = []keyring.Format{keyring.FormatNginx, keyring.FormatHAProxy, keyring.FormatEnvoy, keyring.FormatCilium}

func TestDeriveKeyGolden(t *testing.T) {
	var s keyring.Secret
	for i := range s {
		s[i] = byte(i)
	}
	// RFC 5869 HKDF-SHA256, no salt, info "ringmaster.io/v1 ticket-key <format>",
	// computed by an independent implementation (Python's hmac) and pinned:
	// a change breaks every running server's tickets at the next reload.
	golden := map[keyring.Format]string{
		keyring.FormatNginx:   "3ecbddbacc0dc83dc38ff68ca07fafac3e4df43836aa71af5e0e684d7071dddbc0711638e48983fbb14754614574378cbe0f52cb42dc4dc20abea05512a0ba4ae773361b8569e2d3f233637b0980e904",
		keyring.FormatHAProxy: "8e1944adb538a7a43340925075023ccb1981cbab890e82dfddbd36dd0c7dbb77c235339483fef6810322f9757fd26736fb42f452f4e883959f0b3d0e463c70bb23fd4007aaef2b3573bb8163771cef84",
		keyring.FormatEnvoy:   "e6def0a8d45c63223d581545609e7c617a9abf0aedec1b9af0a9b5d25898c34e5ae7229fc0c0ab4254a4c05914945cab34f7d5fa554f3762855e60b2b85f2e23904d3b5e2a296d3fb26a9e072b41a067",
		keyring.FormatCilium:  "1adf44e6854c510b9fe6f9d777ca180b486356e0ee56870235d5bd06977b36f19ede4a0c02a291a1a7352d59138caf471f14b16c16db73b31e61bb9ca9552aca8157917ce8ff3e1cd03f2eccb9ffc95e",
	}
	for f, want := range golden {
		t.Run(string(f), func(t *testing.T) {
			d, err := keyring.DeriveKey(s, f)
			if err != nil {
				t.Fatal(err)
			}
			if got := hex.EncodeToString(d[:]); got != want {
				t.Errorf("DeriveKey = %s\nwant %s", got, want)
			}
		})
	}
}

func TestDeriveKeyIndependence(t *testing.T) {
	secrets := []keyring.Secret{secretOf("derive a"), secretOf("derive b"), secretOf("derive c")}
	seen := map[[keyring.FormatKeySize]byte]string{}
	for _, s := range secrets {
		for _, f := range derivedFormats {
			d, err := keyring.DeriveKey(s, f)
			if err != nil {
				t.Fatalf("DeriveKey(%s): %v", f, err)
			}
			again, _ := keyring.DeriveKey(s, f)
			if again != d {
				t.Errorf("DeriveKey(%s) is not deterministic", f)
			}
			name := fmt.Sprintf("%s of %s", f, keyring.KeyID(s))
			if prev, ok := seen[d]; ok {
				t.Errorf("%s equals %s", name, prev)
			}
			seen[d] = name
			// No 8-byte window of the secret shows in the derived key.
			for i := 0; i+8 <= len(s); i++ {
				if bytes.Contains(d[:], s[i:i+8]) {
					t.Errorf("%s contains secret bytes %d..%d", name, i, i+8)
				}
			}
			if d == ([keyring.FormatKeySize]byte{}) {
				t.Errorf("%s is all zero", name)
			}
		}
	}
	// Any two formats' keys share no 16-byte part (key name, HMAC or AES key).
	s := secrets[0]
	for i, f := range derivedFormats {
		a, _ := keyring.DeriveKey(s, f)
		for _, g := range derivedFormats[i+1:] {
			b, _ := keyring.DeriveKey(s, g)
			for j := 0; j+16 <= keyring.FormatKeySize; j += 16 {
				if bytes.Contains(b[:], a[j:j+16]) {
					t.Errorf("%s and %s keys share bytes %d..%d", f, g, j, j+16)
				}
			}
		}
	}
}

func TestDeriveKeyUnknownFormat(t *testing.T) {
	for _, f := range []keyring.Format{keyring.FormatGo, "", "NGINX", "openssl"} {
		t.Run(string(f), func(t *testing.T) {
			d, err := keyring.DeriveKey(secretOf("x"), f)
			if err == nil {
				t.Fatalf("DeriveKey(%q): no error", f)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", f)) {
				t.Errorf("error %q does not name the format", err)
			}
			if d != ([keyring.FormatKeySize]byte{}) {
				t.Errorf("key returned with the error")
			}
		})
	}
}

func derived(t *testing.T, k keyring.Key, f keyring.Format) []byte {
	t.Helper()
	d, err := keyring.DeriveKey(k.Secret, f)
	if err != nil {
		t.Fatal(err)
	}
	return d[:]
}

func TestFilesNginxEnvoy(t *testing.T) {
	r := steadyRing() // S t0+1h, A t0, D1, D2, D3 (expires t0+1h)
	S, A, D1, D2, D3 := r.Keys[0], r.Keys[1], r.Keys[2], r.Keys[3], r.Keys[4]
	tests := []struct {
		name string
		at   time.Time
		want []keyring.Key // file 0, 1, …
	}{
		{"at issuedAt: active first", t0, []keyring.Key{A, S, D1, D2, D3}},
		{"one second before S activates", at(time.Hour - time.Second), []keyring.Key{A, S, D1, D2, D3}},
		{"S active, D3 expired", at(time.Hour), []keyring.Key{S, A, D1, D2}},
		{"every key expired", at(5 * time.Hour), nil},
	}
	for _, f := range []keyring.Format{keyring.FormatNginx, keyring.FormatEnvoy} {
		for _, tc := range tests {
			t.Run(string(f)+"/"+tc.name, func(t *testing.T) {
				files, err := r.Files(f, tc.at)
				if err != nil {
					t.Fatal(err)
				}
				if len(files) != len(tc.want) {
					t.Errorf("%d files %v, want %d", len(files), slices.Sorted(maps.Keys(files)), len(tc.want))
				}
				for i, k := range tc.want {
					name := fmt.Sprintf("%s.%d.key", f, i)
					got, ok := files[name]
					if !ok {
						t.Errorf("no file %s", name)
						continue
					}
					if len(got) != keyring.FormatKeySize {
						t.Errorf("%s: %d bytes, want %d", name, len(got), keyring.FormatKeySize)
					}
					if !bytes.Equal(got, derived(t, k, f)) {
						t.Errorf("%s does not hold the %s key of %s", name, f, k.ID)
					}
				}
			})
		}
	}
}

func TestFilesHAProxy(t *testing.T) {
	r := steadyRing()
	S, A, D1 := r.Keys[0], r.Keys[1], r.Keys[2]
	fresh := ringOf(std, 1, t0, at(time.Hour), t0) // a new ring: S staged, A active
	tests := []struct {
		name string
		ring keyring.Ring
		at   time.Time
		want []keyring.Key // the 3 lines: newest decrypt-only, active (encrypts), staged
	}{
		{"at issuedAt", r, t0, []keyring.Key{D1, A, S}},
		{"one second before S activates", r, at(time.Hour - time.Second), []keyring.Key{D1, A, S}},
		{"S active, no staged key yet: S repeated in the next slot", r, at(time.Hour), []keyring.Key{A, S, S}},
		{"a new ring of two keys: the active key repeated on the first line", fresh, t0, []keyring.Key{fresh.Keys[1], fresh.Keys[1], fresh.Keys[0]}},
		{"every key expired: no file", r, at(5 * time.Hour), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			files, err := tc.ring.Files(keyring.FormatHAProxy, tc.at)
			if err != nil {
				t.Fatal(err)
			}
			data, ok := files["haproxy.keys"]
			if tc.want == nil {
				if len(files) != 0 {
					t.Errorf("%d files, want none", len(files))
				}
				return
			}
			if !ok || len(files) != 1 {
				t.Fatalf("files %v, want only haproxy.keys", slices.Sorted(maps.Keys(files)))
			}
			if !bytes.HasSuffix(data, []byte("\n")) {
				t.Errorf("haproxy.keys does not end with a newline")
			}
			lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
			if len(lines) != keyring.HAProxySlots {
				t.Fatalf("%d lines, want the %d HAProxy keeps", len(lines), keyring.HAProxySlots)
			}
			for i, line := range lines {
				raw, err := base64.StdEncoding.DecodeString(line)
				if err != nil || len(raw) != keyring.FormatKeySize {
					t.Errorf("line %d: not base64 of %d bytes (%d bytes, %v)", i, keyring.FormatKeySize, len(raw), err)
					continue
				}
				if !bytes.Equal(raw, derived(t, tc.want[i], keyring.FormatHAProxy)) {
					t.Errorf("line %d does not hold the haproxy key of %s", i, tc.want[i].ID)
				}
			}
			// HAProxy encrypts with the next-to-last line: the key every
			// replica's clock calls active.
			active, _ := tc.ring.Active(tc.at)
			if lines[1] != base64.StdEncoding.EncodeToString(derived(t, active, keyring.FormatHAProxy)) {
				t.Errorf("next-to-last line is not the active key %s", active.ID)
			}
		})
	}
}

func TestFilesCilium(t *testing.T) {
	r := steadyRing() // S t0+1h, A t0, D1, D2, D3 (expires t0+1h)
	S, A, D1, D2, D3 := r.Keys[0], r.Keys[1], r.Keys[2], r.Keys[3], r.Keys[4]
	// The most a ring holds: a staged key, the active key and 16 retired.
	big := ringOf(keyring.Policy{RotationInterval: 10 * time.Minute, RetainedKeys: keyring.MaxRetainedKeys}, 30, t0,
		func() (afs []time.Time) {
			for i := 1; i >= -keyring.MaxRetainedKeys; i-- {
				afs = append(afs, at(time.Duration(i)*10*time.Minute))
			}
			return afs
		}()...)
	tests := []struct {
		name string
		ring keyring.Ring
		at   time.Time
		want []keyring.Key // tls.sessionticket.key, .1, .2, …
	}{
		{"at issuedAt: active, staged, decrypt-only newest first", r, t0, []keyring.Key{A, S, D1, D2, D3}},
		{"one second before S activates", r, at(time.Hour - time.Second), []keyring.Key{A, S, D1, D2, D3}},
		{"S active, D3 expired: the previous active key decrypts", r, at(time.Hour), []keyring.Key{S, A, D1, D2}},
		{"18 keys: the 8 newest decrypt-only keys fit", big, t0, nil},
		{"every key expired: no file", r, at(5 * time.Hour), nil},
	}
	tests[3].want = append([]keyring.Key{big.Keys[1], big.Keys[0]}, big.Keys[2:keyring.CiliumSlots]...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			files, err := tc.ring.Files(keyring.FormatCilium, tc.at)
			if err != nil {
				t.Fatal(err)
			}
			if len(files) != len(tc.want) {
				t.Errorf("%d files %v, want %d", len(files), slices.Sorted(maps.Keys(files)), len(tc.want))
			}
			for i, k := range tc.want {
				name := "tls.sessionticket.key"
				if i > 0 {
					name += fmt.Sprintf(".%d", i)
				}
				if keyring.CiliumFileName(i) != name {
					t.Errorf("CiliumFileName(%d) = %q, want %q", i, keyring.CiliumFileName(i), name)
				}
				got, ok := files[name]
				if !ok {
					t.Errorf("no file %s", name)
					continue
				}
				if !bytes.Equal(got, derived(t, k, keyring.FormatCilium)) {
					t.Errorf("%s does not hold the cilium key of %s", name, k.ID)
				}
			}
			// Envoy encrypts with tls.sessionticket.key: the key every
			// replica's clock calls active.
			if active, ok := tc.ring.Active(tc.at); ok && !bytes.Equal(files["tls.sessionticket.key"], derived(t, active, keyring.FormatCilium)) {
				t.Errorf("tls.sessionticket.key is not the active key %s", active.ID)
			}
		})
	}
}

// TestCiliumProjectionCurrent shows why a projection, which is ordered once
// per epoch (at its IssuedAt) and has no clock of its own, is enough for
// Cilium: under every policy, rotate-now requests and confirmation
// included, the operator's plan asks to be run again (RequeueAt) no later
// than the first instant the order of the ring's keys changes, and the
// epoch published then orders them anew. And the key that encrypts next is
// in the projection for the whole of the epoch before, so every Envoy
// decrypts its tickets before any issues one.
func TestCiliumProjectionCurrent(t *testing.T) {
	policies := []keyring.Policy{
		std,
		{RotationInterval: time.Minute, RetainedKeys: 0, ActivationDelay: 0},
		{RotationInterval: 10 * time.Minute, RetainedKeys: 12, ActivationDelay: 2 * time.Minute},
		{RotationInterval: time.Hour, RetainedKeys: 3, ActivationDelay: 3 * time.Minute, Confirm: &keyring.Confirm{Timeout: 10 * time.Minute, Promote: true}},
	}
	for _, p := range policies {
		for _, rotate := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s,%d,%s,confirm=%v/rotateNow=%v", p.RotationInterval, p.RetainedKeys, p.ActivationDelay, p.Confirm != nil, rotate), func(t *testing.T) {
				var cur keyring.Ring
				now, first := t0, map[string]time.Time{}
				var prevFiles map[string][]byte
				for step := range 120 {
					plan := keyring.Next(now, p, cur, keyring.Inputs{RotateNow: rotate && step%7 == 3, Confirmed: true,
						StagedSince: func(id string) (time.Time, bool) { t, ok := first[id]; return t, ok }})
					secrets := make([]keyring.Secret, plan.Mint)
					for i := range secrets {
						secrets[i] = secretOf(fmt.Sprintf("%d/%d", step, i))
					}
					next, err := plan.Fill(secrets)
					if err != nil {
						t.Fatal(err)
					}
					if plan.Changed {
						files, err := next.Files(keyring.FormatCilium, next.IssuedAt)
						if err != nil {
							t.Fatal(err)
						}
						// The key that now encrypts was in the previous projection.
						if prevFiles != nil {
							found := false
							for _, d := range prevFiles {
								found = found || bytes.Equal(d, files["tls.sessionticket.key"])
							}
							if !found {
								t.Fatalf("step %d: epoch %d encrypts with a key the previous projection did not hold", step, next.Epoch)
							}
						}
						prevFiles = files
						for _, k := range next.Keys {
							if _, ok := first[k.ID]; !ok {
								first[k.ID] = next.IssuedAt
							}
						}
					}
					cur = next
					change, ok := cur.NextChange(cur.IssuedAt)
					if !ok || plan.RequeueAt.IsZero() {
						t.Fatalf("step %d: nothing scheduled (change %v, requeue %v)", step, ok, plan.RequeueAt)
					}
					if plan.RequeueAt.After(change) {
						t.Fatalf("step %d: the order of epoch %d changes at %v, but the operator looks again only at %v", step, cur.Epoch, change, plan.RequeueAt)
					}
					now = plan.RequeueAt
				}
			})
		}
	}
}

func TestHAProxyKeys(t *testing.T) {
	r := steadyRing() // S t0+1h, A t0, D1, D2, D3
	S, A, D1 := r.Keys[0], r.Keys[1], r.Keys[2]
	two := ringOf(std, 3, t0, at(2*time.Hour), at(time.Hour), t0, at(-time.Hour)) // S2, S1 staged; A; D
	tests := []struct {
		name   string
		served []keyring.Key
		want   []keyring.Key
	}{
		{"steady: newest decrypt-only, active, staged", r.TicketKeys(t0), []keyring.Key{D1, A, S}},
		{"a staged key alone with the active key", []keyring.Key{A, S}, []keyring.Key{A, A, S}},
		{"no staged key", []keyring.Key{A, D1}, []keyring.Key{D1, A, A}},
		{"the active key alone", []keyring.Key{A}, []keyring.Key{A, A, A}},
		{"two staged keys: the soonest", two.TicketKeys(t0), []keyring.Key{two.Keys[3], two.Keys[2], two.Keys[1]}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := keyring.HAProxyKeys(tc.served)
			if !ok {
				t.Fatal("not ok")
			}
			if !slices.Equal(ids(got[:]), ids(tc.want)) {
				t.Errorf("HAProxyKeys = %v, want %v", ids(got[:]), ids(tc.want))
			}
		})
	}
	if _, ok := keyring.HAProxyKeys(nil); ok {
		t.Error("HAProxyKeys(nil) is ok")
	}
}

func TestShortfalls(t *testing.T) {
	all := []keyring.Format{keyring.FormatGo, keyring.FormatNginx, keyring.FormatHAProxy, keyring.FormatEnvoy}
	haproxy := []keyring.Shortfall{{Format: keyring.FormatHAProxy, Keeps: 1}}
	tests := []struct {
		name     string
		formats  []keyring.Format
		retained int
		want     []keyring.Shortfall
	}{
		{"no format", nil, 16, nil},
		{"every format, nothing retained", all, 0, nil},
		{"every format, one retained: HAProxy holds it", all, 1, nil},
		{"every format, two retained: HAProxy drops one", all, 2, haproxy},
		{"every format, the most retained", all, keyring.MaxRetainedKeys, haproxy},
		{"go, nginx and envoy keep every key", []keyring.Format{keyring.FormatGo, keyring.FormatNginx, keyring.FormatEnvoy}, keyring.MaxRetainedKeys, nil},
		{"haproxy listed twice is reported once", []keyring.Format{keyring.FormatHAProxy, keyring.FormatHAProxy}, 3, haproxy},
		{"cilium holds 8 decrypt-only keys", []keyring.Format{keyring.FormatCilium}, 8, nil},
		{"cilium drops the ninth", []keyring.Format{keyring.FormatGo, keyring.FormatCilium}, 9, []keyring.Shortfall{{Format: keyring.FormatCilium, Keeps: 8}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := keyring.Shortfalls(tc.formats, tc.retained); !slices.Equal(got, tc.want) {
				t.Errorf("Shortfalls(%v, %d) = %v, want %v", tc.formats, tc.retained, got, tc.want)
			}
		})
	}
}

func TestFilesOtherFormats(t *testing.T) {
	r := steadyRing()
	files, err := r.Files(keyring.FormatGo, t0)
	if err != nil || len(files) != 0 {
		t.Errorf("go format: %d files, %v; want none", len(files), err)
	}
	for _, f := range []keyring.Format{"", "NGINX", "openssl"} {
		files, err := r.Files(f, t0)
		if err == nil || files != nil {
			t.Errorf("Files(%q) = %d files, %v; want an error", f, len(files), err)
		}
	}
}

func TestFilesCarryNoSecret(t *testing.T) {
	r := steadyRing()
	for _, f := range []keyring.Format{keyring.FormatGo, keyring.FormatNginx, keyring.FormatHAProxy, keyring.FormatEnvoy, keyring.FormatCilium} {
		files, err := r.Files(f, t0)
		if err != nil {
			t.Fatal(err)
		}
		for name, data := range files {
			for _, k := range r.Keys {
				if bytes.Contains(data, k.Secret[:16]) || bytes.Contains(data, []byte(base64.StdEncoding.EncodeToString(k.Secret[:])[:16])) {
					t.Errorf("%s holds the ring secret of %s", name, k.ID)
				}
			}
		}
	}
}
