package schedule

import (
	"testing"
	"time"
)

func TestAfter(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		at       time.Time
		min, max time.Duration
	}{
		{"nothing due", time.Time{}, 0, 0},
		{"an hour ahead: an hour and a second, and up to 1% more", now.Add(time.Hour), time.Hour + time.Second, (time.Hour + time.Second) * 101 / 100},
		{"already past: a second", now.Add(-time.Minute), time.Second, time.Second * 101 / 100},
	}
	for _, tt := range tests {
		for range 100 { // the jitter is random: stay within bounds every time
			if got := After(now, tt.at); got < tt.min || got > tt.max {
				t.Fatalf("%s: After = %v, want within [%v, %v]", tt.name, got, tt.min, tt.max)
			}
		}
	}
}
