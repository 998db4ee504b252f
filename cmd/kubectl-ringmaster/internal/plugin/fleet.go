package plugin

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

// fleetFlags select rings for a FleetRequest: rotate and revoke make one
// when any is set, rather than annotate one ring.
type fleetFlags struct {
	selector, namespaceSelector, keySource string
	allNamespaces                          bool
	kinds                                  []string
	noWait                                 bool
}

func (f *fleetFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&f.selector, "selector", "l", "", "Every ring whose labels match this selector, through one FleetRequest (cluster administrators: ringmaster-fleet-operator).")
	cmd.Flags().StringVar(&f.namespaceSelector, "namespace-selector", "", "Every namespaced ring of the namespaces whose labels match this selector, through one FleetRequest.")
	cmd.Flags().StringVar(&f.keySource, "key-source", "", "Every ring minting from this ClusterKeySource, through one FleetRequest.")
	cmd.Flags().BoolVarP(&f.allNamespaces, "all-namespaces", "A", false, "Select rings of every namespace, and cluster rings, through one FleetRequest; without it a FleetRequest selects the rings of the current namespace.")
	cmd.Flags().StringSliceVar(&f.kinds, "kind", nil, "Kinds of ring a FleetRequest selects: TicketKeyRing (tkr), ClusterTicketKeyRing (ctkr); all by default.")
	cmd.Flags().BoolVar(&f.noWait, "no-wait", false, "Only make the request (the same as --wait=false).")
}

// fleet reports whether the flags ask for a FleetRequest.
func (f *fleetFlags) fleet(cmd *cobra.Command) bool {
	for _, name := range []string{"selector", "namespace-selector", "key-source", "all-namespaces", "kind"} {
		if cmd.Flags().Changed(name) {
			return true
		}
	}
	return false
}

// spec is the FleetRequest the flags describe, for the namespace of the
// kubeconfig or -n when no namespace flag says otherwise.
func (f *fleetFlags) spec(action v1alpha1.FleetAction, namespace string) (v1alpha1.FleetRequestSpec, error) {
	spec := v1alpha1.FleetRequestSpec{Action: action, KeySource: f.keySource}
	var err error
	if f.selector != "" {
		if spec.RingSelector, err = metav1.ParseToLabelSelector(f.selector); err != nil {
			return spec, fmt.Errorf("--selector: %w", err)
		}
	}
	switch {
	case f.namespaceSelector != "" && f.allNamespaces:
		return spec, fmt.Errorf("--namespace-selector and --all-namespaces select namespaces each: give one")
	case f.namespaceSelector != "":
		if spec.NamespaceSelector, err = metav1.ParseToLabelSelector(f.namespaceSelector); err != nil {
			return spec, fmt.Errorf("--namespace-selector: %w", err)
		}
	case !f.allNamespaces:
		spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": namespace}}
	}
	for _, k := range f.kinds {
		switch strings.TrimSuffix(strings.ToLower(k), ".ringmaster.io") {
		case "tkr", "ticketkeyring", "ticketkeyrings":
			spec.Kinds = append(spec.Kinds, v1alpha1.KindTicketKeyRing)
		case "ctkr", "clusterticketkeyring", "clusterticketkeyrings":
			spec.Kinds = append(spec.Kinds, v1alpha1.KindClusterTicketKeyRing)
		default:
			return spec, fmt.Errorf("--kind %q: want TicketKeyRing (tkr) or ClusterTicketKeyRing (ctkr)", k)
		}
	}
	slices.Sort(spec.Kinds)
	spec.Kinds = slices.Compact(spec.Kinds)
	return spec, nil
}

// runFleet creates a FleetRequest and, unless told not to wait, follows
// it with a progress bar until its last pod confirms.
func (r *request) runFleet(ctx context.Context, f *fleetFlags, action v1alpha1.FleetAction) error {
	if err := r.kube.connect(); err != nil {
		return err
	}
	ns, err := r.kube.namespace()
	if err != nil {
		return err
	}
	spec, err := f.spec(action, ns)
	if err != nil {
		return err
	}
	fr := &v1alpha1.FleetRequest{ObjectMeta: metav1.ObjectMeta{GenerateName: strings.ToLower(string(action)) + "-"}, Spec: spec}
	if err := r.kube.client.Create(ctx, fr, client.FieldOwner(fieldManager)); err != nil {
		if refused(err) {
			return fmt.Errorf("you may not create a FleetRequest: %w\nit takes cluster-admin or the ringmaster-fleet-operator ClusterRole (docs/security.md, Tenancy); a team rotates its own rings one by one: kubectl ringmaster %s RING", err, strings.ToLower(string(action)))
		}
		return fmt.Errorf("create a FleetRequest: %w", err)
	}
	fmt.Fprintf(r.streams.Out, "Created FleetRequest %s: %s of every ring it selects (%s)\n", fr.Name, action, describeSelection(spec))
	if !r.wait || f.noWait {
		fmt.Fprintf(r.streams.Out, "Follow it with: kubectl ringmaster status flr/%s\n", fr.Name)
		return nil
	}
	var said string
	var last v1alpha1.FleetRequest
	err = wait.PollUntilContextTimeout(ctx, r.poll, r.timeout, true, func(ctx context.Context) (bool, error) {
		got := &v1alpha1.FleetRequest{}
		if err := r.kube.client.Get(ctx, client.ObjectKeyFromObject(fr), got); err != nil {
			return false, err
		}
		last = *got
		if line := progressLine(got.Status); line != said && got.Status.StartedAt != nil {
			fmt.Fprintln(r.streams.Out, line)
			said = line
		}
		return meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionComplete), nil
	})
	if err == nil {
		st := last.Status
		fmt.Fprintf(r.streams.Out, "Completed FleetRequest %s: %d rings served, the last at %s; %d of %d pods confirmed, the last at %s\n",
			fr.Name, st.Served, stampOrDash(st.LastRingServedAt), st.PodsConfirmed, st.PodsTotal, stampOrDash(st.LastPodConfirmedAt))
		return nil
	}
	if ctx.Err() == nil && wait.Interrupted(err) {
		return fmt.Errorf("timed out after %s waiting for FleetRequest %s: %s\n%s", r.timeout, fr.Name, progressLine(last.Status), waitingLines(last.Status))
	}
	return fmt.Errorf("follow FleetRequest %s: %w", fr.Name, err)
}

// describeSelection says in words what a FleetRequest selects.
func describeSelection(s v1alpha1.FleetRequestSpec) string {
	var parts []string
	if s.NamespaceSelector != nil {
		parts = append(parts, "namespaces "+metav1.FormatLabelSelector(s.NamespaceSelector))
	} else {
		parts = append(parts, "all namespaces and cluster rings")
	}
	if s.RingSelector != nil {
		parts = append(parts, "rings "+metav1.FormatLabelSelector(s.RingSelector))
	}
	if s.KeySource != "" {
		parts = append(parts, "key source "+s.KeySource)
	}
	if len(s.Kinds) > 0 {
		var kinds []string
		for _, k := range s.Kinds {
			kinds = append(kinds, string(k))
		}
		parts = append(parts, "kinds "+strings.Join(kinds, ","))
	}
	return strings.Join(parts, "; ")
}

// barWidth is the progress bar's width in characters.
const barWidth = 30

// progressLine is a FleetRequest's progress as one line: a bar of the
// rings served, the pods confirmed, and what waits.
func progressLine(st v1alpha1.FleetRequestStatus) string {
	filled := barWidth
	if st.Selected > 0 {
		filled = int(st.Served) * barWidth / int(st.Selected)
	}
	line := fmt.Sprintf("[%s%s] %d/%d rings served", strings.Repeat("#", filled), strings.Repeat(".", barWidth-filled), st.Served, st.Selected)
	if st.PodsTotal > 0 {
		line += fmt.Sprintf(", %d/%d pods confirmed", st.PodsConfirmed, st.PodsTotal)
	}
	if st.WaitingCount > 0 {
		line += fmt.Sprintf(", %d waiting", st.WaitingCount)
		if len(st.Waiting) > 0 {
			w := st.Waiting[0]
			line += fmt.Sprintf(" (%s: %s)", ringName(w), w.Reason)
		}
	}
	return esc(line)
}

// waitingLines lists the rings a FleetRequest waits on, one a line.
func waitingLines(st v1alpha1.FleetRequestStatus) string {
	var b strings.Builder
	for _, w := range st.Waiting {
		fmt.Fprintf(&b, "  %s: %s\n", ringName(w), w.Reason)
	}
	if more := int(st.WaitingCount) - len(st.Waiting); more > 0 {
		fmt.Fprintf(&b, "  and %d more\n", more)
	}
	return esc(b.String())
}

func ringName(w v1alpha1.FleetWaiting) string {
	if w.Namespace == "" {
		return string(w.Kind) + " " + w.Name
	}
	return string(w.Kind) + " " + w.Namespace + "/" + w.Name
}

// printFleetRequests lists FleetRequests, newest first: what each asked,
// and how far it got.
func printFleetRequests(w io.Writer, list []v1alpha1.FleetRequest, now time.Time) error {
	slices.SortFunc(list, func(a, b v1alpha1.FleetRequest) int { return b.CreationTimestamp.Compare(a.CreationTimestamp.Time) })
	tw := printers.GetNewTabWriter(w)
	fmt.Fprintln(tw, "FLEET REQUEST\tACTION\tCOMPLETE\tSERVED\tPODS\tWAITING\tAGE\tSELECTS")
	for _, fr := range list {
		st := fr.Status
		complete := "False"
		if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionComplete); c != nil {
			complete = string(c.Status)
			if c.Status != metav1.ConditionTrue {
				complete += " (" + c.Reason + ")"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%d/%d\t%d\t%s\t%s\n", esc(fr.Name), fr.Spec.Action, complete, st.Served, st.Selected,
			st.PodsConfirmed, st.PodsTotal, st.WaitingCount, age(&fr.CreationTimestamp, now), esc(describeSelection(fr.Spec)))
	}
	return tw.Flush()
}

// printFleetRequest shows one FleetRequest: its selection, its times and
// the rings it waits on.
func printFleetRequest(w io.Writer, fr v1alpha1.FleetRequest) {
	st := fr.Status
	fmt.Fprintf(w, "FleetRequest %s: %s of %s\n", esc(fr.Name), fr.Spec.Action, esc(describeSelection(fr.Spec)))
	fmt.Fprintln(w, progressLine(st))
	fmt.Fprintf(w, "Started %s; last ring served %s; last pod confirmed %s\n", stampOrDash(st.StartedAt), stampOrDash(st.LastRingServedAt), stampOrDash(st.LastPodConfirmedAt))
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionComplete); c != nil {
		fmt.Fprintf(w, "Complete: %s (%s): %s\n", c.Status, c.Reason, esc(c.Message))
	}
	if len(st.Waiting) > 0 {
		fmt.Fprintf(w, "Waiting:\n%s", waitingLines(st))
	}
}
