package ticket_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/ringplan"
	"github.com/ringmaster-io/ringmaster/internal/ringplan/ticket"
)

var owner = distribute.Owner{Kind: v1alpha1.KindTicketKeyRing, Name: "web", Namespace: "shop", Home: "shop"}

// reported runs a whole pass of the plan on rd, with the mint's outcome
// and the writes' given.
// outcome is a pass's report as these tests read it.
type outcome struct {
	ringplan.Report[v1alpha1.TicketKeyRingStatus]
	Succeeded, MintRetry bool
	Failed               int
	// Published is the snapshot of the epoch published, "" for none.
	Published string
	Gauge     *ringplan.Gauge
}

func reported(t *testing.T, rd ticket.Read, mintErr error, applied ticket.Applied) (ticket.Result, outcome) {
	t.Helper()
	rd.Ring = ticket.Ring{Owner: owner, Generation: 3, Targets: 1}
	d := ticket.Decide(rd)
	m := ticket.Minted{Ring: minted(d.Plan, "k")}
	if mintErr != nil {
		m = ticket.Minted{Err: mintErr, Problem: ticket.MintProblem(rd.Now, d.Current, d.Plan.Mint, v1alpha1.ReasonVaultUnavailable, "Vault is down")}
	}
	res := ticket.Finish(rd, d, m)
	rep := res.Report(applied)
	o := outcome{Report: rep, Succeeded: rep.Counts.Rotated, MintRetry: rep.Counts.MintRetry, Failed: rep.Counts.Failed, Gauge: rep.Counts.Gauge}
	if pub, ok := res.Publication(); ok && applied.Publish == nil {
		o.Published = owner.SnapshotName(pub.Epoch)
	}
	return res, o
}

func TestReport(t *testing.T) {
	t.Run("a new ring publishes epoch 1, named after it, and counts a success", func(t *testing.T) {
		rd := read(t, t0)
		rd.Current, rd.History = keyring.Ring{}, keyring.History{}
		res, out := reported(t, rd, nil, ticket.Applied{})
		next, ok := res.Publication()
		if !ok || next.Epoch != 1 || !out.Succeeded || out.Failed != 0 || out.Published != "web-e1" {
			t.Fatalf("publication %d (%v), outcome %+v; want epoch 1 published, a success", next.Epoch, ok, out)
		}
		if out.Status.Epoch != 1 || out.Status.Snapshot != "web-e1" || !meta.IsStatusConditionTrue(out.Status.Conditions, v1alpha1.ConditionReady) {
			t.Errorf("status %+v", out.Status)
		}
		if out.Gauge == nil || out.Gauge.Epoch != 1 {
			t.Errorf("gauge %+v, want epoch 1", out.Gauge)
		}
	})
	t.Run("the epoch follows the status's when the record lags it", func(t *testing.T) {
		rd := read(t, t0.Add(59*time.Minute))
		rd.Last.Epoch = 9
		rd.Rotate = t0.Add(59 * time.Minute).Format(time.RFC3339)
		res, _ := reported(t, rd, nil, ticket.Applied{})
		if next, ok := res.Publication(); !ok || next.Epoch != 10 {
			t.Fatalf("publication epoch %d (%v), want 10", next.Epoch, ok)
		}
	})
	t.Run("a snapshot that cannot be written rolls the status back and echoes no request", func(t *testing.T) {
		rd := read(t, t0.Add(59*time.Minute))
		rd.Last = v1alpha1.TicketKeyRingStatus{Epoch: 1, Snapshot: "web-e1"}
		rd.Rotate = t0.Add(59 * time.Minute).Format(time.RFC3339)
		p := &ringplan.Problem{Reason: v1alpha1.ReasonSecretConflict, Message: "in the way"}
		_, out := reported(t, rd, nil, ticket.Applied{Publish: p})
		if out.Succeeded || out.Failed != 1 || out.Requeue != ringplan.ConflictRetry {
			t.Fatalf("outcome %+v, want a failure retried in %s", out, ringplan.ConflictRetry)
		}
		if out.Status.Epoch != 1 || out.Status.Snapshot != "web-e1" || out.Status.LastRotateRequestedAt != "" {
			t.Errorf("status epoch %d snapshot %s request %q, want the served epoch and no echo", out.Status.Epoch, out.Status.Snapshot, out.Status.LastRotateRequestedAt)
		}
		if c := meta.FindStatusCondition(out.Status.Conditions, v1alpha1.ConditionReady); c.Reason != v1alpha1.ReasonSecretConflict {
			t.Errorf("Ready %+v", c)
		}
	})
	t.Run("a key source down: no backoff past the next expiry, and the message says what still encrypts", func(t *testing.T) {
		rd := read(t, t0.Add(59*time.Minute))
		rd.Rotate = t0.Add(59 * time.Minute).Format(time.RFC3339)
		_, out := reported(t, rd, errors.New("down"), ticket.Applied{})
		if !out.MintRetry || out.Failed != 1 || out.Requeue > 5*time.Second {
			t.Fatalf("outcome retry %v failed %d requeue %s, want a retry within 5s", out.MintRetry, out.Failed, out.Requeue)
		}
		c := meta.FindStatusCondition(out.Status.Conditions, v1alpha1.ConditionReady)
		if !strings.Contains(c.Message, "keeps encrypting") {
			t.Errorf("Ready message %q does not say which key encrypts", c.Message)
		}
	})
	t.Run("a halted reconcile reports why and publishes nothing", func(t *testing.T) {
		rd := read(t, t0)
		rd.Halted = &ringplan.Problem{Reason: v1alpha1.ReasonInvalidSnapshot, Message: "bad"}
		res, out := reported(t, rd, nil, ticket.Applied{})
		if _, ok := res.Publication(); ok || out.Gauge != nil {
			t.Fatal("a halted reconcile publishes")
		}
		if c := meta.FindStatusCondition(out.Status.Conditions, v1alpha1.ConditionReady); c.Reason != v1alpha1.ReasonInvalidSnapshot {
			t.Errorf("Ready %+v", c)
		}
	})
	t.Run("a refused request is said in a condition, without its value", func(t *testing.T) {
		rd := read(t, t0)
		rd.Refused = []string{v1alpha1.RotateRequestedAtAnnotation}
		_, out := reported(t, rd, nil, ticket.Applied{})
		c := meta.FindStatusCondition(out.Status.Conditions, v1alpha1.ConditionRequestRefused)
		if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, v1alpha1.RotateRequestedAtAnnotation) {
			t.Fatalf("RequestRefused %+v", c)
		}
		rd.Refused = nil
		_, out = reported(t, rd, nil, ticket.Applied{})
		if meta.FindStatusCondition(out.Status.Conditions, v1alpha1.ConditionRequestRefused) != nil {
			t.Error("RequestRefused stays once the annotation is valid")
		}
	})
}

func TestAnnounced(t *testing.T) {
	const rotate, revoke = "2026-03-01T12:10:00Z", "2026-03-01T12:11:00Z"
	tests := []struct {
		name      string
		at        time.Duration
		edit      func(*ticket.Read)
		published bool
		announced bool
	}{
		{name: "a new ring's first epoch", edit: func(r *ticket.Read) { r.Current, r.History = keyring.Ring{}, keyring.History{} }, published: true},
		{name: "a scheduled rotation", at: 2 * time.Hour, published: true},
		{name: "a rotate-now", at: 10 * time.Minute, edit: func(r *ticket.Read) { r.Rotate = rotate }, published: true, announced: true},
		{name: "a rotate-now an epoch on record carried out", at: 10 * time.Minute, edit: func(r *ticket.Read) { r.Rotate = "2026-03-01T11:00:00Z" }},
		{name: "a scheduled rotation while an old request stays annotated", at: 2 * time.Hour, edit: func(r *ticket.Read) {
			r.Rotate, r.Last.LastRotateRequestedAt = "2026-03-01T11:00:00Z", "2026-03-01T11:00:00Z"
		}, published: true},
		{name: "a revoke, which has its Warning Revoked", at: 10 * time.Minute, edit: func(r *ticket.Read) { r.Revoke = revoke }, published: true},
		{name: "nothing published", at: 10 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rd := read(t, t0.Add(tt.at))
			if tt.edit != nil {
				tt.edit(&rd)
			}
			res, _ := reported(t, rd, nil, ticket.Applied{})
			if _, published := res.Publication(); published != tt.published {
				t.Fatalf("published %v, want %v", published, tt.published)
			}
			if got := res.Announced(); got != tt.announced {
				t.Errorf("Announced() = %v, want %v", got, tt.announced)
			}
		})
	}
}

func TestMintProblemWithNoKeyLeft(t *testing.T) {
	cur, _ := steady(t)
	late := cur.Keys[0].ExpiresAt.Add(time.Hour)
	p := ticket.MintProblem(late, cur, 1, v1alpha1.ReasonVaultUnavailable, "Vault is down")
	if strings.Contains(p.Message, "keep") || !strings.Contains(p.Message, "no key encrypts now") {
		t.Fatalf("message %q, want it to say no key encrypts", p.Message)
	}
}

func TestMintRetry(t *testing.T) {
	for _, tc := range []struct {
		failing time.Duration
		want    time.Duration
	}{{0, 5 * time.Second}, {10 * time.Second, 5 * time.Second}, {2 * time.Minute, 30 * time.Second}, {time.Hour, 5 * time.Minute}} {
		since := time.Time{}
		if tc.failing > 0 {
			since = t0.Add(-tc.failing)
		}
		if got := ticket.MintRetry(t0, since); got != tc.want {
			t.Errorf("failing for %s: retry in %s, want %s", tc.failing, got, tc.want)
		}
	}
}
