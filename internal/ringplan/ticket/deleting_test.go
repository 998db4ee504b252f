package ticket_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/ringplan"
	"github.com/ringmaster-io/ringmaster/internal/ringplan/ticket"
	"github.com/ringmaster-io/ringmaster/internal/sharedring"
	"github.com/ringmaster-io/ringmaster/internal/textlimit"
)

// A ring being deleted and held by a finalizer plans as a ring whose key
// source fails: it publishes nothing new, carries out no request, and
// still destroys each key at its expiresAt. steady's keys: the active one
// expires at t0+2h, the staged one (active from t0+1h) at t0+3h.
func TestDeleting(t *testing.T) {
	const rotate, revoke = "2026-03-01T12:10:00Z", "2026-03-01T12:11:00Z"
	cur, _ := steady(t)
	staged, active := cur.Keys[0], cur.Keys[1]
	type want struct {
		publish bool
		keys    []string // the keys of the ring served after the pass
		expired []string
		epoch   int64 // the epoch published, when publish
		// requeueBy is when the ring must look again at the latest.
		requeueBy time.Time
	}
	tests := []struct {
		name string
		at   time.Time
		edit func(*ticket.Read)
		want want
	}{
		{name: "before any key expires it publishes nothing, and carries out no rotate-now or revoke",
			at:   t0.Add(10 * time.Minute),
			edit: func(r *ticket.Read) { r.Rotate, r.Revoke, r.RevokedBy = rotate, revoke, "kubectl" },
			want: want{keys: []string{staged.ID, active.ID}, requeueBy: staged.ActiveFrom}},
		{name: "the staged key's time comes: it activates by its own time, and no successor is minted",
			at:   staged.ActiveFrom,
			want: want{keys: []string{staged.ID, active.ID}, requeueBy: active.ExpiresAt}},
		{name: "at a key's expiresAt it publishes the next epoch without it",
			at:   active.ExpiresAt,
			want: want{publish: true, keys: []string{staged.ID}, expired: []string{active.ID}, epoch: 2, requeueBy: staged.ExpiresAt}},
		{name: "past every key's expiresAt it publishes an epoch holding none",
			at:   staged.ExpiresAt.Add(time.Minute),
			want: want{publish: true, expired: []string{staged.ID, active.ID}, epoch: 2}},
		{name: "the epoch published follows the newest the status reports",
			at:   active.ExpiresAt,
			edit: func(r *ticket.Read) { r.Last.Epoch = 7 },
			want: want{publish: true, keys: []string{staged.ID}, expired: []string{active.ID}, epoch: 8, requeueBy: staged.ExpiresAt}},
		{name: "a shared ring writes nothing to its entry, whatever falls due",
			at: active.ExpiresAt,
			edit: func(r *ticket.Read) {
				r.Rotate = rotate
				r.Shared = &ticket.Shared{Entry: &sharedring.Record{Version: 5, Ring: r.Current}, Base: r.Current, LocalVersion: 5}
			},
			want: want{publish: true, keys: []string{staged.ID}, expired: []string{active.ID}, epoch: 5, requeueBy: staged.ExpiresAt}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rd := read(t, tt.at)
			rd.Deleting, rd.Finalizers = true, []string{"example.com/hold"}
			if tt.edit != nil {
				tt.edit(&rd)
			}
			d := ticket.Decide(rd)
			if !d.FailClosed || d.Plan.Mint != 0 || d.RotateNow || d.Revoke {
				t.Fatalf("Decide: failClosed %v, mint %d, rotateNow %v, revoke %v; want a plan that mints and carries out nothing", d.FailClosed, d.Plan.Mint, d.RotateNow, d.Revoke)
			}
			res := ticket.Finish(rd, d, ticket.Minted{Ring: d.Plan.Ring})
			if res.Sync != nil || res.Revocation != nil || res.Requests.Rotate != "" || res.Requests.Revoke != "" || res.RotateRequest != "" || res.RevokeRequest != "" {
				t.Errorf("Finish: sync %+v, revocation %+v, requests %+v, echoed %q %q; want no entry write and no request carried out or echoed",
					res.Sync, res.Revocation, res.Requests, res.RotateRequest, res.RevokeRequest)
			}
			next, published := res.Publication()
			if published != tt.want.publish {
				t.Fatalf("published %v, want %v", published, tt.want.publish)
			}
			served := res.Serving(res.Read())
			if published {
				served = next
				if next.Epoch != tt.want.epoch {
					t.Errorf("published epoch %d, want %d", next.Epoch, tt.want.epoch)
				}
			}
			if ids := ids(served); !slices.Equal(ids, tt.want.keys) {
				t.Errorf("serves keys %v, want %v (none minted)", ids, tt.want.keys)
			}
			if !slices.Equal(res.Plan.Expired, tt.want.expired) {
				t.Errorf("destroys %v, want %v", res.Plan.Expired, tt.want.expired)
			}

			out := res.Report(ticket.Applied{})
			ready := meta.FindStatusCondition(out.Status.Conditions, v1alpha1.ConditionReady)
			if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != v1alpha1.ReasonRingDeleting ||
				!strings.Contains(ready.Message, "stages no new key") || !strings.Contains(ready.Message, "example.com/hold") {
				t.Errorf("Ready %+v, want False %s naming the finalizer", ready, v1alpha1.ReasonRingDeleting)
			}
			revoked := slices.ContainsFunc(out.Events, func(e ringplan.Event) bool { return e.Reason == v1alpha1.ReasonRevoked })
			if out.Counts.MintRetry || revoked || out.Counts.Failed != 0 {
				t.Errorf("outcome %+v, want no failure and no retry of a mint", out)
			}
			if by := tt.want.requeueBy; !by.IsZero() && out.Requeue > by.Sub(tt.at)+by.Sub(tt.at)/10+time.Second {
				t.Errorf("looks again in %s, after %s (the next expiry or activation)", out.Requeue, by.Sub(tt.at))
			}
		})
	}
}

func TestDeletingKeepsSharedStatusAndYieldsToHalt(t *testing.T) {
	rd := read(t, t0.Add(10*time.Minute))
	rd.Deleting = true
	rd.Last.Shared = &v1alpha1.SharedRingStatus{Path: "kv/ringmaster/shop/web", Version: 5}
	res := ticket.Finish(rd, ticket.Decide(rd), ticket.Minted{})
	if res.SharedStatus == nil || res.SharedStatus.Version != 5 {
		t.Errorf("status.shared %+v, want the last one kept", res.SharedStatus)
	}
	rd.Halted = &ringplan.Problem{Reason: v1alpha1.ReasonInvalidSnapshot, Message: "bad"}
	if d := ticket.Decide(rd); d.Source != nil {
		t.Errorf("a halted ring being deleted reports %+v, want the halt", d.Source)
	}
}

func TestDeletingMessageIsBounded(t *testing.T) {
	rd := read(t, t0)
	rd.Deleting = true
	for i := range 1000 {
		rd.Finalizers = append(rd.Finalizers, fmt.Sprintf("example.com/%s-%d", strings.Repeat("f", 50), i))
	}
	d := ticket.Decide(rd)
	msg := d.Source.Message
	if len(msg) > textlimit.NoteLimit || !strings.HasSuffix(msg, "and 995 more") || !strings.Contains(msg, rd.Finalizers[0]) {
		t.Errorf("%d bytes: %q", len(msg), msg)
	}
	if !strings.Contains(msg, "its last key expires at "+rd.Current.Keys[0].ExpiresAt.UTC().Format(time.RFC3339)) {
		t.Errorf("message %q does not say when its last key expires", msg)
	}
	rd.Now, rd.Finalizers = t0.Add(10*time.Hour), nil
	if msg := ticket.Decide(rd).Source.Message; !strings.Contains(msg, "holds no key") || strings.Contains(msg, "finalizers") {
		t.Errorf("message %q", msg)
	}
}

func ids(r keyring.Ring) []string {
	var out []string
	for _, k := range r.Keys {
		out = append(out, k.ID)
	}
	return out
}
