package ech

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/dnspub"
	"github.com/ringmaster-io/ringmaster/internal/dnszone"
	"github.com/ringmaster-io/ringmaster/internal/echring"
	"github.com/ringmaster-io/ringmaster/internal/ringplan"
	"github.com/ringmaster-io/ringmaster/internal/shape"
	"github.com/ringmaster-io/ringmaster/internal/textlimit"
)

// ECH timings of the reconcile.
const (
	// DNSRetry is how soon a ring whose DNS does not answer what it
	// wants looks again; the DNS worker enqueues it sooner when its answer
	// changes.
	DNSRetry = 5 * time.Second
	// ConfirmRetry is how soon a ring waiting for its fleet looks again;
	// the prober enqueues it sooner when the answers change.
	ConfirmRetry = 30 * time.Second
	// ClaimRetry is how soon a ring waiting for its DNS name, or for a
	// name it lets go, looks again; a change of its zone enqueues it
	// sooner.
	ClaimRetry = time.Minute
)

// Read is what a reconcile read of one ECHKeyRing: its spec as the
// lifecycle reads it, its newest snapshot, its zone and the claim on its
// name, and what its pods and DNS last answered.
type Read struct {
	Now        time.Time
	Generation int64
	Policy     echring.Policy
	Params     echring.Params
	// Current is the ring of the newest snapshot; zero for a new ring.
	Current echring.Ring
	// SnapshotErr says why the newest snapshot could not be read.
	SnapshotErr error
	// Unconfirmed is the config the newest snapshot records as published
	// unconfirmed (distribute.ECHUnconfirmed); nil when none.
	Unconfirmed *uint8
	// Last is the ring's status as read.
	Last v1alpha1.ECHKeyRingStatus
	// Deleting says the ring is being deleted: it lets its name go.
	Deleting bool
	// Blocked, when set, says why the ring stages and publishes nothing
	// though its spec is valid (a selector the cache did not keep); it
	// still destroys what expired.
	Blocked *ringplan.Problem
	Zone    Zone
	// Confirmed says every selected pod reports holding the staged
	// config; Seen is what they said (or the status's last report of the
	// same config); Timeout is spec.confirmation.timeout.
	Confirmed bool
	Seen      *v1alpha1.ConfirmationStatus
	Timeout   time.Duration
}

// Zone is what the reconcile found of the ring's ClusterDNSZone.
type Zone struct {
	// Ref is the zone's name; Name the ring's record, canonical.
	Ref, Name string
	// Problem says why the ring may not use the zone (it does not exist,
	// refuses the ring, cannot sign); Err that it could not be read.
	Problem *ringplan.Problem
	Err     error
	// VerifyOnly says another system publishes: the ring writes nothing.
	VerifyOnly bool
	// Claim is where the ring stands with its name and the names it
	// holds, as their records say.
	Claim dnszone.Claim
}

// DNSOp is what a ring asks of its record in one pass.
type DNSOp int

const (
	// DNSNone: nothing; the record is left as it is.
	DNSNone DNSOp = iota
	// DNSPublish: the record must carry List, written by the operator.
	DNSPublish
	// DNSVerify: the servers must answer List, written by another system.
	DNSVerify
	// DNSRemove: the record must no longer carry List, the value the ring
	// wrote; only that value is removed.
	DNSRemove
)

// DNS is what the ring asks of its record.
type DNS struct {
	Op   DNSOp
	List []byte
}

// DNSAnswer is DNS's latest answer to the ring's DNS, if any.
type DNSAnswer struct {
	// Known says there is an answer to exactly what was asked.
	Known bool
	Holds bool
	Err   error
	// Message is Err in words the ring's status may carry
	// (dnswork.ForTenant).
	Message string
	At      time.Time
}

// Decision is the pass planned before a config is minted and DNS is
// asked.
type Decision struct {
	// Halted stops the pass: nothing is written, Ready says why.
	Halted *ringplan.Problem
	// Blocked says why the ring stages and publishes nothing this pass; it
	// still destroys what expired.
	Blocked *ringplan.Problem
	// Mint is the config_id of the config to mint, if any.
	Mint *uint8
	// DNS is what to ask of the record.
	DNS DNS
	// Want is what the record must hold now (echring.Want).
	Want []echring.Config
}

// Decide plans a pass: whether the ring may stage and publish, which
// config to mint, and what its record must hold.
func Decide(in Read) Decision {
	if err := in.Policy.Validate(); err != nil {
		return Decision{Halted: &ringplan.Problem{Reason: v1alpha1.ReasonInvalidSpec, Message: fmt.Sprintf("Invalid spec: %v", err)}}
	}
	if in.SnapshotErr != nil {
		return Decision{Halted: &ringplan.Problem{Reason: v1alpha1.ReasonInvalidSnapshot,
			Message: fmt.Sprintf("%v; delete that Secret to fall back to the previous epoch", in.SnapshotErr)}}
	}
	d := Decision{Want: echring.Want(in.Now, in.Policy, in.Current, in.Confirmed)}
	noDNS := dnsBlocked(in)
	d.Blocked = cmp.Or(in.Blocked, paramsProblem(in.Params), noDNS)
	if noDNS == nil {
		d.DNS = dnsWant(in, d.Want)
	}
	if plan := echring.Next(echring.Input{Now: in.Now, Policy: in.Policy, Ring: in.Current, Confirmed: in.Confirmed}); d.Blocked == nil {
		d.Mint = plan.Mint
	}
	return d
}

func paramsProblem(p echring.Params) *ringplan.Problem {
	if err := p.Validate(); err != nil {
		return &ringplan.Problem{Reason: v1alpha1.ReasonECHConfigInvalid, Message: fmt.Sprintf("The spec describes no ECHConfig Go serves: %v", err)}
	}
	return nil
}

// dnsBlocked says why the ring may not touch its record this pass: it is
// being deleted, its zone refuses it or could not be read, another ring
// owns the name, or it still lets another name go.
func dnsBlocked(in Read) *ringplan.Problem {
	z := in.Zone
	switch {
	case in.Deleting:
		return &ringplan.Problem{Reason: v1alpha1.ReasonDNSNameReleasing, Message: "The ring is being deleted: " + holdingMessage(z.Claim.Holding, in.Now)}
	case z.Problem != nil:
		return z.Problem
	case z.Err != nil:
		return &ringplan.Problem{Reason: v1alpha1.ReasonDNSUnavailable, Message: fmt.Sprintf("Reading the ring's ClusterDNSZone failed: %v", z.Err)}
	case len(z.Claim.Holding) > 0:
		return &ringplan.Problem{Reason: v1alpha1.ReasonDNSNameReleasing,
			Message: fmt.Sprintf("The ring publishes %s once it has let go of the name it held before: %s", z.Name, holdingMessage(z.Claim.Holding, in.Now))}
	case z.Claim.Pending:
		return &ringplan.Problem{Reason: v1alpha1.ReasonAwaitingDNS,
			Message: fmt.Sprintf("The operator has not yet recorded the ring as the owner of %s (ClusterDNSZone %s)", z.Name, z.Ref)}
	case !z.Claim.Owned:
		return &ringplan.Problem{Reason: v1alpha1.ReasonDNSNameClaimed,
			Message: fmt.Sprintf("The name %s of ClusterDNSZone %s is owned by another ECHKeyRing, admitted through this zone or another that allows the name: this ring stages and publishes nothing, and changes nothing in DNS, until that ring is deleted or lets the name go (the name's record in the operator's namespace says who; ask a cluster administrator)", z.Name, z.Ref)}
	}
	return nil
}

func holdingMessage(held []dnszone.Held, now time.Time) string {
	if len(held) == 0 {
		return "it holds no DNS name"
	}
	parts := make([]string, len(held))
	for i, h := range held {
		switch {
		case h.ReleaseAt.IsZero():
			parts[i] = fmt.Sprintf("%s (zone %s): the ech value it wrote is being removed from DNS", h.Name, h.Zone)
		case now.Before(h.ReleaseAt):
			parts[i] = fmt.Sprintf("%s (zone %s): out of DNS; its configs keep decrypting for resolvers' caches until %s", h.Name, h.Zone, h.ReleaseAt.UTC().Format(time.RFC3339))
		default:
			parts[i] = fmt.Sprintf("%s (zone %s): released", h.Name, h.Zone)
		}
	}
	return "releasing " + textlimit.List(parts, textlimit.MaxListed, "; ", 0)
}

// dnsWant is what the ring's record must hold: the configs wanted, or,
// when none is, no longer the value the ring wrote there (and nothing else
// is ever removed).
func dnsWant(in Read, want []echring.Config) DNS {
	if len(want) > 0 {
		op := DNSPublish
		if in.Zone.VerifyOnly {
			op = DNSVerify
		}
		return DNS{Op: op, List: echring.ConfigList(want)}
	}
	if wrote := written(in.Last.DNSRecord, in.Zone.Ref, in.Zone.Name); wrote != nil && !in.Zone.VerifyOnly {
		return DNS{Op: DNSRemove, List: wrote}
	}
	return DNS{}
}

// written is the value r records for zone's name, if any.
func written(r *v1alpha1.ECHDNSRecord, zone, name string) []byte {
	if r == nil || r.Zone != zone || r.Name != name {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(r.ECHConfigList)
	if err != nil || len(b) == 0 {
		return nil
	}
	return b
}

// Minted is what minting the decided config gave.
type Minted struct {
	Config echring.Config
	// Err is why minting failed; Problem what the status shows of it.
	Err     error
	Problem *ringplan.Problem
	// At is when the mint returned, by the ring's clock: a config's times
	// count from then, not from the start of the pass.
	At time.Time
}

// Result is what a pass must write, and what its status reports once
// written (Report).
type Result struct {
	in   Read
	dec  Decision
	dns  DNSAnswer
	at   time.Time
	Plan echring.Plan
	// Next is the ring after the pass; Write says it is a new epoch whose
	// snapshot must be written.
	Next  echring.Ring
	Write bool
	// Problem is what keeps Ready False, before the writes.
	Problem *ringplan.Problem
	// MintErr is the mint's error, for backoff.
	MintErr error
	// Unconfirmed says a config was published unconfirmed, at its ceiling.
	Unconfirmed bool
	// Record is the ring's status.dnsRecord after the pass.
	Record *v1alpha1.ECHDNSRecord
	// Recorded is the config the new epoch records as published
	// unconfirmed: this pass's, or the current one's while it stays the
	// published config.
	Recorded *uint8
}

// Finish folds DNS's answer and the mint into the pass. The clock of
// the pass is when the mint returned, so that a config staged after a slow
// key source is stamped when it reaches the snapshot, not before. A config
// is published only when DNS answers it; one the pass did not ask for
// (its plan changed meanwhile) is dropped unused.
func Finish(in Read, d Decision, dns DNSAnswer, m Minted) Result {
	r := Result{in: in, dec: d, dns: dns, at: in.Now, Problem: d.Blocked}
	if d.Halted != nil {
		r.Problem, r.Next = d.Halted, in.Current
		return r
	}
	if m.At.After(r.at) {
		r.at = m.At
	}
	var seen echring.DNS
	if (d.DNS.Op == DNSPublish || d.DNS.Op == DNSVerify) && dns.Known {
		seen = echring.DNS{Checked: true, Holds: dns.Holds, Err: dns.Err}
	}
	plan := echring.Next(echring.Input{Now: r.at, Policy: in.Policy, Ring: in.Current, Confirmed: in.Confirmed, DNS: seen})
	var c echring.Config
	if plan.Mint != nil {
		switch {
		case d.Blocked != nil || d.Mint == nil:
			plan.Mint = nil
		case m.Err != nil:
			plan.Mint, r.MintErr, r.Problem = nil, m.Err, m.Problem
		case m.Config.ID != *plan.Mint || len(m.Config.Config) == 0:
			plan.Mint = nil // planned otherwise since: the next pass mints
		default:
			c = m.Config
		}
		if plan.Mint == nil {
			plan.Changed = plan.Published != nil || len(plan.Destroyed) > 0
		}
	}
	next, err := plan.Stage(r.at, c)
	if err != nil {
		r.Problem, r.Next = &ringplan.Problem{Reason: v1alpha1.ReasonECHConfigInvalid, Message: err.Error()}, in.Current
		return r
	}
	r.Plan, r.Next, r.Write = plan, next, plan.Changed
	r.Unconfirmed = plan.Published != nil && plan.Unconfirmed
	r.Record = record(in, d, dns)
	r.Recorded = recorded(in.Unconfirmed, next)
	if r.Unconfirmed {
		r.Recorded = plan.Published
	}
	return r
}

// recorded is id while it is still r's published config, nil otherwise.
func recorded(id *uint8, r echring.Ring) *uint8 {
	if id == nil {
		return nil
	}
	for _, c := range r.Published() {
		if c.ID == *id {
			return id
		}
	}
	return nil
}

// record is the ring's status.dnsRecord after a pass: the value DNS was
// seen answering, set when the ring's own value holds, cleared once its
// removal holds, or once the zone no longer has the ring hold the name it
// names.
func record(in Read, d Decision, dns DNSAnswer) *v1alpha1.ECHDNSRecord {
	last := in.Last.DNSRecord
	switch {
	case d.DNS.Op == DNSPublish && dns.Known && dns.Holds:
		return &v1alpha1.ECHDNSRecord{Zone: in.Zone.Ref, Name: in.Zone.Name, ECHConfigList: base64.StdEncoding.EncodeToString(d.DNS.List)}
	case d.DNS.Op == DNSRemove && dns.Known && dns.Holds:
		return nil
	case last == nil:
		return nil
	case last.Zone == in.Zone.Ref && last.Name == in.Zone.Name && in.Zone.Err == nil && !in.Deleting && (in.Zone.Claim.Owned || in.Zone.Problem != nil):
		return last
	}
	for _, h := range in.Zone.Claim.Holding {
		if h.Zone == last.Zone && h.Name == last.Name {
			return last
		}
	}
	if in.Zone.Err != nil || in.Deleting {
		return last // nothing known for sure: keep the record
	}
	return nil
}

// events are the events of what the pass wrote: the epoch's changes, and a
// config published unconfirmed.
func (r Result) events(snapshot string) []ringplan.Event {
	if !r.Write {
		return nil
	}
	pl := r.Plan
	var parts []string
	if pl.Published != nil {
		parts = append(parts, fmt.Sprintf("config %d published to DNS", *pl.Published))
	}
	for _, id := range pl.Retired {
		parts = append(parts, fmt.Sprintf("config %d retired", id))
	}
	for _, id := range pl.Destroyed {
		parts = append(parts, fmt.Sprintf("config %d destroyed", id))
	}
	if pl.Mint != nil {
		parts = append(parts, fmt.Sprintf("config %d staged", *pl.Mint))
	}
	out := []ringplan.Event{{Reason: "Rotated", Action: "Publish", Regarding: snapshot,
		Note: fmt.Sprintf("Epoch %d (%s): %s", r.Next.Epoch, snapshot, strings.Join(parts, ", "))}}
	if r.Unconfirmed {
		out = append(out, ringplan.Event{Warning: true, Reason: v1alpha1.ReasonPublishedUnconfirmed, Action: "Publish", Regarding: snapshot,
			Note: PublishedUnconfirmed(*pl.Published, r.in.Seen)})
	}
	return out
}

// Written is how the pass's writes went.
type Written struct {
	// Snapshot is the newest snapshot's name after the writes ("" for
	// none); Published says the pass wrote it.
	Snapshot  string
	Published bool
	// Problem says why a write failed or was refused (the snapshot, the
	// projection).
	Problem *ringplan.Problem
}

// Report is the ring's report after the pass and its writes: its status,
// when to look again, the events of what it wrote and of its conditions'
// changes, and whether a config went live unconfirmed.
func (r Result) Report(w Written) ringplan.Report[v1alpha1.ECHKeyRingStatus] {
	ring := r.Next
	if r.dec.Halted != nil || (r.Write && !w.Published) {
		ring = r.in.Current
	}
	problem := r.Problem
	if w.Problem != nil {
		problem = w.Problem
	}
	out := Pass{
		Now: r.at, Generation: r.in.Generation, Policy: r.in.Policy, Ring: ring, Snapshot: w.Snapshot, Plan: r.Plan,
		Want: r.dec.Want, Problem: problem, Halted: r.dec.Halted != nil, Seen: r.in.Seen,
		Overdue: r.overdue(), Record: r.Record, Recorded: recorded(r.in.Unconfirmed, ring), LastSeen: r.in.Last.Confirmation,
	}
	if (r.dec.DNS.Op == DNSPublish || r.dec.DNS.Op == DNSVerify) && r.dns.Known {
		out.DNSHolds, out.DNSAt = r.dns.Holds, r.dns.At
		if r.dns.Err != nil {
			out.DNSProblem = r.dns.Message
		}
	}
	rep := ringplan.Report[v1alpha1.ECHKeyRingStatus]{Status: Build(r.in.Last, out), Requeue: r.requeue(w).After()}
	if w.Published {
		rep.Events = r.events(w.Snapshot)
		rep.Counts.Unconfirmed = r.Unconfirmed
	}
	rep.Events = append(rep.Events, Warnings(r.in.Last.Conditions, rep.Status.Conditions)...)
	return rep
}

// overdue says the staged config waits for its fleet past
// spec.confirmation.timeout (and before its ceiling).
func (r Result) overdue() bool {
	due := echring.ReadyAt(r.in.Policy, r.in.Current)
	if due.IsZero() || r.in.Confirmed {
		return false
	}
	return r.at.After(due.Add(min(r.in.Timeout, r.in.Policy.MaxDelay)))
}

// requeue is when the ring next needs a pass: what the plan has to do by
// the clock, at least once per TTL (a minute at least) to see that DNS
// still answers what it should, sooner while it waits for DNS, its fleet
// (and at its confirmation timeout, to report it overdue) or a name.
func (r Result) requeue(w Written) *ringplan.Requeue {
	p := r.in.Policy
	after := ringplan.From(r.at)
	after.Within(min(p.RotationInterval, max(p.TTL, time.Minute)))
	after.At(r.Plan.Next)
	switch r.Plan.Held {
	case echring.HoldDNS:
		after.Within(DNSRetry)
	case echring.HoldConfirmation:
		after.Within(ConfirmRetry)
		if due := echring.ReadyAt(p, r.in.Current); !due.IsZero() && !r.overdue() {
			after.At(due.Add(min(r.in.Timeout, p.MaxDelay)).Add(time.Second))
		}
	}
	if r.Problem != nil && (r.Problem.Reason == v1alpha1.ReasonDNSNameClaimed || r.Problem.Reason == v1alpha1.ReasonDNSNameReleasing || r.Problem.Reason == v1alpha1.ReasonAwaitingDNS) {
		after.Within(ClaimRetry)
		for _, h := range r.in.Zone.Claim.Holding {
			after.At(h.ReleaseAt)
		}
	}
	if r.dec.DNS.Op != DNSNone && (!r.dns.Known || !r.dns.Holds) {
		after.Within(DNSRetry)
	}
	if r.Write || w.Problem != nil {
		after.Within(ringplan.WrittenRetry) // look again at what was written
	}
	return after
}

// ZoneRead is what a reconcile read of an ECHKeyRing's zone.
type ZoneRead struct {
	Ring *v1alpha1.ECHKeyRing
	// Zone is the ClusterDNSZone the ring names; nil when there is none.
	Zone *v1alpha1.ClusterDNSZone
	// Records are the records of the ring's name (if any) and of every
	// name the ring owns (dnszone.Record): who owns each, across every
	// zone that allows it.
	Records []dnszone.Record
	// NamespaceLabels are the ring's namespace's, NamespaceErr why they
	// could not be read.
	NamespaceLabels map[string]string
	// NamespaceCut says the cache did not keep the namespace's labels
	// (shape.CutLabels): only a zone selecting every namespace admits it.
	NamespaceCut bool
	NamespaceErr error
	// TSIG is the zone's TSIG Secret, TSIGErr why it could not be read
	// (nil for a verify-only zone).
	TSIG    *corev1.Secret
	TSIGErr error
}

// ZoneOf says, from what was read of a ring's zone, whether the ring may
// use it (its namespace, name and TTL admitted, its TSIG key sound), where
// it stands with its name, and where it publishes. A problem is the user's
// (or the cluster administrator's) to fix; Err is retried. What the ring
// is told of the zone names neither its servers nor its other names.
func ZoneOf(in ZoneRead) (Zone, dnspub.Target) {
	d := in.Ring.Spec.DNS
	out := Zone{Ref: d.ZoneRef.Name, Name: dnszone.Canonical(d.Name),
		Claim: dnszone.ClaimOf(in.Records, string(in.Ring.UID), d.ZoneRef.Name, d.Name)}
	z := in.Zone
	switch {
	case z == nil:
		out.Problem = &ringplan.Problem{Reason: v1alpha1.ReasonDNSZoneNotFound,
			Message: fmt.Sprintf("ClusterDNSZone %s does not exist: ask a cluster administrator to create it, or fix spec.dns.zoneRef", d.ZoneRef.Name)}
		return out, dnspub.Target{}
	case in.NamespaceErr != nil:
		out.Err = in.NamespaceErr
		return out, dnspub.Target{}
	}
	out.VerifyOnly = z.Spec.Primary == ""
	if in.NamespaceCut {
		if err := dnszone.Unjudged(z, in.Ring.Namespace, shape.MaxLabelBytes); err != nil {
			out.Problem = &ringplan.Problem{Reason: v1alpha1.ReasonDNSNameNotAllowed, Message: err.Error()}
			return out, dnspub.Target{}
		}
	}
	if err := dnszone.Admit(z, in.NamespaceLabels, d.Name, d.TTL); err != nil {
		out.Problem = &ringplan.Problem{Reason: v1alpha1.ReasonDNSNameNotAllowed, Message: err.Error()}
		return out, dnspub.Target{}
	}
	var key *dnspub.TSIG
	if !out.VerifyOnly && z.Spec.TSIGSecretRef != nil {
		// The administrator's Secret: its name and namespace are the
		// zone's to show, not the ring's.
		var err error
		switch {
		case apierrors.IsNotFound(in.TSIGErr):
			out.Problem = &ringplan.Problem{Reason: v1alpha1.ReasonDNSUnavailable,
				Message: fmt.Sprintf("ClusterDNSZone %s cannot sign updates: its TSIG Secret is missing (the zone's status says more)", z.Name)}
		case in.TSIGErr != nil:
			out.Err = in.TSIGErr
		default:
			if key, err = dnszone.TSIG(in.TSIG.Data); err != nil {
				out.Problem = &ringplan.Problem{Reason: v1alpha1.ReasonDNSUnavailable,
					Message: fmt.Sprintf("ClusterDNSZone %s cannot sign updates: its TSIG Secret is invalid (the zone's status says more)", z.Name)}
			}
		}
	}
	return out, dnszone.Target(z, d.Name, d.TTL, key)
}
