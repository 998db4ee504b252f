// Package unmanagedkeys is the operator's audit of the session-ticket keys
// no ring manages (internal/ticketkeys), for its metrics: every interval,
// on the leader, it lists the ConfigMaps, Secrets and Envoy configurations
// of the cluster from the API server, a page at a time, keeps of each
// object only its findings, and exports how many keys each kind holds in
// each namespace, and the oldest last change among them.
//
// It lists rather than watches: no informer, no cache, so that what the
// operator holds grows with the number of findings, never with the objects
// or their data (DESIGN bound 5), and no Secret or ConfigMap stays in its
// memory past the page that brought it. The price is a full list every
// interval (ten minutes by default): the gauges are as fresh as that.
package unmanagedkeys

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ringmaster-io/ringmaster/internal/ticketkeys"
	"github.com/ringmaster-io/ringmaster/internal/ticketkeys/read"
)

// The audit lists these; nothing else of them.
//
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=list
// +kubebuilder:rbac:groups="",resources=secrets,verbs=list
// +kubebuilder:rbac:groups=networking.istio.io,resources=envoyfilters,verbs=list
// +kubebuilder:rbac:groups=gateway.envoyproxy.io,resources=envoypatchpolicies,verbs=list
// +kubebuilder:rbac:groups=cilium.io,resources=ciliumenvoyconfigs;ciliumclusterwideenvoyconfigs,verbs=list

// DefaultInterval is how often the audit lists the cluster.
const DefaultInterval = 10 * time.Minute

// Auditor lists the cluster every Interval and exports its findings. It
// runs on the leader only.
type Auditor struct {
	// Reader reads from the API server (the manager's API reader: no
	// cache), Mapper answers which kinds the cluster serves.
	Reader   client.Reader
	Mapper   meta.RESTMapper
	Clock    clock.PassiveClock
	Interval time.Duration

	metrics *metrics
}

// metrics are the auditor's gauges, set whole after each round.
//
//	ringmaster_unmanaged_ticket_keys{kind,namespace}
//	  session-ticket keys no ring manages, by the kind of object holding
//	  them and its namespace ("" for a cluster-scoped one).
//	ringmaster_unmanaged_ticket_keys_last_changed_timestamp_seconds{kind,namespace}
//	  the earliest last change (managedFields) among them, in seconds since
//	  the epoch: the oldest of them is at least as old as that.
//	ringmaster_unmanaged_ticket_keys_audit_timestamp_seconds
//	  when the last round that read everything it may read ended.
type metrics struct {
	mu      sync.Mutex
	keys    map[[2]string]int
	changed map[[2]string]time.Time
	at      time.Time

	keysDesc, changedDesc, atDesc *prometheus.Desc
}

func newMetrics() *metrics {
	l := []string{"kind", "namespace"}
	return &metrics{
		keysDesc: prometheus.NewDesc("ringmaster_unmanaged_ticket_keys",
			"Session-ticket keys no ring manages, by the kind of object holding them and its namespace.", l, nil),
		changedDesc: prometheus.NewDesc("ringmaster_unmanaged_ticket_keys_last_changed_timestamp_seconds",
			"Earliest last change (from managedFields) among the unmanaged session-ticket keys of a kind in a namespace, in seconds since the epoch.", l, nil),
		atDesc: prometheus.NewDesc("ringmaster_unmanaged_ticket_keys_audit_timestamp_seconds",
			"When the last audit of unmanaged session-ticket keys ended, in seconds since the epoch.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.keysDesc
	ch <- m.changedDesc
	ch <- m.atDesc
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.at.IsZero() {
		return
	}
	for k, n := range m.keys {
		ch <- prometheus.MustNewConstMetric(m.keysDesc, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
	for k, t := range m.changed {
		ch <- prometheus.MustNewConstMetric(m.changedDesc, prometheus.GaugeValue, float64(t.Unix()), k[0], k[1])
	}
	ch <- prometheus.MustNewConstMetric(m.atDesc, prometheus.GaugeValue, float64(m.at.Unix()))
}

func (m *metrics) set(fs []ticketkeys.Finding, at time.Time) {
	keys, changed := map[[2]string]int{}, map[[2]string]time.Time{}
	for _, f := range fs {
		k := [2]string{f.Kind, f.Namespace}
		keys[k] += f.Keys
		if f.SinceFrom != ticketkeys.SinceManagedFields {
			continue
		}
		if t, ok := changed[k]; !ok || f.Since.Time.Before(t) {
			changed[k] = f.Since.Time
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.keys, m.changed, m.at = keys, changed, at
}

// Register adds the auditor's metrics to reg.
func (a *Auditor) Register(reg prometheus.Registerer) error {
	a.metrics = newMetrics()
	return reg.Register(a.metrics)
}

// NeedLeaderElection: one replica lists the cluster.
func (a *Auditor) NeedLeaderElection() bool { return true }

// Start audits at once, then every Interval, until ctx ends.
func (a *Auditor) Start(ctx context.Context) error {
	if a.metrics == nil {
		a.metrics = newMetrics()
	}
	interval := a.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	logger := log.FromContext(ctx).WithName("unmanaged-ticket-keys")
	var refusedBefore string
	for {
		fs, refused, err := a.Round(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			logger.Error(err, "Auditing unmanaged ticket keys failed; the metrics keep the last round's")
		default:
			a.metrics.set(fs, a.Clock.Now())
			if refused != refusedBefore && refused != "" {
				logger.Info("Could not list some kinds for unmanaged ticket keys (the chart grants them with unmanagedTicketKeys.enabled)", "refused", refused)
			}
			refusedBefore = refused
			logger.V(1).Info("Audited unmanaged ticket keys", "findings", len(fs))
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// Round lists the cluster once, and returns the findings and the kinds it
// was refused (a comma-separated list, for the log).
func (a *Auditor) Round(ctx context.Context) ([]ticketkeys.Finding, string, error) {
	got, err := read.All(ctx, a.Reader, a.Mapper, "")
	if err != nil {
		return nil, "", err
	}
	var refused []string
	for _, s := range got.Sources {
		if s.Outcome == read.Refused {
			refused = append(refused, s.Resource)
		}
	}
	return ticketkeys.Resolve(got.Summaries).Findings, strings.Join(refused, ","), nil
}
