package audit

import (
	"fmt"
	"strings"

	"github.com/ringmaster-io/ringmaster/internal/ticketkeys"
)

// Read says whether the audit read one kind of object for ticket keys.
type Read string

const (
	// ReadDone: the kind was listed.
	ReadDone Read = "read"
	// ReadNotInstalled: the cluster does not serve the kind (its CRD is
	// not installed), so nothing of it can hold keys.
	ReadNotInstalled Read = "not installed"
	// ReadRefused: the user may not list the kind; its keys are not known.
	ReadRefused Read = "refused"
	// ReadSkipped: the kind is cluster-scoped and the audit covers one
	// namespace.
	ReadSkipped Read = "skipped"
)

// Source is one kind read for ticket keys.
type Source struct {
	// Resource is the kind's resource and group, as kubectl names it
	// (envoyfilters.networking.istio.io).
	Resource string `json:"resource"`
	Read     Read   `json:"read"`
}

// UnmanagedKeys is the report's account of the session-ticket keys no
// ring manages (internal/ticketkeys): where each set is, its size, count,
// fingerprints and last change; never its bytes.
type UnmanagedKeys struct {
	Findings []ticketkeys.Finding `json:"findings"`
	// Unresolved are references whose keys were not read.
	Unresolved []ticketkeys.Reference `json:"unresolved,omitempty"`
	// Sources are the kinds read, or not, and why.
	Sources []Source `json:"sources"`
}

// unmanagedProblem is the problem of a finding: a key no ring rotates.
func unmanagedProblem(f ticketkeys.Finding) Problem {
	msg := fmt.Sprintf("%d %s key(s) no ring manages (%s), last changed %s", f.Keys, sizeName(f.Size), f.Shape, Changed(f))
	if f.Problem != "" {
		msg += "; " + f.Problem
	}
	return problem(msg, Unmanaged)
}

// Changed says when a finding's keys last changed, and how that is known.
func Changed(f ticketkeys.Finding) string {
	if f.SinceFrom == ticketkeys.SinceCreation {
		return "at an unknown time (no managedFields; the object was created " + stamp(f.Since.Time) + ")"
	}
	by := ""
	if f.Manager != "" {
		by = " by " + f.Manager
	}
	return "no later than " + stamp(f.Since.Time) + " (managedFields" + by + ")"
}

func sizeName(size int) string {
	if size == 0 {
		return "mixed-size"
	}
	return fmt.Sprintf("%d-byte", size)
}

// FindingRef names where a finding is: Kind namespace/name field.
func FindingRef(f ticketkeys.Finding) string {
	return f.String() + " " + f.Field
}

// SourceSummary lists the kinds by what was made of them.
func (u *UnmanagedKeys) SourceSummary() string {
	by := map[Read][]string{}
	for _, s := range u.Sources {
		by[s.Read] = append(by[s.Read], s.Resource)
	}
	var parts []string
	for _, r := range []Read{ReadDone, ReadNotInstalled, ReadRefused, ReadSkipped} {
		if len(by[r]) > 0 {
			parts = append(parts, string(r)+": "+strings.Join(by[r], ", "))
		}
	}
	return strings.Join(parts, "; ")
}
