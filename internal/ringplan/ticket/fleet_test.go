package ticket_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/ringplan/ticket"
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
