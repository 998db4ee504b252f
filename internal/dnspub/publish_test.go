package dnspub_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/ringmaster-io/ringmaster/internal/dnspub"
	"github.com/ringmaster-io/ringmaster/internal/testing/blackhole"
	"github.com/ringmaster-io/ringmaster/internal/testing/knot"
)

// list is an ECHConfigList of one ECHConfig (version 0xfe0d) per id, each
// with an X25519 key of 32 bytes derived from the id and one suite: what
// the ech param carries, byte for byte.
func list(ids ...uint8) []byte {
	var configs []byte
	for _, id := range ids {
		c := []byte{id, 0x00, 0x20, 0x00, 0x20}
		for i := range 32 {
			c = append(c, id^byte(i))
		}
		c = append(c, 0x00, 0x04, 0x00, 0x01, 0x00, 0x01) // HKDF-SHA256, AES-128-GCM
		c = append(c, 64, 0x00, 0x0e)
		c = append(c, "www.example.test"[:14]...)
		c = append(c, 0x00, 0x00)
		configs = append(configs, 0xfe, 0x0d, byte(len(c)>>8), byte(len(c)))
		configs = append(configs, c...)
	}
	return append([]byte{byte(len(configs) >> 8), byte(len(configs))}, configs...)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func target(s *knot.Server) dnspub.Target {
	return dnspub.Target{
		Zone: s.Zone, Name: "www." + s.Zone, Primary: s.Addr, TTL: 120,
		TSIG: &dnspub.TSIG{Name: s.Key.Name, Algorithm: s.Key.Algorithm, Secret: s.Key.Secret},
	}
}

// https is the one HTTPS record of name at s.
func https(t *testing.T, s *knot.Server, name string) *dns.HTTPS {
	t.Helper()
	rrs, err := s.Query(ctx(t), name, dns.TypeHTTPS)
	if err != nil {
		t.Fatal(err)
	}
	if len(rrs) != 1 {
		t.Fatalf("%s HTTPS = %v, want one record", name, rrs)
	}
	return rrs[0].(*dns.HTTPS)
}

// params is the record's SvcParams but ech, in zone-file text.
func params(h *dns.HTTPS) string {
	var p []string
	for _, kv := range h.Value {
		if kv.Key() != dns.SVCB_ECHCONFIG {
			p = append(p, kv.Key().String()+"="+kv.String())
		}
	}
	return strings.Join(p, " ")
}

func ech(h *dns.HTTPS) []byte {
	for _, kv := range h.Value {
		if e, ok := kv.(*dns.SVCBECHConfig); ok {
			return e.ECH
		}
	}
	return nil
}

const otherParams = "alpn=h2,http/1.1 port=8443 ipv4hint=127.0.0.1"

// Publish merges the list into the record, keeping its priority, target
// and other params; Verify then finds it; a second list replaces the
// first; an empty list removes the param.
func TestPublishThenVerify(t *testing.T) {
	s := knot.Run(t, "example.test.", knot.Key{})
	tg := target(s)
	for _, l := range [][]byte{list(1), list(2, 1), nil} {
		if err := dnspub.Publish(ctx(t), tg, l); err != nil {
			t.Fatal(err)
		}
		h := https(t, s, tg.Name)
		if h.Priority != 1 || h.Target != "." || params(h) != otherParams || h.Hdr.Ttl != 120 {
			t.Fatalf("record = %v, want priority 1, target ., %s, TTL 120", h, otherParams)
		}
		if got := ech(h); string(got) != string(l) {
			t.Fatalf("ech = %x, want %x", got, l)
		}
		res, err := dnspub.Verify(ctx(t), tg, l)
		if err != nil || !res.Matched() || len(res.Servers) != 1 || res.Servers[0].Server != s.Addr {
			t.Fatalf("Verify = %+v, %v; want %s matching", res, err, s.Addr)
		}
	}
	// The record holds no ech param now: a list is not verified.
	res, err := dnspub.Verify(ctx(t), tg, list(2, 1))
	if err == nil || res.Matched() || res.Servers[0].Match {
		t.Fatalf("Verify of a list DNS does not hold = %+v, %v; want a mismatch", res, err)
	}
	for _, want := range []string{s.Addr, "www.example.test.", "without an ech param", "[2 1]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// A name with no HTTPS record gets "1 . ech=..."; an empty list for it
// then leaves the record in place without the param.
func TestPublishCreates(t *testing.T) {
	s := knot.Run(t, "example.test.", knot.Key{})
	tg := target(s)
	tg.Name, tg.TTL = "new.example.test.", 0
	if err := dnspub.Publish(ctx(t), tg, nil); err != nil {
		t.Fatal(err)
	}
	if rrs, err := s.Query(ctx(t), tg.Name, dns.TypeHTTPS); err != nil || len(rrs) != 0 {
		t.Fatalf("empty list on a name with no record: %v, %v; want no record", rrs, err)
	}
	if err := dnspub.Publish(ctx(t), tg, list(7)); err != nil {
		t.Fatal(err)
	}
	h := https(t, s, tg.Name)
	if h.Priority != 1 || h.Target != "." || params(h) != "" || h.Hdr.Ttl != dnspub.DefaultTTL || string(ech(h)) != string(list(7)) {
		t.Fatalf("created record = %v, want 1 . ech=<list> with TTL %d", h, dnspub.DefaultTTL)
	}
}

// An ECHConfigList too big for a UDP answer is published and verified:
// the UDP answer comes truncated and Verify asks again over TCP.
func TestBigListOverTCP(t *testing.T) {
	s := knot.Run(t, "example.test.", knot.Key{})
	tg := target(s)
	ids := make([]uint8, 24)
	for i := range ids {
		ids[i] = uint8(i)
	}
	l := list(ids...)
	if err := dnspub.Publish(ctx(t), tg, l); err != nil {
		t.Fatal(err)
	}
	m := new(dns.Msg)
	m.SetQuestion(tg.Name, dns.TypeHTTPS)
	m.SetEdns0(1232, false)
	r, _, err := (&dns.Client{Net: "udp"}).ExchangeContext(ctx(t), m, s.Addr)
	if err != nil || !r.Truncated {
		t.Fatalf("UDP answer for a %d-byte list: truncated=%v, %v; want truncated (the test needs TCP fallback)", len(l), r != nil && r.Truncated, err)
	}
	if res, err := dnspub.Verify(ctx(t), tg, l); err != nil || !res.Matched() {
		t.Fatalf("Verify = %+v, %v; want a match over TCP", res, err)
	}
}

// An update signed with a wrong secret is refused with an error that
// names the key problem, server, zone and name, and not the secret; the
// record is untouched.
func TestWrongKey(t *testing.T) {
	s := knot.Run(t, "example.test.", knot.Key{})
	for name, k := range map[string]knot.Key{
		"wrong secret": knot.NewKey(s.Key.Name),
		"unknown key":  knot.NewKey("other-key."),
	} {
		t.Run(name, func(t *testing.T) {
			tg := target(s)
			tg.TSIG = &dnspub.TSIG{Name: k.Name, Algorithm: k.Algorithm, Secret: k.Secret}
			err := dnspub.Publish(ctx(t), tg, list(1))
			if err == nil {
				t.Fatal("Publish with a wrong key succeeded")
			}
			for _, want := range []string{"TSIG key refused", s.Addr, "zone example.test.", "www.example.test."} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if strings.Contains(err.Error(), base64.StdEncoding.EncodeToString(k.Secret)) {
				t.Errorf("error %q carries the secret", err)
			}
			if !dnspub.Refused(err) {
				t.Errorf("Refused(%v) = false, want true: a key to fix, not an outage", err)
			}
			if h := https(t, s, tg.Name); ech(h) != nil {
				t.Fatalf("record after a refused update = %v, want no ech", h)
			}
		})
	}
}

// With the server down Publish fails naming it and changes nothing; once
// the server is back the record is as it was, and Publish succeeds.
func TestServerDown(t *testing.T) {
	s := knot.Run(t, "example.test.", knot.Key{})
	tg := target(s)
	if err := dnspub.Publish(ctx(t), tg, list(1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := dnspub.Publish(c, tg, list(2, 1))
	if err == nil || !strings.Contains(err.Error(), s.Addr) || dnspub.Refused(err) {
		t.Fatalf("Publish with the server down = %v, want an error naming %s, not a refusal", err, s.Addr)
	}
	res, err := dnspub.Verify(c, tg, list(1))
	if err == nil || res.Matched() || !strings.Contains(res.Servers[0].Err.Error(), s.Addr) {
		t.Fatalf("Verify with the server down = %+v, %v; want a failure naming %s", res, err, s.Addr)
	}
	if err := s.Restart(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if h := https(t, s, tg.Name); string(ech(h)) != string(list(1)) || params(h) != otherParams {
		t.Fatalf("record after a failed publish = %v, want the first list and other params", h)
	}
	if err := dnspub.Publish(ctx(t), tg, list(2, 1)); err != nil {
		t.Fatal(err)
	}
}

// Verify-only: another system sets the record; Verify reports each
// server, matching or not; Publish refuses to write without a primary.
func TestVerifyOnly(t *testing.T) {
	a := knot.Run(t, "example.test.", knot.Key{})
	b := knot.Run(t, "example.test.", knot.Key{})
	l := list(5, 4)
	rec := "www 300 IN HTTPS 1 . alpn=h2 ech=" + base64.StdEncoding.EncodeToString(l)
	if err := a.Replace(ctx(t), "www", dns.TypeHTTPS, rec); err != nil {
		t.Fatal(err)
	}
	tg := dnspub.Target{Zone: "example.test.", Name: "www.example.test.", Servers: []string{a.Addr}}
	if res, err := dnspub.Verify(ctx(t), tg, l); err != nil || !res.Matched() {
		t.Fatalf("Verify of the record set by hand = %+v, %v; want a match", res, err)
	}
	if err := dnspub.Publish(ctx(t), tg, l); err == nil || !strings.Contains(err.Error(), "verify-only") {
		t.Fatalf("Publish without a primary = %v, want a verify-only error", err)
	}

	tg.Servers = []string{a.Addr, b.Addr}
	res, err := dnspub.Verify(ctx(t), tg, l)
	if err == nil || res.Matched() || len(res.Servers) != 2 {
		t.Fatalf("Verify with one server behind = %+v, %v; want a mismatch", res, err)
	}
	if r := res.Servers[0]; r.Server != a.Addr || !r.Match || r.Err != nil {
		t.Errorf("server %s: %+v, want a match", a.Addr, r)
	}
	if r := res.Servers[1]; r.Server != b.Addr || r.Match || !strings.Contains(r.Err.Error(), b.Addr) {
		t.Errorf("server %s: %+v, want a mismatch naming it", b.Addr, r)
	}
	if !strings.Contains(err.Error(), b.Addr) || strings.Contains(err.Error(), a.Addr) {
		t.Errorf("error %q: want the lagging server named, not the matching one", err)
	}
	var e *dnspub.Error
	if errors.As(err, &e) {
		t.Errorf("a mismatch is not a DNS error: %v", e)
	}
}

// A server that never answers ends each exchange when ctx does, with an
// error naming it: Publish over TCP, Verify over UDP.
func TestTimeoutFromContext(t *testing.T) {
	tcp := blackhole.Listen(t)
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	c, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	tg := dnspub.Target{Zone: "example.test.", Name: "www.example.test.", Primary: tcp.Addr, Servers: []string{udp.LocalAddr().String()}}
	err = dnspub.Publish(c, tg, list(1))
	if err == nil || !strings.Contains(err.Error(), tcp.Addr) || !strings.Contains(err.Error(), "timeout") || dnspub.Refused(err) {
		t.Fatalf("Publish to a silent server = %v, want a timeout naming %s", err, tcp.Addr)
	}
	c2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	res, err := dnspub.Verify(c2, tg, list(1))
	if err == nil || res.Matched() || !strings.Contains(err.Error(), udp.LocalAddr().String()) || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("Verify at a silent server = %+v, %v; want a timeout naming it", res, err)
	}
}

// A zone the server does not serve is refused, and says so.
func TestZoneNotServed(t *testing.T) {
	s := knot.Run(t, "example.test.", knot.Key{})
	tg := target(s)
	tg.Zone, tg.Name = "other.test.", "www.other.test."
	err := dnspub.Publish(ctx(t), tg, list(1))
	if err == nil || !strings.Contains(err.Error(), "REFUSED") || !strings.Contains(err.Error(), "zone other.test.") || !dnspub.Refused(err) {
		t.Fatalf("Publish to a zone the server does not serve = %v, want REFUSED naming the zone", err)
	}
	if _, err := dnspub.Verify(ctx(t), tg, list(1)); err == nil || !strings.Contains(err.Error(), "REFUSED") {
		t.Fatalf("Verify of a zone the server does not serve = %v, want REFUSED", err)
	}
}

// Remove takes off only the value it is given: another value, or a record
// without one, is left as it is; the TTL and other params are kept.
func TestRemoveOnlyItsOwnValue(t *testing.T) {
	s := knot.Run(t, "example.test.", knot.Key{})
	tg := target(s)
	if err := dnspub.Publish(ctx(t), tg, list(1)); err != nil {
		t.Fatal(err)
	}
	removed, err := dnspub.Remove(ctx(t), tg, list(2))
	if err != nil || removed {
		t.Fatalf("Remove of another value = %v, %v; want nothing removed", removed, err)
	}
	if got := ech(https(t, s, tg.Name)); string(got) != string(list(1)) {
		t.Fatalf("ech after removing another value = %x, want %x", got, list(1))
	}
	removed, err = dnspub.Remove(ctx(t), tg, list(1))
	if err != nil || !removed {
		t.Fatalf("Remove of the record's own value = %v, %v; want it removed", removed, err)
	}
	h := https(t, s, tg.Name)
	if ech(h) != nil || params(h) != otherParams || h.Hdr.Ttl != 120 || h.Priority != 1 {
		t.Fatalf("record after Remove = %v; want no ech, %s, TTL 120", h, otherParams)
	}
	if removed, err := dnspub.Remove(ctx(t), tg, list(1)); err != nil || removed {
		t.Fatalf("Remove again = %v, %v; want nothing to remove", removed, err)
	}
	tg.Name = "absent.example.test."
	if removed, err := dnspub.Remove(ctx(t), tg, list(1)); err != nil || removed {
		t.Fatalf("Remove on a name without a record = %v, %v; want nothing", removed, err)
	}
}
