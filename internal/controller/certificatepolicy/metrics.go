package certificatepolicy

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/certpolicy"
)

// cpolMetrics exports what the CertificatePolicy controller knows. The
// per-certificate gauges and the violation counts are read from the store
// when scraped, so a key's age keeps growing between evaluations.
//
//	ringmaster_certificate_not_after_timestamp_seconds{namespace,name}
//	  notAfter of every certificate the operator sees: each cert-manager
//	  Certificate, each kubernetes.io/tls Secret no Certificate manages, and
//	  each issued PodCertificateRequest it judges.
//	ringmaster_certificate_key_age_seconds{namespace,name}
//	  age of the key of each of them (see CertificateRules.MaxKeyAge).
//	ringmaster_certificatepolicy_violations{policy,rule}
//	  certificates a policy selects that break a rule, for every rule.
//	ringmaster_certificatepolicy_pod_certificates{policy,state}
//	  pod certificates (PodCertificateRequests) a policy selects, by state:
//	  pending, fresh, overdue for refresh, expired, failed, denied.
//	ringmaster_trust_bundle_not_after_timestamp_seconds{name}
//	  notAfter of the CA that expires first in each ClusterTrustBundle.
//	ringmaster_certificatepolicy_renewals_triggered_total{policy}
//	  re-issuances Enforce triggered.
//	ringmaster_certificatepolicy_evaluations_total
//	  evaluations of one certificate against one policy.
//	ringmaster_certificatepolicy_status_writes_total
//	  CertificatePolicy status writes.
type cpolMetrics struct {
	store *certpolicy.Store
	clock clock.PassiveClock

	notAfter, keyAge, violations, podCerts, bundleNotAfter *prometheus.Desc

	renewals     *prometheus.CounterVec
	evaluations  prometheus.Counter
	statusWrites prometheus.Counter
}

func newCPolMetrics(store *certpolicy.Store, c clock.PassiveClock) *cpolMetrics {
	cert := []string{"namespace", "name"}
	return &cpolMetrics{
		store: store,
		clock: c,
		notAfter: prometheus.NewDesc("ringmaster_certificate_not_after_timestamp_seconds",
			"Expiry (notAfter) of a certificate, in seconds since the epoch.", cert, nil),
		keyAge: prometheus.NewDesc("ringmaster_certificate_key_age_seconds",
			"Age of a certificate's key: since its certificate's notBefore, or the first certificate seen with the same key when keys are reused.", cert, nil),
		violations: prometheus.NewDesc("ringmaster_certificatepolicy_violations",
			"Certificates selected by a CertificatePolicy that break a rule.", []string{"policy", "rule"}, nil),
		podCerts: prometheus.NewDesc("ringmaster_certificatepolicy_pod_certificates",
			"Pod certificates (PodCertificateRequests) selected by a CertificatePolicy, by state.", []string{"policy", "state"}, nil),
		bundleNotAfter: prometheus.NewDesc("ringmaster_trust_bundle_not_after_timestamp_seconds",
			"Expiry (notAfter) of the CA that expires first in a ClusterTrustBundle, in seconds since the epoch.", []string{"name"}, nil),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringmaster_certificatepolicy_renewals_triggered_total",
			Help: "Re-issuances of cert-manager Certificates triggered by an Enforce CertificatePolicy.",
		}, []string{"policy"}),
		evaluations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringmaster_certificatepolicy_evaluations_total",
			Help: "Evaluations of one certificate against one CertificatePolicy.",
		}),
		statusWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringmaster_certificatepolicy_status_writes_total",
			Help: "Writes of a CertificatePolicy status.",
		}),
	}
}

func (m *cpolMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m, m.renewals, m.evaluations, m.statusWrites}
}

// Describe implements prometheus.Collector.
func (m *cpolMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.notAfter
	ch <- m.keyAge
	ch <- m.violations
	ch <- m.podCerts
	ch <- m.bundleNotAfter
}

// Collect implements prometheus.Collector.
func (m *cpolMetrics) Collect(ch chan<- prometheus.Metric) {
	now := m.clock.Now()
	// A Secret and a Certificate may share a namespace and name; the
	// Certificate's series wins, as series must be unique.
	byName := map[[2]string]*certpolicy.Facts{}
	bundles := map[string]time.Time{}
	m.store.EachCertificate(func(f *certpolicy.Facts) {
		k := [2]string{f.ID.Namespace, f.ID.Name}
		if ca, ok := f.Subject.CAs.SoonestExpiry(); ok && f.ID.Kind == v1alpha1.KindClusterTrustBundle {
			bundles[f.ID.Name] = ca.NotAfter
		}
		if f.Subject.Cert == nil {
			return
		}
		if prev, ok := byName[k]; !ok || prev.ID.Kind == v1alpha1.KindSecret {
			byName[k] = f
		}
	})
	for k, f := range byName {
		ch <- prometheus.MustNewConstMetric(m.notAfter, prometheus.GaugeValue, float64(f.Subject.Cert.NotAfter.Unix()), k[0], k[1])
		if !f.Subject.KeySince.IsZero() {
			ch <- prometheus.MustNewConstMetric(m.keyAge, prometheus.GaugeValue, now.Sub(f.Subject.KeySince).Seconds(), k[0], k[1])
		}
	}
	for name, t := range bundles {
		ch <- prometheus.MustNewConstMetric(m.bundleNotAfter, prometheus.GaugeValue, float64(t.Unix()), name)
	}
	for name, counts := range m.store.PodStateCounts() {
		for _, s := range certpolicy.PodStates {
			ch <- prometheus.MustNewConstMetric(m.podCerts, prometheus.GaugeValue, float64(counts[s]), name, string(s))
		}
	}
	for name, counts := range m.store.ViolationCounts() {
		for _, r := range certpolicy.Rules {
			ch <- prometheus.MustNewConstMetric(m.violations, prometheus.GaugeValue, float64(counts[r]), name, string(r))
		}
	}
}
