package dnszone

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

// Claimant is an ECHKeyRing as the decision over one DNS name sees it: a
// ring that names it, or the name's recorded owner wherever it is now.
type Claimant struct {
	Ref     v1alpha1.ECHKeyRingReference
	Created time.Time
	// Zone is the ClusterDNSZone the ring names (spec.dns.zoneRef.name).
	Zone string
	// Claims says the ring claims the name: it is its spec.dns.name, the
	// ring is not being deleted, and its own zone admits it (Admit). A
	// ring that does not claim the name it owns lets it go.
	Claims bool
	// Window is how long a name the ring lets go stays its once its ech
	// value left DNS: the record's TTL plus the ring's retirementMargin,
	// for resolvers still handing the value out.
	Window time.Duration
	// Wrote is the ech value (an ECHConfigList) the ring wrote into the
	// name's record and last saw DNS answer (its status.dnsRecord, when of
	// this name); empty when it holds none there.
	Wrote []byte
}

// ClaimantOf is ring x as the decision over name sees it: z is the
// ClusterDNSZone x names (nil when it does not exist) and nsLabels the
// labels of x's namespace. x is judged against its own zone: another
// zone allowing the name admits nothing for x.
func ClaimantOf(name string, x *v1alpha1.ECHKeyRing, z *v1alpha1.ClusterDNSZone, nsLabels map[string]string) Claimant {
	name = Canonical(name)
	d := x.Spec.DNS
	c := Claimant{Ref: v1alpha1.ECHKeyRingReference{Namespace: x.Namespace, Name: x.Name, UID: string(x.UID)}, Created: x.CreationTimestamp.Time,
		Zone: d.ZoneRef.Name, Window: time.Duration(d.TTL)*time.Second + x.Spec.RetirementMargin.Duration}
	c.Claims = x.DeletionTimestamp.IsZero() && Canonical(d.Name) == name && z != nil && z.Name == d.ZoneRef.Name && Admit(z, nsLabels, d.Name, d.TTL) == nil
	if rec := x.Status.DNSRecord; rec != nil && Canonical(rec.Name) == name {
		if b, err := base64.StdEncoding.DecodeString(rec.ECHConfigList); err == nil && len(b) > 0 {
			c.Wrote = b
		}
	}
	return c
}

// Removal is what DNS last answered about the ech value of a name's
// releasing owner: Gone once no server answers it (removed, or never
// there), seen at At.
type Removal struct {
	Gone bool
	At   time.Time
}

// NameRead is what the reconcile of one DNS name read.
type NameRead struct {
	Now time.Time
	// Name is the DNS name, canonical.
	Name string
	// Record is the name's record; nil when it has none.
	Record *Record
	// Rings are the ECHKeyRings that name Name (spec.dns.name), and the
	// record's owner wherever it is now; absent from them, the owner no
	// longer exists.
	Rings []Claimant
	// Removal is what DNS last answered of the owner's value being
	// removed from Name.
	Removal Removal
	// ZoneGone says the record's ClusterDNSZone no longer exists: nothing
	// can remove the owner's value through it.
	ZoneGone bool
}

// NameDecision is who owns a name after one pass, and what the pass must
// do for it.
type NameDecision struct {
	// Record is the name's record after the pass; nil when the name has no
	// owner (its record is deleted).
	Record *Record
	// Remove is the value to remove from the name's HTTPS record, through
	// Record.Zone: the releasing owner's, and only it. Nil for none.
	Remove []byte
	// Next is when a release completes by the clock; zero for none.
	Next time.Time
	// Released is the record the pass let go; nil for none.
	Released *Record
	// Assigned says the pass gave the name to Record.Ring.
	Assigned bool
	// Waiting counts the rings that claim the name and do not own it.
	Waiting int32
}

// Decide decides who owns one DNS name: from its record (or none), every
// ring that names it (each judged against its own zone) and the owner,
// and what DNS answered of the owner's value being removed.
//
// The owner keeps the name while it claims it through the zone that
// admitted it. An owner that no longer does (deleted, renamed, moved to
// another zone, no longer admitted) releases it: one that never published
// there, or whose zone is gone, lets go at once; one that did waits until
// no server answers the value it wrote (Remove), then Window more, and
// never owns the name again in between (Releasing never turns back to
// Owned). An owner that no longer exists (its finalizer removed by hand)
// lets go at once. A free name goes to the ring that claimed it first:
// the oldest, then by namespace and name.
func Decide(in NameRead) NameDecision {
	var claims []Claimant
	var owner *Claimant
	for i, c := range in.Rings {
		if c.Claims {
			claims = append(claims, c)
		}
		if in.Record != nil && c.Ref.UID == in.Record.Ring.UID {
			owner = &in.Rings[i]
		}
	}
	slices.SortFunc(claims, func(a, b Claimant) int {
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.Ref.Namespace, b.Ref.Namespace), cmp.Compare(a.Ref.Name, b.Ref.Name))
	})
	var out NameDecision
	if in.Record != nil {
		rec := *in.Record
		switch {
		case owner == nil:
			out.Released = in.Record
		case rec.State == v1alpha1.DNSNameOwned && owner.Claims && owner.Zone == rec.Zone:
			out.Record = &rec
		default:
			rec.State = v1alpha1.DNSNameReleasing
			if len(owner.Wrote) == 0 || in.ZoneGone {
				out.Released = in.Record
				break
			}
			if rec.ReleaseAt.IsZero() {
				if in.Removal.Gone {
					rec.ReleaseAt = ceilSecond(in.Removal.At.Add(owner.Window))
				} else {
					out.Remove = owner.Wrote
				}
			}
			if !rec.ReleaseAt.IsZero() && !in.Now.Before(rec.ReleaseAt) {
				out.Released = in.Record
				break
			}
			out.Record, out.Next = &rec, rec.ReleaseAt
		}
	}
	if out.Record == nil && len(claims) > 0 {
		c := claims[0]
		out.Record = &Record{Name: Canonical(in.Name), Ring: c.Ref, Zone: c.Zone, State: v1alpha1.DNSNameOwned, Since: in.Now.Truncate(time.Second)}
		out.Assigned = true
	}
	out.Waiting = Waiting(out.Record, in.Rings)
	return out
}

// Waiting counts the rings that claim a name and do not own it: every
// claimant but the owner of an Owned record (one claiming the name again
// while it releases it waits like any other).
func Waiting(rec *Record, rings []Claimant) int32 {
	var n int32
	for _, c := range rings {
		if c.Claims && (rec == nil || rec.State != v1alpha1.DNSNameOwned || c.Ref.UID != rec.Ring.UID) {
			n++
		}
	}
	return n
}

// ceilSecond is t, or the next whole second after it: a record holds
// times to the second, and a release must never come early.
func ceilSecond(t time.Time) time.Time {
	if s := t.Truncate(time.Second); !s.Equal(t) {
		return s.Add(time.Second)
	}
	return t
}

// Claim is where one ECHKeyRing stands with the name it claims, and with
// every name it owns, in the names' records.
type Claim struct {
	// Owned says the ring owns its name through its zone, and may write
	// its record.
	Owned bool
	// Waiting says another ring owns the name, or no owner is recorded yet
	// (Pending).
	Waiting, Pending bool
	// Holding lists the names the ring still holds while it lets them go,
	// with when each passes on (zero: its value still waits to leave
	// DNS): every record of the ring but its name's, Owned through its
	// zone.
	Holding []Held
}

// Held is a name a ring is letting go.
type Held struct {
	Zone, Name string
	ReleaseAt  time.Time
}

// ClaimOf reads, from records (the record of the ring's name, if any, and
// every record whose owner is the ring uid), where the ring stands with
// the name it claims through zone (empty when it claims none).
func ClaimOf(records []Record, uid, zone, name string) Claim {
	var c Claim
	name = Canonical(name)
	found := false
	seen := map[string]bool{}
	for _, r := range records {
		if seen[r.Name] {
			continue
		}
		seen[r.Name] = true
		mine := r.Ring.UID == uid
		owned := false
		if zone != "" && r.Name == name {
			found = true
			// Its own name, still Releasing, or owned through another
			// zone: it waits for the release like any other claimant.
			owned = mine && r.State == v1alpha1.DNSNameOwned && r.Zone == zone
			c.Owned, c.Waiting = owned, !owned
		}
		if mine && !owned {
			c.Holding = append(c.Holding, Held{Zone: r.Zone, Name: r.Name, ReleaseAt: r.ReleaseAt})
		}
	}
	if zone != "" && !found {
		c.Waiting, c.Pending = true, true
	}
	slices.SortFunc(c.Holding, func(a, b Held) int { return cmp.Or(cmp.Compare(a.Zone, b.Zone), cmp.Compare(a.Name, b.Name)) })
	return c
}

// LegacyRecords are the records that zones' status.names held before
// names had records of their own: those of every zone whose status has
// no nameCounts, which the operator has not summarised since. A name more
// than one zone lists (two zones over one zone, as issue 45 found) is
// recorded once: the entry Owned rather than Releasing, then the oldest,
// then that of the first zone by name.
func LegacyRecords(zones []v1alpha1.ClusterDNSZone) map[string]Record {
	out := map[string]Record{}
	for i := range zones {
		z := &zones[i]
		if z.Status.NameCounts != nil {
			continue
		}
		for _, e := range z.Status.Names {
			r := Record{Name: Canonical(e.Name), Ring: e.Ring, Zone: z.Name, State: e.State, Since: e.Since.Time}
			if e.ReleaseAt != nil {
				r.ReleaseAt = e.ReleaseAt.Time
			}
			if prev, ok := out[r.Name]; ok && legacyFirst(prev, r) {
				continue
			}
			out[r.Name] = r
		}
	}
	return out
}

func legacyFirst(a, b Record) bool {
	if a.State != b.State {
		return a.State == v1alpha1.DNSNameOwned
	}
	return cmp.Or(a.Since.Compare(b.Since), cmp.Compare(a.Zone, b.Zone)) <= 0
}

// MaxListed bounds the names a zone's status lists (status.names): the
// first by name. nameCounts counts them all.
const MaxListed = 64

// Summarize is a zone's status.names and status.nameCounts from the
// records of the names owned through it, the rings it admits that wait
// for their name, and how many other rings claim each name (waiting).
// Whatever the number of names, it lists at most MaxListed.
func Summarize(records []Record, ringsWaiting int32, waiting func(name string) int32) ([]v1alpha1.DNSNameOwner, v1alpha1.DNSNameCounts) {
	counts := v1alpha1.DNSNameCounts{Waiting: ringsWaiting}
	for _, r := range records {
		if r.State == v1alpha1.DNSNameOwned {
			counts.Owned++
		} else {
			counts.Releasing++
		}
	}
	sorted := slices.SortedFunc(slices.Values(records), func(a, b Record) int { return cmp.Compare(a.Name, b.Name) })
	sorted = sorted[:min(len(sorted), MaxListed)]
	var names []v1alpha1.DNSNameOwner
	for _, r := range sorted {
		e := v1alpha1.DNSNameOwner{Name: r.Name, Ring: r.Ring, State: r.State, Since: metav1.Time{Time: r.Since.Truncate(time.Second)}, Waiting: waiting(r.Name)}
		if !r.ReleaseAt.IsZero() {
			e.ReleaseAt = &metav1.Time{Time: r.ReleaseAt}
		}
		names = append(names, e)
	}
	return names, counts
}

// PatternsOverlap reports whether some DNS name is allowed by both a and
// b, each an allowedNames pattern: a name, or "*.<name>" (every name below
// <name>).
func PatternsOverlap(a, b string) bool {
	a, b = Canonical(a), Canonical(b)
	baseA, wildA := strings.CutPrefix(a, "*.")
	baseB, wildB := strings.CutPrefix(b, "*.")
	below := func(name, base string) bool { return strings.HasSuffix(name, "."+base) }
	switch {
	case !wildA && !wildB:
		return a == b
	case wildA && !wildB:
		return below(b, baseA)
	case !wildA && wildB:
		return below(a, baseB)
	}
	return baseA == baseB || below(baseA, baseB) || below(baseB, baseA)
}

// Overlapping names the other zones whose allowedNames overlap z's
// (PatternsOverlap), by name: whatever their zones, namespaces or servers,
// a name they both allow is one record, with one owner.
func Overlapping(z *v1alpha1.ClusterDNSZone, zones []v1alpha1.ClusterDNSZone) []string {
	var out []string
	for i := range zones {
		o := &zones[i]
		if o.Name == z.Name || !o.DeletionTimestamp.IsZero() {
			continue
		}
		if slices.ContainsFunc(z.Spec.AllowedNames, func(p string) bool {
			return slices.ContainsFunc(o.Spec.AllowedNames, func(q string) bool { return PatternsOverlap(p, q) })
		}) {
			out = append(out, o.Name)
		}
	}
	slices.Sort(out)
	return out
}

// maxOverlapNamed bounds the zones NamesOverlap's message names.
const maxOverlapNamed = 8

// OverlapMessage is the message of a zone's NamesOverlap condition when
// the zones named overlap it.
func OverlapMessage(zones []string) string {
	named := strings.Join(zones[:min(len(zones), maxOverlapNamed)], ", ")
	if len(zones) > maxOverlapNamed {
		named += fmt.Sprintf(" and %d more", len(zones)-maxOverlapNamed)
	}
	return fmt.Sprintf("ClusterDNSZone %s allows names this zone allows too: each such name has one owner across the zones, the first ring admitted to claim it, and a ring claiming it through another zone waits (DNSNameClaimed)", named)
}
