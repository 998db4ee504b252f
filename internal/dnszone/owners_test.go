package dnszone_test

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/dnszone"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func ring(ns, name string, created time.Duration, claims string) dnszone.Claimant {
	return dnszone.Claimant{Ref: v1alpha1.ECHKeyRingReference{Namespace: ns, Name: name, UID: ns + "-" + name},
		Created: t0.Add(created), Claims: claims, Window: 15 * time.Minute, Wrote: []byte("list-" + name), WroteName: "www.example.test"}
}

func owned(name string, c dnszone.Claimant) v1alpha1.DNSNameOwner {
	return v1alpha1.DNSNameOwner{Name: name, Ring: c.Ref, State: v1alpha1.DNSNameOwned, Since: metav1.Time{Time: t0}}
}

func releasing(name string, c dnszone.Claimant, at *time.Time) v1alpha1.DNSNameOwner {
	e := owned(name, c)
	e.State = v1alpha1.DNSNameReleasing
	if at != nil {
		e.ReleaseAt = &metav1.Time{Time: *at}
	}
	return e
}

func TestAssign(t *testing.T) {
	const www = "www.example.test"
	now := t0.Add(time.Hour)
	a, b, c := ring("shop", "web", 0, www), ring("ads", "web", time.Minute, www), ring("blog", "web", -time.Minute, "")
	gone := func(at time.Time) map[string]dnszone.Removal {
		return map[string]dnszone.Removal{www: {Gone: true, At: at}}
	}
	releaseAt := now.Add(15 * time.Minute)
	past := now.Add(-time.Second)
	type want struct {
		owner    string // namespace of the owner of www; "" for none
		state    v1alpha1.DNSNameState
		waiting  int32
		remove   bool // the owner's value must leave DNS
		release  *time.Time
		assigned bool
		released bool
	}
	for _, tc := range []struct {
		name     string
		prev     []v1alpha1.DNSNameOwner
		rings    []dnszone.Claimant
		removals map[string]dnszone.Removal
		want     want
	}{
		{name: "a free name goes to the ring that claimed it first", rings: []dnszone.Claimant{b, a},
			want: want{owner: "shop", state: v1alpha1.DNSNameOwned, waiting: 1, assigned: true}},
		{name: "the owner keeps it against an older claimant", prev: []v1alpha1.DNSNameOwner{owned(www, b)},
			rings: []dnszone.Claimant{a, b}, want: want{owner: "ads", state: v1alpha1.DNSNameOwned, waiting: 1}},
		{name: "an owner that no longer claims it releases it: its value must leave DNS first",
			prev: []v1alpha1.DNSNameOwner{owned(www, a)}, rings: []dnszone.Claimant{ring("shop", "web", 0, ""), b},
			want: want{owner: "shop", state: v1alpha1.DNSNameReleasing, waiting: 1, remove: true}},
		{name: "once DNS no longer answers its value, the name waits out the TTL and margin",
			prev: []v1alpha1.DNSNameOwner{releasing(www, a, nil)}, rings: []dnszone.Claimant{ring("shop", "web", 0, ""), b},
			removals: gone(now), want: want{owner: "shop", state: v1alpha1.DNSNameReleasing, waiting: 1, release: &releaseAt}},
		{name: "a releasing owner claiming its name again still releases it first",
			prev: []v1alpha1.DNSNameOwner{releasing(www, a, &releaseAt)}, rings: []dnszone.Claimant{a, b},
			want: want{owner: "shop", state: v1alpha1.DNSNameReleasing, waiting: 2, release: &releaseAt}},
		{name: "released: the name passes to the first claimant",
			prev: []v1alpha1.DNSNameOwner{releasing(www, a, &past)}, rings: []dnszone.Claimant{ring("shop", "web", 0, ""), b},
			want: want{owner: "ads", state: v1alpha1.DNSNameOwned, released: true, assigned: true}},
		{name: "an owner whose value is another name's lets go at once",
			prev: []v1alpha1.DNSNameOwner{owned(www, a)}, rings: []dnszone.Claimant{{Ref: a.Ref, Created: a.Created, Wrote: a.Wrote, WroteName: "api.example.test"}, b},
			want: want{owner: "ads", state: v1alpha1.DNSNameOwned, released: true, assigned: true}},
		{name: "an owner that never published lets go at once",
			prev: []v1alpha1.DNSNameOwner{owned(www, a)}, rings: []dnszone.Claimant{{Ref: a.Ref, Created: a.Created}, b},
			want: want{owner: "ads", state: v1alpha1.DNSNameOwned, released: true, assigned: true}},
		{name: "an owner that no longer exists lets go at once",
			prev: []v1alpha1.DNSNameOwner{owned(www, a)}, rings: []dnszone.Claimant{b, c},
			want: want{owner: "ads", state: v1alpha1.DNSNameOwned, released: true, assigned: true}},
		{name: "nobody claims it: the name is dropped",
			prev: []v1alpha1.DNSNameOwner{releasing(www, a, &past)}, rings: []dnszone.Claimant{ring("shop", "web", 0, "")},
			want: want{released: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := dnszone.Assign(now, tc.prev, tc.rings, tc.removals)
			i := slices.IndexFunc(got.Names, func(e v1alpha1.DNSNameOwner) bool { return e.Name == www })
			if tc.want.owner == "" {
				if i >= 0 {
					t.Fatalf("names = %+v, want %s without an owner", got.Names, www)
				}
			} else {
				if i < 0 {
					t.Fatalf("names = %+v, want %s owned by %s", got.Names, www, tc.want.owner)
				}
				e := got.Names[i]
				if e.Ring.Namespace != tc.want.owner || e.State != tc.want.state || e.Waiting != tc.want.waiting {
					t.Errorf("owner = %s %s waiting %d, want %s %s waiting %d", e.Ring.Namespace, e.State, e.Waiting, tc.want.owner, tc.want.state, tc.want.waiting)
				}
				if (e.ReleaseAt == nil) != (tc.want.release == nil) || (e.ReleaseAt != nil && !e.ReleaseAt.Time.Equal(*tc.want.release)) {
					t.Errorf("releaseAt = %v, want %v", e.ReleaseAt, tc.want.release)
				}
			}
			if _, ok := got.Remove[www]; ok != tc.want.remove {
				t.Errorf("remove = %v, want %v", got.Remove, tc.want.remove)
			}
			if v, ok := got.Remove[www]; ok && string(v) != "list-web" {
				t.Errorf("remove %q, want only the value the owner wrote", v)
			}
			if slices.Contains(got.Assigned, www) != tc.want.assigned || slices.Contains(got.Released, www) != tc.want.released {
				t.Errorf("assigned %v released %v, want %v %v", got.Assigned, got.Released, tc.want.assigned, tc.want.released)
			}
			if tc.want.release != nil && !got.Next.Equal(*tc.want.release) {
				t.Errorf("next = %v, want %v", got.Next, *tc.want.release)
			}
		})
	}
}

func TestAssignBoundsNames(t *testing.T) {
	var rings []dnszone.Claimant
	for i := range dnszone.MaxNames + 5 {
		rings = append(rings, ring("ns", "r"+string(rune('a'+i%26))+string(rune('a'+i/26%26))+string(rune('a'+i/676)), 0, "n"+string(rune('a'+i%26))+string(rune('a'+i/26%26))+string(rune('a'+i/676))+".example.test"))
	}
	if got := dnszone.Assign(t0, nil, rings, nil); len(got.Names) != dnszone.MaxNames {
		t.Fatalf("%d names recorded, want at most %d", len(got.Names), dnszone.MaxNames)
	}
}

func TestClaimOf(t *testing.T) {
	a, b := ring("shop", "web", 0, ""), ring("ads", "web", 0, "")
	at := t0.Add(time.Hour)
	zones := map[string][]v1alpha1.DNSNameOwner{
		"z1": {owned("www.example.test", a), releasing("old.example.test", a, &at)},
		"z2": {owned("api.example.test", b)},
	}
	for _, tc := range []struct {
		name, uid, zone, dns string
		want                 dnszone.Claim
	}{
		{"its own name", "shop-web", "z1", "WWW.example.test.", dnszone.Claim{Owned: true,
			Holding: []dnszone.Held{{Zone: "z1", Name: "old.example.test", ReleaseAt: at}}}},
		{"another's name", "ads-web", "z1", "www.example.test", dnszone.Claim{Waiting: true}},
		{"a name the zone has not recorded yet", "ads-web", "z1", "new.example.test", dnszone.Claim{Waiting: true, Pending: true}},
		{"its name, being released", "shop-web", "z1", "old.example.test", dnszone.Claim{Waiting: true,
			Holding: []dnszone.Held{{Zone: "z1", Name: "old.example.test", ReleaseAt: at}}}},
		{"no name claimed, none held", "ads-web", "", "", dnszone.Claim{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := dnszone.ClaimOf(zones, tc.uid, tc.zone, tc.dns)
			if got.Owned != tc.want.Owned || got.Waiting != tc.want.Waiting || got.Pending != tc.want.Pending || !slices.Equal(got.Holding, tc.want.Holding) {
				t.Fatalf("ClaimOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}
