package ticket_test

import (
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/ringplan"
	"github.com/ringmaster-io/ringmaster/internal/ringplan/ticket"
	"github.com/ringmaster-io/ringmaster/internal/sharedring"
)

var (
	t0     = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	policy = keyring.Policy{RotationInterval: time.Hour, RetainedKeys: 1, ActivationDelay: 3 * time.Minute}
)

// minted gives the plan's new keys a secret, as a key source would.
func minted(plan keyring.Plan, label string) keyring.Ring {
	r := plan.Ring
	r.Keys = append([]keyring.Key(nil), r.Keys...)
	for i := range plan.Mint {
		k := keyring.NewKey(keyring.Secret(sha256.Sum256([]byte(label + string(rune('a'+i))))))
		k.ActiveFrom, k.RetireAt, k.ExpiresAt = r.Keys[i].ActiveFrom, r.Keys[i].RetireAt, r.Keys[i].ExpiresAt
		r.Keys[i] = k
	}
	return r
}

// steady is a ring published at t0 (active and staged keys), and its
// history.
func steady(t *testing.T) (keyring.Ring, keyring.History) {
	t.Helper()
	cur := minted(keyring.Next(t0, policy, keyring.Ring{}, keyring.Inputs{}), "steady")
	cur.Epoch, cur.IssuedAt = 1, t0
	h, err := keyring.NewHistory([]keyring.Record{{Epoch: 1, Ring: cur, RotateRequest: "2026-03-01T11:00:00Z"}})
	if err != nil {
		t.Fatal(err)
	}
	return cur, h
}

func read(t *testing.T, now time.Time) ticket.Read {
	cur, h := steady(t)
	return ticket.Read{Now: now, Policy: policy, History: h, Current: cur}
}

var blocked = &ringplan.Problem{Reason: v1alpha1.ReasonSharedRingRolledBack, Message: "rolled back"}

func TestDecideAndFinish(t *testing.T) {
	const rotate, revoke = "2026-03-01T12:10:00Z", "2026-03-01T12:11:00Z"
	mintFailed := &ringplan.Problem{Reason: v1alpha1.ReasonVaultUnavailable, Message: "minting failed"}
	type want struct {
		publish, failClosed, mintFailed bool
		mint                            int
		source                          *ringplan.Problem
		shared                          int64
		rotate, revoke                  string // requests carried out by the epoch
		echoRotate, echoRevoke          string
		revocation                      bool
		sync                            bool // a write to the shared entry is due
	}
	tests := []struct {
		name string
		edit func(*ticket.Read)
		mint error
		want want
	}{
		{name: "a steady ring before its staged key activates publishes nothing",
			edit: func(*ticket.Read) {}},
		{name: "a new ring mints two keys and publishes",
			edit: func(r *ticket.Read) { r.Current, r.History = keyring.Ring{}, keyring.History{} },
			want: want{publish: true, mint: 2}},
		{name: "a rotate-now request is carried out and echoed",
			edit: func(r *ticket.Read) { r.Rotate = rotate },
			want: want{publish: true, mint: 1, rotate: rotate, echoRotate: rotate}},
		{name: "a request the status echoes already is not carried out again",
			edit: func(r *ticket.Read) { r.Rotate, r.Last.LastRotateRequestedAt = rotate, rotate }},
		{name: "a request an epoch on record carried out is echoed, not carried out",
			edit: func(r *ticket.Read) { r.Rotate = "2026-03-01T11:00:00Z" },
			want: want{echoRotate: "2026-03-01T11:00:00Z"}},
		{name: "a revoke mints a fresh key and records the revocation",
			edit: func(r *ticket.Read) { r.Revoke, r.RevokedBy = revoke, "kubectl-ringmaster" },
			want: want{publish: true, mint: 2, revoke: revoke, echoRevoke: revoke, revocation: true}},
		{name: "a failed mint falls back on destroying what expired, and echoes nothing",
			edit: func(r *ticket.Read) { r.Revoke = revoke },
			mint: errors.New("vault down"),
			want: want{mintFailed: true, source: mintFailed}},
		{name: "a shared ring that cannot use its entry fails closed",
			edit: func(r *ticket.Read) {
				r.Rotate = rotate
				r.Shared = &ticket.Shared{LocalVersion: 4, Blocked: blocked}
			},
			want: want{failClosed: true, source: blocked, shared: 4}},
		{name: "a shared ring whose entry carried out the request echoes it with the epoch that adopts it",
			edit: func(r *ticket.Read) {
				entry := &sharedring.Record{Version: 5, Ring: r.Current, Requests: sharedring.Requests{Rotate: []string{rotate}}}
				r.Rotate, r.Shared = rotate, &ticket.Shared{Entry: entry, Base: r.Current, LocalVersion: 5}
			},
			want: want{shared: 5, rotate: rotate, echoRotate: rotate}},
		{name: "a shared ring that rotates writes its entry first",
			edit: func(r *ticket.Read) {
				entry := &sharedring.Record{Version: 5, Ring: r.Current}
				r.Rotate, r.Shared = rotate, &ticket.Shared{Entry: entry, Base: r.Current, LocalVersion: 5}
			},
			want: want{mint: 1, shared: 5, rotate: rotate, echoRotate: rotate, sync: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := read(t, t0.Add(10*time.Minute))
			tt.edit(&in)
			d := ticket.Decide(in)
			if d.FailClosed != tt.want.failClosed || d.Plan.Mint != tt.want.mint && tt.mint == nil {
				t.Fatalf("Decide: failClosed %v, mint %d; want %v, %d", d.FailClosed, d.Plan.Mint, tt.want.failClosed, tt.want.mint)
			}
			m := ticket.Minted{Ring: minted(d.Plan, "next")}
			if tt.mint != nil {
				m = ticket.Minted{Err: tt.mint, Problem: mintFailed}
			}
			r := ticket.Finish(in, d, m)
			w := tt.want
			got := want{publish: r.Publish, failClosed: d.FailClosed, mintFailed: r.MintFailed, mint: w.mint, source: r.Source,
				shared: r.Requests.Shared, rotate: r.Requests.Rotate, revoke: r.Requests.Revoke,
				echoRotate: r.RotateRequest, echoRevoke: r.RevokeRequest, revocation: r.Revocation != nil, sync: r.Sync != nil && r.Sync.Write}
			if got != w {
				t.Errorf("Finish:\n got %+v\nwant %+v", got, w)
			}
			if r.MintFailed && (r.Plan.Mint != 0 || !r.RotationFailed) {
				t.Errorf("a failed mint keeps a plan that mints %d key(s), rotationFailed %v", r.Plan.Mint, r.RotationFailed)
			}
			if r.Revocation != nil && (r.Revocation.RequestedBy != in.RevokedBy || len(r.Revocation.Keys) == 0) {
				t.Errorf("revocation %+v", r.Revocation)
			}
			if d.FailClosed && r.Serving(in).Epoch != in.Current.Epoch {
				t.Errorf("a ring failing closed serves epoch %d, want the current %d", r.Serving(in).Epoch, in.Current.Epoch)
			}
		})
	}
}

func TestWrote(t *testing.T) {
	const rotate = "2026-03-01T12:10:00Z"
	failed := &ringplan.Problem{Reason: v1alpha1.ReasonVaultUnavailable, Message: "write failed"}
	tests := []struct {
		name                      string
		w                         ticket.Written
		publish, lostRace, closed bool
		shared                    int64
		echo                      string
		source                    *ringplan.Problem
	}{
		{name: "a write that wins publishes under the version written",
			w: ticket.Written{Version: 6}, publish: true, shared: 6, echo: rotate},
		{name: "a write that loses the race publishes nothing and echoes nothing",
			w: ticket.Written{Err: errors.New("lost"), LostRace: true}, lostRace: true, shared: 5},
		{name: "a write that fails fails closed",
			w: ticket.Written{Err: errors.New("vault down"), Problem: failed}, closed: true, shared: 4, source: failed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := read(t, t0.Add(10*time.Minute))
			in.Rotate = rotate
			in.Shared = &ticket.Shared{Entry: &sharedring.Record{Version: 5, Ring: in.Current}, Base: in.Current, LocalVersion: 4}
			d := ticket.Decide(in)
			r := ticket.Finish(in, d, ticket.Minted{Ring: minted(d.Plan, "next")})
			if r.Sync == nil || !r.Sync.Write || r.Sync.CAS != 5 || r.Sync.Record.Ring.Keys[0].ID != r.Next.Keys[0].ID {
				t.Fatalf("sync %+v: want a write of the next ring over version 5", r.Sync)
			}
			r = ticket.Wrote(in, r, tt.w)
			if r.Publish != tt.publish || r.LostRace != tt.lostRace || r.SyncFailed != tt.closed || r.Requests.Shared != tt.shared ||
				r.RotateRequest != tt.echo || r.Source != tt.source {
				t.Errorf("got publish %v lostRace %v closed %v shared %d echo %q source %v", r.Publish, r.LostRace, r.SyncFailed, r.Requests.Shared, r.RotateRequest, r.Source)
			}
			if tt.closed && (r.Plan.Mint != 0 || !r.RotationFailed || r.Revocation != nil) {
				t.Errorf("a ring failing closed keeps plan %+v", r.Plan)
			}
		})
	}
}

func TestFinishAdoptsAnotherClustersVersion(t *testing.T) {
	in := read(t, t0.Add(10*time.Minute))
	theirs := minted(keyring.Next(t0, policy, keyring.Ring{}, keyring.Inputs{}), "theirs")
	in.Shared = &ticket.Shared{Entry: &sharedring.Record{Version: 7, Ring: theirs}, Base: theirs, LocalVersion: 6}
	r := ticket.Finish(in, ticket.Decide(in), ticket.Minted{Ring: theirs})
	if !r.Publish || !r.Adopt || r.Sync == nil || r.Sync.Write || r.Requests.Shared != 7 || r.Next.Keys[0].ID != theirs.Keys[0].ID {
		t.Errorf("got publish %v adopt %v sync %+v shared %d", r.Publish, r.Adopt, r.Sync, r.Requests.Shared)
	}
	in.Shared.Entry.Ring, in.Shared.Base = in.Current, in.Current
	if r := ticket.Finish(in, ticket.Decide(in), ticket.Minted{Ring: in.Current}); r.Publish || r.Adopt {
		t.Errorf("the version this cluster serves is adopted again")
	}
}

func TestRequeue(t *testing.T) {
	due := keyring.Plan{RequeueAt: t0.Add(time.Hour)}
	tests := []struct {
		name     string
		plan     keyring.Plan
		shared   bool
		failed   int
		lostRace bool
		want     time.Duration
	}{
		{"when the plan says", due, false, 0, false, time.Hour},
		{"a failed target is retried", due, false, 1, false, ringplan.ConflictRetry},
		{"a staged key awaiting its fleet", keyring.Plan{RequeueAt: due.RequeueAt, Awaiting: true}, false, 0, false, ticket.ConfirmPoll},
		{"a shared ring reads its entry again", due, true, 0, false, sharedring.SyncPeriod(policy.ActivationDelay)},
		{"a lost race is retried at once", due, true, 1, true, ticket.LostRaceRetry},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ticket.Requeue(t0, policy, tt.plan, tt.shared, tt.failed, tt.lostRace)
			if tt.want == time.Hour {
				// schedule.After adds a little jitter.
				if got < time.Hour || got > time.Hour+time.Hour/10 {
					t.Errorf("got %v, want about %v", got, tt.want)
				}
				return
			}
			if got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestOverdue(t *testing.T) {
	cur, _ := steady(t)
	cur.Due = t0.Add(time.Hour)
	staged := cur.Keys[0].ID
	shown := &v1alpha1.ConfirmationStatus{StagedKey: staged}
	tests := []struct {
		name      string
		now       time.Time
		confirmed bool
		shown     *v1alpha1.ConfirmationStatus
		want      time.Time
	}{
		{"before the timeout", t0.Add(time.Hour + 9*time.Minute), false, shown, time.Time{}},
		{"at the timeout", t0.Add(time.Hour + 10*time.Minute), false, shown, t0.Add(time.Hour + 10*time.Minute)},
		{"confirmed", t0.Add(2 * time.Hour), true, shown, time.Time{}},
		{"no answers", t0.Add(2 * time.Hour), false, nil, time.Time{}},
		{"answers about another key", t0.Add(2 * time.Hour), false, &v1alpha1.ConfirmationStatus{StagedKey: "other"}, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ticket.Overdue(tt.now, cur, 10*time.Minute, tt.confirmed, tt.shown); !got.Equal(tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSharedStatus(t *testing.T) {
	rec := sharedring.Record{Version: 3, Created: t0}
	adopted, delay := ticket.Adopted(v1alpha1.SharedRingStatus{Path: "kv/x"}, rec, t0.Add(1500*time.Millisecond))
	if delay != 1500*time.Millisecond || adopted.Version != 3 || adopted.Writer != "Adopted" || adopted.PropagationDelay.Duration != delay {
		t.Errorf("Adopted: %+v, %v", adopted, delay)
	}
	if w := ticket.WroteStatus(v1alpha1.SharedRingStatus{}, rec); w.Writer != "Local" || w.Version != 3 || w.PropagationDelay.Duration != 0 {
		t.Errorf("WroteStatus: %+v", w)
	}
	shown := v1alpha1.SharedRingStatus{Path: "kv/x", Version: 2, Writer: "Local", PropagationDelay: &metav1.Duration{}}
	tests := []struct {
		name       string
		entry      *sharedring.Record
		usable     bool
		remembered *v1alpha1.SharedRingStatus
		version    int64
		delay      *metav1.Duration
	}{
		{"the version shown stands when the entry is unusable", &rec, false, nil, 2, &metav1.Duration{}},
		{"a version adopted by a pass whose write failed is shown, its delay unknown", &rec, true, nil, 3, nil},
		{"... or remembered", &rec, true, &adopted, 3, adopted.PropagationDelay},
		{"a deleted entry", &sharedring.Record{Version: 4, Deleted: true}, true, nil, 2, &metav1.Duration{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ticket.SharedStatus(shown, tt.entry, tt.usable, tt.remembered)
			if got.Version != tt.version || (got.PropagationDelay == nil) != (tt.delay == nil) ||
				(got.PropagationDelay != nil && *got.PropagationDelay != *tt.delay) {
				t.Errorf("got version %d delay %v, want %d %v", got.Version, got.PropagationDelay, tt.version, tt.delay)
			}
		})
	}
}

func TestReplan(t *testing.T) {
	// Back a minute before the active key's successor falls due, having
	// been down when it should have minted it, the operator mints it due
	// ActivationDelay from now.
	now := t0.Add(119 * time.Minute)
	base := read(t, now)
	d := ticket.Decide(base)
	if d.Plan.Mint != 1 || !d.Plan.Ring.Keys[0].ActiveFrom.Equal(now.Add(policy.ActivationDelay)) {
		t.Fatalf("plan at now mints %d key(s), the first due %s; want 1 due %s", d.Plan.Mint, d.Plan.Ring.Keys[0].ActiveFrom, now.Add(policy.ActivationDelay))
	}
	m := ticket.Minted{Ring: minted(d.Plan, "late")}
	slow := now.Add(40 * time.Second)
	tests := []struct {
		name      string
		later     time.Time
		edit      func(*ticket.Read, *ticket.Minted)
		replanned bool
	}{
		{name: "a mint that took 40 s: the staged key counts its delay from then", later: slow, replanned: true},
		{name: "a mint within the second keeps the plan", later: now.Add(900 * time.Millisecond)},
		{name: "a shared ring keeps the plan its entry records", later: slow,
			edit: func(r *ticket.Read, _ *ticket.Minted) { r.Shared = &ticket.Shared{} }},
		{name: "a failed mint keeps the plan", later: slow,
			edit: func(_ *ticket.Read, m *ticket.Minted) { m.Err = errors.New("vault down") }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in, mm := base, m
			if tc.edit != nil {
				tc.edit(&in, &mm)
			}
			gotIn, gotD, gotM := ticket.Replan(in, d, mm, tc.later)
			staged := gotM.Ring.Keys[0]
			if staged.ID != m.Ring.Keys[0].ID || staged.Secret != m.Ring.Keys[0].Secret {
				t.Fatalf("staged key %s, want the minted %s", staged.ID, m.Ring.Keys[0].ID)
			}
			wantNow, wantFrom := now, now.Add(policy.ActivationDelay)
			if tc.replanned {
				wantNow, wantFrom = tc.later, tc.later.Add(policy.ActivationDelay)
			}
			if !gotIn.Now.Equal(wantNow) || !staged.ActiveFrom.Equal(wantFrom) || !gotD.Plan.Ring.Keys[0].ActiveFrom.Equal(wantFrom) {
				t.Errorf("planned at %s, staged key due %s; want %s and %s", gotIn.Now, staged.ActiveFrom, wantNow, wantFrom)
			}
			if active := gotM.Ring.Keys[1]; !active.RetireAt.Equal(wantFrom) {
				t.Errorf("active key retires at %s, want the staged key's activeFrom %s", active.RetireAt, wantFrom)
			}
		})
	}
}
