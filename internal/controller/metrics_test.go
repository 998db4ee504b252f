package controller

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

// A ring's gauges read its epoch and the ages of its active key, overdue
// rotation and unconfirmed staged key, at scrape time; a zero time reads 0.
func TestRingGaugesValues(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	g := newRingGauges(clocktesting.NewFakePassiveClock(now))
	g.set(types.NamespacedName{Namespace: "shop", Name: "web"}, 7, now.Add(-90*time.Second), time.Time{}, now.Add(-5*time.Second))
	g.set(types.NamespacedName{Name: "edge"}, 2, now.Add(-time.Hour), now.Add(-time.Minute), time.Time{})
	for _, tc := range []struct {
		family string
		want   string
	}{
		{"ringmaster_ticketkeyring_epoch", `ringmaster_ticketkeyring_epoch{name="edge",namespace=""} 2` + "\n" + `ringmaster_ticketkeyring_epoch{name="web",namespace="shop"} 7`},
		{"ringmaster_ticketkeyring_active_key_age_seconds", `ringmaster_ticketkeyring_active_key_age_seconds{name="edge",namespace=""} 3600` + "\n" + `ringmaster_ticketkeyring_active_key_age_seconds{name="web",namespace="shop"} 90`},
		{"ringmaster_ticketkeyring_rotation_overdue_seconds", `ringmaster_ticketkeyring_rotation_overdue_seconds{name="edge",namespace=""} 60` + "\n" + `ringmaster_ticketkeyring_rotation_overdue_seconds{name="web",namespace="shop"} 0`},
		{"ringmaster_ticketkeyring_confirmation_overdue_seconds", `ringmaster_ticketkeyring_confirmation_overdue_seconds{name="edge",namespace=""} 0` + "\n" + `ringmaster_ticketkeyring_confirmation_overdue_seconds{name="web",namespace="shop"} 5`},
	} {
		t.Run(tc.family, func(t *testing.T) {
			got, err := testutil.CollectAndFormat(g, expfmt.TypeTextPlain, tc.family)
			if err != nil {
				t.Fatal(err)
			}
			if samples := samplesOf(string(got)); samples != tc.want {
				t.Fatalf("scraped\n%s\nwant\n%s", samples, tc.want)
			}
		})
	}
}

// samplesOf is the sample lines of a text exposition, without its
// comments.
func samplesOf(text string) string {
	var samples []string
	for line := range strings.Lines(text) {
		if !strings.HasPrefix(line, "#") {
			samples = append(samples, strings.TrimSuffix(line, "\n"))
		}
	}
	return strings.Join(samples, "\n")
}

// A scrape holds no lock while it emits: a reconcile that records its ring
// while a scrape is under way does not wait for the scrape to end.
func TestRingGaugesCollectHoldsNoLock(t *testing.T) {
	g := newRingGauges(clocktesting.NewFakePassiveClock(time.Now()))
	for i := range 3 {
		g.set(types.NamespacedName{Namespace: "shop", Name: fmt.Sprint(i)}, 1, time.Now(), time.Time{}, time.Time{})
	}
	ch := make(chan prometheus.Metric) // unbuffered: Collect blocks on each send
	go func() { g.Collect(ch); close(ch) }()
	<-ch // the scrape is under way, and waits for its reader
	recorded := make(chan struct{})
	go func() {
		g.set(types.NamespacedName{Namespace: "shop", Name: "new"}, 1, time.Now(), time.Time{}, time.Time{})
		close(recorded)
	}()
	select {
	case <-recorded:
	case <-time.After(10 * time.Second):
		t.Fatal("recording a ring waited for a scrape under way")
	}
	for range ch {
	}
}

// BenchmarkRingGaugesScrape gathers and encodes the per-ring gauges of
// 10,000 rings, as a scrape of the operator's metrics does.
func BenchmarkRingGaugesScrape(b *testing.B) {
	g := newRingGauges(clocktesting.NewFakePassiveClock(time.Now()))
	for i := range 10000 {
		g.set(types.NamespacedName{Namespace: fmt.Sprintf("ns-%03d", i%100), Name: fmt.Sprintf("ring-%05d", i)}, 1, time.Now(), time.Time{}, time.Time{})
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(g)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := testutil.GatherAndCount(reg); err != nil {
			b.Fatal(err)
		}
	}
}
