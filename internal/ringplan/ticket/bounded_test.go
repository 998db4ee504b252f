package ticket

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/ringplan"
	"github.com/ringmaster-io/ringmaster/internal/textlimit"
)

// bound is the most a message listing names may hold: its own words, and
// textlimit.MaxListed names of at most textlimit.MaxItem bytes each. It
// does not grow with the names listed.
const bound = 600 + textlimit.MaxListed*(textlimit.MaxItem+2)

var b0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// longPods are n pods with names as long as the API allows (253), on
// nodes with names as long, each with a reason.
func longPods(n int) []v1alpha1.PodReport {
	out := make([]v1alpha1.PodReport, n)
	for i := range out {
		name := fmt.Sprintf("%s-%05d", strings.Repeat("p", 246), i)
		out[i] = v1alpha1.PodReport{Namespace: strings.Repeat("n", 63), Name: name, Node: strings.Repeat("k", 253), Reason: "holds epoch 1, without the staged key"}
	}
	return out
}

// The messages that name pods, namespaces or DNS names (a condition's,
// and the Warning event it calls for) list a bounded number and count the
// rest, whatever the fleet: here 1,000 pods whose names are as long as
// the API allows. The event recorder cuts any note past 1 KiB besides.
func TestNameListsAreBounded(t *testing.T) {
	const n = 1000
	ring := ringOf(t)
	report := &v1alpha1.ConfirmationStatus{StagedKey: ring.Keys[0].ID, Pods: n + 3, Holding: 3, Missing: longPods(n),
		CheckedAt: metav1.NewTime(b0.Add(-time.Minute)), Note: strings.Repeat("x", 256)}
	check := func(t *testing.T, what, msg string) {
		t.Helper()
		if len(msg) > bound || !utf8.ValidString(msg) {
			t.Errorf("%s: %d bytes (valid UTF-8 %v), over %d", what, len(msg), utf8.ValidString(msg), bound)
		}
		if !strings.Contains(msg, fmt.Sprintf("and %d more", n-textlimit.MaxListed)) {
			t.Errorf("%s does not count the pods it leaves out: %q", what, msg[max(0, len(msg)-80):])
		}
	}

	t.Run("ConfirmationOverdue and its Warning", func(t *testing.T) {
		var prev v1alpha1.TicketKeyRingStatus
		st := Build(prev, Pass{Now: b0, Ring: ring, Targets: 1, Confirm: true, Confirmation: report, Overdue: b0})
		c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionConfirmationOverdue)
		check(t, "ConfirmationOverdue", c.Message)
		msg, ok := ConfirmationWarning(prev.Conditions, st.Conditions)
		if !ok {
			t.Fatal("no Warning")
		}
		check(t, "the ConfirmationOverdue Warning", msg)
	})
	t.Run("ActivatedUnconfirmed and its Warning", func(t *testing.T) {
		u := &Unconfirmed{Key: ring.Keys[0].ID, ActiveFrom: b0, Due: b0.Add(-30 * time.Minute), Ceiling: 30 * time.Minute, Report: report}
		var prev v1alpha1.TicketKeyRingStatus
		st := Build(prev, Pass{Now: b0, Ring: ring, Targets: 1, Confirm: true, Unconfirmed: u})
		msg, ok := UnconfirmedWarning(prev.Conditions, st.Conditions)
		if !ok {
			t.Fatal("no Warning")
		}
		check(t, "ActivatedUnconfirmed", msg)
	})
	t.Run("failed targets", func(t *testing.T) {
		var failed []v1alpha1.TargetFailure
		for i := range n {
			failed = append(failed, v1alpha1.TargetFailure{Namespace: fmt.Sprintf("%s-%04d", strings.Repeat("t", 58), i), Reason: v1alpha1.ReasonPublishFailed, Message: "refused"})
		}
		st := Build(v1alpha1.TicketKeyRingStatus{}, Pass{Now: b0, Ring: ring, Targets: n + 1, Failed: failed})
		check(t, "DistributionFailed", meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady).Message)
		if len(st.FailedTargets) != MaxFailedTargets {
			t.Errorf("status.failedTargets holds %d, want %d", len(st.FailedTargets), MaxFailedTargets)
		}
	})
}

// Whatever a condition quotes (a Vault error of any size), its message
// stays within the 32 KiB the API takes, cut at a rune.
func TestConditionMessagesFitTheAPI(t *testing.T) {
	huge := fmt.Errorf("vault answered HTTP 500: %s", strings.Repeat("é", 40*1024))
	ring := ringOf(t)
	p := &ringplan.Problem{Reason: v1alpha1.ReasonVaultUnavailable, Message: huge.Error()}
	rs := Build(v1alpha1.TicketKeyRingStatus{}, Pass{Now: b0, Ring: ring, Current: ring, Targets: 1, Source: p})
	if c := meta.FindStatusCondition(rs.Conditions, v1alpha1.ConditionReady); len(c.Message) > textlimit.MessageLimit || !utf8.ValidString(c.Message) {
		t.Errorf("a ring's Ready: %d bytes", len(c.Message))
	}
}

// ringOf is a ring published at b0 with an active and a staged key.
func ringOf(t *testing.T) keyring.Ring {
	t.Helper()
	r, err := keyring.Next(b0, keyring.Policy{RotationInterval: time.Hour, RetainedKeys: 1, ActivationDelay: 3 * time.Minute},
		keyring.Ring{Name: "shop/web"}, keyring.Inputs{}).Fill([]keyring.Secret{{1}, {2}})
	if err != nil {
		t.Fatal(err)
	}
	r.Epoch = 1
	return r
}
