package keyring_test

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

// planted is the secret placed where it does not belong.
var planted = keyring.NewKey(secretOf("planted"))

// leaked returns how many characters of s, in its longest run of at least
// 16, text shows in raw, base64 or hex form; 0 when none.
func leaked(text string, s keyring.Secret) (n int, form string) {
	for f, enc := range map[string]string{
		"raw":       string(s[:]),
		"base64":    base64.StdEncoding.EncodeToString(s[:]),
		"base64url": base64.URLEncoding.EncodeToString(s[:]),
		"hex":       hex.EncodeToString(s[:]),
		"HEX":       strings.ToUpper(hex.EncodeToString(s[:])),
		"decimal":   decimal(s[:]),
	} {
		for i := 0; i+16 <= len(enc); i++ {
			m := 0
			for i+m < len(enc) && strings.Contains(text, enc[i:i+m+1]) {
				m++
			}
			if m >= 16 && m > n {
				n, form = m, f
			}
		}
	}
	return n, form
}

// decimal is b as %v prints a byte slice, without the brackets.
func decimal(b []byte) string {
	parts := make([]string, len(b))
	for i, c := range b {
		parts[i] = strconv.Itoa(int(c))
	}
	return strings.Join(parts, " ")
}

func assertNoLeak(t *testing.T, where, text string, secrets ...keyring.Secret) {
	t.Helper()
	for _, s := range secrets {
		if n, form := leaked(text, s); n > 0 {
			t.Errorf("%s shows %d characters of a secret in %s: %s", where, n, form, text)
		}
	}
}

// TestDecodeErrorsQuoteNoField: a secret, in base64 or hex, in any field of
// ticketkeys.json, as a field name, or as the whole file, shows in no part
// of Decode's error, whatever the problem found.
func TestDecodeErrorsQuoteNoField(t *testing.T) {
	p64 := base64.StdEncoding.EncodeToString(planted.Secret[:])
	phex := hex.EncodeToString(planted.Secret[:])
	valid := encoded()
	cases := map[string][]byte{}
	for form, text := range map[string]string{"base64": p64, "hex": phex} {
		for _, field := range []string{"version", "ring", "epoch", "issuedAt", "keys"} {
			cases[field+" in "+form] = mutate(func(m map[string]any) { m[field] = text })
		}
		for _, field := range []string{"id", "activeFrom", "retireAt", "expiresAt", "secret"} {
			cases["key "+field+" in "+form] = mutate(func(m map[string]any) { key(m, 1)[field] = text })
			cases["key "+field+" after a time in "+form] = mutate(func(m map[string]any) { key(m, 1)[field] = "2026-03-01T12:00:00Z" + text })
			cases["key "+field+" as an object in "+form] = mutate(func(m map[string]any) { key(m, 1)[field] = map[string]any{text: text} })
		}
		cases["a key in "+form] = mutate(func(m map[string]any) { m["keys"].([]any)[1] = text })
		cases["unknown field named in "+form] = replace(valid, `"epoch"`, `"`+text+`": 1, "epoch"`)
		cases["unknown key field named in "+form] = replace(valid, `"secret"`, `"`+text+`": 1, "secret"`)
		cases["unknown field holding it in "+form] = replace(valid, `"epoch"`, `"x": "`+text+`", "epoch"`)
		cases["field in another case holding it in "+form] = replace(valid, `"epoch"`, `"Ring": "`+text+`", "epoch"`)
		cases["field given twice, then it in "+form] = replace(valid, `"epoch"`, `"ring": "`+text+`", "epoch"`)
		cases["whole file in "+form] = []byte(text)
		cases["whole file quoted in "+form] = []byte(`"` + text + `"`)
		cases["unquoted in "+form] = replace(valid, `"shop/web"`, text)
		cases["trailing in "+form] = append(bytes.Clone(valid), ` "`+text+`"`...)
		cases["truncated in "+form] = []byte(`{"version": 1, "ring": "` + text)
		cases["number beside it in "+form] = replace(valid, `"epoch": 10`, `"epoch": 1`+strings.Repeat("0", 30)+`, "x": "`+text+`"`)
	}
	// Valid names of hex digits.
	cases["ring name of hex"] = mutate(func(m map[string]any) { m["ring"] = "shop/" + phex[:60] + "-" })
	cases["secret with a wrong id"] = mutate(func(m map[string]any) { key(m, 1)["secret"] = p64 })
	cases["secret with times out of order"] = mutate(func(m map[string]any) {
		key(m, 1)["secret"], key(m, 1)["id"], key(m, 1)["retireAt"] = p64, planted.ID, key(m, 1)["activeFrom"]
	})
	cases["secret unpadded"] = mutate(func(m map[string]any) { key(m, 1)["secret"] = strings.TrimRight(p64, "=") })
	cases["secret with a newline"] = mutate(func(m map[string]any) { key(m, 1)["secret"] = p64[:20] + "\n" + p64[20:] })
	cases["secret too long"] = mutate(func(m map[string]any) {
		key(m, 1)["secret"] = base64.StdEncoding.EncodeToString(append(planted.Secret[:], planted.Secret[:]...))
	})
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := keyring.Decode(data)
			if !errors.Is(err, keyring.ErrInvalidRing) {
				t.Fatalf("Decode = %v, want ErrInvalidRing", err)
			}
			assertNoLeak(t, "error", err.Error(), planted.Secret)
			for _, k := range steadyRing().Keys {
				assertNoLeak(t, "error", err.Error(), k.Secret)
			}
		})
	}
}

// TestTypesRedactSecrets: a secret, a key, a ring, a plan, a record and a
// history show no key byte in any fmt verb, in log/slog, in logr or in
// encoding/json; a key shows its id, a ring its name and epoch.
func TestTypesRedactSecrets(t *testing.T) {
	ring := steadyRing()
	k := ring.Keys[1]
	plan := keyring.Next(at(10*time.Hour), keyring.Policy{RotationInterval: time.Hour, RetainedKeys: 3, ActivationDelay: time.Minute}, ring, keyring.Inputs{})
	history, err := keyring.NewHistory([]keyring.Record{{Epoch: ring.Epoch, Ring: ring, RotateRequest: "r1"}})
	if err != nil {
		t.Fatal(err)
	}
	var secrets []keyring.Secret
	for _, k := range ring.Keys {
		secrets = append(secrets, k.Secret)
	}
	values := []struct {
		name  string
		v     any
		shows string // what %v must show
	}{
		{"Secret", k.Secret, "[redacted]"},
		{"*Secret", &k.Secret, "[redacted]"},
		{"Key", k, k.ID},
		{"*Key", &k, k.ID},
		{"[]Key", ring.Keys, k.ID},
		{"Ring", ring, ring.Name},
		{"*Ring", &ring, k.ID},
		{"Plan", plan, ring.Name},
		{"Record", keyring.Record{Epoch: ring.Epoch, Ring: ring}, k.ID},
		{"History", history, ring.Name},
		{"a struct of them", struct {
			K keyring.Key
			R keyring.Ring
			S keyring.Secret
		}{k, ring, k.Secret}, k.ID},
		{"a map of them", map[string]keyring.Key{"k": k}, k.ID},
	}
	for _, tc := range values {
		t.Run(tc.name, func(t *testing.T) {
			for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%10.3v"} {
				out := fmt.Sprintf(verb, tc.v)
				assertNoLeak(t, verb, out, secrets...)
				if verb == "%v" && !strings.Contains(out, tc.shows) {
					t.Errorf("%%v = %s, want it to show %s", out, tc.shows)
				}
			}
			assertNoLeak(t, "Sprint", fmt.Sprint(tc.v), secrets...)
			var b bytes.Buffer
			slog.New(slog.NewJSONHandler(&b, nil)).Info("m", "v", tc.v)
			slog.New(slog.NewTextHandler(&b, nil)).Info("m", "v", tc.v)
			assertNoLeak(t, "slog", b.String(), secrets...)
			var logr string
			funcr.New(func(prefix, args string) { logr += args }, funcr.Options{}).Info("m", "v", tc.v)
			assertNoLeak(t, "logr", logr, secrets...)
			j, err := json.Marshal(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			assertNoLeak(t, "json", string(j), secrets...)
		})
	}

	// The codec still writes the secrets, and reads them back.
	data, err := keyring.Encode(ring)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), base64.StdEncoding.EncodeToString(k.Secret[:])) {
		t.Error("Encode no longer writes the secrets")
	}
	back, err := keyring.Decode(data)
	if err != nil || back.Keys[1].Secret != k.Secret {
		t.Errorf("Decode(Encode(ring)) lost the secret: %v", err)
	}
}
