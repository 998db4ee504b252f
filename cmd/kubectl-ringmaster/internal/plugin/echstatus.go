package plugin

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/audit"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
)

// ECHRingStatus is what status shows of an ECHKeyRing, and prints with -o
// json or -o yaml. It holds config ids and times, never key bytes.
type ECHRingStatus struct {
	Kind      string                    `json:"ringKind"`
	Namespace string                    `json:"namespace"`
	Name      string                    `json:"name"`
	Time      metav1.Time               `json:"time"`
	Spec      v1alpha1.ECHKeyRingSpec   `json:"spec"`
	Status    v1alpha1.ECHKeyRingStatus `json:"status"`
	// Projections and Snapshots are the ring's Secrets, by metadata only.
	Projections   []RingSecret    `json:"projections,omitempty"`
	Snapshots     []RingSecret    `json:"snapshots,omitempty"`
	Events        []Event         `json:"events,omitempty"`
	SecretsListed bool            `json:"secretsListed"`
	EventsListed  bool            `json:"eventsListed"`
	Problems      []audit.Problem `json:"problems,omitempty"`
	Notes         []string        `json:"notes,omitempty"`
}

func (o *statusOptions) runECH(ctx context.Context, ref ringRef) error {
	r := &v1alpha1.ECHKeyRing{}
	if err := o.kube.client.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, r); err != nil {
		return readError(ref, err)
	}
	now := o.now()
	st := ECHRingStatus{Kind: v1alpha1.KindECHKeyRing, Namespace: r.Namespace, Name: r.Name, Time: metav1.NewTime(now),
		Spec: r.Spec, Status: r.Status, Problems: audit.ECHRow(r, now).Problems}
	owner := distribute.ECHOwnerOf(r)
	var err error
	if st.Projections, err = o.ringSecrets(ctx, r.Namespace, owner.ProjectionLabels(), v1alpha1.EpochAnnotation, true); err != nil {
		if !refused(err) {
			return err
		}
		st.Notes = append(st.Notes, fmt.Sprintf("the ring's Secrets were not listed (by metadata: their data is never read): %v", err))
	} else if st.Snapshots, err = o.ringSecrets(ctx, r.Namespace, owner.SnapshotLabels(), v1alpha1.EpochLabel, false); err != nil {
		return err
	} else {
		st.SecretsListed = true
	}
	if st.Events, err = o.ringEvents(ctx, r); err != nil {
		if !refused(err) {
			return err
		}
		st.Notes = append(st.Notes, fmt.Sprintf("the ring's events were not listed: %v", err))
	} else {
		st.EventsListed = true
	}
	for _, n := range st.Notes {
		printf(o.streams.ErrOut, "Warning: %s\n", n)
	}
	if o.out.structured() {
		return printReport(o.streams.Out, o.out.format, "ECHRingStatus", st)
	}
	return printECHStatus(o.streams.Out, st)
}

func printECHStatus(w io.Writer, st ECHRingStatus) error {
	now, spec := st.Time.Time, st.Spec
	printf(w, "%s %s/%s\n", st.Kind, st.Namespace, st.Name)
	printf(w, "  Schedule:        a config is published for %s, staged at least %s before, then decrypts for the TTL (%ds) + %s once out of DNS\n",
		limit(spec.RotationInterval.Duration), limit(spec.DeliveryDelay.Duration), spec.DNS.TTL, limit(spec.RetirementMargin.Duration))
	printf(w, "  Public name:     %s\n", spec.PublicName)
	printf(w, "  DNS:             HTTPS %s, ClusterDNSZone %s, last verified %s\n", spec.DNS.Name, spec.DNS.ZoneRef.Name, verified(st.Status.DNSVerifiedAt, now))
	printf(w, "  Epoch:           %d (snapshot %s)\n", st.Status.Epoch, orDash(st.Status.Snapshot))
	if n := st.Status.NextRotation; n != nil {
		printf(w, "  Next rotation:   %s (%s)\n", stamp(n.Time), relative(n.Time, now))
	}
	conditions := statusSection{title: "Conditions", empty: "<none>",
		columns: []column{{name: "Type"}, {name: "Status"}, {name: "Reason"}, {name: "Age"}, {name: "Message"}}}
	for _, c := range st.Status.Conditions {
		conditions.rows = append(conditions.rows, []any{c.Type, string(c.Status), c.Reason, age(&c.LastTransitionTime, now), c.Message})
	}
	configs := statusSection{title: "Configs, newest first", empty: "<none>",
		columns: []column{{name: "ID"}, {name: "State"}, {name: "Created"}, {name: "In DNS Since"}, {name: "Retired"}, {name: "Expires At"}}}
	for _, c := range st.Status.Configs {
		configs.rows = append(configs.rows, []any{strconv.Itoa(int(c.ID)), string(c.State), stamp(c.CreatedAt.Time), stampOrDash(c.PublishedAt), stampOrDash(c.RetiredAt), stampOrDash(c.ExpiresAt)})
	}
	pods := statusSection{title: "Pods", columns: []column{{name: "Namespace"}, {name: "Pod"}, {name: "Node"}, {name: "Reason"}}}
	c, conf := spec.Confirmation, st.Status.Confirmation
	if conf == nil {
		pods.empty = fmt.Sprintf("pods %s are asked on port %s once a staged config may be published; none is awaiting them",
			metav1.FormatLabelSelector(&c.PodSelector), c.Port.String())
	} else {
		pods.title = fmt.Sprintf("Pods (selected by %s, asked on port %s %s): %d of %d ready pod(s) hold staged config %s",
			metav1.FormatLabelSelector(&c.PodSelector), c.Port.String(), age(&conf.CheckedAt, now)+" ago", conf.Holding, conf.Pods, conf.StagedKey)
		pods.empty = "every one holds it"
		for _, p := range conf.Missing {
			pods.rows = append(pods.rows, []any{p.Namespace, p.Name, orDash(p.Node), p.Reason})
		}
	}
	out := []statusSection{conditions, configs}
	for _, group := range []struct {
		title   string
		secrets []RingSecret
	}{{"Projection Secrets (pods mount these)", st.Projections}, {"Snapshot Secrets", st.Snapshots}} {
		sec := statusSection{title: group.title, empty: unlisted(st.SecretsListed, "Secrets"),
			columns: []column{{name: "Namespace"}, {name: "Name"}, {name: "Epoch"}, {name: "Age"}}}
		for _, s := range group.secrets {
			sec.rows = append(sec.rows, []any{s.Namespace, s.Name, orDash(s.Epoch), age(&s.Created, now)})
		}
		out = append(out, sec)
	}
	events := statusSection{title: "Events", empty: unlisted(st.EventsListed, "events"),
		columns: []column{{name: "Type"}, {name: "Reason"}, {name: "Age"}, {name: "Message"}}}
	for _, e := range st.Events {
		events.rows = append(events.rows, []any{e.Type, e.Reason, age(&e.Last, now), e.Message})
	}
	out = append(out, pods, events)
	for _, sec := range out {
		printf(w, "%s:\n", sec.title)
		if len(sec.rows) == 0 {
			printf(w, "  %s\n", sec.empty)
			continue
		}
		if err := indented(w, sec.columns, sec.rows); err != nil {
			return err
		}
	}
	if len(st.Problems) > 0 {
		fmt.Fprintln(w, "Problems:")
		for _, p := range st.Problems {
			printf(w, "  %s\n", p.Message)
		}
	}
	return nil
}

func stampOrDash(t *metav1.Time) string {
	if t == nil {
		return "-"
	}
	return stamp(t.Time)
}

func verified(t *metav1.Time, now time.Time) string {
	if t == nil {
		return "never"
	}
	return relative(t.Time, now)
}
