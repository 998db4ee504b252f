package ech_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/echring"
	"github.com/ringmaster-io/ringmaster/internal/ringplan"
	"github.com/ringmaster-io/ringmaster/internal/ringplan/ech"
	"github.com/ringmaster-io/ringmaster/internal/textlimit"
)

// The messages of an ECH ring that name pods list a bounded number and
// count the rest, whatever the fleet: here 1,000 pods whose names are as
// long as the API allows.
func TestNameListsAreBounded(t *testing.T) {
	const n = 1000
	b0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	missing := make([]v1alpha1.PodReport, n)
	for i := range missing {
		missing[i] = v1alpha1.PodReport{Namespace: strings.Repeat("n", 63), Name: fmt.Sprintf("%s-%05d", strings.Repeat("p", 246), i), Node: strings.Repeat("k", 253), Reason: "holds epoch 1, without the staged config"}
	}
	report := &v1alpha1.ConfirmationStatus{StagedKey: "2", Pods: n + 3, Holding: 3, Missing: missing,
		CheckedAt: metav1.NewTime(b0.Add(-time.Minute)), Note: strings.Repeat("x", 256)}
	bound := 600 + textlimit.MaxListed*(textlimit.MaxItem+2)
	check := func(t *testing.T, what, msg string) {
		t.Helper()
		if len(msg) > bound || !utf8.ValidString(msg) {
			t.Errorf("%s: %d bytes (valid UTF-8 %v), over %d", what, len(msg), utf8.ValidString(msg), bound)
		}
		if !strings.Contains(msg, fmt.Sprintf("and %d more", n-textlimit.MaxListed)) {
			t.Errorf("%s does not count the pods it leaves out: %q", what, msg[max(0, len(msg)-80):])
		}
	}
	check(t, "PublishedUnconfirmed", ech.PublishedUnconfirmed(1, report))
	stg := echCfg(t, 2, echring.Staged, b0.Add(-2*time.Hour))
	st := ech.Build(v1alpha1.ECHKeyRingStatus{}, ech.Pass{Now: b0, Ring: echring.Ring{Ring: "shop/web", Epoch: 2, Configs: []echring.Config{stg}},
		Policy: echring.Policy{RotationInterval: time.Hour, DeliveryDelay: 5 * time.Minute, TTL: 5 * time.Minute, MaxDelay: time.Hour},
		Seen:   report, Overdue: true})
	c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionConfirmationOverdue)
	check(t, "the ECH ring's ConfirmationOverdue", c.Message)
	warned := false
	for _, e := range ech.Warnings(nil, st.Conditions) {
		if e.Condition == v1alpha1.ConditionConfirmationOverdue {
			check(t, "its Warning", e.Note)
			warned = true
		}
	}
	if !warned {
		t.Error("no Warning of the overdue config")
	}
}

// Whatever a condition quotes, its message stays within the 32 KiB the API
// takes, cut at a rune.
func TestConditionMessagesFitTheAPI(t *testing.T) {
	huge := fmt.Errorf("vault answered HTTP 500: %s", strings.Repeat("é", 40*1024))
	p := &ringplan.Problem{Reason: v1alpha1.ReasonVaultUnavailable, Message: huge.Error()}
	es := ech.Build(v1alpha1.ECHKeyRingStatus{}, ech.Pass{Now: time.Now(), Problem: p, Halted: true})
	if c := meta.FindStatusCondition(es.Conditions, v1alpha1.ConditionReady); len(c.Message) > textlimit.MessageLimit || !utf8.ValidString(c.Message) {
		t.Errorf("an ECH ring's Ready: %d bytes", len(c.Message))
	}
}
