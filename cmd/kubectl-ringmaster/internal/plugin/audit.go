package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/audit"
	"github.com/ringmaster-io/ringmaster/internal/certpolicy"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
)

// Exit statuses of audit, as kubectl diff's: 1 when a --fail-on limit is
// broken, 2 when the audit could not run or cannot vouch for a category
// --fail-on names.
const (
	exitBroken = 1
	exitFailed = 2
)

type auditOptions struct {
	kube    *kube
	streams genericiooptions.IOStreams
	now     func() time.Time

	allNamespaces bool
	failOn        string
	expiryWindow  time.Duration
	out           output
}

func newAuditCommand(k *kube, streams genericiooptions.IOStreams) *cobra.Command {
	o := &auditOptions{kube: k, streams: streams, now: now}
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Audit key and certificate age: every ring, every certificate a CertificatePolicy (certificatepolicies.ringmaster.io) selects, and ticket keys no ring manages, problems first",
		Long: `Audit lists, in one table, problems first:

  - every TicketKeyRing and ClusterTicketKeyRing: the active key and its age
    against the rotationInterval, when the oldest retained key is destroyed,
    overdue rotations (the RotationOverdue condition, or no key staged behind
    the active one by the clock), failed targets, readiness;
  - with -A, every CertificatePolicy.ringmaster.io (certificatepolicies.
    ringmaster.io, short name cpol; not Open Cluster Management's
    CertificatePolicy of policy.open-cluster-management.io): what it
    evaluated, its oldest key and soonest expiry, its violations;
  - every certificate such a policy selects: its key's age against the
    least maxKeyAge of the policies selecting it, its expiry, and the
    policies' violations;
  - every session-ticket key no ring manages, in a section of its own:
    ingress-nginx's ssl-session-ticket-key in a ConfigMap; Envoy's
    session_ticket_keys inline in an EnvoyFilter (networking.istio.io), an
    EnvoyPatchPolicy (gateway.envoyproxy.io), a CiliumEnvoyConfig or (with
    -A) CiliumClusterwideEnvoyConfig (cilium.io), or in the Secret they
    name; an haproxy.cfg's tls-ticket-keys file in a Secret or ConfigMap;
    any Secret or ConfigMap entry named like a ticket key file. Each is
    shown by where it is, its size, count and fingerprints (a truncated
    SHA-256 of each key) and when it last changed (managedFields), never
    its bytes. Only the kinds the cluster serves are read; Secrets of
    types kubernetes.io/tls, service-account-token and helm.sh/release.v1
    are not. A ring's own Secrets are skipped.

Rings are read from their status by the clock, as the pods holding them read
them. Certificate keys are dated as the operator dates them (internal/
certpolicy): a key carried by several certificates is as old as the earliest;
a Certificate with rotationPolicy Always has a key as old as its certificate.
Violations are the operator's, from the policies' status. Reading
certificates takes the right to list cert-manager Certificates and Secrets;
without it the audit says so, and shows what the policies' status reports.

--fail-on names categories of problems that make audit exit with status 1,
for CI and cron jobs: overdue, key-age, expired-soon, violations,
failed-targets, not-ready, at-rest, unmanaged-keys, or all. It exits with status 2 when it
cannot run, or cannot read what one of those categories needs.

It ends with the keys' posture at rest: the Secrets that hold key bytes
(read by their metadata only), whether backups skip them
(velero.io/exclude-from-backup), and whether kube-apiserver encrypts Secrets,
by its own metrics (apiserver_storage_transformation_operations_total; this
takes get on the non-resource URL /metrics). The operator cannot learn the
latter: a Secret read back through the API is decrypted alike. at-rest is a
problem when the metrics show no encrypted write of a Secret, or a Secret
holding keys is not excluded from backups.`,
		Example: `  # The whole cluster
  kubectl ringmaster audit -A

  # One namespace, as a team sees it, with more columns
  kubectl ringmaster audit -n shop -o wide

  # In a cron job: fail on an overdue rotation, an old key or a violation
  kubectl ringmaster audit -A --fail-on overdue,key-age,violations,failed-targets

  # Certificates expiring within 30 days count as expired-soon
  kubectl ringmaster audit -A --expiry-window 720h --fail-on expired-soon -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.run(cmd.Context()); err != nil {
				if exit := (*ExitError)(nil); errors.As(err, &exit) {
					return err
				}
				return &ExitError{Code: exitFailed, Err: err}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "Audit the whole cluster: every namespace, every ClusterTicketKeyRing and certificatepolicies.ringmaster.io.")
	cmd.Flags().StringVar(&o.failOn, "fail-on", "", "Exit with status 1 when a problem of these categories is found: comma-separated overdue, key-age, expired-soon, violations, failed-targets, not-ready, at-rest, unmanaged-keys, or all.")
	cmd.Flags().DurationVar(&o.expiryWindow, "expiry-window", 7*24*time.Hour, "A certificate expiring within this window is a problem (expired-soon).")
	addOutputFlag(cmd, &o.out, true)
	return cmd
}

func (o *auditOptions) run(ctx context.Context) error {
	cats, err := audit.ParseCategories(o.failOn)
	if err != nil {
		return fmt.Errorf("--fail-on: %w", err)
	}
	if err := o.out.validate(); err != nil {
		return err
	}
	if err := o.kube.connect(); err != nil {
		return err
	}
	ns := ""
	if !o.allNamespaces {
		if ns, err = o.kube.namespace(); err != nil {
			return err
		}
	}
	in, err := o.read(ctx, ns)
	if err != nil {
		return err
	}
	rep := audit.Build(in)

	for _, n := range rep.Notes {
		fmt.Fprintf(o.streams.ErrOut, "Warning: %s\n", n.Message)
	}
	if o.out.structured() {
		err = printReport(o.streams.Out, o.out.format, "AuditReport", rep)
	} else {
		err = printAudit(o.streams, rep, o.out.format == "wide")
	}
	if err != nil || len(cats) == 0 {
		return err
	}
	if broken := rep.Broken(cats); len(broken) > 0 {
		return &ExitError{Code: exitBroken, Err: fmt.Errorf("%d problem(s) in the --fail-on categories %s", len(broken), o.failOn)}
	}
	if blind := rep.Blind(cats); len(blind) > 0 {
		return &ExitError{Code: exitFailed, Err: fmt.Errorf("the audit cannot vouch for --fail-on %s: %d read(s) were refused (see the warnings)", o.failOn, len(blind))}
	}
	return nil
}

// read gathers what the audit needs.
func (o *auditOptions) read(ctx context.Context, ns string) (audit.Input, error) {
	r := &auditReader{c: o.kube.client, core: o.kube.core.CoreV1().RESTClient(), ns: ns, where: "in the cluster",
		in: audit.Input{Now: o.now(), Namespace: ns, ExpiryWindow: o.expiryWindow}}
	if ns != "" {
		r.where = "in namespace " + ns
	}
	namespace, err := r.namespaces(ctx)
	if err == nil {
		err = r.rings(ctx, namespace)
	}
	if err == nil {
		err = r.certificates(ctx)
	}
	if err == nil {
		err = r.atRest(ctx)
	}
	if err == nil {
		err = r.ticketKeys(ctx)
	}
	return r.in, err
}

// auditReader reads as the user. What the user may not read becomes a note
// saying what it hides; any other error ends the audit.
type auditReader struct {
	c     client.Client
	core  rest.Interface
	ns    string
	where string // "in namespace <ns>", or "in the cluster"
	in    audit.Input
}

var (
	ringCategories = []audit.Category{audit.Overdue, audit.KeyAge, audit.FailedTargets, audit.NotReady}
	certCategories = []audit.Category{audit.KeyAge, audit.ExpiredSoon}
)

// refused says whether err is a refusal, and notes it with what it hides.
func (r *auditReader) refused(err error, what string, blinds ...audit.Category) (bool, error) {
	switch {
	case err == nil:
		return false, nil
	case refused(err):
		r.in.Notes = append(r.in.Notes, audit.Note{Message: fmt.Sprintf("%s: %v", what, err), Blinds: blinds})
		return true, nil
	}
	return true, err
}

// namespaces reads the labels of the namespaces audited, for the selectors
// of policies and cluster rings, and returns the one namespace audited.
func (r *auditReader) namespaces(ctx context.Context) (*corev1.Namespace, error) {
	if r.ns == "" {
		list := &corev1.NamespaceList{}
		skipped, err := r.refused(r.c.List(ctx, list), "namespaces were not listed, so CertificatePolicies' namespaceSelectors see only the kubernetes.io/metadata.name label", certCategories...)
		if skipped {
			return nil, err
		}
		r.in.NamespaceLabels = map[string]map[string]string{}
		for _, n := range list.Items {
			r.in.NamespaceLabels[n.Name] = n.Labels
		}
		return nil, nil
	}
	n := &corev1.Namespace{}
	skipped, err := r.refused(r.c.Get(ctx, client.ObjectKey{Name: r.ns}, n), fmt.Sprintf("namespace %s was not read, so every ClusterTicketKeyRing is shown whether or not it delivers there, and CertificatePolicies' namespaceSelectors see only the kubernetes.io/metadata.name label", r.ns), certCategories...)
	if skipped {
		return nil, err
	}
	r.in.NamespaceLabels = map[string]map[string]string{r.ns: n.Labels}
	return n, nil
}

// rings reads the TicketKeyRings, and the ClusterTicketKeyRings that
// deliver into namespace (all of them when it is nil).
func (r *auditReader) rings(ctx context.Context, namespace *corev1.Namespace) error {
	tkrs := &v1alpha1.TicketKeyRingList{}
	err := r.c.List(ctx, tkrs, client.InNamespace(r.ns))
	if notServed(err) {
		return fmt.Errorf("ringmaster's CRDs are not installed in this cluster: %w", err)
	}
	if skipped, err := r.refused(err, "TicketKeyRings "+r.where+" were not listed", ringCategories...); err != nil {
		return err
	} else if !skipped {
		for i := range tkrs.Items {
			r.in.Rings = append(r.in.Rings, audit.FromTicketKeyRing(&tkrs.Items[i]))
		}
	}
	ekrs := &v1alpha1.ECHKeyRingList{}
	if err := r.c.List(ctx, ekrs, client.InNamespace(r.ns)); !notServed(err) { // an operator older than ECH serves none
		if skipped, err := r.refused(err, "ECHKeyRings "+r.where+" were not listed", ringCategories...); err != nil {
			return err
		} else if !skipped {
			r.in.ECHRings = ekrs.Items
		}
	}
	ctkrs := &v1alpha1.ClusterTicketKeyRingList{}
	if skipped, err := r.refused(r.c.List(ctx, ctkrs), "ClusterTicketKeyRings were not listed", ringCategories...); skipped {
		return err
	}
	for i := range ctkrs.Items {
		if ring := &ctkrs.Items[i]; namespace == nil || deliversTo(ring, namespace) {
			r.in.Rings = append(r.in.Rings, audit.FromClusterTicketKeyRing(ring))
		}
	}
	return nil
}

// certificates reads the CertificatePolicies and, when there are some, the
// certificates they may select: cert-manager Certificates and TLS Secrets.
func (r *auditReader) certificates(ctx context.Context) error {
	policies := &v1alpha1.CertificatePolicyList{}
	if skipped, err := r.refused(r.c.List(ctx, policies), "CertificatePolicies (certificatepolicies.ringmaster.io) were not listed, so no certificate is audited", audit.Violations, audit.KeyAge, audit.ExpiredSoon, audit.NotReady); skipped {
		return err
	}
	r.in.Policies = policies.Items
	if len(r.in.Policies) == 0 {
		return nil // nothing selects a certificate
	}

	crts := &cmapi.CertificateList{}
	if err := r.c.List(ctx, crts, client.InNamespace(r.ns)); notServed(err) {
		// Without cert-manager the operator judges every TLS Secret as a
		// Secret, as the audit then does.
		r.in.CertificatesRead = true
	} else if skipped, err := r.refused(err, "cert-manager Certificates "+r.where+" were not listed, so their keys are dated only where a CertificatePolicy's status names them", certCategories...); err != nil {
		return err
	} else {
		r.in.Certificates, r.in.CertificatesRead = crts.Items, !skipped
	}
	secrets, err := listTLSSecrets(ctx, r.core, r.ns)
	skipped, err := r.refused(err, "kubernetes.io/tls Secrets "+r.where+" were not listed, so certificate keys are dated only where a CertificatePolicy's status names them", certCategories...)
	if err != nil {
		return err
	}
	r.in.TLSSecrets, r.in.SecretsRead = secrets, !skipped
	return r.podCertificates(ctx)
}

// podCertificates reads the PodCertificateRequests and, for the whole
// cluster, the ClusterTrustBundles, when some policy judges their kind and
// the API serves it (Kubernetes 1.37 and later).
func (r *auditReader) podCertificates(ctx context.Context) error {
	judges := func(kind v1alpha1.CertificateKind) bool {
		for i := range r.in.Policies {
			if c, err := certpolicy.Compile(&r.in.Policies[i]); err == nil && c.Judges(kind) {
				return true
			}
		}
		return false
	}
	if judges(v1alpha1.KindPodCertificateRequest) {
		pcrs := &certificatesv1.PodCertificateRequestList{}
		err := r.c.List(ctx, pcrs, client.InNamespace(r.ns))
		if !notServed(err) {
			if skipped, err := r.refused(err, "PodCertificateRequests "+r.where+" were not listed, so pod certificates are shown only where a CertificatePolicy's status names them", certCategories...); err != nil {
				return err
			} else if !skipped {
				r.in.PodCertificateRequests = pcrs.Items
			}
		}
	}
	if r.ns == "" && judges(v1alpha1.KindClusterTrustBundle) {
		bundles := &certificatesv1.ClusterTrustBundleList{}
		err := r.c.List(ctx, bundles)
		if !notServed(err) {
			if skipped, err := r.refused(err, "ClusterTrustBundles were not listed, so trust bundles are shown only where a CertificatePolicy's status names them", certCategories...); err != nil {
				return err
			} else if !skipped {
				r.in.TrustBundles = bundles.Items
			}
		}
	}
	return nil
}

// deliversTo reports whether a cluster ring's selector takes the namespace,
// as the operator decides it.
func deliversTo(r *v1alpha1.ClusterTicketKeyRing, ns *corev1.Namespace) bool {
	sel, err := metav1.LabelSelectorAsSelector(&r.Spec.NamespaceSelector)
	return err == nil && len(distribute.Targets(sel, []corev1.Namespace{*ns})) > 0
}

var auditColumns = []column{
	{name: "Kind"}, {name: "Namespace"}, {name: "Name"}, {name: "Key"}, {name: "Key Age"}, {name: "Max Age"},
	{name: "Expires"}, {name: "Problems"},
	{name: "Key Since", wide: true}, {name: "Expires At", wide: true}, {name: "Policies", wide: true}, {name: "Detail", wide: true},
}

// printAudit prints the report's table, then each problem in full.
func printAudit(streams genericiooptions.IOStreams, rep audit.Report, wide bool) error {
	if len(rep.Rows) == 0 {
		where := "in the cluster"
		if rep.Namespace != "" {
			where = "in namespace " + rep.Namespace
		}
		fmt.Fprintf(streams.ErrOut, "No rings or audited certificates found %s.\n", where)
		return printUnmanaged(streams.Out, rep.UnmanagedKeys, wide, rep)
	}
	now := rep.Time.Time
	rows := make([][]any, len(rep.Rows))
	for i, r := range rep.Rows {
		maxAge, expires, expiresAt, since := "-", "-", "-", "-"
		if r.MaxKeyAge != nil {
			maxAge = limit(r.MaxKeyAge.Duration)
		}
		if r.Expires != nil {
			expires, expiresAt = relative(r.Expires.Time, now), stamp(r.Expires.Time)
		}
		if r.KeySince != nil {
			since = stamp(r.KeySince.Time)
		}
		rows[i] = []any{r.Kind, orDash(r.Namespace), r.Name, orDash(r.KeyID), age(r.KeySince, now), maxAge,
			expires, problemSummary(r.Problems), since, expiresAt, orDash(strings.Join(r.Policies, ",")), orDash(r.Detail)}
	}
	if err := printTable(streams.Out, wide, auditColumns, rows); err != nil {
		return err
	}
	printProblems(streams.Out, rep.Rows)
	if err := printUnmanaged(streams.Out, rep.UnmanagedKeys, wide, rep); err != nil {
		return err
	}
	printPosture(streams.Out, rep.AtRest)
	return nil
}

// problemSummary names the categories of a row's problems.
func problemSummary(ps []audit.Problem) string {
	var cats []audit.Category
	for _, p := range ps {
		cats = append(cats, p.Categories...)
	}
	var names []string
	for _, c := range audit.Categories {
		if slices.Contains(cats, c) {
			names = append(names, string(c))
		}
	}
	return orDash(strings.Join(names, ","))
}

func printProblems(w io.Writer, rows []audit.Row) {
	first := true
	for _, r := range rows {
		for _, p := range r.Problems {
			if first {
				fmt.Fprintln(w, "\nProblems:")
				first = false
			}
			fmt.Fprintf(w, "  %s: %s\n", r.Ref(), p.Message)
		}
	}
}
