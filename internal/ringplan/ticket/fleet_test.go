package ticket_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/ringplan/ticket"
	"github.com/ringmaster-io/ringmaster/internal/sharedring"
)

// A FleetRequest is one more source of the ring's requests: it rotates or
// revokes as the annotations do, once, records itself on the epoch and in
// status, and leaves the ring no event of its own (the request has one).
func TestFleetRequest(t *testing.T) {
	rec := func(action v1alpha1.FleetAction) *v1alpha1.FleetRequestRecord {
		return &v1alpha1.FleetRequestRecord{Name: "incident-7", UID: "u-7", CreatedAt: metav1.NewTime(t0.Add(-5 * time.Minute)), Action: action}
	}
	for _, tc := range []struct {
		name          string
		action        v1alpha1.FleetAction
		onRecord      bool
		rotate, revke bool
	}{
		{name: "a fleet rotate is a rotate-now", action: v1alpha1.FleetRotate, rotate: true},
		{name: "a fleet revoke is a revoke", action: v1alpha1.FleetRevoke, revke: true},
		{name: "a request an epoch on record carried out is not carried out again", action: v1alpha1.FleetRotate, onRecord: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := read(t, t0.Add(10*time.Minute))
			in.Fleet = rec(tc.action)
			if tc.onRecord {
				cur, _ := steady(t)
				h, err := keyring.NewHistory([]keyring.Record{{Epoch: 1, Ring: cur, FleetRequest: "u-7"}})
				if err != nil {
					t.Fatal(err)
				}
				in.History = h
			}
			d := ticket.Decide(in)
			if d.Fleet == tc.onRecord {
				t.Fatalf("Decide carries out the fleet request: %v, want %v", d.Fleet, !tc.onRecord)
			}
			if d.RotateNow || d.Revoke {
				t.Errorf("the ring's own requests are marked carried out (rotate %v, revoke %v)", d.RotateNow, d.Revoke)
			}
			res := ticket.Finish(in, d, ticket.Minted{Ring: minted(d.Plan, "fleet")})
			rep := res.Report(ticket.Applied{})
			got := rep.Status.FleetRequest
			if got == nil || got.UID != "u-7" {
				t.Fatalf("status.fleetRequest = %+v, want u-7", got)
			}
			if tc.onRecord {
				if res.Publish || got.Epoch != 1 {
					t.Errorf("publish %v, recorded epoch %d: want nothing published and epoch 1 on record", res.Publish, got.Epoch)
				}
				return
			}
			pub, ok := res.Publication()
			if !ok || got.Epoch != pub.Epoch || got.ServedAt == nil {
				t.Fatalf("published %v epoch %d, recorded %+v", ok, pub.Epoch, got)
			}
			if want := distribute.FleetRequestValue(tc.action, "u-7"); res.Requests.Fleet != want {
				t.Errorf("snapshot records %q, want %q", res.Requests.Fleet, want)
			}
			if tc.revke {
				if len(rep.Status.Revocations) != 1 || rep.Status.Revocations[0].RequestedBy != "FleetRequest incident-7" || len(d.Plan.Revoked) == 0 {
					t.Errorf("revocations %+v, revoked %v", rep.Status.Revocations, d.Plan.Revoked)
				}
			}
			if rep.Status.LastRotateRequestedAt != "" || rep.Status.LastRevokeRequestedAt != "" {
				t.Errorf("the annotations' echoes changed: %q %q", rep.Status.LastRotateRequestedAt, rep.Status.LastRevokeRequestedAt)
			}
			for _, e := range rep.Events {
				if e.Reason == "Rotated" || e.Reason == v1alpha1.ReasonRevoked {
					t.Errorf("a fleet-driven pass emitted %s on the ring", e.Reason)
				}
			}
		})
	}
}

// A shared ring carries a FleetRequest out in its entry, and the entry
// remembers it: an operator that wrote the entry and stopped before its
// snapshot serves that version on its next pass, recording the request on
// the epoch that adopts it, rather than rotate or revoke a second time.
func TestFleetRequestSharedRing(t *testing.T) {
	for _, action := range []v1alpha1.FleetAction{v1alpha1.FleetRotate, v1alpha1.FleetRevoke} {
		t.Run(string(action), func(t *testing.T) {
			in := read(t, t0.Add(10*time.Minute))
			in.Fleet = &v1alpha1.FleetRequestRecord{Name: "incident-7", UID: "u-7", CreatedAt: metav1.NewTime(t0.Add(-5 * time.Minute)), Action: action}
			in.Shared = &ticket.Shared{Entry: &sharedring.Record{Version: 5, Ring: in.Current}, Base: in.Current, LocalVersion: 5}
			value := distribute.FleetRequestValue(action, "u-7")

			// First pass: the entry is written first, remembering the request.
			d := ticket.Decide(in)
			if !d.Fleet || d.Plan.Mint == 0 {
				t.Fatalf("Decide: fleet %v, mint %d: want the request carried out", d.Fleet, d.Plan.Mint)
			}
			first := ticket.Finish(in, d, ticket.Minted{Ring: minted(d.Plan, "fleet")})
			if first.Sync == nil || !first.Sync.Write {
				t.Fatalf("sync %+v: want a write to the entry", first.Sync)
			}
			rec := first.Sync.Record
			if remembered := map[v1alpha1.FleetAction]bool{v1alpha1.FleetRotate: rec.Handled(value), v1alpha1.FleetRevoke: rec.Revoked(value)}; !remembered[action] {
				t.Fatalf("the entry's version remembers %+v, want %q", rec.Requests, value)
			}
			rec.Version = 6

			// The operator stops after the write: the next pass reads the
			// entry at version 6, the snapshot still at version 5.
			again := in
			again.Shared = &ticket.Shared{Entry: &rec, Base: rec.Ring, LocalVersion: 5}
			d = ticket.Decide(again)
			if d.Plan.Mint != 0 {
				t.Fatalf("the request is carried out a second time: %d key(s) minted", d.Plan.Mint)
			}
			r := ticket.Finish(again, d, ticket.Minted{Ring: rec.Ring})
			if r.Sync == nil || r.Sync.Write || !r.Publish || r.Requests.Shared != 6 {
				t.Fatalf("got sync %+v publish %v shared %d: want version 6 served, nothing written", r.Sync, r.Publish, r.Requests.Shared)
			}
			if r.Requests.Fleet != value || r.Fleet == nil || r.Fleet.UID != "u-7" {
				t.Errorf("the epoch records %q (%+v), want %q", r.Requests.Fleet, r.Fleet, value)
			}
			if r.Revocation != nil {
				t.Errorf("a second revocation is recorded: %+v", r.Revocation)
			}
		})
	}
}

// A fleet rotate of a ring whose staged key already activates as early as
// is safe (an annotation's rotate-now just moved it) publishes nothing: it
// is carried out by the epoch served, which status records, not by an
// epoch 0.
func TestFleetRotateThatPublishesNothing(t *testing.T) {
	cur, _ := steady(t)
	first := read(t, t0.Add(time.Minute))
	first.Rotate = "2026-03-01T12:01:00Z"
	d := ticket.Decide(first)
	pub, ok := ticket.Finish(first, d, ticket.Minted{Ring: minted(d.Plan, "rotate")}).Publication()
	if !ok {
		t.Fatal("the annotation's rotate-now publishes nothing")
	}
	pub.IssuedAt = t0.Add(time.Minute)
	h, err := keyring.NewHistory([]keyring.Record{{Epoch: pub.Epoch, Ring: pub, RotateRequest: first.Rotate}, {Epoch: 1, Ring: cur}})
	if err != nil {
		t.Fatal(err)
	}
	in := ticket.Read{Now: t0.Add(2 * time.Minute), Policy: policy, History: h, Current: pub, Rotate: first.Rotate,
		Last: v1alpha1.TicketKeyRingStatus{Epoch: pub.Epoch, LastRotateRequestedAt: first.Rotate}}
	in.Fleet = &v1alpha1.FleetRequestRecord{Name: "incident-7", UID: "u-7", CreatedAt: metav1.NewTime(t0.Add(90 * time.Second)), Action: v1alpha1.FleetRotate}
	d = ticket.Decide(in)
	if !d.Fleet {
		t.Fatal("the request is not carried out")
	}
	res := ticket.Finish(in, d, ticket.Minted{Ring: minted(d.Plan, "fleet")})
	if res.Publish {
		t.Fatalf("publishes %+v: want the staged key's activation unchanged", res.Next)
	}
	got := res.Report(ticket.Applied{}).Status.FleetRequest
	if got == nil || got.UID != "u-7" || got.Epoch != pub.Epoch || got.ServedAt == nil {
		t.Errorf("status.fleetRequest = %+v, want u-7 served by epoch %d", got, pub.Epoch)
	}
}
