package unmanagedkeys

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/internal/ticketkeys"
)

// The gauges count keys by kind and namespace (never by object: the labels
// stay bounded by the cluster's namespaces), and date the oldest change
// known from managedFields; a key of unknown age counts, but dates nothing.
func TestMetrics(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	f := func(kind, ns, name string, keys int, since time.Time, from string) ticketkeys.Finding {
		return ticketkeys.Finding{ObjectRef: ticketkeys.ObjectRef{Kind: kind, Namespace: ns, Name: name}, Keys: keys,
			Since: metav1.NewTime(since), SinceFrom: from}
	}
	m := newMetrics()
	if n := testutil.CollectAndCount(m); n != 0 {
		t.Errorf("%d series before the first round", n)
	}
	m.set([]ticketkeys.Finding{
		f("Secret", "shop", "a", 3, at.Add(-time.Hour), ticketkeys.SinceManagedFields),
		f("Secret", "shop", "b", 1, at.Add(-2*time.Hour), ticketkeys.SinceManagedFields),
		f("Secret", "shop", "c", 2, at.Add(-9*time.Hour), ticketkeys.SinceCreation),
		f("CiliumClusterwideEnvoyConfig", "", "wide", 1, at.Add(-time.Minute), ticketkeys.SinceManagedFields),
	}, at)
	want := `
# HELP ringmaster_unmanaged_ticket_keys Session-ticket keys no ring manages, by the kind of object holding them and its namespace.
# TYPE ringmaster_unmanaged_ticket_keys gauge
ringmaster_unmanaged_ticket_keys{kind="CiliumClusterwideEnvoyConfig",namespace=""} 1
ringmaster_unmanaged_ticket_keys{kind="Secret",namespace="shop"} 6
# HELP ringmaster_unmanaged_ticket_keys_last_changed_timestamp_seconds Earliest last change (from managedFields) among the unmanaged session-ticket keys of a kind in a namespace, in seconds since the epoch.
# TYPE ringmaster_unmanaged_ticket_keys_last_changed_timestamp_seconds gauge
ringmaster_unmanaged_ticket_keys_last_changed_timestamp_seconds{kind="CiliumClusterwideEnvoyConfig",namespace=""} 1.79999994e+09
ringmaster_unmanaged_ticket_keys_last_changed_timestamp_seconds{kind="Secret",namespace="shop"} 1.7999928e+09
# HELP ringmaster_unmanaged_ticket_keys_audit_timestamp_seconds When the last audit of unmanaged session-ticket keys ended, in seconds since the epoch.
# TYPE ringmaster_unmanaged_ticket_keys_audit_timestamp_seconds gauge
ringmaster_unmanaged_ticket_keys_audit_timestamp_seconds 1.8e+09
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	m.set(nil, at.Add(time.Minute))
	if n := testutil.CollectAndCount(m); n != 1 {
		t.Errorf("%d series after a round that found nothing, want the audit's time alone", n)
	}
}
