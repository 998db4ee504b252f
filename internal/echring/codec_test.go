package echring_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/echring"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// sampleRing is a ring in every state: staged 12, published 11, retired 10.
func sampleRing(t *testing.T) echring.Ring {
	t.Helper()
	r := echring.Ring{Ring: "shop/web", Epoch: 7, IssuedAt: t0.Add(3 * time.Hour)}
	for i, id := range []uint8{12, 11, 10} {
		c, err := echring.NewConfig(id, seed(byte(20+i)), params)
		if err != nil {
			t.Fatal(err)
		}
		c.CreatedAt = t0.Add(-time.Duration(i) * 24 * time.Hour)
		c.ExpiresAt = c.CreatedAt.Add(10 * 24 * time.Hour)
		switch i {
		case 1:
			c.State, c.PublishedAt = echring.Published, c.CreatedAt.Add(time.Hour)
		case 2:
			c.State, c.PublishedAt, c.RetiredAt = echring.Retired, c.CreatedAt.Add(time.Hour), c.CreatedAt.Add(25*time.Hour)
			c.ExpiresAt = c.RetiredAt.Add(2 * time.Hour)
		}
		r.Configs = append(r.Configs, c)
	}
	return r
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	r := sampleRing(t)
	data, err := echring.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := echring.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Errorf("Decode(Encode(r)) = %#v, want %#v", got, r)
	}
	again, err := echring.Encode(got)
	if err != nil || !bytes.Equal(again, data) {
		t.Errorf("Encode(Decode(data)) differs from data (err %v)", err)
	}
	// The file carries what the contract says, zero times left out.
	var f map[string]any
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	staged := f["configs"].([]any)[0].(map[string]any)
	if _, ok := staged["publishedAt"]; ok || staged["state"] != "staged" || staged["id"] != 12.0 {
		t.Errorf("staged config written as %v", staged)
	}
	if p := r.Published(); len(p) != 1 || p[0].ID != 11 {
		t.Errorf("Published = %v, want config 11 alone", p)
	}
}

// mutate returns the sample ring's file with edit applied to its JSON.
func mutate(t *testing.T, edit func(f map[string]any, cs []map[string]any)) []byte {
	t.Helper()
	data, err := echring.Encode(sampleRing(t))
	if err != nil {
		t.Fatal(err)
	}
	var f map[string]any
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	var cs []map[string]any
	for _, c := range f["configs"].([]any) {
		cs = append(cs, c.(map[string]any))
	}
	edit(f, cs)
	out, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A ring whose every config expired while it could mint none (its name
// claimed, its DNS down) is an epoch with no config: its file destroys the
// last key bytes, and readers serve no ECH.
func TestEmptyRingRoundTrips(t *testing.T) {
	r := sampleRing(t)
	r.Configs = []echring.Config{}
	data, err := echring.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := echring.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Configs) != 0 || got.Epoch != r.Epoch {
		t.Errorf("Decode(Encode(empty ring)) = epoch %d, %d configs", got.Epoch, len(got.Configs))
	}
}

func TestDecodeRefuses(t *testing.T) {
	r := sampleRing(t)
	b64 := base64.StdEncoding.EncodeToString
	good, err := echring.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	// A fourth and fifth config, to exceed MaxConfigs.
	var extra []any
	for i := range 2 {
		c, err := echring.NewConfig(uint8(1+i), seed(byte(40+i)), params)
		if err != nil {
			t.Fatal(err)
		}
		extra = append(extra, map[string]any{"id": int(c.ID), "state": "retired", "config": b64(c.Config), "privateKey": b64(c.PrivateKey),
			"createdAt": t0.Add(-10 * 24 * time.Hour), "publishedAt": t0.Add(-9 * 24 * time.Hour), "retiredAt": t0.Add(-8 * 24 * time.Hour), "expiresAt": t0.Add(-7 * 24 * time.Hour)})
	}
	other, err := echring.NewConfig(12, seed(99), echring.Params{PublicName: "other.example.test"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "empty"},
		{"not JSON", []byte("{"), "unexpected end of input"},
		{"invalid UTF-8", append(bytes.Clone(good[:len(good)-1]), 0xff, '}'), "not valid UTF-8"},
		{"trailing data", append(bytes.Clone(good), []byte("{}")...), "trailing data"},
		{"version 2", mutate(t, func(f map[string]any, _ []map[string]any) { f["version"] = 2 }), "unsupported version"},
		{"unknown field", mutate(t, func(f map[string]any, _ []map[string]any) { f["keys"] = []any{} }), "the ECH ring: unknown field"},
		{"unknown config field", mutate(t, func(_ map[string]any, cs []map[string]any) { cs[1]["secret"] = "x" }), "configs[1]: unknown field"},
		{"field in other case", mutate(t, func(f map[string]any, _ []map[string]any) { f["Epoch"] = f["epoch"]; delete(f, "epoch") }), `another case than "epoch"`},
		{"field twice", bytes.Replace(good, []byte(`"epoch": 7,`), []byte(`"epoch": 7, "epoch": 8,`), 1), `field "epoch" given twice`},
		{"bad ring name", mutate(t, func(f map[string]any, _ []map[string]any) { f["ring"] = "Shop/Web" }), "ring name is not"},
		{"ring name without a namespace", mutate(t, func(f map[string]any, _ []map[string]any) { f["ring"] = "web" }), `ring name is not "<namespace>/<name>" as the API names ECHKeyRings`},
		{"epoch zero", mutate(t, func(f map[string]any, _ []map[string]any) { f["epoch"] = 0 }), "epoch is not positive"},
		{"epoch a string", mutate(t, func(f map[string]any, _ []map[string]any) { f["epoch"] = "7" }), "epoch: a JSON string where an integer belongs"},
		{"issuedAt bad", mutate(t, func(f map[string]any, _ []map[string]any) { f["issuedAt"] = "yesterday" }), "issuedAt is not an RFC 3339 time"},
		{"no configs list", mutate(t, func(f map[string]any, _ []map[string]any) { delete(f, "configs") }), "no configs list"},
		{"too many", mutate(t, func(f map[string]any, _ []map[string]any) { f["configs"] = append(f["configs"].([]any), extra...) }), "5 configs, more than the 4"},
		{"id 256", mutate(t, func(_ map[string]any, cs []map[string]any) { cs[0]["id"] = 256 }), "config 0: id is not an integer from 0 to 255"},
		{"id fraction", mutate(t, func(_ map[string]any, cs []map[string]any) { cs[0]["id"] = 1.5 }), "not an integer in range"},
		{"id not config_id", mutate(t, func(_ map[string]any, cs []map[string]any) { cs[0]["id"] = 13 }), "config 0: id does not match the ECHConfig's config_id"},
		{"duplicate id", mutate(t, func(_ map[string]any, cs []map[string]any) {
			cs[1]["config"], cs[1]["privateKey"], cs[1]["id"] = cs[0]["config"], cs[0]["privateKey"], 12
		}), "config 1 (id 12): duplicate id"},
		{"key of another config", mutate(t, func(_ map[string]any, cs []map[string]any) { cs[0]["privateKey"] = cs[1]["privateKey"] }), "config 0 (id 12): privateKey does not match the config's public key"},
		{"config of another key", mutate(t, func(_ map[string]any, cs []map[string]any) { cs[0]["config"] = b64(other.Config) }), "privateKey does not match"},
		{"short key", mutate(t, func(_ map[string]any, cs []map[string]any) { cs[0]["privateKey"] = b64(make([]byte, 31)) }), "privateKey is not a private key of the config's KEM"},
		{"long key", mutate(t, func(_ map[string]any, cs []map[string]any) { cs[0]["privateKey"] = b64(make([]byte, 200)) }), "privateKey is longer than 66 bytes"},
		{"key not base64", mutate(t, func(_ map[string]any, cs []map[string]any) { cs[0]["privateKey"] = "!!!!" }), "config 0: privateKey is not valid base64"},
		{"key unpadded", mutate(t, func(_ map[string]any, cs []map[string]any) {
			cs[0]["privateKey"] = strings.TrimRight(cs[0]["privateKey"].(string), "=")
		}), "privateKey is not valid base64"},
		{"key with newline", mutate(t, func(_ map[string]any, cs []map[string]any) {
			s := cs[0]["privateKey"].(string)
			cs[0]["privateKey"] = s[:8] + "\n" + s[8:]
		}), "privateKey is not in standard padded base64"},
		{"config truncated", mutate(t, func(_ map[string]any, cs []map[string]any) { cs[0]["config"] = b64(r.Configs[0].Config[:20]) }), "config 0: ECHConfig: length does not match"},
		{"config huge", mutate(t, func(_ map[string]any, cs []map[string]any) { cs[0]["config"] = b64(make([]byte, 600)) }), "config 0: config is longer than 512 bytes"},
		{"config draft version", mutate(t, func(_ map[string]any, cs []map[string]any) {
			c := bytes.Clone(r.Configs[0].Config)
			c[1] = 0x0c
			cs[0]["config"] = b64(c)
		}), "version 0xfe0c, want 0xfe0d"},
		{"config with extension", mutate(t, func(_ map[string]any, cs []map[string]any) {
			c := bytes.Clone(r.Configs[0].Config)
			c = append(c[:len(c)-2], 0, 4, 0xff, 0x01, 0, 0)
			c[3] += 4
			cs[0]["config"] = b64(c)
		}), "extensions or trailing bytes"},
		{"bad state", mutate(t, func(_ map[string]any, cs []map[string]any) { cs[0]["state"] = "active" }), `config 0: state is not "staged", "published" or "retired"`},
		{"staged with publishedAt", mutate(t, func(_ map[string]any, cs []map[string]any) { cs[0]["publishedAt"] = cs[1]["publishedAt"] }), "staged with publishedAt"},
		{"published without publishedAt", mutate(t, func(_ map[string]any, cs []map[string]any) { delete(cs[1], "publishedAt") }), "published wants publishedAt set"},
		{"published with retiredAt", mutate(t, func(_ map[string]any, cs []map[string]any) { cs[1]["retiredAt"] = cs[2]["retiredAt"] }), "published wants publishedAt set, retiredAt not"},
		{"retired without retiredAt", mutate(t, func(_ map[string]any, cs []map[string]any) { delete(cs[2], "retiredAt") }), "retired wants retiredAt set"},
		{"retired without expiresAt", mutate(t, func(_ map[string]any, cs []map[string]any) { cs[2]["expiresAt"] = nil }), "config 2 (id 10): expiresAt is missing"},
		{"staged without expiresAt", mutate(t, func(_ map[string]any, cs []map[string]any) { delete(cs[0], "expiresAt") }), "config 0 (id 12): expiresAt is missing"},
		{"published without expiresAt", mutate(t, func(_ map[string]any, cs []map[string]any) { delete(cs[1], "expiresAt") }), "config 1 (id 11): expiresAt is missing"},
		{"zero expiresAt", mutate(t, func(_ map[string]any, cs []map[string]any) { cs[0]["expiresAt"] = "0001-01-01T00:00:00Z" }), "config 0 (id 12): expiresAt is missing"},
		{"expiresAt at createdAt", mutate(t, func(_ map[string]any, cs []map[string]any) { cs[0]["expiresAt"] = cs[0]["createdAt"] }), "config 0 (id 12): expiresAt is not after createdAt"},
		{"expiresAt before createdAt", mutate(t, func(_ map[string]any, cs []map[string]any) { cs[1]["expiresAt"] = cs[2]["createdAt"] }), "config 1 (id 11): expiresAt is not after createdAt"},
		{"published expires before publishedAt", mutate(t, func(_ map[string]any, cs []map[string]any) {
			cs[1]["expiresAt"] = t0.Add(-23*time.Hour + time.Minute).Format(time.RFC3339)
			cs[1]["publishedAt"] = t0.Add(-23*time.Hour + 2*time.Minute).Format(time.RFC3339)
		}), "expiresAt before publishedAt"},
		{"expires before retired", mutate(t, func(_ map[string]any, cs []map[string]any) { cs[2]["expiresAt"] = cs[2]["publishedAt"] }), "expiresAt before retiredAt"},
		{"no createdAt", mutate(t, func(_ map[string]any, cs []map[string]any) { delete(cs[0], "createdAt") }), "config 0 (id 12): createdAt is missing"},
		{"not newest first", mutate(t, func(_ map[string]any, cs []map[string]any) {
			cs[1]["createdAt"], cs[1]["publishedAt"] = t0.Add(time.Minute), t0.Add(time.Hour)
		}), "createdAt after that of config 0"},
		{"config an object", mutate(t, func(_ map[string]any, cs []map[string]any) { cs[0]["config"] = map[string]any{} }), "configs[0].config: an object or array where another type belongs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := echring.Decode(tc.data)
			if !errors.Is(err, echring.ErrInvalidRing) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Decode = %v, want an ErrInvalidRing with %q", err, tc.want)
			}
			noKeyBytes(t, err.Error(), r)
		})
	}
}

// noKeyBytes fails when s holds any form of a private key of r.
func noKeyBytes(t *testing.T, s string, r echring.Ring) {
	t.Helper()
	for _, c := range r.Configs {
		for _, form := range []string{string(c.PrivateKey), base64.StdEncoding.EncodeToString(c.PrivateKey)[:12], fmt.Sprintf("%x", c.PrivateKey)[:12], fmt.Sprintf("%d %d %d", c.PrivateKey[0], c.PrivateKey[1], c.PrivateKey[2])} {
			if strings.Contains(s, form) {
				t.Errorf("text %q shows config %d's private key", s, c.ID)
			}
		}
	}
}

func TestEncodeRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*echring.Ring)
		want string
	}{
		{"no name", func(r *echring.Ring) { r.Ring = "" }, "ring name is empty"},
		{"no issuedAt", func(r *echring.Ring) { r.IssuedAt = time.Time{} }, "issuedAt is missing"},
		{"too many", func(r *echring.Ring) { r.Configs = append(r.Configs, r.Configs[2], r.Configs[2]) }, "5 configs"},
		{"id changed", func(r *echring.Ring) { r.Configs[1].ID = 99 }, "config 1: id does not match"},
		{"key dropped", func(r *echring.Ring) { r.Configs[2].PrivateKey = nil }, "config 2 (id 10): privateKey is not a private key"},
		{"year 10000", func(r *echring.Ring) { r.Configs[2].ExpiresAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, "outside years 0-9999"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := sampleRing(t)
			tc.edit(&r)
			if _, err := echring.Encode(r); !errors.Is(err, echring.ErrInvalidRing) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Encode = %v, want an ErrInvalidRing with %q", err, tc.want)
			}
		})
	}
}

// TestTextShowsNoKey: every verb, slog and JSON show a config by its id and
// state, never its private key.
func TestTextShowsNoKey(t *testing.T) {
	r := sampleRing(t)
	c := r.Configs[0]
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("x", "ring", r, "config", c, "configs", r.Configs)
	js, err := json.Marshal(struct {
		R echring.Ring
		C []echring.Config
	}{r, r.Configs})
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{logged.String(), string(js)}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d"} {
		texts = append(texts, fmt.Sprintf(verb, r), fmt.Sprintf(verb, c), fmt.Sprintf(verb, &c), fmt.Sprintf(verb, r.Configs))
	}
	for _, s := range texts {
		noKeyBytes(t, s, r)
	}
	if got := fmt.Sprint(c); got != "12/staged" {
		t.Errorf("Sprint(config) = %q, want 12/staged", got)
	}
	if got := r.String(); got != "ech ring shop/web epoch 7 configs [12/staged 11/published 10/retired]" {
		t.Errorf("String = %q", got)
	}
	if got := fmt.Sprintf("%+v", c); !strings.Contains(got, "PrivateKey:[redacted]") {
		t.Errorf("%%+v = %q, want the key [redacted]", got)
	}
}

func TestExpired(t *testing.T) {
	c := sampleRing(t).Configs[2]
	if c.Expired(c.ExpiresAt.Add(-time.Nanosecond)) || !c.Expired(c.ExpiresAt) {
		t.Error("Expired does not turn at ExpiresAt")
	}
	for _, c := range sampleRing(t).Configs[:2] {
		if c.Expired(c.ExpiresAt.Add(-time.Nanosecond)) || !c.Expired(c.ExpiresAt) {
			t.Errorf("a %s config does not expire at its ExpiresAt", c.State)
		}
	}
}

// TestKeyDigest: one key pair has one digest whatever bytes carry it (a
// config_id, public_name, maximum_name_length or suite list of its own),
// another key another digest, and a config Validate refuses none.
func TestKeyDigest(t *testing.T) {
	base, err := echring.NewConfig(7, seed(1), params)
	if err != nil {
		t.Fatal(err)
	}
	want, err := base.KeyDigest()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		id   uint8
		seed byte
		p    echring.Params
		same bool
	}{
		{"same config", 7, 1, params, true},
		{"another maximum_name_length", 7, 1, echring.Params{PublicName: params.PublicName, MaxNameLength: 33}, true},
		{"another public_name", 7, 1, echring.Params{PublicName: "publid.example.test", MaxNameLength: 32}, true},
		{"another config_id", 8, 1, params, true},
		{"other suites", 7, 1, echring.Params{PublicName: params.PublicName, MaxNameLength: 32, Suites: []echring.Suite{{KDF: echring.KDFHKDFSHA256, AEAD: echring.AEADAES128GCM}}}, true},
		{"another key", 7, 2, params, false},
		{"another KEM", 7, 1, echring.Params{PublicName: params.PublicName, MaxNameLength: 32, KEM: echring.KEMP256HKDFSHA256}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := echring.NewConfig(tc.id, seed(tc.seed), tc.p)
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.KeyDigest()
			if err != nil {
				t.Fatal(err)
			}
			if tc.same && got != want {
				t.Errorf("the same key under other bytes has another digest")
			}
			if !tc.same && got == want {
				t.Errorf("another key has the same digest")
			}
		})
	}
	bad := base
	bad.Config = bad.Config[:len(bad.Config)-1]
	if _, err := bad.KeyDigest(); !errors.Is(err, echring.ErrInvalidRing) {
		t.Errorf("KeyDigest of a truncated config = %v, want ErrInvalidRing", err)
	}
}
