package ringstatus

import (
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

// The key source's Minting condition holds the whole error of its last
// mint, which its rings show only as a reason and the key source's name.
func TestKeySourceMinting(t *testing.T) {
	detail := errors.New("read random bytes from sys/tools/random: Put \"https://vault.internal:8200/v1/sys/tools/random/32\": dial tcp: connection refused")
	cases := []struct {
		name       string
		last       *Mint
		wantStatus metav1.ConditionStatus
		wantReason string
		wantMsg    string
	}{
		{name: "no mint yet", last: nil},
		{name: "a mint succeeded", last: &Mint{At: t0}, wantStatus: metav1.ConditionTrue, wantReason: v1alpha1.ReasonMinted,
			wantMsg: "The last mint, at 2026-11-30T12:00:00Z, succeeded"},
		{name: "a mint failed", last: &Mint{At: t0, Reason: v1alpha1.ReasonVaultUnavailable, Err: detail}, wantStatus: metav1.ConditionFalse,
			wantReason: v1alpha1.ReasonVaultUnavailable, wantMsg: "The last mint, at 2026-11-30T12:00:00Z, failed: " + detail.Error()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := KeySource(v1alpha1.ClusterKeySourceStatus{}, 3, "https://vault.internal:8200", "", nil, tc.last, t0.Add(time.Minute))
			c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionMinting)
			if tc.last == nil {
				if c != nil {
					t.Errorf("a Minting condition before any mint: %+v", c)
				}
				return
			}
			if c == nil || c.Status != tc.wantStatus || c.Reason != tc.wantReason || c.Message != tc.wantMsg || c.ObservedGeneration != 3 {
				t.Errorf("Minting = %+v, want %s %s %q", c, tc.wantStatus, tc.wantReason, tc.wantMsg)
			}
			if r := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionReady); r == nil || r.Status != metav1.ConditionTrue {
				t.Errorf("Ready = %+v: a mint's outcome is not the check's", r)
			}
		})
	}
}
