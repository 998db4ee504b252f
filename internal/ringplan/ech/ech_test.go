package ech_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/dnszone"
	"github.com/ringmaster-io/ringmaster/internal/echring"
	"github.com/ringmaster-io/ringmaster/internal/ringplan"
	"github.com/ringmaster-io/ringmaster/internal/ringplan/ech"
	"github.com/ringmaster-io/ringmaster/internal/textlimit"
)

var (
	e0        = time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	echPolicy = echring.Policy{RotationInterval: time.Hour, DeliveryDelay: 5 * time.Minute, TTL: 5 * time.Minute,
		RetirementMargin: 10 * time.Minute, MaxDelay: 30 * time.Minute, RetainedConfigs: 1}
	echParams = echring.Params{PublicName: "public.example.test", KEM: 0x0020}
)

// echConfig is a real config of the given id and state, created at the
// given offset from e0; published ones were published 5 minutes later.
func echConfig(t *testing.T, id uint8, st echring.State, created time.Duration) echring.Config {
	t.Helper()
	c, err := echring.NewConfig(id, bytes.Repeat([]byte{id}, echring.SeedSize), echParams)
	if err != nil {
		t.Fatal(err)
	}
	c.State, c.CreatedAt, c.ExpiresAt = st, e0.Add(created), e0.Add(created+echPolicy.Life())
	if st != echring.Staged {
		c.PublishedAt = c.CreatedAt.Add(5 * time.Minute)
	}
	return c
}

func echRing(cs ...echring.Config) echring.Ring {
	return echring.Ring{Ring: "shop/web", Epoch: 3, Configs: cs}
}

func owned() ech.Zone {
	return ech.Zone{Ref: "z", Name: "www.example.test", Claim: dnszone.Claim{Owned: true}}
}

func echRead(now time.Duration, cur echring.Ring) ech.Read {
	return ech.Read{Now: e0.Add(now), Generation: 2, Policy: echPolicy, Params: echParams, Current: cur, Zone: owned(), Timeout: 10 * time.Minute}
}

func TestDecideECH(t *testing.T) {
	published := func(t *testing.T) echring.Ring { return echRing(echConfig(t, 1, echring.Published, 0)) }
	staged := func(t *testing.T) echring.Ring {
		return echRing(echConfig(t, 2, echring.Staged, 55*time.Minute), echConfig(t, 1, echring.Published, 0))
	}
	for _, tc := range []struct {
		name    string
		read    func(*testing.T) ech.Read
		halted  string
		blocked string
		mint    *uint8
		dns     ech.DNSOp
		list    []uint8 // config ids of the DNS list
	}{
		{name: "a new ring it owns the name of mints its first config, and leaves DNS alone",
			read: func(*testing.T) ech.Read { return echRead(0, echring.Ring{Ring: "shop/web"}) }, mint: ptr(1)},
		{name: "an invalid policy halts",
			read: func(*testing.T) ech.Read {
				r := echRead(0, echring.Ring{})
				r.Policy.RotationInterval = time.Second
				return r
			}, halted: v1alpha1.ReasonInvalidSpec},
		{name: "an unreadable snapshot halts",
			read: func(*testing.T) ech.Read {
				r := echRead(0, echring.Ring{})
				r.SnapshotErr = errors.New("snapshot shop/web-ech-e3: parse echkeys.json")
				return r
			}, halted: v1alpha1.ReasonInvalidSnapshot},
		{name: "another ring owns the name: nothing is staged, DNS is left alone",
			read: func(*testing.T) ech.Read {
				r := echRead(0, echring.Ring{})
				r.Zone.Claim = dnszone.Claim{Waiting: true}
				return r
			}, blocked: v1alpha1.ReasonDNSNameClaimed},
		{name: "the zone has not recorded an owner yet",
			read: func(*testing.T) ech.Read {
				r := echRead(0, echring.Ring{})
				r.Zone.Claim = dnszone.Claim{Waiting: true, Pending: true}
				return r
			}, blocked: v1alpha1.ReasonAwaitingDNS},
		{name: "a ring still letting another name go waits",
			read: func(t *testing.T) ech.Read {
				r := echRead(70*time.Minute, published(t))
				r.Zone.Claim.Holding = []dnszone.Held{{Zone: "z", Name: "old.example.test"}}
				return r
			}, blocked: v1alpha1.ReasonDNSNameReleasing},
		{name: "a ring being deleted stages nothing and touches no record",
			read: func(t *testing.T) ech.Read {
				r := echRead(70*time.Minute, published(t))
				r.Deleting = true
				return r
			}, blocked: v1alpha1.ReasonDNSNameReleasing},
		{name: "a zone refusing the ring blocks it and DNS",
			read: func(t *testing.T) ech.Read {
				r := echRead(10*time.Minute, published(t))
				r.Zone.Problem = &ringplan.Problem{Reason: v1alpha1.ReasonDNSNameNotAllowed, Message: "no"}
				return r
			}, blocked: v1alpha1.ReasonDNSNameNotAllowed},
		{name: "a spec describing no config mints nothing, but its published config stays in DNS",
			read: func(t *testing.T) ech.Read {
				r := echRead(10*time.Minute, published(t))
				r.Params.PublicName = "localhost"
				return r
			}, blocked: v1alpha1.ReasonECHConfigInvalid, dns: ech.DNSPublish, list: []uint8{1}},
		{name: "the published config is what DNS must hold",
			read: func(t *testing.T) ech.Read { return echRead(10*time.Minute, published(t)) }, dns: ech.DNSPublish, list: []uint8{1}},
		{name: "deliveryDelay before it falls due, the next config is minted",
			read: func(t *testing.T) ech.Read { return echRead(60*time.Minute, published(t)) }, mint: ptr(2), dns: ech.DNSPublish, list: []uint8{1}},
		{name: "a staged config due and confirmed replaces the published one in DNS",
			read: func(t *testing.T) ech.Read {
				r := echRead(66*time.Minute, staged(t))
				r.Confirmed = true
				return r
			}, dns: ech.DNSPublish, list: []uint8{2}},
		{name: "due but unconfirmed before its ceiling: DNS keeps the published one",
			read: func(t *testing.T) ech.Read { return echRead(66*time.Minute, staged(t)) }, dns: ech.DNSPublish, list: []uint8{1}},
		{name: "at its ceiling it is published unconfirmed",
			read: func(t *testing.T) ech.Read { return echRead(95*time.Minute, staged(t)) }, dns: ech.DNSPublish, list: []uint8{2}},
		{name: "in a verify-only zone the ring asks another system for it",
			read: func(t *testing.T) ech.Read {
				r := echRead(10*time.Minute, published(t))
				r.Zone.VerifyOnly = true
				return r
			}, dns: ech.DNSVerify, list: []uint8{1}},
		{name: "nothing to publish: only the value the ring wrote there is removed",
			read: func(t *testing.T) ech.Read {
				r := echRead(0, echring.Ring{Ring: "shop/web"})
				r.Last.DNSRecord = record(t, "z", "www.example.test", 1)
				return r
			}, mint: ptr(1), dns: ech.DNSRemove, list: []uint8{1}},
		{name: "nothing to publish, its value recorded under another name: the record is left alone",
			read: func(t *testing.T) ech.Read {
				r := echRead(0, echring.Ring{Ring: "shop/web"})
				r.Last.DNSRecord = record(t, "z", "old.example.test", 1)
				return r
			}, mint: ptr(1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := ech.Decide(tc.read(t))
			if got := reason(d.Halted); got != tc.halted {
				t.Fatalf("halted %q, want %q", got, tc.halted)
			}
			if tc.halted != "" {
				return
			}
			if got := reason(d.Blocked); got != tc.blocked {
				t.Errorf("blocked %q, want %q", got, tc.blocked)
			}
			if (d.Mint == nil) != (tc.mint == nil) || (d.Mint != nil && *d.Mint != *tc.mint) {
				t.Errorf("mint %v, want %v", show(d.Mint), show(tc.mint))
			}
			if d.DNS.Op != tc.dns || listIDs(d.DNS.List) != fmt.Sprint(ints(tc.list)) {
				t.Errorf("DNS %d %s, want %d %v", d.DNS.Op, listIDs(d.DNS.List), tc.dns, tc.list)
			}
		})
	}
}

func TestFinishECH(t *testing.T) {
	pub := func(t *testing.T) echring.Config { return echConfig(t, 1, echring.Published, 0) }
	stg := func(t *testing.T) echring.Config { return echConfig(t, 2, echring.Staged, 55*time.Minute) }
	holds := ech.DNSAnswer{Known: true, Holds: true, At: e0.Add(66 * time.Minute)}
	t.Run("DNS answering the staged config publishes it and retires the one it replaces", func(t *testing.T) {
		rd := echRead(66*time.Minute, echRing(stg(t), pub(t)))
		rd.Confirmed = true
		d := ech.Decide(rd)
		r := ech.Finish(rd, d, holds, ech.Minted{})
		if !r.Write || r.Plan.Published == nil || *r.Plan.Published != 2 || r.Unconfirmed || states(r.Next) != "2:published 1:retired" {
			t.Fatalf("plan published %v, ring %s, unconfirmed %v; want 2 published, 1 retired", show(r.Plan.Published), states(r.Next), r.Unconfirmed)
		}
		if r.Record == nil || r.Record.Name != "www.example.test" || r.Record.ECHConfigList != base64.StdEncoding.EncodeToString(d.DNS.List) {
			t.Errorf("record %+v, want the list DNS answers", r.Record)
		}
		if r.Next.Epoch != 4 {
			t.Errorf("epoch %d, want 4", r.Next.Epoch)
		}
	})
	t.Run("DNS not answered yet: held for DNS, nothing written", func(t *testing.T) {
		rd := echRead(66*time.Minute, echRing(stg(t), pub(t)))
		rd.Confirmed = true
		r := ech.Finish(rd, ech.Decide(rd), ech.DNSAnswer{}, ech.Minted{})
		if r.Write || r.Plan.Held != echring.HoldDNS {
			t.Fatalf("write %v held %q, want nothing written, held for DNS", r.Write, r.Plan.Held)
		}
		after := r.Report(ech.Written{Snapshot: "web-ech-e3"}).Requeue
		if after != ech.DNSRetry {
			t.Errorf("requeue %s, want %s", after, ech.DNSRetry)
		}
	})
	t.Run("at its ceiling a config is published unconfirmed and announced", func(t *testing.T) {
		rd := echRead(95*time.Minute, echRing(stg(t), pub(t)))
		d := ech.Decide(rd)
		r := ech.Finish(rd, d, ech.DNSAnswer{Known: true, Holds: true}, ech.Minted{})
		if !r.Unconfirmed {
			t.Fatal("published at its ceiling without confirmation, not reported unconfirmed")
		}
		events := written(r, "web-ech-e4")
		if len(events) != 2 || events[1].Reason != v1alpha1.ReasonPublishedUnconfirmed || !events[1].Warning {
			t.Errorf("events %+v, want Rotated and a PublishedUnconfirmed warning", events)
		}
		st := r.Report(ech.Written{Snapshot: "web-ech-e4", Published: true}).Status
		if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionConfirmationOverdue); c == nil || c.Reason != v1alpha1.ReasonPublishedUnconfirmed {
			t.Errorf("ConfirmationOverdue %+v, want PublishedUnconfirmed", c)
		}
		if r.Recorded == nil || *r.Recorded != 2 {
			t.Fatalf("recorded %v, want config 2 recorded with the epoch", show(r.Recorded))
		}

		By := "the next pass reads a status that lags the publication: the snapshot's record still says it"
		next := echRead(96*time.Minute, r.Next)
		next.Unconfirmed = r.Recorded
		r2 := ech.Finish(next, ech.Decide(next), holds, ech.Minted{})
		st2 := r2.Report(ech.Written{Snapshot: "web-ech-e4"}).Status
		if c := meta.FindStatusCondition(st2.Conditions, v1alpha1.ConditionConfirmationOverdue); c == nil || c.Reason != v1alpha1.ReasonPublishedUnconfirmed {
			t.Errorf("%s: ConfirmationOverdue %+v, want PublishedUnconfirmed", By, c)
		}
		if r2.Recorded == nil || *r2.Recorded != 2 {
			t.Errorf("%s: recorded %v, want it carried while config 2 stays published", By, show(r2.Recorded))
		}
	})
	t.Run("a config minted late is stamped when the mint returned", func(t *testing.T) {
		rd := echRead(0, echring.Ring{Ring: "shop/web"})
		d := ech.Decide(rd)
		c := echConfig(t, 1, echring.Staged, 0)
		at := rd.Now.Add(40 * time.Second)
		r := ech.Finish(rd, d, ech.DNSAnswer{}, ech.Minted{Config: c, At: at})
		got := r.Next.Configs[0]
		if !got.CreatedAt.Equal(at) || !got.ExpiresAt.Equal(at.Add(echPolicy.Life())) {
			t.Fatalf("created %s expires %s, want from %s", got.CreatedAt, got.ExpiresAt, at)
		}
	})
	t.Run("a failed mint stages nothing and says why, and the current configs keep serving", func(t *testing.T) {
		rd := echRead(60*time.Minute, echRing(pub(t)))
		d := ech.Decide(rd)
		p := &ringplan.Problem{Reason: v1alpha1.ReasonVaultUnavailable, Message: "down"}
		r := ech.Finish(rd, d, holdsFor(d), ech.Minted{Err: errors.New("down"), Problem: p})
		if r.Write || r.Problem != p || r.MintErr == nil || len(r.Next.Configs) != 1 {
			t.Fatalf("write %v problem %v mintErr %v configs %d; want nothing staged, the mint's problem", r.Write, r.Problem, r.MintErr, len(r.Next.Configs))
		}
	})
	t.Run("a config minted under another id than planned is not staged", func(t *testing.T) {
		rd := echRead(0, echring.Ring{Ring: "shop/web"})
		r := ech.Finish(rd, ech.Decide(rd), ech.DNSAnswer{}, ech.Minted{Config: echConfig(t, 9, echring.Staged, 0), At: rd.Now})
		if r.Write || len(r.Next.Configs) != 0 {
			t.Fatalf("staged %s, want nothing", states(r.Next))
		}
	})
	t.Run("the ring's own value removed from DNS: the record is cleared", func(t *testing.T) {
		rd := echRead(0, echring.Ring{Ring: "shop/web"})
		rd.Last.DNSRecord = record(t, "z", "www.example.test", 1)
		d := ech.Decide(rd)
		if r := ech.Finish(rd, d, ech.DNSAnswer{}, ech.Minted{}); r.Record == nil {
			t.Error("the record was dropped before DNS answered its removal")
		}
		if r := ech.Finish(rd, d, ech.DNSAnswer{Known: true, Holds: true}, ech.Minted{}); r.Record != nil {
			t.Errorf("record %+v after its removal held, want none", r.Record)
		}
	})
	t.Run("a name the ring let go is no longer recorded once the zone released it", func(t *testing.T) {
		rd := echRead(10*time.Minute, echRing(pub(t)))
		rd.Last.DNSRecord = record(t, "z", "old.example.test", 1)
		r := ech.Finish(rd, ech.Decide(rd), ech.DNSAnswer{}, ech.Minted{})
		if r.Record != nil {
			t.Errorf("record %+v kept for a name the ring no longer holds", r.Record)
		}
		rd.Zone.Claim.Holding = []dnszone.Held{{Zone: "z", Name: "old.example.test"}}
		if r := ech.Finish(rd, ech.Decide(rd), ech.DNSAnswer{}, ech.Minted{}); r.Record == nil {
			t.Error("record dropped while the ring still holds its name")
		}
	})
}

// A staged config waiting for its fleet is looked at again at its
// confirmation timeout, whatever the ceiling, so that it is reported
// overdue then.
func TestECHRequeueAtTimeout(t *testing.T) {
	rd := echRead(65*time.Minute+5*time.Second, echRing(echConfig(t, 2, echring.Staged, 55*time.Minute), echConfig(t, 1, echring.Published, 0)))
	rd.Policy.MaxDelay, rd.Timeout = 40*time.Second, 20*time.Second
	d := ech.Decide(rd)
	r := ech.Finish(rd, d, holdsFor(d), ech.Minted{})
	if r.Plan.Held != echring.HoldConfirmation {
		t.Fatalf("held %q, want for confirmation", r.Plan.Held)
	}
	due := e0.Add(65 * time.Minute)
	after := r.Report(ech.Written{Snapshot: "web-ech-e3"}).Requeue
	if want := due.Add(21 * time.Second).Sub(rd.Now); after != want {
		t.Fatalf("requeue %s, want %s (the timeout past its due time)", after, want)
	}
	rd.Now = due.Add(25 * time.Second)
	r = ech.Finish(rd, ech.Decide(rd), holdsFor(d), ech.Minted{})
	st := r.Report(ech.Written{Snapshot: "web-ech-e3"}).Status
	if !meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionConfirmationOverdue) {
		t.Fatalf("past the timeout: ConfirmationOverdue %+v, want True", meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionConfirmationOverdue))
	}
}

// retainedConfigs bounds the configs the ring holds: with one retired
// config kept, a ring holding three waits for one to expire before it
// stages the next.
func TestECHRetainedConfigs(t *testing.T) {
	pub := echConfig(t, 2, echring.Published, 0)
	ret1, ret2 := echConfig(t, 1, echring.Retired, -time.Hour), echConfig(t, 9, echring.Retired, -2*time.Hour)
	ret1.RetiredAt, ret2.RetiredAt = e0, e0
	ret1.ExpiresAt, ret2.ExpiresAt = e0.Add(2*time.Hour), e0.Add(2*time.Hour)
	rd := echRead(60*time.Minute, echRing(pub, ret1, ret2))
	rd.Policy.RetainedConfigs = 1
	if d := ech.Decide(rd); d.Mint != nil {
		t.Fatalf("minted %d with retainedConfigs 1 and 3 live configs", *d.Mint)
	}
	rd.Policy.RetainedConfigs = 2
	if d := ech.Decide(rd); d.Mint == nil {
		t.Fatal("retainedConfigs 2: no mint with room for one more")
	}
}

func holdsFor(d ech.Decision) ech.DNSAnswer {
	return ech.DNSAnswer{Known: d.DNS.Op != ech.DNSNone, Holds: true}
}

func record(t *testing.T, zone, name string, ids ...uint8) *v1alpha1.ECHDNSRecord {
	var cs []echring.Config
	for _, id := range ids {
		cs = append(cs, echConfig(t, id, echring.Published, 0))
	}
	return &v1alpha1.ECHDNSRecord{Zone: zone, Name: name, ECHConfigList: base64.StdEncoding.EncodeToString(echring.ConfigList(cs))}
}

func ints(ids []uint8) []int {
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}

func listIDs(list []byte) string {
	var ids []int
	for rest := list; len(rest) > 6; {
		if len(ids) == 0 {
			rest = rest[2:]
		}
		n := int(rest[2])<<8 | int(rest[3])
		ids = append(ids, int(rest[4]))
		rest = rest[4+n:]
	}
	return fmt.Sprint(ids)
}

func states(r echring.Ring) string {
	var s []string
	for _, c := range r.Configs {
		s = append(s, fmt.Sprintf("%d:%s", c.ID, c.State))
	}
	return strings.Join(s, " ")
}

func reason(p *ringplan.Problem) string {
	if p == nil {
		return ""
	}
	return p.Reason
}

func ptr(v uint8) *uint8 { return &v }

func show(p *uint8) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprint(*p)
}

func TestZoneOf(t *testing.T) {
	ring := &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "uid-web"}, Spec: v1alpha1.ECHKeyRingSpec{
		DNS: v1alpha1.ECHDNS{ZoneRef: v1alpha1.DNSZoneReference{Name: "z"}, Name: "WWW.example.com.", TTL: 300}}}
	zone := func(edit func(*v1alpha1.ClusterDNSZoneSpec)) *v1alpha1.ClusterDNSZone {
		z := &v1alpha1.ClusterDNSZone{ObjectMeta: metav1.ObjectMeta{Name: "z"}, Spec: v1alpha1.ClusterDNSZoneSpec{
			Zone: "example.com", Primary: "10.0.0.53:53", Servers: []string{"10.0.0.53:53", "10.0.1.53:53"},
			TSIGSecretRef:     &v1alpha1.SecretReference{Name: "operator-tsig"},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "shop"}},
			AllowedNames:      []string{"www.example.com", "secret-project.example.com"}}}
		if edit != nil {
			edit(&z.Spec)
		}
		return z
	}
	tsig := &corev1.Secret{Data: map[string][]byte{"name": []byte("k."), "secret": []byte(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)))}}
	labels := map[string]string{"team": "shop"}
	for _, tc := range []struct {
		name    string
		in      ech.ZoneRead
		problem string
		err     bool
		signed  bool
	}{
		{name: "admitted and signed", in: ech.ZoneRead{Zone: zone(nil), NamespaceLabels: labels, TSIG: tsig}, signed: true},
		{name: "no zone", in: ech.ZoneRead{NamespaceLabels: labels}, problem: v1alpha1.ReasonDNSZoneNotFound},
		{name: "the namespace unread is retried", in: ech.ZoneRead{Zone: zone(nil), NamespaceErr: errors.New("timeout")}, err: true},
		{name: "a namespace the zone does not select", in: ech.ZoneRead{Zone: zone(nil), NamespaceLabels: map[string]string{"team": "ads"}, TSIG: tsig},
			problem: v1alpha1.ReasonDNSNameNotAllowed},
		{name: "the TSIG Secret missing", in: ech.ZoneRead{Zone: zone(nil), NamespaceLabels: labels,
			TSIGErr: apierrors.NewNotFound(corev1.Resource("secrets"), "operator-tsig")}, problem: v1alpha1.ReasonDNSUnavailable},
		{name: "the TSIG Secret unread is retried", in: ech.ZoneRead{Zone: zone(nil), NamespaceLabels: labels, TSIGErr: errors.New("timeout")}, err: true},
		{name: "the TSIG Secret invalid", in: ech.ZoneRead{Zone: zone(nil), NamespaceLabels: labels, TSIG: &corev1.Secret{}},
			problem: v1alpha1.ReasonDNSUnavailable},
		{name: "verify-only: nothing to sign with", in: ech.ZoneRead{Zone: zone(func(s *v1alpha1.ClusterDNSZoneSpec) { s.Primary, s.TSIGSecretRef = "", nil }),
			NamespaceLabels: labels}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Ring = ring
			z, target := ech.ZoneOf(tc.in)
			if reason(z.Problem) != tc.problem || (z.Err != nil) != tc.err {
				t.Fatalf("problem %v err %v, want %q, error %v", z.Problem, z.Err, tc.problem, tc.err)
			}
			if z.Name != "www.example.com" || z.Ref != "z" {
				t.Errorf("name %q ref %q", z.Name, z.Ref)
			}
			if (target.TSIG != nil) != tc.signed {
				t.Errorf("target signed %v, want %v", target.TSIG != nil, tc.signed)
			}
			if z.Problem != nil {
				for _, leak := range []string{"10.0.0.53", "10.0.1.53", "secret-project", "operator-tsig"} {
					if strings.Contains(z.Problem.Message, leak) {
						t.Errorf("message %q shows %s, the administrator's", z.Problem.Message, leak)
					}
				}
			}
		})
	}
}

// A ring being deleted (held by its own DNS finalizer, or by another's)
// stages nothing and publishes nothing to DNS, but drops each config at
// its expiresAt and looks again by then.
func TestECHDeletingDestroysOnTime(t *testing.T) {
	pub, stg := echConfig(t, 1, echring.Published, 0), echConfig(t, 2, echring.Staged, 55*time.Minute)
	before := pub.ExpiresAt.Sub(e0) - time.Minute
	rd := echRead(before, echRing(stg, pub))
	rd.Deleting, rd.Confirmed = true, true
	d := ech.Decide(rd)
	r := ech.Finish(rd, d, ech.DNSAnswer{Known: true, Holds: true}, ech.Minted{})
	if d.Mint != nil || r.Write || r.Plan.Published != nil {
		t.Fatalf("before the expiry: mint %v, write %v, published %v; want nothing", show(d.Mint), r.Write, show(r.Plan.Published))
	}
	if after := r.Report(ech.Written{Snapshot: "web-ech-e3"}).Requeue; after > time.Minute {
		t.Errorf("looks again in %s, after the published config's expiresAt a minute away", after)
	}

	rd.Now = pub.ExpiresAt
	d = ech.Decide(rd)
	r = ech.Finish(rd, d, ech.DNSAnswer{Known: true, Holds: true}, ech.Minted{})
	if d.Mint != nil || !r.Write || states(r.Next) != "2:staged" || r.Next.Epoch != 4 || r.Plan.Published != nil {
		t.Fatalf("at the expiry: mint %v, write %v, ring %s epoch %d; want epoch 4 without config 1, nothing new", show(d.Mint), r.Write, states(r.Next), r.Next.Epoch)
	}
	if ev := written(r, "web-ech-e4"); len(ev) != 1 || !strings.Contains(ev[0].Note, "config 1 destroyed") {
		t.Errorf("events %+v, want the destruction announced", ev)
	}
}

// A ring letting many names go names a bounded number of them in its
// status (and the Warning event it calls for), and counts the rest.
func TestECHHoldingMessageIsBounded(t *testing.T) {
	rd := echRead(0, echring.Ring{Ring: "shop/web"})
	rd.Deleting = true
	for i := range 1000 {
		rd.Zone.Claim.Holding = append(rd.Zone.Claim.Holding, dnszone.Held{Zone: "z", Name: fmt.Sprintf("%s-%d.example.test", strings.Repeat("n", 60), i)})
	}
	msg := ech.Decide(rd).Blocked.Message
	if len(msg) > textlimit.NoteLimit+textlimit.MaxListed*textlimit.MaxItem || !strings.HasSuffix(msg, "and 995 more") {
		t.Errorf("%d bytes, ending %q", len(msg), msg[max(0, len(msg)-40):])
	}
}

// written are the events of what a pass wrote, once its epoch is published
// as snapshot.
func written(r ech.Result, snapshot string) []ringplan.Event {
	var out []ringplan.Event
	for _, e := range r.Report(ech.Written{Snapshot: snapshot, Published: true}).Events {
		if e.Condition == "" {
			out = append(out, e)
		}
	}
	return out
}
