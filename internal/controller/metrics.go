package controller

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// rotationsTotal counts published epochs and failed attempts to publish one.
// Labels: result ("success" or "failure").
var rotationsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "ringmaster_ticketkeyring_rotations_total",
	Help: "Epochs published (result=success) and attempts that published nothing (result=failure).",
}, []string{"result"})

// unconfirmedActivationsTotal counts, per ring, the held staged keys that
// activated by the clock without every voter confirming them: at the
// ceiling (spec.confirmation.maxDelay) under Wait, at the timeout under
// Promote. Labels: namespace (empty for a ClusterTicketKeyRing), name.
var unconfirmedActivationsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "ringmaster_ticketkeyring_unconfirmed_activations_total",
	Help: "Held staged keys that activated by the clock without every voter confirming them (at the confirmation ceiling, or the timeout under Promote).",
}, []string{"namespace", "name"})

// unconfirmedPublicationsTotal counts, per ECHKeyRing, the staged configs
// published to DNS at their ceiling without every pod reporting them.
// Labels: namespace, name.
var unconfirmedPublicationsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "ringmaster_echkeyring_unconfirmed_publications_total",
	Help: "Staged ECH configs published to DNS at their confirmation ceiling without every selected pod reporting them.",
}, []string{"namespace", "name"})

// dnsUpdatesTotal counts the signed DNS updates the DNS worker sends, per
// zone. Labels: zone (a ClusterDNSZone), result ("written", "failed", or
// "rate_limited" when the zone's budget per minute was spent).
var dnsUpdatesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "ringmaster_dns_updates_total",
	Help: "Signed DNS updates of ECH records, by ClusterDNSZone and result (written, failed, or rate_limited by the zone's budget).",
}, []string{"zone", "result"})

// snapshotReadsTotal counts the reads of a ring's snapshots, by where they
// came from. Labels: source ("cache", when the cache holds every snapshot
// the operator knows of at the version it knows; "api", the ring's listed
// from the API server; "sweep", every snapshot of a kind of ring in a
// namespace listed from the API server, once per namespace after a start).
var snapshotReadsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "ringmaster_snapshot_reads_total",
	Help: "Reads of rings' snapshot Secrets: from the cache (shown current), from the API server, or a namespace's from the API server at once (sweep).",
}, []string{"source"})

// sharedWritesTotal counts writes of shared rings' entries in Vault.
// Labels: result ("won", or "lost" to another operator's check-and-set).
var sharedWritesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "ringmaster_shared_ring_writes_total",
	Help: "Writes of a shared ring's next version to Vault: won, or lost to another cluster's operator (which this one then adopts).",
}, []string{"result"})

// sharedPropagationSeconds observes how long after another cluster wrote a
// shared ring's version this cluster published it.
var sharedPropagationSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
	Name:    "ringmaster_shared_ring_propagation_seconds",
	Help:    "Seconds from a shared ring version's write in Vault by another cluster to its publication in this one.",
	Buckets: []float64{0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120},
})

// ringGauges exports, per ring, the newest epoch and the age of the key that
// encrypts now. The age is computed at scrape time from the active key's
// activeFrom, so it keeps growing between reconciles, as a key's age does.
//
//	ringmaster_ticketkeyring_epoch{namespace,name}
//	ringmaster_ticketkeyring_active_key_age_seconds{namespace,name}
//	ringmaster_ticketkeyring_rotation_overdue_seconds{namespace,name}
//	ringmaster_ticketkeyring_confirmation_overdue_seconds{namespace,name}
type ringGauges struct {
	clock       clock.PassiveClock
	epoch       *prometheus.Desc
	age         *prometheus.Desc
	overdue     *prometheus.Desc
	unconfirmed *prometheus.Desc

	mu    sync.Mutex
	rings map[types.NamespacedName]ringGauge
}

type ringGauge struct {
	// labels are the ring's label pairs, built once, when the ring is
	// first recorded, for every series of every scrape (gaugeSample).
	labels       []*dto.LabelPair
	epoch        int64
	activeFrom   time.Time
	overdueSince time.Time // zero: on schedule
	// unconfirmedSince is when the staged key's confirmation timeout passed
	// while it waits for its fleet; zero otherwise.
	unconfirmedSince time.Time
}

func newRingGauges(c clock.PassiveClock) *ringGauges {
	labels := []string{"namespace", "name"}
	return &ringGauges{
		clock: c,
		epoch: prometheus.NewDesc("ringmaster_ticketkeyring_epoch", "Newest published epoch of a TicketKeyRing.", labels, nil),
		age:   prometheus.NewDesc("ringmaster_ticketkeyring_active_key_age_seconds", "Seconds since the key that encrypts now became active.", labels, nil),
		overdue: prometheus.NewDesc("ringmaster_ticketkeyring_rotation_overdue_seconds",
			"Seconds since a rotation became due that could not be minted (0 when on schedule).", labels, nil),
		unconfirmed: prometheus.NewDesc("ringmaster_ticketkeyring_confirmation_overdue_seconds",
			"Seconds a staged key has waited for its fleet past its confirmation timeout (0 when none waits).", labels, nil),
		rings: map[types.NamespacedName]ringGauge{},
	}
}

func (g *ringGauges) set(ring types.NamespacedName, epoch int64, activeFrom, overdueSince, unconfirmedSince time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	labels := g.rings[ring].labels
	if labels == nil {
		labels = prometheus.MakeLabelPairs(g.epoch, []string{ring.Namespace, ring.Name})
	}
	g.rings[ring] = ringGauge{labels: labels, epoch: epoch, activeFrom: activeFrom, overdueSince: overdueSince, unconfirmedSince: unconfirmedSince}
}

func (g *ringGauges) forget(ring types.NamespacedName) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.rings, ring)
}

// Describe implements prometheus.Collector.
func (g *ringGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.epoch
	ch <- g.age
	ch <- g.overdue
	ch <- g.unconfirmed
}

// Collect implements prometheus.Collector. It copies the gauges under the
// lock and emits them after releasing it, so that a scrape (40,000 series
// at 10,000 rings) never holds up a reconcile recording its ring. It emits
// each family in the order the registry sorts it to, by the label values
// in their names' order (name, then namespace), which makes that sort a
// pass over sorted input.
func (g *ringGauges) Collect(ch chan<- prometheus.Metric) {
	now := g.clock.Now()
	g.mu.Lock()
	rings := make([]keyedGauge, 0, len(g.rings))
	for k, v := range g.rings {
		rings = append(rings, keyedGauge{k, v})
	}
	g.mu.Unlock()
	slices.SortFunc(rings, func(a, b keyedGauge) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.Namespace, b.Namespace))
	})
	emit := func(d *prometheus.Desc, value func(ringGauge) float64) {
		samples := make([]gaugeSample, len(rings))
		for i, r := range rings {
			s := &samples[i]
			s.desc, s.labels, s.value = d, r.labels, value(r.ringGauge)
			s.gauge.Value = &s.value
			ch <- s
		}
	}
	emit(g.epoch, func(v ringGauge) float64 { return float64(v.epoch) })
	emit(g.age, func(v ringGauge) float64 { return now.Sub(v.activeFrom).Seconds() })
	emit(g.overdue, func(v ringGauge) float64 { return secondsSince(now, v.overdueSince) })
	emit(g.unconfirmed, func(v ringGauge) float64 { return secondsSince(now, v.unconfirmedSince) })
}

// gaugeSample is one series of a ring's gauges in a scrape: the ring's
// label pairs, built once (ringGauge.labels), and a value. A const metric
// (prometheus.MustNewConstMetric) builds the pairs again for every series
// of every scrape: at 10,000 rings, 40,000 series and 35 MB a scrape, the
// largest part of what the operator allocated during a bulk. The registry
// only reads the pairs, as it does a const metric's.
type gaugeSample struct {
	desc   *prometheus.Desc
	labels []*dto.LabelPair
	value  float64
	gauge  dto.Gauge
}

// Desc implements prometheus.Metric.
func (s *gaugeSample) Desc() *prometheus.Desc { return s.desc }

// Write implements prometheus.Metric.
func (s *gaugeSample) Write(m *dto.Metric) error {
	m.Label, m.Gauge = s.labels, &s.gauge
	return nil
}

// keyedGauge is a ring's gauges with its name, as Collect emits them.
type keyedGauge struct {
	types.NamespacedName
	ringGauge
}

// secondsSince is now - t in seconds, or 0 for a zero t.
func secondsSince(now, t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return now.Sub(t).Seconds()
}
