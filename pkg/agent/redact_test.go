package agent_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

// planted is the secret the hostile files carry, in every field position:
// no text the agent produces may show any 16 characters of it.
var planted = keyring.NewKey(keyring.Secret(sha256.Sum256([]byte("planted in a hostile file"))))

// fragmentLength is the length of the pieces of a secret looked for: 16
// characters of base64 are 12 bytes of key, of hex 8.
const fragmentLength = 16

// secretForms are the texts of s that a message could show: raw, base64
// (standard, URL-safe, unpadded) and hex (lower and upper case).
func secretForms(s keyring.Secret) map[string]string {
	return map[string]string{
		"raw":        string(s[:]),
		"base64":     base64.StdEncoding.EncodeToString(s[:]),
		"base64url":  base64.URLEncoding.EncodeToString(s[:]),
		"base64 raw": base64.RawStdEncoding.EncodeToString(s[:]),
		"hex":        hex.EncodeToString(s[:]),
		"HEX":        strings.ToUpper(hex.EncodeToString(s[:])),
	}
}

// assertNoFragment fails if text holds any fragmentLength characters of a
// form of s, and says how many characters of it the longest leak shows.
func assertNoFragment(t *testing.T, where, text string, s keyring.Secret) {
	t.Helper()
	for form, enc := range secretForms(s) {
		longest := 0
		for i := 0; i+fragmentLength <= len(enc); i++ {
			if !strings.Contains(text, enc[i:i+fragmentLength]) {
				continue
			}
			n := fragmentLength
			for i+n < len(enc) && strings.Contains(text, enc[i:i+n+1]) {
				n++
			}
			longest = max(longest, n)
		}
		if longest > 0 {
			t.Errorf("%s shows %d characters of the planted secret in %s:\n%s", where, longest, form, text)
		}
	}
}

// replaceFirst replaces the first old in data.
func replaceFirst(data []byte, old, new string) []byte {
	return []byte(strings.Replace(string(data), old, new, 1))
}

type hostile struct {
	name string
	data []byte
}

// hostileRings are the bad rings of TestBadInputKeepsLastGood's kinds, each
// with the planted secret (as base64, hex, or raw) in one field position.
func hostileRings(t *testing.T, good []byte) []hostile {
	p64 := base64.StdEncoding.EncodeToString(planted.Secret[:])
	phex := hex.EncodeToString(planted.Secret[:])
	edit := func(f func(m map[string]any)) []byte { return editRing(t, good, f) }
	key0 := func(m map[string]any) map[string]any { return m["keys"].([]any)[0].(map[string]any) }
	var out []hostile
	add := func(name string, data []byte) { out = append(out, hostile{name, data}) }
	for form, text := range map[string]string{"base64": p64, "hex": phex} {
		for _, field := range []string{"version", "ring", "epoch", "issuedAt", "keys"} {
			add(field+" holds the secret in "+form, edit(func(m map[string]any) { m[field] = text }))
		}
		for _, field := range []string{"id", "activeFrom", "retireAt", "expiresAt", "secret"} {
			add("key "+field+" holds the secret in "+form, edit(func(m map[string]any) { key0(m)[field] = text }))
		}
		add("a key is the secret in "+form, edit(func(m map[string]any) { m["keys"].([]any)[0] = text }))
		add("time with the secret after it in "+form, edit(func(m map[string]any) { key0(m)["expiresAt"] = "2026-01-01T00:00:00Z" + text }))
		add("time with the secret inside in "+form, edit(func(m map[string]any) { key0(m)["activeFrom"] = "2026-01-01T" + text }))
		add("unknown field named by the secret in "+form, replaceOnce(t, good, `"epoch"`, `"`+text+`": 1, "epoch"`))
		add("unknown key field named by the secret in "+form, replaceFirst(good, `"expiresAt"`, `"`+text+`": 1, "expiresAt"`))
		add("unknown field holding the secret in "+form, replaceOnce(t, good, `"epoch"`, `"extra": "`+text+`", "epoch"`))
		add("field in another case holding the secret in "+form, replaceOnce(t, good, `"epoch"`, `"Ring": "`+text+`", "epoch"`))
		add("field given twice, the second the secret in "+form, replaceOnce(t, good, `"epoch"`, `"ring": "`+text+`", "epoch"`))
		add("the whole file the secret in "+form, []byte(text))
		add("the whole file the secret quoted in "+form, []byte(`"`+text+`"`))
		add("the secret unquoted in "+form, replaceOnce(t, good, `"shop/web"`, text))
		add("trailing secret in "+form, append(append([]byte{}, good...), ` "`+text+`"`...))
		add("truncated in the secret in "+form, []byte(`{"version": 1, "ring": "`+text))
		add("version 2 beside the secret in "+form, edit(func(m map[string]any) { m["version"] = 2; m["ring"] = text }))
	}
	// Hex is of the alphabet of ring names: these rings are valid, and
	// refused as another ring than the one served.
	add("ring name of hex", edit(func(m map[string]any) { m["ring"] = "shop/" + phex[:60] }))
	add("cluster ring name of hex", edit(func(m map[string]any) { m["ring"] = phex[:60] }))
	// The secret where it belongs, with something else wrong around it.
	withSecret := func(f func(k map[string]any)) []byte {
		return edit(func(m map[string]any) {
			k := key0(m)
			k["secret"], k["id"] = p64, planted.ID
			f(k)
		})
	}
	add("secret with a wrong id", withSecret(func(k map[string]any) { k["id"] = "00000000" }))
	add("secret with times out of order", withSecret(func(k map[string]any) { k["retireAt"] = k["activeFrom"] }))
	add("secret with a bad time", withSecret(func(k map[string]any) { k["expiresAt"] = "soon" }))
	add("secret without padding", withSecret(func(k map[string]any) { k["secret"] = strings.TrimRight(p64, "=") }))
	add("secret with a newline", withSecret(func(k map[string]any) { k["secret"] = p64[:20] + "\n" + p64[20:] }))
	add("secret of the wrong length", withSecret(func(k map[string]any) {
		k["secret"] = base64.StdEncoding.EncodeToString(append(planted.Secret[:], planted.Secret[:8]...))
	}))
	add("secret in URL-safe base64", withSecret(func(k map[string]any) { k["secret"] = base64.URLEncoding.EncodeToString(planted.Secret[:]) }))
	add("the raw secret", append([]byte(`{"ring": "`), append(planted.Secret[:], `"}`...)...))
	return out
}

// TestNoSecretInAnyText: whatever field of ticketkeys.json holds a secret,
// no text the agent produces shows 16 characters of it: not New's error,
// not Status, the status handler, the metrics or the log of a running
// agent that refuses the file.
func TestNoSecretInAnyText(t *testing.T) {
	s := newSchedule(time.Now())
	good := s.ring(t, 6)
	for _, h := range hostileRings(t, good) {
		t.Run(h.name, func(t *testing.T) {
			v := newVolume(t)
			v.write(h.data, nil, nil)
			var newLogs logBuffer
			_, err := agent.New(agent.Options{Dir: v.dir, Ring: "shop/web", Clock: newFakeClock(s.t0), Logger: newLogs.logger()})
			if !errors.Is(err, agent.ErrTicketKeys) {
				t.Fatalf("New = %v, want ErrTicketKeys", err)
			}
			assertNoFragment(t, "New's error", err.Error(), planted.Secret)
			assertNoFragment(t, "New's log", newLogs.String(), planted.Secret)

			v.write(good, nil, nil)
			var logs logBuffer
			a, err := agent.New(agent.Options{Dir: v.dir, Clock: newFakeClock(s.t0), Logger: logs.logger(), ResyncPeriod: noResync, Debounce: -1})
			if err != nil {
				t.Fatal(err)
			}
			start(t, a)
			v.write(h.data, nil, nil)
			eventually(t, "the hostile file refused", func() bool { return a.Status().LastError != "" })

			assertNoFragment(t, "Status", mustStatusJSON(t, a), planted.Secret)
			rec := httptest.NewRecorder()
			a.StatusHandler().ServeHTTP(rec, httptest.NewRequest("GET", agent.StatusPath, nil))
			body, _ := io.ReadAll(rec.Body)
			assertNoFragment(t, "the status handler", string(body), planted.Secret)
			assertNoFragment(t, "the metrics", metricsText(t, a), planted.Secret)
			if n := len(logs.records(t, map[string]string{"msg": rejectedMsg})); n != 1 {
				t.Errorf("%d rejections logged, want 1", n)
			}
			assertNoFragment(t, "the log", logs.String(), planted.Secret)
			assertNoSecrets(t, "the log", logs.String(), s.k1, s.k2)
		})
	}
}
