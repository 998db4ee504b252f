package plugin

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/audit"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

// RingStatus is what status shows of a ring, and prints with -o json or
// -o yaml. It holds key ids and times, never key bytes.
type RingStatus struct {
	Kind      string                       `json:"ringKind"`
	Namespace string                       `json:"namespace,omitempty"`
	Name      string                       `json:"name"`
	Time      metav1.Time                  `json:"time"`
	Spec      v1alpha1.TicketKeyRingSpec   `json:"spec"`
	Status    v1alpha1.TicketKeyRingStatus `json:"status"`
	// RotateRequestedAt is the ring's ringmaster.io/rotate-requested-at
	// annotation.
	RotateRequestedAt string `json:"rotateRequestedAt,omitempty"`
	// Keys are the ring's keys with their state at Time by the clock, as
	// the pods holding the ring see them.
	Keys []KeyState `json:"keys"`
	// Projections and Snapshots are the ring's Secrets, by metadata only.
	Projections []RingSecret `json:"projections,omitempty"`
	Snapshots   []RingSecret `json:"snapshots,omitempty"`
	// RevokeRequestedAt is the ring's ringmaster.io/revoke-requested-at
	// annotation.
	RevokeRequestedAt string  `json:"revokeRequestedAt,omitempty"`
	Events            []Event `json:"events,omitempty"`
	// SecretsListed and EventsListed say whether the user could list the
	// ring's Secrets and events.
	SecretsListed bool `json:"secretsListed"`
	EventsListed  bool `json:"eventsListed"`
	// Problems are what audit finds with the ring.
	Problems []audit.Problem `json:"problems,omitempty"`
	// Notes say what could not be read.
	Notes []string `json:"notes,omitempty"`
}

// KeyState is a key of the ring and its state at the status's time.
type KeyState struct {
	ID         string        `json:"id"`
	State      keyring.State `json:"state"`
	ActiveFrom metav1.Time   `json:"activeFrom"`
	RetireAt   metav1.Time   `json:"retireAt"`
	ExpiresAt  metav1.Time   `json:"expiresAt"`
}

// RingSecret is a Secret of the ring, by its metadata.
type RingSecret struct {
	Namespace string      `json:"namespace"`
	Name      string      `json:"name"`
	Epoch     string      `json:"epoch"`
	Created   metav1.Time `json:"created"`
}

// Event is an event about the ring.
type Event struct {
	Type    string      `json:"type"`
	Reason  string      `json:"reason"`
	Message string      `json:"message"`
	Count   int32       `json:"count,omitempty"`
	Last    metav1.Time `json:"last"`
}

type statusOptions struct {
	kube    *kube
	streams genericiooptions.IOStreams
	now     func() time.Time

	events int
	out    output
}

func newStatusCommand(k *kube, streams genericiooptions.IOStreams) *cobra.Command {
	o := &statusOptions{kube: k, streams: streams, now: now}
	cmd := &cobra.Command{
		Use:   "status RING",
		Short: "Show a ring: conditions, epochs, keys and their times, projection Secrets, recent events",
		Long: `Status shows one TicketKeyRing (NAME or tkr/NAME), one ClusterTicketKeyRing
(ctkr/NAME), or one ECHKeyRing (ekr/NAME): its conditions, its epoch and snapshot, its keys with
their times and their state now by the clock, the projection Secrets pods
mount and the epoch each carries, the snapshot Secrets, and recent events.

Under spec.confirmation, it shows what the ring's pods report of the staged
key, as the operator asks them: how many hold it, and which do not, on which
node and why. It lists the ring's emergency revokes.

Secrets are listed by metadata alone: their data, the keys, is never read.
Listing them takes the right to list Secrets; without it status says so.

Without an argument, status lists the FleetRequests (a cluster
administrator's rotate-now or revoke of many rings at once), newest first,
with how far each got; flr/NAME shows one, with the rings it waits on.`,
		Example: `  # A ring in the current namespace
  kubectl ringmaster status web

  # A ring in another namespace, as YAML
  kubectl ringmaster status web -n shop -o yaml

  # A ClusterTicketKeyRing
  kubectl ringmaster status ctkr/edge

  # An ECHKeyRing: its configs, when each reached DNS and when its retirement ends
  kubectl ringmaster status ekr/web -n shop

  # Every FleetRequest, newest first; then one, with the rings it waits on
  kubectl ringmaster status
  kubectl ringmaster status flr/revoke-x7k2p`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return o.runFleet(cmd.Context(), "")
			}
			if name, ok := fleetArg(args[0]); ok {
				return o.runFleet(cmd.Context(), name)
			}
			return o.run(cmd.Context(), args[0])
		},
	}
	cmd.Flags().IntVar(&o.events, "events", 10, "How many of the ring's most recent events to show.")
	addOutputFlag(cmd, &o.out, false)
	return cmd
}

func (o *statusOptions) run(ctx context.Context, arg string) error {
	if err := o.out.validate(); err != nil {
		return err
	}
	ref, err := o.kube.ring(arg)
	if err != nil {
		return err
	}
	if ref.ECH {
		return o.runECH(ctx, ref)
	}
	st, err := o.read(ctx, ref)
	if err != nil {
		return err
	}
	for _, n := range st.Notes {
		printf(o.streams.ErrOut, "Warning: %s\n", n)
	}
	if o.out.structured() {
		return printReport(o.streams.Out, o.out.format, "RingStatus", st)
	}
	return printStatus(o.streams.Out, st)
}

func (o *statusOptions) read(ctx context.Context, ref ringRef) (RingStatus, error) {
	obj, ring, err := o.kube.getRing(ctx, ref)
	if err != nil {
		return RingStatus{}, err
	}
	now := o.now()
	st := RingStatus{
		Kind: ring.Kind, Namespace: ring.Namespace, Name: ring.Name, Time: metav1.NewTime(now),
		Spec: ring.Spec, Status: ring.Status,
		RotateRequestedAt: obj.GetAnnotations()[v1alpha1.RotateRequestedAtAnnotation],
		RevokeRequestedAt: obj.GetAnnotations()[v1alpha1.RevokeRequestedAtAnnotation],
		Problems:          ring.Row(now).Problems,
	}
	kr := ring.Keys()
	for _, k := range kr.Keys {
		st.Keys = append(st.Keys, KeyState{ID: k.ID, State: kr.StateOf(k, now),
			ActiveFrom: metav1.NewTime(k.ActiveFrom), RetireAt: metav1.NewTime(k.RetireAt), ExpiresAt: metav1.NewTime(k.ExpiresAt)})
	}

	var owner distribute.Owner
	secretsIn := ring.Namespace // a cluster ring's Secrets are in every namespace
	switch r := obj.(type) {
	case *v1alpha1.TicketKeyRing:
		owner = distribute.OwnerOf(r)
	case *v1alpha1.ClusterTicketKeyRing:
		owner = distribute.ClusterOwnerOf(r, "")
	}
	if st.Projections, err = o.ringSecrets(ctx, secretsIn, owner.ProjectionLabels(), v1alpha1.EpochAnnotation, true); err != nil {
		if !refused(err) {
			return st, err
		}
		st.Notes = append(st.Notes, fmt.Sprintf("the ring's Secrets were not listed (by metadata: their data is never read): %v", err))
	} else if st.Snapshots, err = o.ringSecrets(ctx, secretsIn, owner.SnapshotLabels(), v1alpha1.EpochLabel, false); err != nil {
		return st, err
	} else {
		st.SecretsListed = true
	}

	if st.Events, err = o.ringEvents(ctx, obj); err != nil {
		if !refused(err) {
			return st, err
		}
		st.Notes = append(st.Notes, fmt.Sprintf("the ring's events were not listed: %v", err))
	} else {
		st.EventsListed = true
	}
	return st, nil
}

// ringSecrets lists Secrets by their metadata alone, through the API's
// PartialObjectMetadata form: their data is never sent. epochKey is the
// annotation (projections) or label (snapshots) naming the epoch.
func (o *statusOptions) ringSecrets(ctx context.Context, ns string, selector map[string]string, epochKey string, annotation bool) ([]RingSecret, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("SecretList"))
	if err := o.kube.client.List(ctx, list, client.InNamespace(ns), client.MatchingLabels(selector)); err != nil {
		return nil, err
	}
	out := make([]RingSecret, 0, len(list.Items))
	for _, s := range list.Items {
		epoch := s.Labels[epochKey]
		if annotation {
			epoch = s.Annotations[epochKey]
		}
		out = append(out, RingSecret{Namespace: s.Namespace, Name: s.Name, Epoch: epoch, Created: s.CreationTimestamp})
	}
	slices.SortFunc(out, func(a, b RingSecret) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(len(a.Name), len(b.Name)), cmp.Compare(a.Name, b.Name))
	})
	return out, nil
}

// ringEvents are the ring's most recent events, oldest first, as kubectl
// describe lists them. A cluster ring's events are in the default
// namespace, where events about cluster-scoped objects go.
func (o *statusOptions) ringEvents(ctx context.Context, obj client.Object) ([]Event, error) {
	ns := obj.GetNamespace()
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	list := &corev1.EventList{}
	if err := o.kube.client.List(ctx, list, client.InNamespace(ns), client.MatchingFields{"involvedObject.uid": string(obj.GetUID())}); err != nil {
		return nil, err
	}
	out := make([]Event, 0, len(list.Items))
	for _, e := range list.Items {
		// Events written through events.k8s.io carry eventTime, and a
		// series once repeated; core ones lastTimestamp.
		last := e.CreationTimestamp
		for _, t := range []time.Time{e.LastTimestamp.Time, e.EventTime.Time, seriesTime(e.Series)} {
			if !t.IsZero() && t.After(last.Time) {
				last = metav1.NewTime(t)
			}
		}
		count := e.Count
		if e.Series != nil {
			count = e.Series.Count
		}
		out = append(out, Event{Type: e.Type, Reason: e.Reason, Message: e.Message, Count: count, Last: last})
	}
	slices.SortStableFunc(out, func(a, b Event) int { return a.Last.Compare(b.Last.Time) })
	if len(out) > o.events {
		out = out[len(out)-o.events:]
	}
	return out, nil
}

func seriesTime(s *corev1.EventSeries) time.Time {
	if s == nil {
		return time.Time{}
	}
	return s.LastObservedTime.Time
}

func printStatus(w io.Writer, st RingStatus) error {
	printSummary(w, st)
	for _, sec := range statusSections(st) {
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

// printSummary prints the ring's name, schedule, epoch, active key, next
// rotation and rotate request.
func printSummary(w io.Writer, st RingStatus) {
	now, spec := st.Time.Time, st.Spec
	ref := st.Kind + " " + st.Name
	if st.Namespace != "" {
		ref = st.Kind + " " + st.Namespace + "/" + st.Name
	}
	printf(w, "%s\n", ref)
	printf(w, "  Schedule:        a key encrypts for %s, is staged %s before, then decrypts for %d more interval(s)\n",
		limit(spec.RotationInterval.Duration), limit(spec.ActivationDelay.Duration), spec.RetainedKeys)
	source := "crypto/rand, in the operator"
	if spec.SourceRef != nil {
		source = "ClusterKeySource " + spec.SourceRef.Name
	}
	printf(w, "  Key source:      %s\n", source)
	printf(w, "  Epoch:           %d (snapshot %s)\n", st.Status.Epoch, orDash(st.Status.Snapshot))
	for _, k := range st.Keys {
		if k.State == keyring.Active {
			printf(w, "  Active key:      %s, encrypting for %s of its %s\n", k.ID, age(&k.ActiveFrom, now), limit(spec.RotationInterval.Duration))
		}
	}
	if n := st.Status.NextRotation; n != nil {
		printf(w, "  Next rotation:   %s (%s)\n", stamp(n.Time), relative(n.Time, now))
	}
	if st.RotateRequestedAt != "" {
		handled := "handled"
		if st.RotateRequestedAt != st.Status.LastRotateRequestedAt {
			handled = "not handled yet"
		}
		printf(w, "  Rotate request:  %s, %s\n", st.RotateRequestedAt, handled)
	}
	if st.RevokeRequestedAt != "" {
		handled := "carried out"
		if st.RevokeRequestedAt != st.Status.LastRevokeRequestedAt {
			handled = "not carried out yet"
		}
		printf(w, "  Revoke request:  %s, %s\n", st.RevokeRequestedAt, handled)
	}
	if c := spec.Confirmation; c != nil {
		ceiling := c.Timeout.Duration
		if c.MaxDelay != nil {
			ceiling = c.MaxDelay.Duration
		}
		then := fmt.Sprintf("%s (by the clock at most %s past its due time)", c.OnTimeout, limit(ceiling))
		if c.OnTimeout == v1alpha1.ConfirmationPromote {
			then = string(c.OnTimeout)
		}
		printf(w, "  Confirmation:    a due key waits for every pod %s to hold it, up to %s, then: %s\n",
			metav1.FormatLabelSelector(&c.PodSelector), limit(c.Timeout.Duration), then)
	}
	if st.Kind == audit.KindClusterTicketKeyRing {
		printf(w, "  Targets:         %d namespace(s), %d failed\n", st.Status.Targets, len(st.Status.FailedTargets))
	}
	if sh := st.Status.Shared; sh != nil {
		printf(w, "  Shared:          %s\n", sharedLine(sh, now))
	}
}

// sharedLine says which version of its Vault entry a shared ring serves,
// who wrote it, and when the operator last read the entry.
func sharedLine(sh *v1alpha1.SharedRingStatus, now time.Time) string {
	line := fmt.Sprintf("version %d of Vault entry %s", sh.Version, sh.Path)
	switch {
	case sh.Writer == "Local":
		line += ", written by this cluster"
	case sh.Writer == "Adopted" && sh.PropagationDelay != nil:
		line += fmt.Sprintf(", written by another cluster and published here %s later", sh.PropagationDelay.Duration)
	}
	if sh.LastSyncTime != nil {
		line += fmt.Sprintf("; entry read %s", relative(sh.LastSyncTime.Time, now))
	}
	return line
}

// statusSection is a titled table of status; empty stands for no rows.
type statusSection struct {
	title   string
	columns []column
	rows    [][]any
	empty   string
}

func statusSections(st RingStatus) []statusSection {
	now := st.Time.Time
	conditions := statusSection{title: "Conditions", empty: "<none>",
		columns: []column{{name: "Type"}, {name: "Status"}, {name: "Reason"}, {name: "Age"}, {name: "Message"}}}
	for _, c := range st.Status.Conditions {
		conditions.rows = append(conditions.rows, []any{c.Type, string(c.Status), c.Reason, age(&c.LastTransitionTime, now), c.Message})
	}
	keys := statusSection{title: "Keys, newest first, in their state now", empty: "<none>",
		columns: []column{{name: "ID"}, {name: "State"}, {name: "Active From"}, {name: "Retire At"}, {name: "Expires At"}}}
	for _, k := range st.Keys {
		keys.rows = append(keys.rows, []any{k.ID, string(k.State), stamp(k.ActiveFrom.Time), stamp(k.RetireAt.Time), stamp(k.ExpiresAt.Time)})
	}
	out := []statusSection{conditions, keys}
	if len(st.Status.FailedTargets) > 0 {
		failed := statusSection{title: "Failed targets", columns: []column{{name: "Namespace"}, {name: "Reason"}, {name: "Message"}}}
		for _, f := range st.Status.FailedTargets {
			failed.rows = append(failed.rows, []any{f.Namespace, f.Reason, f.Message})
		}
		out = append(out, failed)
	}
	for _, group := range []struct {
		title   string
		secrets []RingSecret
	}{{"Projection Secrets (pods mount these)", st.Projections}, {"Snapshot Secrets (one per retained epoch)", st.Snapshots}} {
		sec := statusSection{title: group.title, empty: unlisted(st.SecretsListed, "Secrets"),
			columns: []column{{name: "Namespace"}, {name: "Name"}, {name: "Epoch"}, {name: "Age"}}}
		for _, s := range group.secrets {
			sec.rows = append(sec.rows, []any{s.Namespace, s.Name, orDash(s.Epoch), age(&s.Created, now)})
		}
		out = append(out, sec)
	}
	out = append(out, podsSection(st))
	if len(st.Status.Revocations) > 0 {
		revocations := statusSection{title: "Revocations, newest first",
			columns: []column{{name: "Requested At"}, {name: "Field Manager"}, {name: "Epoch"}, {name: "Keys Destroyed"}}}
		for _, r := range st.Status.Revocations {
			revocations.rows = append(revocations.rows, []any{r.RequestedAt, orDash(r.RequestedBy), fmt.Sprint(r.Epoch), strings.Join(r.Keys, " ")})
		}
		out = append(out, revocations)
	}
	events := statusSection{title: "Events", empty: unlisted(st.EventsListed, "events"),
		columns: []column{{name: "Type"}, {name: "Reason"}, {name: "Age"}, {name: "Message"}}}
	for _, e := range st.Events {
		events.rows = append(events.rows, []any{e.Type, e.Reason, age(&e.Last, now), e.Message})
	}
	return append(out, events)
}

// podsSection is what the ring's pods report of its staged key, under
// spec.confirmation: the operator asks every selected, ready pod.
func podsSection(st RingStatus) statusSection {
	sec := statusSection{title: "Pods", columns: []column{{name: "Namespace"}, {name: "Pod"}, {name: "Node"}, {name: "Reason"}}}
	c, conf := st.Spec.Confirmation, st.Status.Confirmation
	switch {
	case c == nil:
		sec.empty = "not asked: the ring has no spec.confirmation, under which the operator asks its pods which keys they hold"
	case conf == nil:
		sec.empty = fmt.Sprintf("pods %s are asked on port %s once a staged key falls due; none is awaiting them",
			metav1.FormatLabelSelector(&c.PodSelector), c.Port.String())
	default:
		sec.title = fmt.Sprintf("Pods (selected by %s, asked on port %s %s): %d of %d ready pod(s) hold staged key %s",
			metav1.FormatLabelSelector(&c.PodSelector), c.Port.String(), age(&conf.CheckedAt, st.Time.Time)+" ago", conf.Holding, conf.Pods, conf.StagedKey)
		sec.empty = "every one holds it"
		for _, p := range conf.Missing {
			sec.rows = append(sec.rows, []any{p.Namespace, p.Name, orDash(p.Node), p.Reason})
		}
	}
	return sec
}

// unlisted stands for an empty list: none, or not listed for want of the
// right.
func unlisted(listed bool, what string) string {
	if listed {
		return "<none>"
	}
	return "not listed: you may not list " + what
}

// indented prints a table two spaces in, under a section title.
func indented(w io.Writer, columns []column, rows [][]any) error {
	var b strings.Builder
	if err := printTable(&b, false, columns, rows); err != nil {
		return err
	}
	for line := range strings.Lines(b.String()) {
		if _, err := io.WriteString(w, "  "+line); err != nil {
			return err
		}
	}
	return nil
}

// printf prints to w with every string argument escaped by esc: the
// arguments are text from the cluster (names, annotations, messages), which
// whoever may write them could fill with terminal escape sequences.
func printf(w io.Writer, format string, args ...any) {
	for i, a := range args {
		if s, ok := a.(string); ok {
			args[i] = esc(s)
		}
	}
	fmt.Fprintf(w, format, args...)
}

// esc makes text from the cluster safe to print on a terminal, on one line:
// cli-runtime's printers.EscapeTerminal turns ESC and CR into ^[ and \r, as
// kubectl does, and the control and format characters it leaves are
// written as Go escapes (\n, \a, \u009b, \u202e): a newline would forge a
// line of output, BEL ends an OSC sequence, U+009B is CSI to some
// terminals, and bidirectional overrides reorder what is shown.
func esc(s string) string { return escape(s, false) }

// escLines is esc for text whose own newlines are kept: an error of the
// plugin's, which may quote the cluster.
func escLines(s string) string { return escape(s, true) }

func escape(s string, keepNewlines bool) string {
	s = printers.EscapeTerminal(s)
	unsafe := func(r rune) bool {
		return (r != '\n' || !keepNewlines) && (unicode.Is(unicode.Cc, r) || unicode.Is(unicode.Cf, r))
	}
	if !strings.ContainsFunc(s, unsafe) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unsafe(r) {
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// fleetArg reads a FleetRequest argument: flr/NAME, fleetrequest/NAME.
func fleetArg(arg string) (string, bool) {
	typ, name, ok := strings.Cut(arg, "/")
	if !ok {
		return "", false
	}
	switch strings.TrimSuffix(strings.ToLower(typ), ".ringmaster.io") {
	case "flr", "fleetrequest", "fleetrequests":
		return name, name != ""
	}
	return "", false
}

// runFleet shows one FleetRequest, or lists them all when name is "".
func (o *statusOptions) runFleet(ctx context.Context, name string) error {
	if err := o.out.validate(); err != nil {
		return err
	}
	if err := o.kube.connect(); err != nil {
		return err
	}
	if name != "" {
		fr := &v1alpha1.FleetRequest{}
		if err := o.kube.client.Get(ctx, client.ObjectKey{Name: name}, fr); err != nil {
			return fmt.Errorf("read FleetRequest %s: %w", name, err)
		}
		if o.out.structured() {
			return printReport(o.streams.Out, o.out.format, "FleetRequest", fr)
		}
		printFleetRequest(o.streams.Out, *fr)
		return nil
	}
	list := &v1alpha1.FleetRequestList{}
	if err := o.kube.client.List(ctx, list); err != nil {
		return fmt.Errorf("list FleetRequests: %w", err)
	}
	if o.out.structured() {
		return printReport(o.streams.Out, o.out.format, "FleetRequestList", list.Items)
	}
	if len(list.Items) == 0 {
		fmt.Fprintln(o.streams.Out, "No FleetRequest: name a ring to see it (kubectl ringmaster status RING)")
		return nil
	}
	return printFleetRequests(o.streams.Out, list.Items, o.now())
}
