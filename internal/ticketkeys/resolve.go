package ticketkeys

import (
	"cmp"
	"fmt"
	"maps"
	"path"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

// ringFiles are the names of the files a ring's delivery writes (the ring
// file, the ringmaster-agent sidecar's Envoy SDS file, and the per-format
// files of a projection): a reference to one of them is to a ring's keys.
var ringFiles = []string{keyring.FileName, "envoy-ticket-keys.json", "haproxy.keys"}

// Result is the audit of ticket keys no ring manages.
type Result struct {
	// Findings are the keys no ring manages, by namespace, kind, name and
	// field.
	Findings []Finding `json:"findings"`
	// Unresolved are the references whose keys were not read: a file
	// mounted from something the audit did not read, a Secret absent or
	// not readable.
	Unresolved []Reference `json:"unresolved,omitempty"`
}

// Resolve joins the summaries of the objects read: each reference to the
// entries it names (an SDS Secret's key entries; a file, by its base name,
// among the Secrets and ConfigMaps of its namespace). Entries a reference
// names become findings of its shape, used by it; a reference to a ring's
// Secret, or to a file a ring's delivery writes, is dropped.
func Resolve(sums []Summary) Result {
	var r Result
	byRef := map[ObjectRef]*Summary{}
	for i := range sums {
		byRef[sums[i].Object] = &sums[i]
		r.Findings = append(r.Findings, sums[i].Findings...)
	}
	at := map[string]int{} // "<object> <field>" → index in r.Findings
	key := func(o ObjectRef, field string) string { return o.String() + " " + field }
	for i, f := range r.Findings {
		at[key(f.ObjectRef, f.Field)] = i
	}
	use := func(s *Summary, name string, ref Reference) {
		k := key(s.Object, field(name))
		i, ok := at[k]
		if !ok {
			e := s.entries[name]
			f := Finding{ObjectRef: s.Object, Field: field(name), Shape: ref.Shape,
				Since: metav1.NewTime(e.Since), SinceFrom: e.SinceFrom, Manager: e.Manager}
			f.setKeys(e.KeySet)
			if ref.Shape == ShapeEnvoy && f.Size != 80 {
				f.Problem = "Envoy needs keys of exactly 80 bytes"
			}
			if ref.Shape == ShapeHAProxy {
				f.Problem = haproxyProblem(e.KeySet)
			}
			r.Findings = append(r.Findings, f)
			i = len(r.Findings) - 1
			at[k] = i
		}
		r.Findings[i].UsedBy = appendNew(r.Findings[i].UsedBy, ref.what())
	}

	for i := range sums {
		for _, ref := range sums[i].References {
			switch {
			case ref.Secret != nil:
				s, ok := byRef[*ref.Secret]
				switch {
				case !ok:
					ref.Note = fmt.Sprintf("%s was not read (absent, or not readable)", ref.Secret)
				case s.managed:
					continue
				case len(s.entries) == 0:
					ref.Note = fmt.Sprintf("%s holds no ticket keys of 48 or 80 bytes", ref.Secret)
				default:
					for _, name := range slices.Sorted(maps.Keys(s.entries)) {
						use(s, name, ref)
					}
					continue
				}
			case slices.Contains(ringFiles, path.Base(ref.Path)):
				continue
			default:
				found, managed := false, false
				for j := range sums {
					s := &sums[j]
					if s.Object.Namespace != ref.Namespace || (s.Object.Kind != KindSecret && s.Object.Kind != KindConfigMap) {
						continue
					}
					if _, ok := s.entries[path.Base(ref.Path)]; ok {
						if s.managed {
							managed = true
							continue
						}
						use(s, path.Base(ref.Path), ref)
						found = true
					}
				}
				if found || managed {
					continue
				}
				ref.Note = fmt.Sprintf("no Secret or ConfigMap read in namespace %s holds ticket keys in an entry named %s", ref.Namespace, path.Base(ref.Path))
			}
			r.Unresolved = append(r.Unresolved, ref)
		}
	}
	slices.SortFunc(r.Findings, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Field, b.Field))
	})
	return r
}
