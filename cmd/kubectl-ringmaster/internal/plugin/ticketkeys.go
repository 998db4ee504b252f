package plugin

import (
	"context"
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/audit"
	"github.com/ringmaster-io/ringmaster/internal/ticketkeys"
)

// keysPage bounds how many objects one list request for ticket keys
// returns: each page is reduced to its findings (ticketkeys.Scan) before
// the next is read, so the audit holds no object's data for long.
const keysPage = 250

// keyKinds are the custom resources that may hold Envoy's session ticket
// keys. Which of them the cluster serves, and at which version, is asked
// of discovery (the client's REST mapper).
var keyKinds = []struct {
	gk      schema.GroupKind
	cluster bool
}{
	{gk: schema.GroupKind{Group: ticketkeys.GroupIstio, Kind: ticketkeys.KindEnvoyFilter}},
	{gk: schema.GroupKind{Group: ticketkeys.GroupEnvoyGateway, Kind: ticketkeys.KindEnvoyPatchPolicy}},
	{gk: schema.GroupKind{Group: ticketkeys.GroupCilium, Kind: ticketkeys.KindCiliumEnvoyConfig}},
	{gk: schema.GroupKind{Group: ticketkeys.GroupCilium, Kind: ticketkeys.KindCiliumClusterwideEnvoyConfig}, cluster: true},
}

// secretsWithoutKeys are the Secret types that hold no ticket key and are
// not read for them: TLS Secrets (whose private keys the audit never
// decodes), service account tokens and Helm's releases.
var secretsWithoutKeys = []string{string(corev1.SecretTypeTLS), string(corev1.SecretTypeServiceAccountToken), "helm.sh/release.v1"}

// ticketKeys reads, as the user, every object of the audited namespace
// (or cluster) that may hold a session-ticket key no ring manages, page by
// page, keeping of each only what ticketkeys.Scan keeps (never a key's
// bytes), and joins them (ticketkeys.Resolve).
func (r *auditReader) ticketKeys(ctx context.Context) error {
	var sums []ticketkeys.Summary
	var refusals []string
	var firstRefusal error
	read := func(resource string, list client.ObjectList, scan func() []ticketkeys.Object, opts ...client.ListOption) error {
		var cont string
		for {
			err := r.c.List(ctx, list, append(opts, client.InNamespace(r.ns), client.Limit(keysPage), client.Continue(cont))...)
			if notServed(err) {
				r.in.TicketKeySources = append(r.in.TicketKeySources, audit.Source{Resource: resource, Read: audit.ReadNotInstalled})
				return nil
			}
			if refused(err) {
				r.in.TicketKeySources = append(r.in.TicketKeySources, audit.Source{Resource: resource, Read: audit.ReadRefused})
				refusals = append(refusals, resource)
				if firstRefusal == nil {
					firstRefusal = err
				}
				return nil
			}
			if err != nil {
				return fmt.Errorf("list %s: %w", resource, err)
			}
			for _, o := range scan() {
				sums = append(sums, ticketkeys.Scan(o))
			}
			if cont = list.GetContinue(); cont == "" {
				r.in.TicketKeySources = append(r.in.TicketKeySources, audit.Source{Resource: resource, Read: audit.ReadDone})
				return nil
			}
		}
	}

	cms := &corev1.ConfigMapList{}
	if err := read("configmaps", cms, func() []ticketkeys.Object {
		out := make([]ticketkeys.Object, len(cms.Items))
		for i := range cms.Items {
			out[i] = ticketkeys.FromConfigMap(&cms.Items[i])
		}
		return out
	}); err != nil {
		return err
	}
	var notTypes []fields.Selector
	for _, t := range secretsWithoutKeys {
		notTypes = append(notTypes, fields.OneTermNotEqualSelector("type", t))
	}
	secrets := &corev1.SecretList{}
	if err := read("secrets", secrets, func() []ticketkeys.Object {
		out := make([]ticketkeys.Object, len(secrets.Items))
		for i := range secrets.Items {
			out[i] = ticketkeys.FromSecret(&secrets.Items[i])
			secrets.Items[i].Data = nil
		}
		return out
	}, client.MatchingFieldsSelector{Selector: fields.AndSelectors(notTypes...)}); err != nil {
		return err
	}
	for _, k := range keyKinds {
		m, err := r.c.RESTMapper().RESTMapping(k.gk)
		resource := strings.ToLower(k.gk.Kind) + "s." + k.gk.Group
		if m != nil {
			resource = m.Resource.GroupResource().String()
		}
		switch {
		case meta.IsNoMatchError(err):
			r.in.TicketKeySources = append(r.in.TicketKeySources, audit.Source{Resource: resource, Read: audit.ReadNotInstalled})
			continue
		case err != nil:
			return fmt.Errorf("discover %s: %w", resource, err)
		case k.cluster && r.ns != "":
			r.in.TicketKeySources = append(r.in.TicketKeySources, audit.Source{Resource: resource, Read: audit.ReadSkipped})
			continue
		}
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(m.GroupVersionKind.GroupVersion().WithKind(k.gk.Kind + "List"))
		if err := read(resource, list, func() []ticketkeys.Object {
			out := make([]ticketkeys.Object, len(list.Items))
			for i := range list.Items {
				list.Items[i].SetGroupVersionKind(m.GroupVersionKind)
				out[i] = ticketkeys.FromUnstructured(&list.Items[i])
			}
			return out
		}); err != nil {
			return err
		}
	}
	if len(refusals) > 0 {
		// One note for all: a user who may not list Secrets may list none
		// of the others either.
		r.in.Notes = append(r.in.Notes, audit.Note{Blinds: []audit.Category{audit.Unmanaged},
			Message: fmt.Sprintf("%s %s were not listed, so the ticket keys they hold are not found: %v", strings.Join(refusals, ", "), r.where, firstRefusal)})
	}
	res := ticketkeys.Resolve(sums)
	r.in.TicketKeys = &res
	return nil
}

var unmanagedColumns = []column{
	{name: "Kind"}, {name: "Namespace"}, {name: "Name"}, {name: "Field"}, {name: "Shape"}, {name: "Keys"}, {name: "Size"}, {name: "Unchanged For"},
	{name: "Last Changed", wide: true}, {name: "Fingerprints", wide: true}, {name: "Used By", wide: true}, {name: "Problem", wide: true},
}

// printUnmanaged prints the ticket keys no ring manages.
func printUnmanaged(w io.Writer, u *audit.UnmanagedKeys, wide bool, rep audit.Report) error {
	if u == nil {
		return nil
	}
	fmt.Fprintln(w, "\nUnmanaged ticket keys:")
	fmt.Fprintf(w, "  Session-ticket keys no ring manages: they rotate only by hand, and whoever holds one decrypts every session it protected. Kinds %s.\n", u.SourceSummary())
	if len(u.Findings) == 0 {
		fmt.Fprintln(w, "  None found.")
	} else {
		now := rep.Time.Time
		rows := make([][]any, len(u.Findings))
		for i, f := range u.Findings {
			unchanged := "unknown"
			if f.SinceFrom == ticketkeys.SinceManagedFields {
				unchanged = age(&f.Since, now)
			}
			size := "mixed"
			if f.Size != 0 {
				size = fmt.Sprint(f.Size)
			}
			rows[i] = []any{f.Kind, orDash(f.Namespace), f.Name, f.Field, f.Shape, fmt.Sprint(f.Keys), size, unchanged,
				audit.Changed(f), strings.Join(f.Fingerprints, ","), orDash(strings.Join(f.UsedBy, ", ")), orDash(f.Problem)}
		}
		var b strings.Builder
		if err := printTable(&b, wide, unmanagedColumns, rows); err != nil {
			return err
		}
		for line := range strings.SplitSeq(strings.TrimSuffix(b.String(), "\n"), "\n") {
			fmt.Fprintln(w, "  "+line)
		}
	}
	for _, ref := range u.Unresolved {
		fmt.Fprintf(w, "  Not read: %s %s: %s\n", ref.ObjectRef, esc(ref.Field), esc(ref.Note))
	}
	return nil
}
