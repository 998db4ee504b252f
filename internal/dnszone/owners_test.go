package dnszone_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/dnszone"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

const www = "www.example.test"

// ring is a ring of namespace ns created at t0+created, claiming www
// through zone (not claiming it when zone is ""), which wrote its value
// there.
func ring(ns, name string, created time.Duration, zone string) dnszone.Claimant {
	return dnszone.Claimant{Ref: v1alpha1.ECHKeyRingReference{Namespace: ns, Name: name, UID: ns + "-" + name},
		Created: t0.Add(created), Zone: zone, Claims: zone != "", Window: 15 * time.Minute, Wrote: []byte("list-" + ns)}
}

func record(c dnszone.Claimant, zone string, state v1alpha1.DNSNameState, releaseAt time.Time) *dnszone.Record {
	return &dnszone.Record{Name: www, Ring: c.Ref, Zone: zone, State: state, Since: t0, ReleaseAt: releaseAt}
}

func TestDecide(t *testing.T) {
	now := t0.Add(time.Hour)
	// a and b claim www through two zones over one DNS zone (overlapping
	// allowedNames); c names it but its zone does not admit it.
	a, b, c := ring("shop", "web", 0, "z1"), ring("ads", "web", time.Minute, "z2"), ring("blog", "web", -time.Minute, "")
	stopped := func(x dnszone.Claimant) dnszone.Claimant { x.Claims = false; return x }
	neverWrote := func(x dnszone.Claimant) dnszone.Claimant { x.Claims, x.Wrote = false, nil; return x }
	gone := dnszone.Removal{Gone: true, At: now}
	releaseAt := now.Add(15 * time.Minute)
	type want struct {
		owner     string // namespace of the owner; "" for no record
		zone      string
		state     v1alpha1.DNSNameState
		waiting   int32
		remove    string // the value to remove; "" for none
		releaseAt time.Time
		assigned  bool
		released  string // namespace of the owner released
	}
	for _, tc := range []struct {
		name    string
		record  *dnszone.Record
		rings   []dnszone.Claimant
		removal dnszone.Removal
		zone    bool // the record's zone is gone
		want    want
	}{
		{name: "a free name goes to the ring that claimed it first, whichever zone admitted it", rings: []dnszone.Claimant{b, a, c},
			want: want{owner: "shop", zone: "z1", state: v1alpha1.DNSNameOwned, waiting: 1, assigned: true}},
		{name: "a ring its own zone does not admit claims nothing", rings: []dnszone.Claimant{c}},
		{name: "the owner keeps it against an older claimant of another zone", record: record(b, "z2", v1alpha1.DNSNameOwned, time.Time{}),
			rings: []dnszone.Claimant{a, b}, want: want{owner: "ads", zone: "z2", state: v1alpha1.DNSNameOwned, waiting: 1}},
		{name: "an owner that no longer claims it releases it: its value must leave DNS first", record: record(a, "z1", v1alpha1.DNSNameOwned, time.Time{}),
			rings: []dnszone.Claimant{stopped(a), b}, want: want{owner: "shop", zone: "z1", state: v1alpha1.DNSNameReleasing, waiting: 1, remove: "list-shop"}},
		{name: "an owner that moved to another zone admitting the name releases it through the zone that admitted it",
			record: record(a, "z1", v1alpha1.DNSNameOwned, time.Time{}), rings: []dnszone.Claimant{ring("shop", "web", 0, "z2"), b},
			want: want{owner: "shop", zone: "z1", state: v1alpha1.DNSNameReleasing, waiting: 2, remove: "list-shop"}},
		{name: "once DNS no longer answers its value, the name waits out the TTL and margin",
			record: record(a, "z1", v1alpha1.DNSNameReleasing, time.Time{}), rings: []dnszone.Claimant{stopped(a), b}, removal: gone,
			want: want{owner: "shop", zone: "z1", state: v1alpha1.DNSNameReleasing, waiting: 1, releaseAt: releaseAt}},
		{name: "a release never comes early: releaseAt is rounded up to the second",
			record: record(a, "z1", v1alpha1.DNSNameReleasing, time.Time{}), rings: []dnszone.Claimant{stopped(a)},
			removal: dnszone.Removal{Gone: true, At: now.Add(time.Millisecond)},
			want:    want{owner: "shop", zone: "z1", state: v1alpha1.DNSNameReleasing, releaseAt: releaseAt.Add(time.Second)}},
		{name: "a releasing owner claiming its name again still releases it first",
			record: record(a, "z1", v1alpha1.DNSNameReleasing, releaseAt), rings: []dnszone.Claimant{a, b},
			want: want{owner: "shop", zone: "z1", state: v1alpha1.DNSNameReleasing, waiting: 2, releaseAt: releaseAt}},
		{name: "released: the name passes to the first claimant",
			record: record(a, "z1", v1alpha1.DNSNameReleasing, now), rings: []dnszone.Claimant{stopped(a), b},
			want: want{owner: "ads", zone: "z2", state: v1alpha1.DNSNameOwned, released: "shop", assigned: true}},
		{name: "an owner that never published lets go at once",
			record: record(a, "z1", v1alpha1.DNSNameOwned, time.Time{}), rings: []dnszone.Claimant{neverWrote(a), b},
			want: want{owner: "ads", zone: "z2", state: v1alpha1.DNSNameOwned, released: "shop", assigned: true}},
		{name: "an owner whose zone is gone lets go at once: nothing can remove its value",
			record: record(a, "z1", v1alpha1.DNSNameOwned, time.Time{}), rings: []dnszone.Claimant{stopped(a), b}, zone: true,
			want: want{owner: "ads", zone: "z2", state: v1alpha1.DNSNameOwned, released: "shop", assigned: true}},
		{name: "an owner that no longer exists lets go at once",
			record: record(a, "z1", v1alpha1.DNSNameOwned, time.Time{}), rings: []dnszone.Claimant{b, c},
			want: want{owner: "ads", zone: "z2", state: v1alpha1.DNSNameOwned, released: "shop", assigned: true}},
		{name: "a ring deleted and created again under the name is another ring",
			record: &dnszone.Record{Name: www, Ring: v1alpha1.ECHKeyRingReference{Namespace: "shop", Name: "web", UID: "old"}, Zone: "z1", State: v1alpha1.DNSNameOwned},
			rings:  []dnszone.Claimant{a}, want: want{owner: "shop", zone: "z1", state: v1alpha1.DNSNameOwned, released: "shop", assigned: true}},
		{name: "nobody claims it: the record goes",
			record: record(a, "z1", v1alpha1.DNSNameReleasing, now.Add(-time.Second)), rings: []dnszone.Claimant{stopped(a)},
			want: want{released: "shop"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := fmt.Sprint(tc.record)
			got := dnszone.Decide(dnszone.NameRead{Now: now, Name: www, Record: tc.record, Rings: tc.rings, Removal: tc.removal, ZoneGone: tc.zone})
			if fmt.Sprint(tc.record) != before {
				t.Fatal("Decide changed the record it read")
			}
			w := tc.want
			switch r := got.Record; {
			case w.owner == "" && r != nil:
				t.Fatalf("record = %+v, want none", *r)
			case w.owner != "" && r == nil:
				t.Fatalf("no record, want %s owning it", w.owner)
			case r != nil:
				if r.Name != www || r.Ring.Namespace != w.owner || r.Zone != w.zone || r.State != w.state || !r.ReleaseAt.Equal(w.releaseAt) {
					t.Errorf("record = %s %s %s %s releaseAt %v, want %s %s %s releaseAt %v", r.Name, r.Ring.Namespace, r.Zone, r.State, r.ReleaseAt, w.owner, w.zone, w.state, w.releaseAt)
				}
				if !w.releaseAt.IsZero() && !got.Next.Equal(w.releaseAt) {
					t.Errorf("next = %v, want %v", got.Next, w.releaseAt)
				}
				if w.assigned && !r.Since.Equal(now) {
					t.Errorf("since = %v, want now", r.Since)
				}
			}
			if got.Waiting != w.waiting {
				t.Errorf("waiting = %d, want %d", got.Waiting, w.waiting)
			}
			if string(got.Remove) != w.remove {
				t.Errorf("remove %q, want %q: only the value the owner wrote", got.Remove, w.remove)
			}
			if got.Assigned != w.assigned {
				t.Errorf("assigned = %v, want %v", got.Assigned, w.assigned)
			}
			if rel := got.Released; (rel == nil) != (w.released == "") || (rel != nil && rel.Ring.Namespace != w.released) {
				t.Errorf("released = %+v, want %q", rel, w.released)
			}
		})
	}
}

// Two writers deciding at once from the same record both decide the same
// owner: the decision depends on what was read, never on who decides.
func TestDecideIsTheSameForEveryZone(t *testing.T) {
	a, b := ring("shop", "web", 0, "z1"), ring("ads", "web", 0, "z2")
	one := dnszone.Decide(dnszone.NameRead{Now: t0, Name: www, Rings: []dnszone.Claimant{a, b}})
	two := dnszone.Decide(dnszone.NameRead{Now: t0, Name: www, Rings: []dnszone.Claimant{b, a}})
	if one.Record == nil || two.Record == nil || *one.Record != *two.Record || one.Record.Ring.Namespace != "ads" {
		t.Fatalf("decided %+v and %+v, want ads (created at the same time, first by namespace) both times", one.Record, two.Record)
	}
}

// A permissive zone (*.example.test) with 10,000 claiming rings: every
// name is assigned, and the zone's status stays bounded.
func TestTenThousandClaimants(t *testing.T) {
	const n = 10_000
	var records []dnszone.Record
	for i := range n {
		name := fmt.Sprintf("r%05d.example.test", i)
		c := dnszone.Claimant{Ref: v1alpha1.ECHKeyRingReference{Namespace: fmt.Sprintf("t%d", i%100), Name: "web", UID: fmt.Sprint(i)},
			Created: t0, Zone: "permissive", Claims: true}
		d := dnszone.Decide(dnszone.NameRead{Now: t0, Name: name, Rings: []dnszone.Claimant{c}})
		if d.Record == nil || !d.Assigned || d.Record.Ring.UID != c.Ref.UID {
			t.Fatalf("%s: decided %+v, want it assigned to its one claimant", name, d.Record)
		}
		records = append(records, *d.Record)
	}
	names, counts := dnszone.Summarize(records, 3, func(string) int32 { return 0 })
	if counts.Owned != n || counts.Releasing != 0 || counts.Waiting != 3 {
		t.Errorf("counts = %+v, want %d owned, 3 waiting", counts, n)
	}
	if len(names) != dnszone.MaxListed || names[0].Name != "r00000.example.test" || names[dnszone.MaxListed-1].Name != "r00063.example.test" {
		t.Errorf("listed %d names from %s, want the first %d by name", len(names), names[0].Name, dnszone.MaxListed)
	}
}

func TestSummarize(t *testing.T) {
	a, b := ring("shop", "web", 0, "z1"), ring("ads", "web", 0, "z1")
	at := t0.Add(time.Hour)
	records := []dnszone.Record{
		{Name: "www.example.test", Ring: a.Ref, Zone: "z1", State: v1alpha1.DNSNameOwned, Since: t0},
		{Name: "api.example.test", Ring: b.Ref, Zone: "z1", State: v1alpha1.DNSNameReleasing, Since: t0, ReleaseAt: at},
	}
	names, counts := dnszone.Summarize(records, 1, func(n string) int32 { return int32(len(n)) })
	if counts != (v1alpha1.DNSNameCounts{Owned: 1, Releasing: 1, Waiting: 1}) {
		t.Errorf("counts = %+v", counts)
	}
	want := []v1alpha1.DNSNameOwner{
		{Name: "api.example.test", Ring: b.Ref, State: v1alpha1.DNSNameReleasing, Since: metav1.Time{Time: t0}, ReleaseAt: &metav1.Time{Time: at}, Waiting: 16},
		{Name: "www.example.test", Ring: a.Ref, State: v1alpha1.DNSNameOwned, Since: metav1.Time{Time: t0}, Waiting: 16},
	}
	if fmt.Sprint(names) != fmt.Sprint(want) {
		t.Errorf("names = %+v, want %+v", names, want)
	}
	if names, counts := dnszone.Summarize(nil, 0, nil); names != nil || counts != (v1alpha1.DNSNameCounts{}) {
		t.Errorf("no records: %+v %+v", names, counts)
	}
}

func TestClaimOf(t *testing.T) {
	a, b := ring("shop", "web", 0, "z1"), ring("ads", "web", 0, "z2")
	at := t0.Add(time.Hour)
	mine := dnszone.Record{Name: "www.example.test", Ring: a.Ref, Zone: "z1", State: v1alpha1.DNSNameOwned}
	old := dnszone.Record{Name: "old.example.test", Ring: a.Ref, Zone: "z1", State: v1alpha1.DNSNameReleasing, ReleaseAt: at}
	theirs := dnszone.Record{Name: "api.example.test", Ring: b.Ref, Zone: "z2", State: v1alpha1.DNSNameOwned}
	for _, tc := range []struct {
		name           string
		records        []dnszone.Record
		uid, zone, dns string
		want           dnszone.Claim
	}{
		{"its own name", []dnszone.Record{mine, old}, "shop-web", "z1", "WWW.example.test.", dnszone.Claim{Owned: true,
			Holding: []dnszone.Held{{Zone: "z1", Name: "old.example.test", ReleaseAt: at}}}},
		{"another's name, owned through another zone", []dnszone.Record{theirs}, "shop-web", "z1", "api.example.test", dnszone.Claim{Waiting: true}},
		{"its name, owned through the zone it named before: it holds it until released", []dnszone.Record{mine}, "shop-web", "z2", "www.example.test",
			dnszone.Claim{Waiting: true, Holding: []dnszone.Held{{Zone: "z1", Name: "www.example.test"}}}},
		{"a name not recorded yet", nil, "ads-web", "z1", "new.example.test", dnszone.Claim{Waiting: true, Pending: true}},
		{"renamed: the old name is held until released", []dnszone.Record{mine}, "shop-web", "z1", "new.example.test",
			dnszone.Claim{Waiting: true, Pending: true, Holding: []dnszone.Held{{Zone: "z1", Name: "www.example.test"}}}},
		{"its name, being released", []dnszone.Record{old, old}, "shop-web", "z1", "old.example.test", dnszone.Claim{Waiting: true,
			Holding: []dnszone.Held{{Zone: "z1", Name: "old.example.test", ReleaseAt: at}}}},
		{"no name claimed, none held", []dnszone.Record{theirs}, "shop-web", "", "", dnszone.Claim{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := dnszone.ClaimOf(tc.records, tc.uid, tc.zone, tc.dns)
			if got.Owned != tc.want.Owned || got.Waiting != tc.want.Waiting || got.Pending != tc.want.Pending || !slices.Equal(got.Holding, tc.want.Holding) {
				t.Fatalf("ClaimOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestLegacyRecords(t *testing.T) {
	a, b := ring("shop", "web", 0, "z1"), ring("ads", "web", 0, "z2")
	at := t0.Add(time.Hour)
	entry := func(name string, c dnszone.Claimant, state v1alpha1.DNSNameState, since time.Time) v1alpha1.DNSNameOwner {
		e := v1alpha1.DNSNameOwner{Name: name, Ring: c.Ref, State: state, Since: metav1.Time{Time: since}}
		if state == v1alpha1.DNSNameReleasing {
			e.ReleaseAt = &metav1.Time{Time: at}
		}
		return e
	}
	zone := func(name string, summarised bool, names ...v1alpha1.DNSNameOwner) v1alpha1.ClusterDNSZone {
		z := v1alpha1.ClusterDNSZone{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: v1alpha1.ClusterDNSZoneStatus{Names: names}}
		if summarised {
			z.Status.NameCounts = &v1alpha1.DNSNameCounts{Owned: int32(len(names))}
		}
		return z
	}
	got := dnszone.LegacyRecords([]v1alpha1.ClusterDNSZone{
		zone("z2", false, entry("www.example.test", b, v1alpha1.DNSNameOwned, t0), entry("old.example.test", b, v1alpha1.DNSNameReleasing, t0)),
		zone("z1", false, entry("www.example.test", a, v1alpha1.DNSNameOwned, t0), entry("api.example.test", a, v1alpha1.DNSNameOwned, t0.Add(time.Minute)),
			entry("old.example.test", a, v1alpha1.DNSNameOwned, t0.Add(time.Minute))),
		zone("z3", true, entry("new.example.test", a, v1alpha1.DNSNameOwned, t0)),
	})
	want := map[string]string{
		"www.example.test": "shop z1 Owned", // two owners: the first zone by name at the same time
		"api.example.test": "shop z1 Owned", // one zone lists it
		"old.example.test": "shop z1 Owned", // Owned before Releasing
		"new.example.test": "",              // summarised already: its records are the records
	}
	for name, w := range want {
		r, ok := got[name]
		if w == "" {
			if ok {
				t.Errorf("%s: %+v, want no legacy record", name, r)
			}
			continue
		}
		if s := strings.Join([]string{r.Ring.Namespace, r.Zone, string(r.State)}, " "); !ok || s != w {
			t.Errorf("%s: %q, want %q", name, s, w)
		}
	}
	if r := got["www.example.test"]; !r.Since.Equal(t0) || r.Name != "www.example.test" {
		t.Errorf("www: %+v", r)
	}
}

func TestPatternsOverlap(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"www.example.test", "www.example.test", true},
		{"www.example.test", "api.example.test", false},
		{"*.example.test", "www.example.test", true},
		{"www.example.test", "*.example.test", true},
		{"*.example.test", "example.test", false}, // a pattern's own name is not below it
		{"*.example.test", "*.shop.example.test", true},
		{"*.shop.example.test", "*.example.test", true},
		{"*.shop.example.test", "*.ads.example.test", false},
		{"*.shop.example.test", "shop.example.test", false},
		{"*.example.test", "*.example.test", true},
		{"evilshop.example.test", "*.shop.example.test", false},
		{"WWW.example.test.", "www.example.test", true},
	} {
		if got := dnszone.PatternsOverlap(tc.a, tc.b); got != tc.want {
			t.Errorf("PatternsOverlap(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestOverlapping(t *testing.T) {
	z := func(name, zone string, allowed ...string) v1alpha1.ClusterDNSZone {
		return v1alpha1.ClusterDNSZone{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.ClusterDNSZoneSpec{Zone: zone, AllowedNames: allowed}}
	}
	zones := []v1alpha1.ClusterDNSZone{
		z("team-a", "example.test", "www.example.test", "a.example.test"),
		z("team-b", "example.test", "www.example.test"),
		z("team-c", "example.test", "c.example.test"),
		z("sub", "shop.example.test", "*.shop.example.test"),
		z("all", "example.test", "*.example.test"),
	}
	for _, tc := range []struct {
		zone int
		want []string
	}{
		{0, []string{"all", "team-b"}},
		{2, []string{"all"}},
		{3, []string{"all"}}, // a zone and a sub-zone: one record per name all the same
		{4, []string{"sub", "team-a", "team-b", "team-c"}},
	} {
		if got := dnszone.Overlapping(&zones[tc.zone], zones); !slices.Equal(got, tc.want) {
			t.Errorf("Overlapping(%s) = %v, want %v", zones[tc.zone].Name, got, tc.want)
		}
	}
	msg := dnszone.OverlapMessage([]string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"})
	if !strings.Contains(msg, "ClusterDNSZone a, b, c, d, e, f, g, h and 2 more allows") {
		t.Errorf("message %q names more than 8 zones, or not the first", msg)
	}
}
