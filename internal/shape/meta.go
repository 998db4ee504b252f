package shape

import (
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// Bounds of what a shape keeps of an object beside what its kind's own
// rules say.
const (
	// MaxLabelBytes bounds an object's labels, keys and values together,
	// where a selector reads them; an object with more keeps none, and is
	// marked (Cut reports CutLabels): selectors then judge it by no label,
	// and the code that selects says it could not judge it.
	MaxLabelBytes = 4 << 10
	// MaxSelectorBytes bounds a label selector of a spec, keys, operators
	// and values together; a longer one is replaced by one that matches
	// nothing (NothingSelector) and marked (Cut names its field).
	MaxSelectorBytes = 4 << 10
	// MaxFinalizers bounds the finalizers kept of an object whose
	// finalizers the operator reads; the first ones are kept, and the
	// object is marked (CutFinalizers).
	MaxFinalizers = 8
	// maxNameLen is the longest object name (a DNS subdomain): an
	// annotation naming an object is kept only up to it.
	maxNameLen = 253
)

// CappedAnnotation is set on an object a shape cut, to a comma-separated
// list of what was cut (CutLabels, CutFinalizers, CutSecrets, CutPorts, or
// a spec field's path). Its key is no valid annotation key (a name may not
// start with "_"), so the API server lets nobody write it: only a shape
// sets it, and it carries it over when it shapes an object it kept
// already.
const CappedAnnotation = "ringmaster.io/_capped"

// What CappedAnnotation names besides spec fields.
const (
	CutLabels     = "labels"
	CutFinalizers = "finalizers"
	CutSecrets    = "secrets"
	CutPorts      = "ports"
)

// Cut reports what the shape cut of o (CappedAnnotation), sorted; none for
// an object kept whole or read from the API server.
func Cut(o metav1.Object) []string {
	v := o.GetAnnotations()[CappedAnnotation]
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// WasCut reports whether the shape cut what of o.
func WasCut(o metav1.Object, what string) bool { return slices.Contains(Cut(o), what) }

// cuts gathers what a shape cuts of one object, starting from what an
// earlier pass of the shape recorded.
type cuts []string

func carried(o metav1.Object) cuts { return cuts(Cut(o)) }

func (c *cuts) add(what string) {
	if !slices.Contains(*c, what) {
		*c = append(*c, what)
		slices.Sort(*c)
	}
}

// mark records the cuts on the kept object's meta.
func (c cuts) mark(m *metav1.ObjectMeta) {
	if len(c) == 0 {
		return
	}
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[CappedAnnotation] = in(strings.Join(c, ","))
}

// AnnotationsDigest is the annotation in which a shape that drops an
// object's annotations keeps a digest of them all, so that a change of
// any annotation still shows as one (a reconcile asked for by annotating
// an object, as Flux's reconcile.fluxcd.io/requestedAt asks, still
// starts one). Like CappedAnnotation its key is no valid annotation key.
const AnnotationsDigest = "ringmaster.io/_annotations"

// digestAnnotations records in out a digest of the annotations of m, the
// object as the API server sent it; a digest m carries already (m was
// shaped before) is kept as it is.
func digestAnnotations(m, out *metav1.ObjectMeta) {
	d, ok := m.Annotations[AnnotationsDigest]
	if !ok {
		if len(m.Annotations) == 0 {
			return
		}
		keys := slices.Sorted(maps.Keys(m.Annotations))
		h := fnv.New64a()
		for _, k := range keys {
			h.Write([]byte(k))
			h.Write([]byte{0})
			h.Write([]byte(m.Annotations[k]))
			h.Write([]byte{0})
		}
		d = strconv.FormatUint(h.Sum64(), 16)
	}
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[AnnotationsDigest] = d
}

// identity is what every shape keeps of an object's metadata: what names
// it and dates it, and its generation.
func identity(m *metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: m.Name, Namespace: in(m.Namespace), UID: m.UID, ResourceVersion: m.ResourceVersion, Generation: m.Generation,
		CreationTimestamp: m.CreationTimestamp, DeletionTimestamp: m.DeletionTimestamp,
	}
}

// labelsUpTo are labels as the caches keep them: all, or none when they
// are over limit bytes.
func labelsUpTo(l map[string]string, limit int, c *cuts) map[string]string {
	if len(l) == 0 {
		return nil
	}
	size := 0
	for k, v := range l {
		size += len(k) + len(v)
	}
	if size > limit {
		c.add(CutLabels)
		return nil
	}
	return l
}

// finalizers keeps the first MaxFinalizers of f, those listed in first
// before any other.
func finalizers(f []string, c *cuts, first ...string) []string {
	if len(f) == 0 {
		return nil
	}
	var out []string
	for _, name := range first {
		if slices.Contains(f, name) {
			out = append(out, in(name))
		}
	}
	for _, name := range f {
		if slices.Contains(first, name) {
			continue
		}
		if len(out) == MaxFinalizers {
			c.add(CutFinalizers)
			break
		}
		out = append(out, in(cut(name)))
	}
	return out
}

// NothingSelector matches no object: what a shape keeps of a selector over
// MaxSelectorBytes, so that nothing is selected by a selector the cache did
// not keep.
func NothingSelector() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "ringmaster.io/selector-not-kept", Operator: metav1.LabelSelectorOpExists},
		{Key: "ringmaster.io/selector-not-kept", Operator: metav1.LabelSelectorOpDoesNotExist},
	}}
}

// selector is s as kept: whole, or NothingSelector when over
// MaxSelectorBytes, with path recorded as cut.
func selector(s *metav1.LabelSelector, path string, c *cuts) *metav1.LabelSelector {
	if s == nil || selectorSize(s) <= MaxSelectorBytes {
		return s
	}
	c.add(path)
	return NothingSelector()
}

// selectorValue is selector for a selector held by value.
func selectorValue(s metav1.LabelSelector, path string, c *cuts) metav1.LabelSelector {
	return *selector(&s, path, c)
}

func selectorSize(s *metav1.LabelSelector) int {
	n := 0
	for k, v := range s.MatchLabels {
		n += len(k) + len(v)
	}
	for _, e := range s.MatchExpressions {
		n += len(e.Key) + len(e.Operator)
		for _, v := range e.Values {
			n += len(v)
		}
	}
	return n
}

// SelectorCut is the message a status shows of a selector a shape did not
// keep.
func SelectorCut(path string) string {
	return fmt.Sprintf("%s is over the %d bytes of keys, operators and values the operator keeps of a selector; it selects nothing until it is shortened", path, MaxSelectorBytes)
}

// cut keeps at most maxNameLen bytes of a name: no object has a longer one.
func cut(s string) string {
	if len(s) > maxNameLen {
		return s[:maxNameLen]
	}
	return s
}

// tombstone reports whether obj is a deletion tombstone, which every shape
// passes on as it is; any other object of the wrong type is an error.
func tombstone(obj any, want string) error {
	if _, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		return nil
	}
	return fmt.Errorf("shape: got %T, want %s", obj, want)
}
