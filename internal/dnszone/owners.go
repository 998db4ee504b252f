package dnszone

import (
	"cmp"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

// MaxNames bounds the names one zone records owners for (the API's bound
// of status.names); a claim past it waits for a name to be released.
const MaxNames = 1024

// Claimant is an ECHKeyRing as a zone sees it when it decides who owns
// which name.
type Claimant struct {
	Ref     v1alpha1.ECHKeyRingReference
	Created time.Time
	// Claims is the name the ring claims in the zone, canonical: its
	// spec.dns.name, when its spec.dns.zoneRef names the zone, it is not
	// being deleted, and the zone admits it (Admit). Empty otherwise: the
	// ring claims nothing here, and lets go of what it owns.
	Claims string
	// Window is how long a name the ring lets go stays its once its ech
	// value left DNS: the record's TTL plus the ring's retirementMargin,
	// for resolvers still handing the value out.
	Window time.Duration
	// Wrote is the ech value (an ECHConfigList) the ring wrote into the
	// record of WroteName and last saw DNS answer (its status.dnsRecord in
	// this zone); empty when it holds none there.
	Wrote     []byte
	WroteName string
}

// Removal is what DNS last answered about the ech value of a name's
// releasing owner: Gone once no server answers it (removed, or never
// there), seen at At.
type Removal struct {
	Gone bool
	At   time.Time
}

// Owners is who owns each name of a zone after one pass, and what the pass
// must do for it.
type Owners struct {
	// Names is the zone's status.names, sorted by name.
	Names []v1alpha1.DNSNameOwner
	// Remove maps each name whose releasing owner's value must leave DNS
	// to that value: only it is removed, never another.
	Remove map[string][]byte
	// Next is when a release completes by the clock; zero for none.
	Next time.Time
	// Assigned and Released are the names that took an owner, and those
	// that lost theirs, in this pass.
	Assigned, Released []string
}

// Assign decides, from the zone's names as recorded (prev), the ECHKeyRings
// that claim its names or own one, and what DNS answered of the values
// being removed, who owns each name at now.
//
// A name's owner keeps it while it claims it. A ring that no longer does
// (deleted, renamed, moved to another zone, no longer admitted) releases
// it: a ring that never published lets go at once; one that did waits
// until no server answers the value it wrote (Remove), then Window more,
// and never owns the name again in between (Releasing never turns back to
// Owned). A ring that no longer exists (its finalizer removed by hand) lets
// go at once. A free name goes to the ring that claimed it first: the
// oldest, then by namespace and name.
func Assign(now time.Time, prev []v1alpha1.DNSNameOwner, rings []Claimant, removals map[string]Removal) Owners {
	byUID := make(map[string]Claimant, len(rings))
	claims := map[string][]Claimant{}
	for _, c := range rings {
		byUID[c.Ref.UID] = c
		if c.Claims != "" {
			claims[c.Claims] = append(claims[c.Claims], c)
		}
	}
	for _, cs := range claims {
		slices.SortFunc(cs, func(a, b Claimant) int {
			return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.Ref.Namespace, b.Ref.Namespace), cmp.Compare(a.Ref.Name, b.Ref.Name))
		})
	}
	out := Owners{Remove: map[string][]byte{}}
	taken := map[string]bool{}
	for _, e := range prev {
		e = *e.DeepCopy()
		owner, ok := byUID[e.Ring.UID]
		if !ok {
			out.Released = append(out.Released, e.Name)
			continue
		}
		if e.State == v1alpha1.DNSNameOwned && owner.Claims == e.Name {
			e.Waiting = int32(len(claims[e.Name]) - 1)
			out.Names, taken[e.Name] = append(out.Names, e), true
			continue
		}
		e.State = v1alpha1.DNSNameReleasing
		if len(owner.Wrote) == 0 || owner.WroteName != e.Name {
			out.Released = append(out.Released, e.Name)
			continue
		}
		if e.ReleaseAt == nil {
			if r := removals[e.Name]; r.Gone {
				e.ReleaseAt = &metav1.Time{Time: r.At.Add(owner.Window)}
			} else {
				out.Remove[e.Name] = owner.Wrote
			}
		}
		if e.ReleaseAt != nil {
			if !now.Before(e.ReleaseAt.Time) {
				out.Released = append(out.Released, e.Name)
				continue
			}
			if out.Next.IsZero() || e.ReleaseAt.Before(&metav1.Time{Time: out.Next}) {
				out.Next = e.ReleaseAt.Time
			}
		}
		e.Waiting = int32(len(claims[e.Name]))
		out.Names, taken[e.Name] = append(out.Names, e), true
	}
	free := make([]string, 0, len(claims))
	for name := range claims {
		if !taken[name] {
			free = append(free, name)
		}
	}
	slices.Sort(free)
	for _, name := range free {
		if len(out.Names) >= MaxNames {
			break
		}
		cs := claims[name]
		out.Names = append(out.Names, v1alpha1.DNSNameOwner{Name: name, Ring: cs[0].Ref, State: v1alpha1.DNSNameOwned,
			Since: metav1.Time{Time: now.Truncate(time.Second)}, Waiting: int32(len(cs) - 1)})
		out.Assigned = append(out.Assigned, name)
	}
	slices.SortFunc(out.Names, func(a, b v1alpha1.DNSNameOwner) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Claim is where one ECHKeyRing stands with the name it claims, and with
// every name it owns, in the zones' records.
type Claim struct {
	// Owned says the ring owns its name, and may write its record.
	Owned bool
	// Waiting says another ring owns the name, or the zone has not
	// recorded an owner yet (Pending).
	Waiting, Pending bool
	// Holding lists the names the ring still holds while it lets them go
	// (Releasing), with when each passes on (zero: its value still waits
	// to leave DNS).
	Holding []Held
}

// Held is a name a ring is letting go.
type Held struct {
	Zone, Name string
	ReleaseAt  time.Time
}

// ClaimOf reads, from the names of every zone (zone name to its
// status.names), where the ring uid stands with the name it claims in
// zone (empty when it claims none).
func ClaimOf(zones map[string][]v1alpha1.DNSNameOwner, uid, zone, name string) Claim {
	var c Claim
	name = Canonical(name)
	found := false
	for z, names := range zones {
		for _, e := range names {
			mine := e.Ring.UID == uid
			if z == zone && e.Name == name && zone != "" {
				found = true
				// Its own name, still Releasing: it waits for the release
				// like any other claimant.
				c.Owned = mine && e.State == v1alpha1.DNSNameOwned
				c.Waiting = !c.Owned
			}
			if mine && e.State == v1alpha1.DNSNameReleasing {
				h := Held{Zone: z, Name: e.Name}
				if e.ReleaseAt != nil {
					h.ReleaseAt = e.ReleaseAt.Time
				}
				c.Holding = append(c.Holding, h)
			}
		}
	}
	if zone != "" && !found {
		c.Waiting, c.Pending = true, true
	}
	slices.SortFunc(c.Holding, func(a, b Held) int { return cmp.Or(cmp.Compare(a.Zone, b.Zone), cmp.Compare(a.Name, b.Name)) })
	return c
}
