// Package dnspub publishes ECH configs to DNS and checks that DNS holds
// them. Publish writes the ech SvcParam (RFC 9460) of a name's HTTPS
// record by an RFC 2136 dynamic update signed with TSIG, merging it into
// the record as it is (priority, target and every other param kept);
// Verify asks each authoritative server directly whether it answers
// exactly the given ECHConfigList. It imports no Kubernetes package: the
// ECHKeyRing controller calls it with values read from a ClusterDNSZone.
//
// Errors name the server, zone, name and DNS response code; they never
// carry the TSIG secret.
package dnspub

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// DefaultTTL is the TTL of an HTTPS record Publish creates when the
// target names none.
const DefaultTTL uint32 = 300

// DefaultTimeout bounds one DNS exchange when ctx has no deadline.
const DefaultTimeout = 5 * time.Second

// udpSize is the EDNS(0) buffer Verify advertises (the DNS flag day 2020
// figure): an ECHConfigList of several configs can pass it, and the
// answer then comes truncated and is asked again over TCP.
const udpSize = 1232

// TSIG is the key that signs updates (RFC 8945). Name is the key's DNS
// name, Algorithm its algorithm (hmac-sha256, hmac-sha512, ...), Secret
// the raw key bytes. String, GoString and Format never show Secret.
type TSIG struct {
	Name      string
	Algorithm string
	Secret    []byte
}

// String names the key without its secret.
func (k TSIG) String() string { return fmt.Sprintf("TSIG key %s (%s)", k.Name, k.Algorithm) }

// GoString is String: %#v shows no secret either.
func (k TSIG) GoString() string { return k.String() }

// Format prints String for every verb.
func (k TSIG) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(k.String())) }

// Target is where a ring's ECH configs go.
type Target struct {
	// Zone is the zone holding the record, an FQDN ("example.test.").
	Zone string
	// Name is the owner of the HTTPS record, an FQDN inside Zone.
	Name string
	// Primary is the host:port receiving RFC 2136 updates; empty in
	// verify-only mode, where another system publishes.
	Primary string
	// Servers are the host:port of the authoritative servers Verify asks;
	// none means Primary.
	Servers []string
	// TTL is the record's TTL; 0 keeps the record's own (DefaultTTL for
	// a record Publish creates).
	TTL uint32
	// TSIG signs updates; nil sends them unsigned.
	TSIG *TSIG
}

func (t Target) servers() []string {
	if len(t.Servers) > 0 {
		return t.Servers
	}
	if t.Primary != "" {
		return []string{t.Primary}
	}
	return nil
}

func (t Target) check() error {
	if t.Zone == "" || !dns.IsFqdn(t.Zone) {
		return fmt.Errorf("zone %q is not a fully qualified name", t.Zone)
	}
	if t.Name == "" || !dns.IsFqdn(t.Name) {
		return fmt.Errorf("name %q is not a fully qualified name", t.Name)
	}
	if !dns.IsSubDomain(t.Zone, t.Name) {
		return fmt.Errorf("name %s is not inside zone %s", t.Name, t.Zone)
	}
	return nil
}

// Error is a DNS exchange that failed or was answered with an error.
type Error struct {
	// Op is "publish", "read" or "verify".
	Op string
	// Server is the host:port asked.
	Server string
	// Zone and Name are the target's.
	Zone, Name string
	// Rcode is the DNS response code, -1 when no answer came.
	Rcode int
	// TSIGError is the TSIG error of the answer (BADSIG, BADKEY,
	// BADTIME), 0 when none.
	TSIGError uint16
	// Err is the underlying cause (a network error, a timeout), or nil.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s HTTPS %s (zone %s) at %s: ", e.Op, e.Name, e.Zone, e.Server)
	switch {
	case e.TSIGError != 0:
		fmt.Fprintf(&b, "TSIG key refused (%s, %s): check the key's name, algorithm and secret",
			dns.RcodeToString[e.Rcode], dns.RcodeToString[int(e.TSIGError)])
	case e.Rcode >= 0:
		b.WriteString(dns.RcodeToString[e.Rcode])
		if e.Err != nil {
			fmt.Fprintf(&b, ": %v", e.Err)
		}
	default:
		fmt.Fprintf(&b, "%v", e.Err)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Refused reports whether err is a server's refusal a retry will not
// change (REFUSED, NOTAUTH, NOTZONE, a refused TSIG key): a
// ClusterDNSZone to fix, not an outage.
func Refused(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	switch {
	case e.TSIGError != 0:
		return true
	case e.Rcode == dns.RcodeRefused, e.Rcode == dns.RcodeNotAuth, e.Rcode == dns.RcodeNotZone:
		return true
	}
	return false
}

// client is a DNS client for one exchange, its timeout the time ctx has
// left (DefaultTimeout when ctx has no deadline).
func client(ctx context.Context, network string, k *TSIG) *dns.Client {
	timeout := DefaultTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(d), time.Millisecond)
	}
	c := &dns.Client{Net: network, Timeout: timeout, UDPSize: udpSize}
	if k != nil {
		c.TsigSecret = map[string]string{dns.Fqdn(k.Name): base64.StdEncoding.EncodeToString(k.Secret)}
	}
	return c
}

// query asks server for t.Name's HTTPS records without recursion: over
// UDP with an EDNS(0) buffer, again over TCP when the answer comes
// truncated (or over TCP at once when tcp is set). It returns the HTTPS
// records owned by t.Name of an authoritative answer (none for NXDOMAIN).
func query(ctx context.Context, op string, t Target, server string, tcp bool) ([]dns.RR, error) {
	m := new(dns.Msg)
	m.SetQuestion(t.Name, dns.TypeHTTPS)
	m.RecursionDesired = false
	m.SetEdns0(udpSize, false)
	network := "udp"
	if tcp {
		network = "tcp"
	}
	r, _, err := client(ctx, network, nil).ExchangeContext(ctx, m, server)
	if err == nil && r.Truncated && network == "udp" {
		r, _, err = client(ctx, "tcp", nil).ExchangeContext(ctx, m, server)
	}
	fail := &Error{Op: op, Server: server, Zone: t.Zone, Name: t.Name, Rcode: -1}
	if err != nil {
		fail.Err = err
		return nil, fail
	}
	if r.Rcode != dns.RcodeSuccess && r.Rcode != dns.RcodeNameError {
		fail.Rcode = r.Rcode
		return nil, fail
	}
	if !r.Authoritative {
		fail.Rcode, fail.Err = r.Rcode, errors.New("the answer is not authoritative: the server does not serve the zone")
		return nil, fail
	}
	var out []dns.RR
	for _, rr := range r.Answer {
		if h, ok := rr.(*dns.HTTPS); ok && strings.EqualFold(h.Hdr.Name, t.Name) {
			out = append(out, rr)
		}
	}
	return out, nil
}

// Publish writes echConfigList as the ech SvcParam of t.Name's HTTPS
// records at t.Primary by one RFC 2136 update signed with t.TSIG. It reads
// the RRset first and rewrites every ServiceMode record with its ech
// param replaced, keeping priority, target and every other param
// (AliasMode records are kept as they are); with no HTTPS record it
// creates "1 . ech=..."; an empty list removes the ech param. The update
// holds the RRset read as a prerequisite, so that a concurrent writer is
// not silently overwritten: when the prerequisite fails Publish reads and
// tries once more. An RRset already holding the list is left alone. One
// update message is one atomic change: a failure leaves the zone as it
// was.
func Publish(ctx context.Context, t Target, echConfigList []byte) error {
	_, err := rewrite(ctx, "publish", t, func(old []dns.RR) ([]dns.RR, error) {
		return merge(old, t.Name, t.TTL, echConfigList)
	})
	return err
}

// Remove takes the ech param off t.Name's HTTPS records at t.Primary, by
// the same kind of update as Publish, only when every ServiceMode record
// carries exactly echConfigList: a ring removes the value it wrote and
// nothing else. Another value, a record without an ech param, and no
// record at all are left as they are. The records' TTL and every other
// param are kept. It reports whether it changed the zone.
func Remove(ctx context.Context, t Target, echConfigList []byte) (bool, error) {
	if len(echConfigList) == 0 {
		return false, errors.New("remove: no ech value given: a ring removes only the value it wrote")
	}
	return rewrite(ctx, "remove", t, func(old []dns.RR) ([]dns.RR, error) {
		if !carries(old, echConfigList) {
			return old, nil
		}
		return merge(old, t.Name, 0, nil)
	})
}

// carries reports whether every ServiceMode record of rrs carries exactly
// list as its ech param, and there is at least one.
func carries(rrs []dns.RR, list []byte) bool {
	service := 0
	for _, rr := range rrs {
		h, ok := rr.(*dns.HTTPS)
		if !ok || h.Priority == 0 {
			continue
		}
		service++
		i := slices.IndexFunc(h.Value, func(kv dns.SVCBKeyValue) bool { return kv.Key() == dns.SVCB_ECHCONFIG })
		if i < 0 || !bytes.Equal(h.Value[i].(*dns.SVCBECHConfig).ECH, list) {
			return false
		}
	}
	return service > 0
}

// rewrite reads t.Name's HTTPS RRset at the primary, asks edit for the
// RRset to hold instead, and sends the update when it differs, holding
// the RRset read as a prerequisite; when the prerequisite fails it reads
// and tries once more. It reports whether it changed the zone.
func rewrite(ctx context.Context, op string, t Target, edit func(old []dns.RR) ([]dns.RR, error)) (bool, error) {
	if err := t.check(); err != nil {
		return false, fmt.Errorf("%s: %w", op, err)
	}
	if t.Primary == "" {
		return false, fmt.Errorf("%s HTTPS %s (zone %s): no primary server to update (verify-only)", op, t.Name, t.Zone)
	}
	var prereqErr error
	for range 2 {
		old, err := query(ctx, "read", t, t.Primary, true)
		if err != nil {
			return false, err
		}
		updated, err := edit(old)
		if err != nil {
			return false, fmt.Errorf("%s HTTPS %s (zone %s) at %s: %w", op, t.Name, t.Zone, t.Primary, err)
		}
		if sameRRset(old, updated) {
			return false, nil
		}
		prereqErr = update(ctx, t, old, updated)
		var e *Error
		if errors.As(prereqErr, &e) && (e.Rcode == dns.RcodeNXRrset || e.Rcode == dns.RcodeYXRrset) {
			continue
		}
		return prereqErr == nil, prereqErr
	}
	return false, fmt.Errorf("%w: the record changed between read and update twice; another writer is changing it", prereqErr)
}

// update sends the update replacing old by updated.
func update(ctx context.Context, t Target, old, updated []dns.RR) error {
	m := new(dns.Msg)
	m.SetUpdate(t.Zone)
	if len(old) > 0 {
		prereq := make([]dns.RR, len(old))
		for i, rr := range old {
			prereq[i] = dns.Copy(rr)
		}
		m.Used(prereq)
	} else {
		m.RRsetNotUsed([]dns.RR{&dns.ANY{Hdr: dns.RR_Header{Name: t.Name, Rrtype: dns.TypeHTTPS}}})
	}
	m.RemoveRRset([]dns.RR{&dns.ANY{Hdr: dns.RR_Header{Name: t.Name, Rrtype: dns.TypeHTTPS}}})
	m.Insert(updated)
	if t.TSIG != nil {
		m.SetTsig(dns.Fqdn(t.TSIG.Name), dns.Fqdn(strings.ToLower(t.TSIG.Algorithm)), 300, time.Now().Unix())
	}
	r, _, err := client(ctx, "tcp", t.TSIG).ExchangeContext(ctx, m, t.Primary)
	fail := &Error{Op: "publish", Server: t.Primary, Zone: t.Zone, Name: t.Name, Rcode: -1, Err: err}
	if r != nil {
		fail.Rcode = r.Rcode
		if ts := r.IsTsig(); ts != nil && ts.Error != 0 {
			fail.TSIGError = ts.Error
		}
	}
	if err != nil {
		if r != nil && fail.TSIGError == 0 && r.Rcode == dns.RcodeNotAuth {
			fail.TSIGError = dns.RcodeBadSig
		}
		if fail.TSIGError != 0 {
			fail.Err = nil
		}
		return fail
	}
	if r.Rcode != dns.RcodeSuccess || fail.TSIGError != 0 {
		fail.Err = nil
		return fail
	}
	return nil
}

// merge is old (t.Name's HTTPS RRset) with the ech param of every
// ServiceMode record set to list (removed when list is empty), its TTL set
// to ttl when ttl is not 0. With no record and a list, it is one new
// "1 . ech=list" record.
func merge(old []dns.RR, name string, ttl uint32, list []byte) ([]dns.RR, error) {
	if len(old) == 0 {
		if len(list) == 0 {
			return nil, nil
		}
		if ttl == 0 {
			ttl = DefaultTTL
		}
		return []dns.RR{&dns.HTTPS{SVCB: dns.SVCB{
			Hdr:      dns.RR_Header{Name: name, Rrtype: dns.TypeHTTPS, Class: dns.ClassINET, Ttl: ttl},
			Priority: 1, Target: ".",
			Value: []dns.SVCBKeyValue{&dns.SVCBECHConfig{ECH: slices.Clone(list)}},
		}}}, nil
	}
	out := make([]dns.RR, 0, len(old))
	service := false
	for _, rr := range old {
		h := dns.Copy(rr).(*dns.HTTPS)
		if ttl != 0 {
			h.Hdr.Ttl = ttl
		}
		if h.Priority != 0 {
			service = true
			h.Value = slices.DeleteFunc(h.Value, func(kv dns.SVCBKeyValue) bool { return kv.Key() == dns.SVCB_ECHCONFIG })
			if len(list) > 0 {
				h.Value = append(h.Value, &dns.SVCBECHConfig{ECH: slices.Clone(list)})
			}
			slices.SortStableFunc(h.Value, func(a, b dns.SVCBKeyValue) int { return int(a.Key()) - int(b.Key()) })
		}
		out = append(out, h)
	}
	if !service && len(list) > 0 {
		return nil, errors.New("the HTTPS RRset holds only AliasMode (priority 0) records, which carry no ech param")
	}
	return out, nil
}

// sameRRset reports whether a and b hold the same records with the same
// TTLs, in any order.
func sameRRset(a, b []dns.RR) bool {
	if len(a) != len(b) {
		return false
	}
	key := func(rrs []dns.RR) []string {
		s := make([]string, len(rrs))
		for i, rr := range rrs {
			s[i] = strings.ToLower(rr.String())
		}
		slices.Sort(s)
		return s
	}
	return slices.Equal(key(a), key(b))
}

// Result is what each server Verify asked answers.
type Result struct {
	// Servers is one entry per server asked, in the target's order.
	Servers []ServerResult
}

// ServerResult is one server's answer.
type ServerResult struct {
	// Server is the host:port asked.
	Server string
	// Match is true when every ServiceMode HTTPS record the server
	// answers carries exactly the list (no ech param, for an empty list).
	Match bool
	// Err says why not: the query failed, or the answer differs.
	Err error
}

// Matched reports whether every server matched (and at least one was
// asked).
func (r Result) Matched() bool {
	if len(r.Servers) == 0 {
		return false
	}
	for _, s := range r.Servers {
		if !s.Match {
			return false
		}
	}
	return true
}

// Err joins the errors of the servers that did not match.
func (r Result) Err() error {
	var errs []error
	for _, s := range r.Servers {
		if !s.Match {
			errs = append(errs, s.Err)
		}
	}
	return errors.Join(errs...)
}

// Verify asks every server of t (t.Servers, else t.Primary) directly,
// without recursion, for t.Name's HTTPS records, over UDP and over TCP
// when the answer is truncated, and compares the ech param of each
// ServiceMode record with echConfigList byte for byte. The servers are
// asked at once; each exchange ends when ctx does. The Result says which
// servers answer the list exactly; the error is nil only when all do.
func Verify(ctx context.Context, t Target, echConfigList []byte) (Result, error) {
	if err := t.check(); err != nil {
		return Result{}, fmt.Errorf("verify: %w", err)
	}
	servers := t.servers()
	if len(servers) == 0 {
		return Result{}, fmt.Errorf("verify HTTPS %s (zone %s): no server to ask", t.Name, t.Zone)
	}
	res := Result{Servers: make([]ServerResult, len(servers))}
	var wg sync.WaitGroup
	for i, server := range servers {
		wg.Go(func() {
			res.Servers[i] = verifyOne(ctx, t, server, echConfigList)
		})
	}
	wg.Wait()
	return res, res.Err()
}

func verifyOne(ctx context.Context, t Target, server string, list []byte) ServerResult {
	rrs, err := query(ctx, "verify", t, server, false)
	if err != nil {
		return ServerResult{Server: server, Err: err}
	}
	differs := func(format string, a ...any) ServerResult {
		return ServerResult{Server: server, Err: fmt.Errorf("verify HTTPS %s (zone %s) at %s: %s", t.Name, t.Zone, server, fmt.Sprintf(format, a...))}
	}
	service := 0
	for _, rr := range rrs {
		h := rr.(*dns.HTTPS)
		if h.Priority == 0 {
			continue
		}
		service++
		var got []byte
		found := false
		for _, kv := range h.Value {
			if e, ok := kv.(*dns.SVCBECHConfig); ok {
				got, found = e.ECH, true
			}
		}
		switch {
		case len(list) == 0 && found:
			return differs("answers ech configs %s, want no ech param", describe(got))
		case len(list) > 0 && !found:
			return differs("answers a record (priority %d, target %s) without an ech param, want ech configs %s", h.Priority, h.Target, describe(list))
		case len(list) > 0 && !bytes.Equal(got, list):
			return differs("answers ech configs %s, want %s", describe(got), describe(list))
		}
	}
	if service == 0 && len(list) > 0 {
		return differs("answers no ServiceMode HTTPS record, want one with ech configs %s", describe(list))
	}
	return ServerResult{Server: server, Match: true}
}

// describe names an ECHConfigList by its config ids and size, for
// messages (the list is public, but ids are what status shows).
func describe(list []byte) string {
	ids, ok := configIDs(list)
	if !ok {
		return fmt.Sprintf("(%d bytes, not an ECHConfigList)", len(list))
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprint(id)
	}
	return fmt.Sprintf("[%s] (%d bytes)", strings.Join(parts, " "), len(list))
}

// configIDs reads the config_id of each ECHConfig (version 0xfe0d) of an
// ECHConfigList; other versions are skipped, as clients skip them.
func configIDs(list []byte) ([]uint8, bool) {
	if len(list) < 2 || int(list[0])<<8|int(list[1]) != len(list)-2 {
		return nil, false
	}
	var ids []uint8
	for rest := list[2:]; len(rest) > 0; {
		if len(rest) < 4 {
			return nil, false
		}
		version, n := int(rest[0])<<8|int(rest[1]), int(rest[2])<<8|int(rest[3])
		if len(rest) < 4+n {
			return nil, false
		}
		if version == 0xfe0d && n > 0 {
			ids = append(ids, rest[4])
		}
		rest = rest[4+n:]
	}
	return ids, true
}
