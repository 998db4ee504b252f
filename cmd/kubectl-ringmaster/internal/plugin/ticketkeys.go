package plugin

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/audit"
	"github.com/ringmaster-io/ringmaster/internal/ticketkeys"
	"github.com/ringmaster-io/ringmaster/internal/ticketkeys/read"
)

// ticketKeys reads, as the user, every object of the audited namespace
// (or cluster) that may hold a session-ticket key no ring manages, page by
// page, keeping of each only what ticketkeys.Scan keeps (never a key's
// bytes), and joins them (ticketkeys.Resolve).
func (r *auditReader) ticketKeys(ctx context.Context) error {
	got, err := read.All(ctx, r.c, r.c.RESTMapper(), r.ns)
	if err != nil {
		return err
	}
	var refusals []string
	var firstRefusal error
	for _, s := range got.Sources {
		r.in.TicketKeySources = append(r.in.TicketKeySources, audit.Source{Resource: s.Resource, Read: sourceReads[s.Outcome]})
		if s.Outcome == read.Refused {
			refusals = append(refusals, s.Resource)
			if firstRefusal == nil {
				firstRefusal = s.Err
			}
		}
	}
	if len(refusals) > 0 {
		// One note for all: a user who may not list Secrets may list none
		// of the others either.
		r.in.Notes = append(r.in.Notes, audit.Note{Blinds: []audit.Category{audit.Unmanaged},
			Message: fmt.Sprintf("%s %s were not listed, so the ticket keys they hold are not found: %v", strings.Join(refusals, ", "), r.where, firstRefusal)})
	}
	res := ticketkeys.Resolve(got.Summaries)
	r.in.TicketKeys = &res
	return nil
}

// sourceReads says each read.Outcome in the audit's words.
var sourceReads = map[read.Outcome]audit.Read{
	read.Done: audit.ReadDone, read.NotInstalled: audit.ReadNotInstalled, read.Skipped: audit.ReadSkipped, read.Refused: audit.ReadRefused,
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
