package ticket

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/ringplan"
)

var (
	s0  = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	std = keyring.Policy{RotationInterval: time.Hour, RetainedKeys: 3, ActivationDelay: 3 * time.Minute}
)

// published is a new ring published at s0: A active, S staged for s0+1h.
func publishedAt0() keyring.Ring {
	plan := keyring.Next(s0, std, keyring.Ring{Name: "shop/web"}, keyring.Inputs{})
	r, err := plan.Fill([]keyring.Secret{sha256.Sum256([]byte("S")), sha256.Sum256([]byte("A"))})
	if err != nil {
		panic(err)
	}
	return r
}

func TestBuild(t *testing.T) {
	ring := publishedAt0()
	S, A := ring.Keys[0], ring.Keys[1]
	conflict := func(ns string) v1alpha1.TargetFailure {
		return v1alpha1.TargetFailure{Namespace: ns, Reason: v1alpha1.ReasonSecretConflict, Message: "Secret " + ns + "/web-ticket-keys exists and is not this ring's"}
	}
	refused := func(ns string) v1alpha1.TargetFailure {
		return v1alpha1.TargetFailure{Namespace: ns, Reason: v1alpha1.ReasonPublishFailed, Message: "forbidden"}
	}
	var many []v1alpha1.TargetFailure
	for i := range 25 {
		many = append(many, refused(fmt.Sprintf("ns-%02d", 24-i)))
	}
	vault := &ringplan.Problem{Reason: v1alpha1.ReasonVaultUnavailable, Message: "Minting 1 key(s) failed: vault down"}
	keyless := keyring.Ring{Name: ring.Name, Epoch: 2, IssuedAt: s0.Add(30 * time.Hour)}

	tests := []struct {
		name    string
		prev    v1alpha1.TicketKeyRingStatus
		out     Pass
		ready   metav1.ConditionStatus
		reason  string
		message string // a substring
		overdue metav1.ConditionStatus
		failed  int
		check   func(t *testing.T, s v1alpha1.TicketKeyRingStatus)
	}{
		{
			name: "published to every target", out: Pass{Now: s0, Ring: ring, Snapshot: "web-e1", Targets: 1},
			ready: metav1.ConditionTrue, reason: v1alpha1.ReasonPublished, message: "Epoch 1 is published to 1 namespace(s)", overdue: metav1.ConditionFalse,
			check: func(t *testing.T, s v1alpha1.TicketKeyRingStatus) {
				if s.Epoch != 1 || s.Snapshot != "web-e1" || s.Targets != 1 || s.ActiveKey.ID != A.ID || !s.NextRotation.Time.Equal(S.ActiveFrom) {
					t.Errorf("status %+v", s)
				}
				if len(s.Keys) != 2 || s.Keys[0].State != "staged" || s.Keys[1].State != "active" {
					t.Errorf("keys %+v", s.Keys)
				}
			},
		},
		{
			name:  "the rotate-now request carried out is echoed",
			out:   Pass{Now: s0, Ring: ring, Snapshot: "web-e1", Targets: 1, RotateRequest: "r1"},
			ready: metav1.ConditionTrue, reason: v1alpha1.ReasonPublished, overdue: metav1.ConditionFalse,
			check: func(t *testing.T, s v1alpha1.TicketKeyRingStatus) {
				if s.LastRotateRequestedAt != "r1" {
					t.Errorf("lastRotateRequestedAt = %q", s.LastRotateRequestedAt)
				}
			},
		},
		{
			name:  "the only target's projection name is taken",
			out:   Pass{Now: s0, Ring: ring, Snapshot: "web-e1", Targets: 1, Failed: []v1alpha1.TargetFailure{conflict("shop")}},
			ready: metav1.ConditionFalse, reason: v1alpha1.ReasonSecretConflict, message: "Secret shop/web-ticket-keys exists", overdue: metav1.ConditionFalse, failed: 1,
		},
		{
			name:  "one target of three refused: the others have it, and they are named",
			out:   Pass{Now: s0, Ring: ring, Snapshot: "edge-ce1", Targets: 3, Failed: []v1alpha1.TargetFailure{refused("kube-system")}},
			ready: metav1.ConditionFalse, reason: v1alpha1.ReasonDistributionFailed, message: "Epoch 1 reached 2 of 3 namespace(s); not kube-system", overdue: metav1.ConditionFalse, failed: 1,
			check: func(t *testing.T, s v1alpha1.TicketKeyRingStatus) {
				if s.Epoch != 1 || s.Snapshot != "edge-ce1" {
					t.Errorf("the published epoch is reported whatever failed: %+v", s)
				}
			},
		},
		{
			name:  "25 targets refused: status lists 20, in namespace order, the message counts them all",
			out:   Pass{Now: s0, Ring: ring, Snapshot: "edge-ce1", Targets: 30, Failed: many},
			ready: metav1.ConditionFalse, reason: v1alpha1.ReasonDistributionFailed, message: "reached 5 of 30 namespace(s); not ns-00, ns-01, ns-02, ns-03, ns-04 and 20 more", overdue: metav1.ConditionFalse, failed: MaxFailedTargets,
			check: func(t *testing.T, s v1alpha1.TicketKeyRingStatus) {
				if s.FailedTargets[0].Namespace != "ns-00" || s.FailedTargets[19].Namespace != "ns-19" {
					t.Errorf("failedTargets not in order: %s .. %s", s.FailedTargets[0].Namespace, s.FailedTargets[19].Namespace)
				}
			},
		},
		{
			name:  "the source failed before a rotation was due: not ready, not overdue",
			out:   Pass{Now: s0.Add(time.Minute), Ring: ring, Current: ring, Snapshot: "web-e1", Targets: 1, Source: vault},
			ready: metav1.ConditionFalse, reason: v1alpha1.ReasonVaultUnavailable, message: "vault down", overdue: metav1.ConditionFalse,
		},
		{
			name:  "the source failed once the staged key activated: the rotation is overdue since then",
			out:   Pass{Now: s0.Add(90 * time.Minute), Ring: withoutStaged(ring), Current: withoutStaged(ring), Snapshot: "web-e1", Targets: 1, Source: vault},
			ready: metav1.ConditionFalse, reason: v1alpha1.ReasonVaultUnavailable, overdue: metav1.ConditionTrue,
			check: func(t *testing.T, s v1alpha1.TicketKeyRingStatus) {
				c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionRotationOverdue)
				if c.Reason != v1alpha1.ReasonVaultUnavailable || !strings.Contains(c.Message, "since 2026-11-30T12:00:00Z") {
					t.Errorf("overdue %+v", c)
				}
			},
		},
		{
			name:  "every key expired while the source failed: nothing encrypts, and the message says so",
			out:   Pass{Now: s0.Add(30 * time.Hour), Ring: keyring.Ring{Epoch: 1}, Current: withoutStaged(ring), Snapshot: "web-e1", Targets: 1, Source: vault},
			ready: metav1.ConditionFalse, reason: v1alpha1.ReasonVaultUnavailable, overdue: metav1.ConditionTrue,
			check: func(t *testing.T, s v1alpha1.TicketKeyRingStatus) {
				c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionRotationOverdue)
				if !strings.Contains(c.Message, "no key encrypts") || strings.Contains(c.Message, "keeps encrypting") {
					t.Errorf("overdue %+v", c)
				}
				if len(s.Keys) != 0 || s.ActiveKey != nil {
					t.Errorf("keys listed after all expired: %+v", s.Keys)
				}
			},
		},
		{
			name:  "the ring published without keys stays overdue on later passes, and says the keys are gone",
			out:   Pass{Now: s0.Add(31 * time.Hour), Ring: keyless, Current: keyless, Snapshot: "web-e2", Targets: 1, Source: vault},
			ready: metav1.ConditionFalse, reason: v1alpha1.ReasonVaultUnavailable, overdue: metav1.ConditionTrue,
			check: func(t *testing.T, s v1alpha1.TicketKeyRingStatus) {
				c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionRotationOverdue)
				if !strings.Contains(c.Message, "expired and been destroyed (epoch 2 holds none)") || !strings.Contains(c.Message, "no key encrypts") {
					t.Errorf("overdue %+v", c)
				}
				if s.Epoch != 2 || len(s.Keys) != 0 || s.ActiveKey != nil || s.NextRotation != nil {
					t.Errorf("status %+v", s)
				}
			},
		},
		{
			name:  "every key expired but the key-less epoch could not be written: the message does not claim the keys destroyed",
			out:   Pass{Now: s0.Add(30 * time.Hour), Ring: withoutStaged(ring), Current: withoutStaged(ring), Snapshot: "web-e1", Targets: 1, Source: vault, Publish: &ringplan.Problem{Reason: v1alpha1.ReasonPublishFailed, Message: "etcd full"}},
			ready: metav1.ConditionFalse, reason: v1alpha1.ReasonVaultUnavailable, overdue: metav1.ConditionTrue,
			check: func(t *testing.T, s v1alpha1.TicketKeyRingStatus) {
				c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionRotationOverdue)
				if strings.Contains(c.Message, "destroyed") || !strings.Contains(c.Message, "still holds the expired keys") {
					t.Errorf("overdue %+v", c)
				}
			},
		},
		{
			name:  "halted by an unreadable snapshot: only Ready changes",
			prev:  v1alpha1.TicketKeyRingStatus{Epoch: 4, Snapshot: "web-e4"},
			out:   Pass{Now: s0, Halted: &ringplan.Problem{Reason: v1alpha1.ReasonInvalidSnapshot, Message: "snapshot shop/web-e4: not JSON"}},
			ready: metav1.ConditionFalse, reason: v1alpha1.ReasonInvalidSnapshot, message: "not JSON",
			check: func(t *testing.T, s v1alpha1.TicketKeyRingStatus) {
				if s.Epoch != 4 || s.Snapshot != "web-e4" {
					t.Errorf("the record of the last epoch was lost: %+v", s)
				}
			},
		},
		{
			name:  "the snapshot could not be written",
			prev:  v1alpha1.TicketKeyRingStatus{FailedTargets: []v1alpha1.TargetFailure{refused("old")}},
			out:   Pass{Now: s0, Ring: ring, Snapshot: "web-e1", Targets: 1, Publish: &ringplan.Problem{Reason: v1alpha1.ReasonPublishFailed, Message: "Writing snapshot shop/web-e2 failed"}},
			ready: metav1.ConditionFalse, reason: v1alpha1.ReasonPublishFailed, message: "shop/web-e2", overdue: metav1.ConditionFalse,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.out.Generation = 3
			s := Build(tt.prev, tt.out)
			r := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionReady)
			if r == nil || r.Status != tt.ready || r.Reason != tt.reason || !strings.Contains(r.Message, tt.message) || r.ObservedGeneration != 3 {
				t.Errorf("Ready = %+v, want %s %s %q (generation 3)", r, tt.ready, tt.reason, tt.message)
			}
			o := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionRotationOverdue)
			switch {
			case tt.overdue == "" && o != nil:
				t.Errorf("RotationOverdue set by a halted reconcile: %+v", o)
			case tt.overdue != "" && (o == nil || o.Status != tt.overdue):
				t.Errorf("RotationOverdue = %+v, want %s", o, tt.overdue)
			}
			if len(s.FailedTargets) != tt.failed {
				t.Errorf("failedTargets = %d, want %d", len(s.FailedTargets), tt.failed)
			}
			if tt.check != nil {
				tt.check(t, s)
			}
		})
	}
}

func withoutStaged(r keyring.Ring) keyring.Ring {
	r.Keys = r.Keys[1:]
	return r
}

func TestWarning(t *testing.T) {
	cond := func(s metav1.ConditionStatus, reason string) []metav1.Condition {
		return []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: s, Reason: reason, Message: "m"}}
	}
	tests := []struct {
		name       string
		prev, next []metav1.Condition
		want       bool
	}{
		{"first status, ready", nil, cond(metav1.ConditionTrue, v1alpha1.ReasonPublished), false},
		{"first status, not ready", nil, cond(metav1.ConditionFalse, v1alpha1.ReasonMintFailed), true},
		{"turns not ready", cond(metav1.ConditionTrue, v1alpha1.ReasonPublished), cond(metav1.ConditionFalse, v1alpha1.ReasonVaultUnavailable), true},
		{"stays not ready for the same reason: a retry, no event", cond(metav1.ConditionFalse, v1alpha1.ReasonVaultUnavailable), cond(metav1.ConditionFalse, v1alpha1.ReasonVaultUnavailable), false},
		{"not ready for a new reason", cond(metav1.ConditionFalse, v1alpha1.ReasonVaultUnavailable), cond(metav1.ConditionFalse, v1alpha1.ReasonVaultPermissionDenied), true},
		{"recovers", cond(metav1.ConditionFalse, v1alpha1.ReasonVaultUnavailable), cond(metav1.ConditionTrue, v1alpha1.ReasonPublished), false},
	}
	for _, tt := range tests {
		if _, _, got := Warning(tt.prev, tt.next); got != tt.want {
			t.Errorf("%s: Warning = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestDescribeNamesKeysNeverBytes(t *testing.T) {
	ring := publishedAt0()
	plan := keyring.Plan{RotateAt: ring.Keys[0].ActiveFrom, Expired: []string{"0badc0de"}}
	got := Describe(ring, plan, s0)
	for _, want := range []string{ring.Keys[1].ID + " active", ring.Keys[0].ID + " staged", "rotate-now: " + ring.Keys[0].ID + " activates", "destroyed 0badc0de"} {
		if !strings.Contains(got, want) {
			t.Errorf("Describe = %q, missing %q", got, want)
		}
	}
	for _, k := range ring.Keys {
		if strings.Contains(got, fmt.Sprintf("%x", k.Secret[:4])) {
			t.Errorf("Describe shows key bytes: %q", got)
		}
	}
}

func TestBuildRecordsRevocationsAndConfirmation(t *testing.T) {
	ring := publishedAt0()
	var prev v1alpha1.TicketKeyRingStatus
	at := func(i int) string { return s0.Add(time.Duration(i) * time.Minute).Format(time.RFC3339) }
	for i := range MaxRevocations + 2 {
		prev = Build(prev, Pass{Now: s0, Ring: ring, Snapshot: "web-e1", Targets: 1,
			RevokeRequest: at(i), Revocation: &v1alpha1.Revocation{RequestedAt: at(i), Epoch: int64(i)}})
	}
	if len(prev.Revocations) != MaxRevocations || prev.Revocations[0].RequestedAt != at(MaxRevocations+1) || prev.LastRevokeRequestedAt != at(MaxRevocations+1) {
		t.Errorf("revocations %d, newest %+v, last %q", len(prev.Revocations), prev.Revocations[0], prev.LastRevokeRequestedAt)
	}

	conf := &v1alpha1.ConfirmationStatus{StagedKey: ring.Keys[0].ID, Pods: 2, Holding: 1,
		Missing: []v1alpha1.PodReport{{Namespace: "shop", Name: "web-b", Node: "n2", Reason: "holds epoch 1"}}}
	waiting := Build(prev, Pass{Now: s0, Ring: ring, Snapshot: "web-e1", Targets: 1, Confirmation: conf, Overdue: s0})
	c := meta.FindStatusCondition(waiting.Conditions, v1alpha1.ConditionConfirmationOverdue)
	if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "shop/web-b (node n2: holds epoch 1)") {
		t.Errorf("ConfirmationOverdue %+v", c)
	}
	if msg, ok := ConfirmationWarning(prev.Conditions, waiting.Conditions); !ok || msg != c.Message {
		t.Error("no Warning when a staged key starts waiting past its timeout")
	}
	if _, ok := ConfirmationWarning(waiting.Conditions, waiting.Conditions); ok {
		t.Error("a Warning for every reconcile while it waits")
	}
	off := Build(waiting, Pass{Now: s0, Ring: ring, Snapshot: "web-e1", Targets: 1})
	if meta.FindStatusCondition(off.Conditions, v1alpha1.ConditionConfirmationOverdue) != nil || off.Confirmation != nil {
		t.Error("confirmation turned off leaves its condition or status")
	}
}

// An operator before request values were bounded wrote whatever a tenant
// set into status; the first Build after an upgrade drops it.
func TestBuildBoundsWhatAnEarlierStatusCarried(t *testing.T) {
	huge := strings.Repeat("9", 200*1024)
	prev := v1alpha1.TicketKeyRingStatus{LastRotateRequestedAt: huge, LastRevokeRequestedAt: "2026-12-02T10:00:00Z",
		Revocations: []v1alpha1.Revocation{{RequestedAt: huge, RequestedBy: "evil\x1b[2J" + huge}, {RequestedAt: "2026-12-02T10:00:00Z", RequestedBy: "kubectl"}}}
	got := Build(prev, Pass{Now: s0, Ring: publishedAt0(), Snapshot: "web-e1", Targets: 1})
	if got.LastRotateRequestedAt != "" || got.LastRevokeRequestedAt != "2026-12-02T10:00:00Z" {
		t.Errorf("requests carried: rotate %.20q, revoke %q", got.LastRotateRequestedAt, got.LastRevokeRequestedAt)
	}
	if len(got.Revocations) != 2 || got.Revocations[0].RequestedAt != "" || len(got.Revocations[0].RequestedBy) > 140 ||
		strings.ContainsRune(got.Revocations[0].RequestedBy, 0x1b) || got.Revocations[1].RequestedAt != prev.Revocations[1].RequestedAt || got.Revocations[1].RequestedBy != "kubectl" {
		t.Errorf("revocations carried: %.200v", got.Revocations)
	}
	if len(prev.LastRotateRequestedAt) != len(huge) {
		t.Error("Build changed the status it was given")
	}
}

func TestRetentionLimited(t *testing.T) {
	ring := publishedAt0()
	all := []v1alpha1.KeyFormat{"go", "nginx", "haproxy", "envoy"}
	tests := []struct {
		name     string
		formats  []v1alpha1.KeyFormat
		retained int32
		status   metav1.ConditionStatus
		reason   string
		message  string // a substring
	}{
		{"go alone keeps every key", []v1alpha1.KeyFormat{"go"}, 16, metav1.ConditionFalse, v1alpha1.ReasonFormatsKeepRetainedKeys, "keeps the 16 retained"},
		{"no format listed", nil, 3, metav1.ConditionFalse, v1alpha1.ReasonFormatsKeepRetainedKeys, ""},
		{"haproxy with one retained key holds it", all, 1, metav1.ConditionFalse, v1alpha1.ReasonFormatsKeepRetainedKeys, ""},
		{"haproxy with three retained keys keeps one", all, 3, metav1.ConditionTrue, v1alpha1.ReasonFormatKeepsFewerKeys, "haproxy keeps 1 decrypt-only key(s) of the 3 retained"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Build(v1alpha1.TicketKeyRingStatus{}, Pass{Now: s0, Generation: 2, Ring: ring, Snapshot: "web-e1", Targets: 1, Formats: tt.formats, RetainedKeys: tt.retained})
			c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionRetentionLimited)
			if c == nil || c.Status != tt.status || c.Reason != tt.reason || !strings.Contains(c.Message, tt.message) || c.ObservedGeneration != 2 {
				t.Fatalf("RetentionLimited = %+v, want %s %s %q", c, tt.status, tt.reason, tt.message)
			}
			if r := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionReady); r.Status != metav1.ConditionTrue {
				t.Errorf("Ready = %+v: a format's limit does not make the ring unready", r)
			}
		})
	}
}

func TestRetentionWarning(t *testing.T) {
	cond := func(s metav1.ConditionStatus, msg string) []metav1.Condition {
		return []metav1.Condition{{Type: v1alpha1.ConditionRetentionLimited, Status: s, Reason: "r", Message: msg}}
	}
	tests := []struct {
		name       string
		prev, next []metav1.Condition
		want       bool
	}{
		{"first status, not limited", nil, cond(metav1.ConditionFalse, "m"), false},
		{"first status, limited", nil, cond(metav1.ConditionTrue, "m"), true},
		{"turns limited", cond(metav1.ConditionFalse, "m"), cond(metav1.ConditionTrue, "m"), true},
		{"stays limited alike: no event", cond(metav1.ConditionTrue, "m"), cond(metav1.ConditionTrue, "m"), false},
		{"stays limited with another message", cond(metav1.ConditionTrue, "of 3"), cond(metav1.ConditionTrue, "of 5"), true},
		{"no longer limited", cond(metav1.ConditionTrue, "m"), cond(metav1.ConditionFalse, "m"), false},
	}
	for _, tt := range tests {
		if _, _, got := RetentionWarning(tt.prev, tt.next); got != tt.want {
			t.Errorf("%s: RetentionWarning = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// A held key that activated unconfirmed is reported once, names the voters
// that lacked it, and stays reported until the next staged key falls due.
func TestBuildUnconfirmedActivation(t *testing.T) {
	ring := publishedAt0()
	report := &v1alpha1.ConfirmationStatus{StagedKey: "s1", Pods: 25, Holding: 3, CheckedAt: metav1.NewTime(s0.Add(-time.Minute))}
	for i := range 20 {
		report.Missing = append(report.Missing, v1alpha1.PodReport{Namespace: "tenant", Name: fmt.Sprintf("silent-%02d", i), Node: "n1", Reason: "holds epoch 1, without key s1"})
	}
	u := &Unconfirmed{Key: "s1", ActiveFrom: s0, Due: s0.Add(-30 * time.Minute), Timeout: 10 * time.Minute, Ceiling: 30 * time.Minute, Report: report}
	nextDue := metav1.NewTime(s0.Add(time.Hour))
	waiting := &v1alpha1.ConfirmationStatus{StagedKey: "s2", Due: &nextDue, Pods: 25}

	var prev v1alpha1.TicketKeyRingStatus
	forced := Build(prev, Pass{Now: s0, Ring: ring, Targets: 1, Confirm: true, Unconfirmed: u})
	c := meta.FindStatusCondition(forced.Conditions, v1alpha1.ConditionConfirmationOverdue)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonActivatedUnconfirmed {
		t.Fatalf("ConfirmationOverdue %+v", c)
	}
	for _, want := range []string{"Key s1 activated by the clock at 2026-11-30T12:00:00Z", "maxDelay 30m0s past its due time 2026-11-30T11:30:00Z",
		"3 of 25 voter(s) held it", "tenant/silent-00 (node n1: holds epoch 1, without key s1)", "tenant/silent-04", "and 17 more"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("message %q lacks %q", c.Message, want)
		}
	}
	if msg, ok := UnconfirmedWarning(prev.Conditions, forced.Conditions); !ok || msg != c.Message {
		t.Error("no Warning for a key activated unconfirmed")
	}
	if _, ok := UnconfirmedWarning(forced.Conditions, forced.Conditions); ok {
		t.Error("a second Warning for the same activation")
	}

	kept := Build(forced, Pass{Now: s0.Add(time.Minute), Ring: ring, Targets: 1, Confirm: true, Confirmation: waiting})
	if k := meta.FindStatusCondition(kept.Conditions, v1alpha1.ConditionConfirmationOverdue); k == nil || k.Message != c.Message {
		t.Errorf("before the next key falls due, the record is gone: %+v", k)
	}
	kept = Build(forced, Pass{Now: s0.Add(time.Minute), Ring: ring, Targets: 1, Confirm: true})
	if k := meta.FindStatusCondition(kept.Conditions, v1alpha1.ConditionConfirmationOverdue); k == nil || k.Message != c.Message {
		t.Errorf("with no report of the next key yet, the record is gone: %+v", k)
	}
	due := Build(forced, Pass{Now: nextDue.Time, Ring: ring, Targets: 1, Confirm: true, Confirmation: waiting})
	if d := meta.FindStatusCondition(due.Conditions, v1alpha1.ConditionConfirmationOverdue); d == nil || d.Reason != v1alpha1.ReasonOnSchedule {
		t.Errorf("once the next key falls due: %+v", d)
	}
	off := Build(forced, Pass{Now: s0.Add(time.Minute), Ring: ring, Targets: 1})
	if meta.FindStatusCondition(off.Conditions, v1alpha1.ConditionConfirmationOverdue) != nil {
		t.Error("confirmation turned off leaves the record")
	}

	u.Promote, u.Report = true, nil
	promoted := Build(prev, Pass{Now: s0, Ring: ring, Targets: 1, Confirm: true, Unconfirmed: u})
	msg := meta.FindStatusCondition(promoted.Conditions, v1alpha1.ConditionConfirmationOverdue).Message
	if !strings.Contains(msg, "its timeout, 10m0s past its due time") || !strings.Contains(msg, "no report of it") {
		t.Errorf("under Promote, without a report: %q", msg)
	}
}

// warned is the note of the Warning event of condition typ and action the
// change of conditions from prev to next calls for, if any.
func warned(prev, next []metav1.Condition, typ, action string) (reason, note string, ok bool) {
	for _, e := range Warnings(prev, next) {
		if e.Condition == typ && e.Action == action {
			return e.Reason, e.Note, true
		}
	}
	return "", "", false
}

// The old vocabulary of the warnings, on the table.
func Warning(prev, next []metav1.Condition) (string, string, bool) {
	return warned(prev, next, v1alpha1.ConditionReady, "Reconcile")
}

func ConfirmationWarning(prev, next []metav1.Condition) (string, bool) {
	_, n, ok := warned(prev, next, v1alpha1.ConditionConfirmationOverdue, "Confirm")
	return n, ok
}

func UnconfirmedWarning(prev, next []metav1.Condition) (string, bool) {
	_, n, ok := warned(prev, next, v1alpha1.ConditionConfirmationOverdue, "Activate")
	return n, ok
}

func RetentionWarning(prev, next []metav1.Condition) (string, string, bool) {
	return warned(prev, next, v1alpha1.ConditionRetentionLimited, "Reconcile")
}
