package dnspub

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/ringmaster-io/ringmaster/internal/testing/knot"
)

func rr(t *testing.T, text string) dns.RR {
	t.Helper()
	r, err := dns.NewRR(text)
	if err != nil {
		t.Fatalf("%s: %v", text, err)
	}
	return r
}

func TestMerge(t *testing.T) {
	l := []byte{0, 3, 0xfe, 0x0d, 0}
	b64 := base64.StdEncoding.EncodeToString(l)
	const name = "www.example.test."
	for _, c := range []struct {
		name string
		old  []string
		ttl  uint32
		list []byte
		want []string // zone-file text; nil: no record
		err  string
	}{
		{name: "no record, no list", want: nil},
		{name: "no record: created", list: l, want: []string{name + " 300 IN HTTPS 1 . ech=" + b64}},
		{name: "no record, ttl", ttl: 60, list: l, want: []string{name + " 60 IN HTTPS 1 . ech=" + b64}},
		{name: "other params kept, ech in key order",
			old:  []string{name + " 300 IN HTTPS 2 svc.example.test. alpn=h2 port=8443 ipv4hint=127.0.0.1 ipv6hint=::1"},
			list: l,
			want: []string{name + " 300 IN HTTPS 2 svc.example.test. alpn=h2 port=8443 ipv4hint=127.0.0.1 ech=" + b64 + " ipv6hint=::1"}},
		{name: "ech replaced",
			old:  []string{name + " 300 IN HTTPS 1 . alpn=h2 ech=AAA="},
			list: l, ttl: 30,
			want: []string{name + " 30 IN HTTPS 1 . alpn=h2 ech=" + b64}},
		{name: "empty list removes ech",
			old:  []string{name + " 300 IN HTTPS 1 . alpn=h2 ech=AAA="},
			want: []string{name + " 300 IN HTTPS 1 . alpn=h2"}},
		{name: "every ServiceMode record, AliasMode untouched",
			old: []string{name + " 300 IN HTTPS 1 a.example.test. alpn=h3", name + " 300 IN HTTPS 2 b.example.test. port=443",
				name + " 300 IN HTTPS 0 c.example.test."},
			list: l,
			want: []string{name + " 300 IN HTTPS 1 a.example.test. alpn=h3 ech=" + b64, name + " 300 IN HTTPS 2 b.example.test. port=443 ech=" + b64,
				name + " 300 IN HTTPS 0 c.example.test."}},
		{name: "AliasMode only", old: []string{name + " 300 IN HTTPS 0 c.example.test."}, list: l, err: "AliasMode"},
		{name: "AliasMode only, empty list", old: []string{name + " 300 IN HTTPS 0 c.example.test."},
			want: []string{name + " 300 IN HTTPS 0 c.example.test."}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var old []dns.RR
			for _, s := range c.old {
				old = append(old, rr(t, s))
			}
			before := fmt.Sprint(old)
			got, err := merge(old, name, c.ttl, c.list)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("merge = %v, %v; want an error saying %q", got, err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var want []dns.RR
			for _, s := range c.want {
				want = append(want, rr(t, s))
			}
			if !sameRRset(got, want) {
				t.Errorf("merge = %v, want %v", got, want)
			}
			if fmt.Sprint(old) != before {
				t.Errorf("merge changed its input: %v, was %s", old, before)
			}
			if len(c.old) > 0 && sameRRset(old, got) != (c.list == nil && !strings.Contains(before, "ech=") && c.ttl == 0) {
				t.Errorf("sameRRset(old, merged) = %v", sameRRset(old, got))
			}
		})
	}
}

func TestConfigIDs(t *testing.T) {
	for _, c := range []struct {
		list []byte
		want string
	}{
		{[]byte{0, 10, 0xfe, 0x0d, 0, 2, 7, 0, 0xfe, 0x0d, 0, 0}, "[7] (12 bytes)"}, // an empty config has no id
		{[]byte{0, 12, 0xfe, 0x0d, 0, 2, 7, 0, 0xfe, 0x0d, 0, 2, 9, 1}, "[7 9] (14 bytes)"},
		{[]byte{0, 6, 0xff, 0x01, 0, 2, 7, 0}, "[] (8 bytes)"}, // another version, skipped
		{[]byte{0, 9, 0xfe, 0x0d, 0, 2, 7}, "(7 bytes, not an ECHConfigList)"},
		{[]byte{0, 4, 0xfe, 0x0d, 0, 9}, "(6 bytes, not an ECHConfigList)"},
		{[]byte{1}, "(1 bytes, not an ECHConfigList)"},
	} {
		if got := describe(c.list); got != c.want {
			t.Errorf("describe(%x) = %q, want %q", c.list, got, c.want)
		}
	}
}

func TestTSIGRedacted(t *testing.T) {
	k := TSIG{Name: "k.", Algorithm: "hmac-sha256", Secret: []byte("sekrit-bytes")}
	tg := Target{TSIG: &k}
	for _, s := range []string{fmt.Sprintf("%v %+v %#v %s %q %x", k, k, k, k, k, k), fmt.Sprintf("%+v %#v", *tg.TSIG, tg)} {
		if strings.Contains(s, "sekrit") || strings.Contains(s, fmt.Sprintf("%x", k.Secret)) || strings.Contains(s, base64.StdEncoding.EncodeToString(k.Secret)) {
			t.Errorf("%q shows the secret", s)
		}
	}
}

// The update's prerequisite is the RRset read: when another writer changed
// the record in between, the update is refused (NXRRSET) and changes
// nothing.
func TestPrerequisite(t *testing.T) {
	s := knot.Run(t, "example.test.", knot.Key{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tg := Target{Zone: s.Zone, Name: "www." + s.Zone, Primary: s.Addr,
		TSIG: &TSIG{Name: s.Key.Name, Algorithm: s.Key.Algorithm, Secret: s.Key.Secret}}
	old, err := query(ctx, "read", tg, s.Addr, true)
	if err != nil {
		t.Fatal(err)
	}
	mine, err := merge(old, tg.Name, 0, []byte{0, 4, 0xfe, 0x0d, 0, 0})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Replace(ctx, "www", dns.TypeHTTPS, "www 300 IN HTTPS 1 . alpn=h3"); err != nil {
		t.Fatal(err)
	}
	err = update(ctx, tg, old, mine)
	var e *Error
	if !errors.As(err, &e) || e.Rcode != dns.RcodeNXRrset {
		t.Fatalf("update on a stale read = %v, want NXRRSET", err)
	}
	now, err := query(ctx, "read", tg, s.Addr, true)
	if err != nil || len(now) != 1 || !strings.HasSuffix(now[0].String(), `alpn="h3"`) {
		t.Fatalf("record = %v, %v; want the other writer's", now, err)
	}
	// Publish reads again and merges into the other writer's record.
	if err := Publish(ctx, tg, []byte{0, 4, 0xfe, 0x0d, 0, 0}); err != nil {
		t.Fatal(err)
	}
	now, _ = query(ctx, "read", tg, s.Addr, true)
	if len(now) != 1 || !strings.Contains(now[0].String(), `alpn="h3" ech=`) {
		t.Fatalf("record = %v, want alpn=h3 with ech", now)
	}
}
