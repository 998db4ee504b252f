package mint

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/textlimit"
)

// The key source's Minting condition holds the whole error of its last
// mint, which its rings show only as a reason and the key source's name.
var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func TestKeySourceMinting(t *testing.T) {
	detail := errors.New("read random bytes from sys/tools/random: Put \"https://vault.internal:8200/v1/sys/tools/random/32\": dial tcp: connection refused")
	cases := []struct {
		name       string
		last       *LastMint
		wantStatus metav1.ConditionStatus
		wantReason string
		wantMsg    string
	}{
		{name: "no mint yet", last: nil},
		{name: "a mint succeeded", last: &LastMint{At: t0}, wantStatus: metav1.ConditionTrue, wantReason: v1alpha1.ReasonMinted,
			wantMsg: "The last mint, at 2026-11-30T12:00:00Z, succeeded"},
		{name: "a mint failed", last: &LastMint{At: t0, Reason: v1alpha1.ReasonVaultUnavailable, Err: detail}, wantStatus: metav1.ConditionFalse,
			wantReason: v1alpha1.ReasonVaultUnavailable, wantMsg: "The last mint, at 2026-11-30T12:00:00Z, failed: " + detail.Error()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := KeySourceStatus(v1alpha1.ClusterKeySourceStatus{}, 3, "https://vault.internal:8200", "", nil, tc.last, t0.Add(time.Minute))
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

// Whatever a key source's conditions quote (a Vault error of any size),
// their messages stay within the 32 KiB the API takes, cut at a rune.
func TestKeySourceMessagesFitTheAPI(t *testing.T) {
	huge := fmt.Errorf("vault answered HTTP 500: %s", strings.Repeat("é", 40*1024))
	st, _ := KeySourceStatus(v1alpha1.ClusterKeySourceStatus{}, 1, "https://vault.example:8200", v1alpha1.ReasonVaultUnavailable, huge,
		&LastMint{At: t0, Reason: v1alpha1.ReasonVaultUnavailable, Err: huge}, t0)
	for _, c := range st.Conditions {
		if len(c.Message) > textlimit.MessageLimit || !utf8.ValidString(c.Message) || !strings.Contains(c.Message, "bytes cut]") {
			t.Errorf("%s: %d bytes, valid UTF-8 %v", c.Type, len(c.Message), utf8.ValidString(c.Message))
		}
	}
}

func TestKeySourceStatus(t *testing.T) {
	ok, changed := KeySourceStatus(v1alpha1.ClusterKeySourceStatus{}, 1, "https://vault:8200", "", nil, nil, t0.Add(500*time.Millisecond))
	c := meta.FindStatusCondition(ok.Conditions, v1alpha1.ConditionReady)
	if !changed || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonLoggedIn || !strings.Contains(c.Message, "https://vault:8200") || !ok.LastCheckTime.Time.Equal(t0) {
		t.Errorf("first check: %+v changed %v, checked %v", c, changed, ok.LastCheckTime)
	}
	if _, changed := KeySourceStatus(ok, 1, "https://vault:8200", "", nil, nil, t0.Add(5*time.Minute)); changed {
		t.Error("a second good check is a transition")
	}
	bad, changed := KeySourceStatus(ok, 2, "https://vault:8200", v1alpha1.ReasonVaultPermissionDenied, fmt.Errorf("vault refused the login"), nil, t0)
	c = meta.FindStatusCondition(bad.Conditions, v1alpha1.ConditionReady)
	if !changed || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonVaultPermissionDenied || c.Message != "vault refused the login" || c.ObservedGeneration != 2 {
		t.Errorf("failed check: %+v changed %v", c, changed)
	}
}
