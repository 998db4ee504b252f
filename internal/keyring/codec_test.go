package keyring_test

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

var update = flag.Bool("update", false, "rewrite testdata/ticketkeys.golden.json")

const goldenFile = "testdata/ticketkeys.golden.json"

// encoded is steadyRing as ticketkeys.json.
func encoded() []byte {
	data, err := keyring.Encode(steadyRing())
	if err != nil {
		panic(err)
	}
	return data
}

// mutate decodes encoded() as generic JSON, lets f change it, and encodes
// it again: inputs that Encode itself would never write.
func mutate(f func(m map[string]any)) []byte {
	var m map[string]any
	if err := json.Unmarshal(encoded(), &m); err != nil {
		panic(err)
	}
	f(m)
	data, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return data
}

// key returns key i of a mutated ring.
func key(m map[string]any, i int) map[string]any { return m["keys"].([]any)[i].(map[string]any) }

func b64(n int, fill byte) string {
	return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{fill}, n))
}

type badInput struct {
	name    string
	data    []byte
	wantErr string
}

// badInputs are inputs Decode must refuse, with a part of the message that
// names the problem.
func badInputs() []badInput {
	valid := encoded()
	zero := keyring.Secret{}
	return []badInput{
		{"empty input", nil, "parse ticketkeys.json: empty"},
		{"not an object", []byte(`[1,2]`), "parse ticketkeys.json"},
		{"unknown version", mutate(func(m map[string]any) { m["version"] = 2 }), "unsupported version: this reader knows version 1 only"},
		{"missing version", mutate(func(m map[string]any) { delete(m, "version") }), "unsupported version"},
		{"unknown field", mutate(func(m map[string]any) { m["activeKey"] = "x" }), "parse ticketkeys.json: the ring: unknown field"},
		{"unknown key field", mutate(func(m map[string]any) { key(m, 0)["state"] = "staged" }), "parse ticketkeys.json: keys[0]: unknown field"},
		{"trailing garbage", append(bytes.Clone(valid), " x"...), "trailing data"},
		{"trailing brace", append(bytes.Clone(valid), '}'), "trailing data"},
		{"trailing bracket", append(bytes.Clone(valid), "\n]"...), "trailing data"},
		{"trailing comma", append(bytes.Clone(valid), ',', ' '), "trailing data"},
		{"second ring", append(bytes.Clone(valid), valid...), "trailing data"},
		{"truncated JSON", valid[:len(valid)/2], "parse ticketkeys.json: unexpected end of input"},
		{"truncated by one byte", valid[:len(valid)-1], "parse ticketkeys.json: unexpected end of input"},
		{"epoch not a number", mutate(func(m map[string]any) { m["epoch"] = "42" }), "parse ticketkeys.json: epoch: a JSON string where an integer belongs"},
		{"time not RFC 3339", mutate(func(m map[string]any) { key(m, 1)["activeFrom"] = "yesterday" }), "key 1: activeFrom is not an RFC 3339 time"},
		{"huge time with control characters", mutate(func(m map[string]any) { key(m, 1)["activeFrom"] = "\x1b[2J" + strings.Repeat("9", 100000) }), "key 1: activeFrom is not an RFC 3339 time"},
		{"bad base64", mutate(func(m map[string]any) { key(m, 0)["secret"] = "not*base64!" }), "key 0: secret is not valid base64"},
		{"31-byte secret", mutate(func(m map[string]any) { key(m, 1)["secret"] = b64(31, 7) }), "secret is 31 bytes, want 32"},
		{"33-byte secret", mutate(func(m map[string]any) { key(m, 1)["secret"] = b64(33, 7) }), "secret is 33 bytes, want 32"},
		{"empty secret", mutate(func(m map[string]any) { key(m, 2)["secret"] = "" }), "key 2: secret is 0 bytes, want 32"},
		{"id not matching secret", mutate(func(m map[string]any) { key(m, 1)["id"] = "00000000" }), "key 1: id does not match its secret"},
		{"secret of another key", mutate(func(m map[string]any) { key(m, 1)["secret"] = key(m, 2)["secret"] }), "key 1: id does not match its secret"},
		{"duplicate ids", mutate(func(m map[string]any) {
			key(m, 1)["id"], key(m, 1)["secret"] = key(m, 0)["id"], key(m, 0)["secret"]
		}), "key 1: duplicate id \"" + idAt(time.Hour) + "\""},
		{"keys oldest first", mutate(func(m map[string]any) {
			ks := m["keys"].([]any)
			ks[0], ks[1] = ks[1], ks[0]
		}), "key 1 (id \"" + idAt(time.Hour) + "\"): activeFrom not before that of key 0: keys must be newest first"},
		{"two keys with one activeFrom", mutate(func(m map[string]any) { key(m, 0)["activeFrom"] = key(m, 1)["activeFrom"] }), "key 1 (id \"" + idAt(0) + "\"): activeFrom not before that of key 0"},
		{"activeFrom = retireAt", mutate(func(m map[string]any) { key(m, 1)["retireAt"] = key(m, 1)["activeFrom"] }), "key 1 (id \"" + idAt(0) + "\"): times out of order"},
		{"activeFrom > retireAt", mutate(func(m map[string]any) { key(m, 2)["activeFrom"] = t0.Add(time.Second) }), "key 2 (id \"" + idAt(-time.Hour) + "\"): times out of order"},
		{"expiresAt < retireAt", mutate(func(m map[string]any) { key(m, 3)["expiresAt"] = t0.Add(-time.Hour - time.Second) }), "key 3 (id \"" + idAt(-2*time.Hour) + "\"): times out of order"},
		{"missing activeFrom", mutate(func(m map[string]any) { delete(key(m, 4), "activeFrom") }), "key 4 (id \"" + idAt(-3*time.Hour) + "\"): times out of order"},
		{"keys null", mutate(func(m map[string]any) { m["keys"] = nil }), "ring has no keys"},
		{"keys missing", mutate(func(m map[string]any) { delete(m, "keys") }), "ring has no keys"},
		{"epoch 0", mutate(func(m map[string]any) { m["epoch"] = 0 }), "epoch is not positive"},
		{"negative epoch", mutate(func(m map[string]any) { m["epoch"] = -3 }), "epoch is not positive"},
		{"empty name", mutate(func(m map[string]any) { m["ring"] = "" }), "ring name is empty"},
		{"missing issuedAt", mutate(func(m map[string]any) { delete(m, "issuedAt") }), "issuedAt is missing"},
		{"zero issuedAt", mutate(func(m map[string]any) { m["issuedAt"] = time.Time{} }), "issuedAt is missing"},
		{"all-zero secret", mutate(func(m map[string]any) {
			key(m, 4)["secret"], key(m, 4)["id"] = b64(32, 0), keyring.KeyID(zero)
		}), "key 4 (id \"" + keyring.KeyID(zero) + "\"): secret is all zero"},
		// What encoding/json alone lets through.
		{"field name in another case", replace(valid, `"epoch"`, `"Epoch"`), `the ring: a field name in another case than "epoch": field names are case-sensitive`},
		{"both cases of a field", replace(valid, `"epoch": 10,`, `"epoch": 10, "EPOCH": 11,`), `the ring: a field name in another case than "epoch"`},
		{"key field in another case", replace(valid, `"secret"`, `"Secret"`), `keys[0]: a field name in another case than "secret"`},
		{"field name folding to keys (Kelvin sign)", replace(valid, `"keys"`, "\"\u212aeys\""), `the ring: a field name in another case than "keys"`},
		{"field name folding to secret (long s)", replace(valid, `"secret"`, "\"\u017fecret\""), "field names are case-sensitive"},
		{"duplicate field", replace(valid, `"epoch": 10,`, `"epoch": 10, "epoch": 11,`), `the ring: field "epoch" given twice`},
		{"duplicate field, same value", replace(valid, `"epoch": 10,`, `"epoch": 10, "epoch": 10,`), `the ring: field "epoch" given twice`},
		{"duplicate key field", replace(valid, `"secret"`, `"id": "00000000", "secret"`), `keys[0]: field "id" given twice`},
		{"unknown field given twice", replace(valid, `"epoch": 10,`, `"x": 1, "x": 2, "epoch": 10,`), "the ring: unknown field"},
		{"unknown field with a long name", replace(valid, `"epoch": 10,`, `"`+strings.Repeat("x", 1000)+`": 1, "epoch": 10,`), "the ring: unknown field"},
		{"invalid UTF-8 in the name", replace(valid, `"shop/web"`, "\"shop/w\xffb\""), "not valid UTF-8"},
		{"invalid UTF-8 in an unknown field", replace(valid, `"epoch": 10,`, "\"\xc3\": 1, \"epoch\": 10,"), "not valid UTF-8"},
		{"secret with a newline", mutate(func(m map[string]any) {
			s := key(m, 0)["secret"].(string)
			key(m, 0)["secret"] = s[:20] + "\n" + s[20:]
		}), "secret is not in standard padded base64"},
		{"secret without padding", mutate(func(m map[string]any) { key(m, 0)["secret"] = strings.TrimRight(key(m, 0)["secret"].(string), "=") }), "secret is not valid base64"},
		{"secret with stray padding bits", mutate(func(m map[string]any) {
			s := key(m, 0)["secret"].(string) // 32 bytes: 43 characters and "="; the last one carries 2 unused bits
			last := strings.IndexByte(b64alphabet, s[42])
			key(m, 0)["secret"] = s[:42] + string(b64alphabet[last|1]) + "="
		}), "secret is not in standard padded base64"},
		{"id not hex", mutate(func(m map[string]any) { key(m, 1)["id"] = "ID-1" }), "key 1: id is not 8 lowercase hex digits"},
		{"id in upper case", mutate(func(m map[string]any) { key(m, 1)["id"] = strings.ToUpper(idAt(0)) }), "is not 8 lowercase hex digits"},
		{"id huge", mutate(func(m map[string]any) { key(m, 1)["id"] = strings.Repeat("f", 5000) }), "key 1: id is not 8 lowercase hex digits"},
		// Ring names the API cannot produce.
		{"name in upper case", mutate(func(m map[string]any) { m["ring"] = "Shop/web" }), "ring name is not"},
		{"name with control characters", mutate(func(m map[string]any) { m["ring"] = "shop/web\n\x1b[31m" }), "ring name is not"},
		{"name with two slashes", mutate(func(m map[string]any) { m["ring"] = "a/b/c" }), "ring name"},
		{"name without a namespace", mutate(func(m map[string]any) { m["ring"] = "/web" }), "ring name"},
		{"name with only a namespace", mutate(func(m map[string]any) { m["ring"] = "shop/" }), "ring name"},
		{"namespace with a dot", mutate(func(m map[string]any) { m["ring"] = "sh.op/web" }), "ring name"},
		{"name of 64 characters", mutate(func(m map[string]any) { m["ring"] = "shop/" + strings.Repeat("w", 64) }), "ring name"},
		{"name huge", mutate(func(m map[string]any) { m["ring"] = strings.Repeat("w", 100000) }), "ring name is not"},
		// Times Encode cannot write back (JSON times are years 0-9999 in UTC).
		{"expiresAt past year 9999 in UTC", mutate(func(m map[string]any) { key(m, 0)["expiresAt"] = "9999-12-31T23:30:00-01:00" }), "key 0 (id \"" + idAt(time.Hour) + "\"): times outside years 0-9999"},
		{"issuedAt before year 0 in UTC", mutate(func(m map[string]any) { m["issuedAt"] = "0000-01-01T00:30:00+01:00" }), "issuedAt is outside years 0-9999"},
	}
}

// replace returns data with the first old replaced by new, failing loudly
// when old is absent so that a change of the encoding cannot void a test.
func replace(data []byte, old, new string) []byte {
	if !bytes.Contains(data, []byte(old)) {
		panic("replace: " + old + " not found")
	}
	return bytes.Replace(data, []byte(old), []byte(new), 1)
}

const b64alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

func TestDecodeRejects(t *testing.T) {
	for _, tc := range badInputs() {
		t.Run(tc.name, func(t *testing.T) {
			r, err := keyring.Decode(tc.data)
			if err == nil {
				t.Fatalf("Decode accepted it (epoch %d, keys %v)", r.Epoch, ids(r.Keys))
			}
			if !errors.Is(err, keyring.ErrInvalidRing) {
				t.Errorf("error %q does not wrap ErrInvalidRing", err)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %q\ndoes not contain %q", err, tc.wantErr)
			}
			if len(r.Keys) != 0 || r.Epoch != 0 || r.Name != "" {
				t.Errorf("Decode returned a ring with its error")
			}
			// The message lands in logs and Status: bounded, and printable.
			if msg := err.Error(); len(msg) > 400 || strings.ContainsFunc(msg, func(c rune) bool { return c < ' ' || c == 0x7f }) {
				t.Errorf("error is %d bytes or holds control characters: %q", len(msg), msg)
			}
			assertNoSecretIn(t, err, tc.data)
		})
	}
}

var secretField = regexp.MustCompile(`"secret"\s*:\s*"([^"\\]*)"`)

// assertNoSecretIn fails when err shows the secret of any key in data, in
// base64 (as written) or in hex, whole or in part.
func assertNoSecretIn(t *testing.T, err error, data []byte) {
	t.Helper()
	msg := err.Error()
	for _, m := range secretField.FindAllSubmatch(data, -1) {
		s := string(m[1])
		if len(s) >= 8 && strings.Contains(msg, s[:8]) {
			t.Errorf("error %q shows secret %q…", msg, s[:8])
		}
		if raw, err := base64.StdEncoding.DecodeString(s); err == nil && len(raw) >= 4 {
			if h := hex.EncodeToString(raw[:4]); strings.Contains(msg, h) {
				t.Errorf("error %q shows secret bytes %s…", msg, h)
			}
		}
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	east := time.FixedZone("UTC+3", 3*3600)
	nanos := ringOf(std, 7, at(123456789).In(east), at(time.Hour+987654321).In(east), at(1).In(east))
	retained0 := ringOf(keyring.Policy{RotationInterval: time.Hour}, 1, t0, at(time.Hour), t0) // retireAt = expiresAt
	for name, r := range map[string]keyring.Ring{
		"steady ring":                        steadyRing(),
		"times with nanoseconds, not in UTC": nanos,
		"retainedKeys 0: retireAt=expiresAt": retained0,
		"one key":                            {Name: "a/b", Epoch: 1 << 62, IssuedAt: t0, Keys: steadyRing().Keys[:1]},
		"cluster-scoped ring":                {Name: "edge.v2", Epoch: 1, IssuedAt: t0, Keys: steadyRing().Keys[1:]},
		"longest names":                      {Name: strings.Repeat("n", 63) + "/" + strings.Repeat("a.", 31) + "b", Epoch: 1, IssuedAt: t0, Keys: steadyRing().Keys[1:]},
	} {
		t.Run(name, func(t *testing.T) {
			data, err := keyring.Encode(r)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			back, err := keyring.Decode(data)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if d := ringDiff(back, r); d != "" {
				t.Errorf("round trip: %s", d)
			}
			for _, x := range append([]time.Time{back.IssuedAt}, back.Keys[0].ActiveFrom, back.Keys[0].ExpiresAt) {
				if x.Location() != time.UTC {
					t.Errorf("decoded time %v is not in UTC", x)
				}
			}
			again, err := keyring.Encode(back)
			if err != nil || !bytes.Equal(again, data) {
				t.Errorf("Encode(Decode(x)) != x (%v)", err)
			}
		})
	}
}

// TestDecodeAcceptsSameMeaning: inputs Encode would not write byte for
// byte, but whose every field is exactly what Encode writes, read as the
// same ring.
func TestDecodeAcceptsSameMeaning(t *testing.T) {
	valid := encoded()
	var compact bytes.Buffer
	if err := json.Compact(&compact, valid); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"compact":                 compact.Bytes(),
		"escaped field name":      replace(valid, `"epoch"`, `"ep\u006fch"`),
		"escaped name characters": replace(valid, `"shop/web"`, `"shop\/w\u0065b"`),
		"fields in another order": mutate(func(map[string]any) {}), // json.Marshal sorts keys
		"times with offsets":      mutate(func(m map[string]any) { m["issuedAt"] = "2026-03-01T15:00:00+03:00" }),
	} {
		t.Run(name, func(t *testing.T) {
			r, err := keyring.Decode(data)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if d := ringDiff(r, steadyRing()); d != "" {
				t.Errorf("Decode: %s", d)
			}
		})
	}
}

func TestValidRingName(t *testing.T) {
	for name, want := range map[string]bool{
		"shop/web":                               true,
		"web":                                    true, // a ClusterTicketKeyRing
		"shop/web.v2":                            true,
		"kube-system/a-b.c-d":                    true,
		"0/0":                                    true,
		strings.Repeat("n", 63) + "/web":         true,
		"shop/" + strings.Repeat("w", 63):        true,
		strings.Repeat("w", 63):                  true,
		"":                                       false,
		"/":                                      false,
		"shop/":                                  false,
		"/web":                                   false,
		"a/b/c":                                  false,
		strings.Repeat("n", 64) + "/web":         false,
		"shop/" + strings.Repeat("w", 64):        false,
		strings.Repeat("w", 64):                  false,
		"Shop/web":                               false,
		"shop/Web":                               false,
		"sh.op/web":                              false, // a namespace is a label
		"shop/web.":                              false,
		"shop/.web":                              false,
		"shop/we..b":                             false,
		"shop/-web":                              false,
		"shop/web-":                              false,
		"-shop/web":                              false,
		"shop/we_b":                              false,
		"shop/we b":                              false,
		"shop/wéb":                               false,
		"shop/web\n":                             false,
		"shop/web\x00":                           false,
		"shop\\web":                              false,
		strings.Repeat("a.", 31) + "bc":          false, // 64 characters of labels
		strings.Repeat("a.", 31) + "b":           true,  // 63
		"shop/" + strings.Repeat("a.", 31) + "b": true,
	} {
		if got := keyring.ValidRingName(name); got != want {
			t.Errorf("ValidRingName(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestEncodeGolden pins the ticketkeys.json format of DESIGN.md: field names,
// UTC RFC 3339 times, standard base64 secrets. Run with -update to rewrite.
func TestEncodeGolden(t *testing.T) {
	data := encoded()
	if *update {
		if err := os.WriteFile(goldenFile, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(filepath.FromSlash(goldenFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, want) {
		t.Errorf("Encode(steadyRing()) differs from %s:\n%s", goldenFile, data)
	}
	r, err := keyring.Decode(want)
	if err != nil {
		t.Fatalf("Decode(golden): %v", err)
	}
	if d := ringDiff(r, steadyRing()); d != "" {
		t.Errorf("Decode(golden): %s", d)
	}

	// DESIGN.md's example shape, on one line, reads too.
	var compact bytes.Buffer
	if err := json.Compact(&compact, want); err != nil {
		t.Fatal(err)
	}
	if _, err := keyring.Decode(compact.Bytes()); err != nil {
		t.Errorf("Decode(compact golden): %v", err)
	}
}

func TestEncodeRefusesInvalidRing(t *testing.T) {
	good := steadyRing()
	swapped := steadyRing()
	swapped.Keys[0], swapped.Keys[1] = swapped.Keys[1], swapped.Keys[0]
	wrongID := steadyRing()
	wrongID.Keys[2].ID = "deadbeef"
	var afs []time.Time
	for i := range keyring.MaxKeys + 1 {
		afs = append(afs, at(time.Duration(1-i)*time.Hour))
	}
	tooMany := ringOf(keyring.Policy{RotationInterval: time.Hour, RetainedKeys: keyring.MaxKeys - 1, ActivationDelay: time.Minute}, 3, t0, afs...)
	for name, r := range map[string]keyring.Ring{
		"more keys than agents accept": tooMany,
		"zero ring":                    {},
		"no name":                      {Epoch: good.Epoch, IssuedAt: good.IssuedAt, Keys: good.Keys},
		"keys oldest first":            swapped,
		"wrong id":                     wrongID,
		"unminted key":                 {Name: good.Name, Epoch: 1, IssuedAt: t0, Keys: []keyring.Key{{ActiveFrom: t0, RetireAt: at(time.Hour), ExpiresAt: at(time.Hour)}}},
		"name the API cannot produce":  {Name: "shop/web\n", Epoch: good.Epoch, IssuedAt: good.IssuedAt, Keys: good.Keys},
	} {
		t.Run(name, func(t *testing.T) {
			data, err := keyring.Encode(r)
			if !errors.Is(err, keyring.ErrInvalidRing) || data != nil {
				t.Errorf("Encode = %d bytes, %v; want ErrInvalidRing", len(data), err)
			}
		})
	}
}

// FuzzDecode: Decode never panics, refuses with ErrInvalidRing and without
// key bytes in the message, and whatever it accepts means what Encode then
// writes: the same fields under the same exact names, each once, with the
// same values (times as instants, secrets as bytes), and valid UTF-8.
// Decode(Encode(r)) is r again, and Encode is stable.
//
//	go test ./internal/keyring/ -run '^$' -fuzz FuzzDecode -fuzztime 1m
func FuzzDecode(f *testing.F) {
	valid := encoded()
	f.Add(valid)
	var compact bytes.Buffer
	if err := json.Compact(&compact, valid); err != nil {
		f.Fatal(err)
	}
	f.Add(compact.Bytes())
	f.Add(mutate(func(m map[string]any) { m["keys"] = m["keys"].([]any)[:1] }))
	f.Add(mutate(func(m map[string]any) { m["issuedAt"] = "2026-03-01T15:00:00.123456789+03:00" }))
	f.Add(mutate(func(m map[string]any) { m["ring"] = "edge" }))
	f.Add(replace(valid, `"epoch"`, `"ep\u006fch"`))
	for _, b := range badInputs() {
		f.Add(b.data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := keyring.Decode(data)
		if err != nil {
			if !errors.Is(err, keyring.ErrInvalidRing) {
				t.Fatalf("error %q does not wrap ErrInvalidRing", err)
			}
			if len(r.Keys) != 0 {
				t.Fatalf("keys returned with error %q", err)
			}
			// Only for a secret written once: a mutation may have copied
			// it into a field whose value the error quotes.
			for _, m := range secretField.FindAllSubmatch(data, -1) {
				if s := m[1]; len(s) >= 16 && bytes.Count(data, s) == 1 && strings.Contains(err.Error(), string(s)) {
					t.Fatalf("error %q shows a secret", err)
				}
			}
			return
		}
		if !utf8.Valid(data) {
			t.Fatal("Decode accepted invalid UTF-8")
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("Decode accepted an invalid ring: %v", err)
		}
		out, err := keyring.Encode(r)
		if err != nil {
			t.Fatalf("Decode accepted a ring Encode refuses: %v", err)
		}
		in, err := meaning(data)
		if err != nil {
			t.Fatalf("Decode accepted input whose meaning is ambiguous: %v", err)
		}
		written, err := meaning(out)
		if err != nil {
			t.Fatalf("Encode wrote ambiguous output: %v", err)
		}
		if d := meaningDiff(in, written); d != "" {
			t.Fatalf("Encode(Decode(x)) means something else than x: %s", d)
		}
		back, err := keyring.Decode(out)
		if err != nil {
			t.Fatalf("Decode(Encode(r)): %v", err)
		}
		if d := ringDiff(back, r); d != "" {
			t.Fatalf("Decode(Encode(r)) != r: %s", d)
		}
		if again, err := keyring.Encode(back); err != nil || !bytes.Equal(again, out) {
			t.Fatalf("Encode is not stable: %v", err)
		}
	})
}

// meaning flattens a JSON document into its values by path ("keys.0.id"),
// with field names exactly as written (escapes resolved). It fails on a
// path given twice and on trailing data: what a reader that took the JSON
// literally, case and all, would have to refuse. Times become instants in
// UTC and secrets their bytes in hex, the only liberties Encode takes.
func meaning(data []byte) (map[string]string, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	out := map[string]string{}
	set := func(path, v string) error {
		if _, dup := out[path]; dup {
			return fmt.Errorf("%s given twice", path)
		}
		out[path] = v
		return nil
	}
	var walk func(path string) error
	walk = func(path string) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		d, ok := tok.(json.Delim)
		if !ok {
			return set(path, normalize(path, tok))
		}
		if err := set(path, d.String()); err != nil {
			return err
		}
		for i := 0; dec.More(); i++ {
			sub := path + "." + strconv.Itoa(i)
			if d == '{' {
				name, err := dec.Token()
				if err != nil {
					return err
				}
				sub = path + "." + name.(string)
			}
			if err := walk(sub); err != nil {
				return err
			}
		}
		_, err = dec.Token()
		return err
	}
	if err := walk(""); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data")
	}
	return out, nil
}

func normalize(path string, v any) string {
	field := path[strings.LastIndexByte(path, '.')+1:]
	switch v := v.(type) {
	case string:
		switch field {
		case "issuedAt", "activeFrom", "retireAt", "expiresAt":
			if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
				return "time " + t.UTC().Format(time.RFC3339Nano)
			}
		case "secret":
			if b, err := base64.StdEncoding.DecodeString(v); err == nil {
				return "bytes " + hex.EncodeToString(b)
			}
		}
		return "string " + strconv.Quote(v)
	case json.Number:
		if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return "int " + strconv.FormatInt(n, 10)
		}
		return "number " + string(v)
	default:
		return fmt.Sprintf("%T %v", v, v)
	}
}

// meaningDiff names the paths whose values differ, without the values:
// they include secrets.
func meaningDiff(a, b map[string]string) string {
	var d []string
	for p, v := range a {
		if w, ok := b[p]; !ok {
			d = append(d, "only in the input: "+p)
		} else if v != w {
			d = append(d, "differs: "+p)
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			d = append(d, "only in the output: "+p)
		}
	}
	slices.Sort(d)
	return strings.Join(d, "; ")
}
