package ech_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/echring"
	"github.com/ringmaster-io/ringmaster/internal/ringplan"
	"github.com/ringmaster-io/ringmaster/internal/ringplan/ech"
)

func echCfg(t *testing.T, id uint8, st echring.State, at time.Time) echring.Config {
	t.Helper()
	c, err := echring.NewConfig(id, bytes.Repeat([]byte{id}, echring.SeedSize), echring.Params{PublicName: "public.example.test", KEM: 0x0020})
	if err != nil {
		t.Fatal(err)
	}
	c.State, c.CreatedAt, c.ExpiresAt = st, at, at.Add(3*time.Hour)
	if st != echring.Staged {
		c.PublishedAt = at.Add(5 * time.Minute)
	}
	return c
}

func TestBuildECH(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	policy := echring.Policy{RotationInterval: time.Hour, DeliveryDelay: 5 * time.Minute, TTL: 5 * time.Minute, MaxDelay: 30 * time.Minute}
	pub := echCfg(t, 1, echring.Published, now.Add(-time.Hour))
	stg := echCfg(t, 2, echring.Staged, now.Add(-10*time.Minute))
	ring := echring.Ring{Ring: "shop/web", Epoch: 4, Configs: []echring.Config{stg, pub}}
	seen := &v1alpha1.ConfirmationStatus{StagedKey: "2", Pods: 2, Holding: 1, Missing: []v1alpha1.PodReport{{Name: "web-b", Reason: "NotHeld"}}}
	prev := v1alpha1.ECHKeyRingStatus{Epoch: 3, ECHConfigList: "kept", Conditions: []metav1.Condition{{Type: v1alpha1.ConditionConfirmationOverdue,
		Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonPublishedUnconfirmed, Message: "config 1 was published unconfirmed"}}}
	base := ech.Pass{Now: now, Generation: 5, Policy: policy, Ring: ring, Snapshot: "web-ech-e4",
		Want: []echring.Config{pub}, DNSHolds: true, DNSAt: now, Seen: seen}
	for _, tc := range []struct {
		name    string
		edit    func(*ech.Pass)
		ready   string
		overdue string
		check   func(*testing.T, v1alpha1.ECHKeyRingStatus)
	}{
		{name: "published, the next config staged: Ready, and how it got there stays said", edit: func(*ech.Pass) {},
			ready: v1alpha1.ReasonPublished, overdue: v1alpha1.ReasonPublishedUnconfirmed,
			check: func(t *testing.T, s v1alpha1.ECHKeyRingStatus) {
				if s.Epoch != 4 || s.Snapshot != "web-ech-e4" || *s.PublishedConfig != 1 || len(s.Configs) != 2 || s.DNSVerifiedAt == nil || s.Confirmation != seen {
					t.Errorf("status %+v", s)
				}
				if s.ECHConfigList == "kept" || s.ECHConfigList == "" {
					t.Errorf("echConfigList %q, want the list wanted now", s.ECHConfigList)
				}
			}},
		{name: "halted: Ready False, the rest stands", edit: func(o *ech.Pass) {
			o.Halted, o.Problem = true, &ringplan.Problem{Reason: v1alpha1.ReasonInvalidSnapshot, Message: "bad"}
		}, ready: v1alpha1.ReasonInvalidSnapshot, overdue: v1alpha1.ReasonPublishedUnconfirmed,
			check: func(t *testing.T, s v1alpha1.ECHKeyRingStatus) {
				if s.Epoch != 3 || s.ECHConfigList != "kept" {
					t.Errorf("a halted pass changed the status: epoch %d, list %q", s.Epoch, s.ECHConfigList)
				}
			}},
		{name: "a problem keeps the list last asked for", edit: func(o *ech.Pass) {
			o.Problem = &ringplan.Problem{Reason: v1alpha1.ReasonDNSNameClaimed, Message: "owned by another ECHKeyRing"}
		}, ready: v1alpha1.ReasonDNSNameClaimed, overdue: v1alpha1.ReasonPublishedUnconfirmed,
			check: func(t *testing.T, s v1alpha1.ECHKeyRingStatus) {
				if s.ECHConfigList != "kept" {
					t.Errorf("echConfigList %q, want the last kept while blocked", s.ECHConfigList)
				}
			}},
		{name: "DNS failing: Ready False in words a tenant may read", edit: func(o *ech.Pass) {
			o.DNSHolds, o.DNSProblem = false, "the update was answered REFUSED"
		}, ready: v1alpha1.ReasonDNSUnavailable, overdue: v1alpha1.ReasonPublishedUnconfirmed,
			check: func(t *testing.T, s v1alpha1.ECHKeyRingStatus) {
				c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionReady)
				if !strings.Contains(c.Message, "REFUSED") || !strings.Contains(c.Message, "no config is destroyed before its time") {
					t.Errorf("message %q", c.Message)
				}
			}},
		{name: "nothing published yet: awaiting DNS", edit: func(o *ech.Pass) {
			o.Ring.Configs = []echring.Config{stg}
			o.Want = nil
		}, ready: v1alpha1.ReasonAwaitingDNS, overdue: v1alpha1.ReasonPublishedUnconfirmed},
		{name: "overdue past the timeout: True, naming the pods", edit: func(o *ech.Pass) { o.Overdue = true },
			ready: v1alpha1.ReasonPublished, overdue: v1alpha1.ReasonAwaitingPods,
			check: func(t *testing.T, s v1alpha1.ECHKeyRingStatus) {
				c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionConfirmationOverdue)
				if c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "web-b") {
					t.Errorf("ConfirmationOverdue %+v", c)
				}
			}},
		{name: "a ring selecting more pods than are asked says so", edit: func(o *ech.Pass) {
			o.Overdue = true
			o.Seen = &v1alpha1.ConfirmationStatus{StagedKey: "2", Pods: 1001, Note: "the ring selects more than 1000 pods"}
		}, ready: v1alpha1.ReasonPublished, overdue: v1alpha1.ReasonAwaitingPods,
			check: func(t *testing.T, s v1alpha1.ECHKeyRingStatus) {
				if c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionConfirmationOverdue); !strings.Contains(c.Message, "more than 1000 pods") {
					t.Errorf("ConfirmationOverdue %q does not carry the note", c.Message)
				}
			}},
		{name: "the record written is reported", edit: func(o *ech.Pass) {
			o.Record = &v1alpha1.ECHDNSRecord{Zone: "z", Name: "www.example.test", ECHConfigList: "AAA="}
		}, ready: v1alpha1.ReasonPublished, overdue: v1alpha1.ReasonPublishedUnconfirmed,
			check: func(t *testing.T, s v1alpha1.ECHKeyRingStatus) {
				if s.DNSRecord == nil || s.DNSRecord.Name != "www.example.test" {
					t.Errorf("dnsRecord %+v", s.DNSRecord)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := base
			tc.edit(&o)
			s := ech.Build(prev, o)
			if c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionReady); c == nil || c.Reason != tc.ready || c.ObservedGeneration != 5 {
				t.Errorf("Ready %+v, want %s at generation 5", c, tc.ready)
			}
			if c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionConfirmationOverdue); c == nil || c.Reason != tc.overdue {
				t.Errorf("ConfirmationOverdue %+v, want %s", c, tc.overdue)
			}
			if tc.check != nil {
				tc.check(t, s)
			}
		})
	}
}

func TestWarnings(t *testing.T) {
	cond := func(typ string, st metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: st, Reason: reason, Message: reason}
	}
	for _, tc := range []struct {
		name       string
		prev, next []metav1.Condition
		want       string
	}{
		{"Ready turning False", []metav1.Condition{cond("Ready", "True", "Published")}, []metav1.Condition{cond("Ready", "False", "DNSNameClaimed")}, "DNSNameClaimed"},
		{"still False for the same reason", []metav1.Condition{cond("Ready", "False", "DNSNameClaimed")}, []metav1.Condition{cond("Ready", "False", "DNSNameClaimed")}, ""},
		{"the first config on its way is no fault", nil, []metav1.Condition{cond("Ready", "False", "AwaitingDNS")}, ""},
		{"ConfirmationOverdue turning True", nil, []metav1.Condition{cond("ConfirmationOverdue", "True", "AwaitingPods")}, "AwaitingPods"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reasons []string
			for _, e := range ech.Warnings(tc.prev, tc.next) {
				reasons = append(reasons, e.Reason)
			}
			if strings.Join(reasons, ",") != tc.want {
				t.Fatalf("warnings %v, want %q", reasons, tc.want)
			}
		})
	}
}

// The conditions a pass changes are dated by the pass's clock, the
// operator's injected clock, not the wall clock (which
// meta.SetStatusCondition reads): a fake clock far from now dates them,
// and a condition that keeps its status keeps its date.
func TestConditionsDatedByThePassClock(t *testing.T) {
	at := time.Date(2031, 1, 2, 3, 4, 5, 600, time.UTC)
	problem := &ringplan.Problem{Reason: v1alpha1.ReasonDNSZoneNotFound, Message: "no zone"}
	st := ech.Build(v1alpha1.ECHKeyRingStatus{}, ech.Pass{Now: at, Generation: 1, Problem: problem})
	for _, c := range st.Conditions {
		if !c.LastTransitionTime.Time.Equal(at.Truncate(time.Second)) {
			t.Errorf("%s dated %s, want the pass's clock %s", c.Type, c.LastTransitionTime.UTC(), at.Truncate(time.Second))
		}
	}
	later := ech.Build(st, ech.Pass{Now: at.Add(time.Hour), Generation: 1, Problem: problem})
	if c := meta.FindStatusCondition(later.Conditions, v1alpha1.ConditionReady); !c.LastTransitionTime.Time.Equal(at.Truncate(time.Second)) {
		t.Errorf("Ready, still False, dated %s, want %s", c.LastTransitionTime.UTC(), at.Truncate(time.Second))
	}
}
