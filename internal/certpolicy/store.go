package certpolicy

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

// MaxStatusViolations caps a policy's status.violations; the rest are
// counted in violationsOmitted.
const MaxStatusViolations = 50

// PolicyState holds one policy's verdicts on the certificates it selects.
type PolicyState struct {
	Compiled Compiled
	// generation is the policy generation the verdicts were made under.
	generation int64
	results    map[ID]Verdict
}

// Current reports whether the verdicts were made under the policy's
// current generation; if not, every certificate must be judged again.
func (st *PolicyState) Current() bool { return st.generation == st.Compiled.Generation }

// Store holds the facts of every certificate and every policy's verdicts, so
// that a changed certificate is judged alone, once per policy, and a policy's
// status is aggregated from verdicts already made. One writer (the
// controller's single worker) changes it; the metrics scraper reads it
// concurrently.
type Store struct {
	// Ledger dates keys reused across certificates.
	Ledger Ledger

	mu          sync.RWMutex
	subjects    map[ID]*Facts
	byNamespace map[string]map[ID]struct{}
	policies    map[string]*PolicyState
}

// NewStore returns an empty store.
func NewStore() *Store {
	return &Store{
		subjects:    map[ID]*Facts{},
		byNamespace: map[string]map[ID]struct{}{},
		policies:    map[string]*PolicyState{},
	}
}

// Policy returns the state of a policy, holding its newest compiled form.
func (s *Store) Policy(c Compiled) *PolicyState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.policies[c.Name]
	if st == nil {
		st = &PolicyState{results: map[ID]Verdict{}}
		s.policies[c.Name] = st
	}
	st.Compiled = c
	return st
}

// DropPolicy forgets a policy that is gone or invalid.
func (s *Store) DropPolicy(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.policies, name)
}

// Judge is how a policy judges one certificate; false when it does not
// select it.
type Judge func(st *PolicyState, f *Facts) (Verdict, bool)

// JudgeAll judges every known certificate afresh under a new or changed
// policy.
func (s *Store) JudgeAll(st *PolicyState, judge Judge) {
	s.mu.Lock()
	defer s.mu.Unlock()
	results := make(map[ID]Verdict, len(st.results))
	for k, f := range s.subjects {
		if v, ok := judge(st, f); ok {
			results[k] = v
		}
	}
	st.results, st.generation = results, st.Compiled.Generation
}

// Recheck judges again the certificates whose verdict the passing of time
// may have changed by now.
func (s *Store) Recheck(st *PolicyState, now time.Time, judge Judge) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range st.results {
		if !v.Recheck.IsZero() && !v.Recheck.After(now) {
			if nv, ok := judge(st, s.subjects[k]); ok {
				st.results[k] = nv
			}
		}
	}
}

// Upsert stores a certificate's facts, judges it for every policy, and
// returns the policies whose status must be aggregated again.
func (s *Store) Upsert(f *Facts, judge Judge) (changed []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.subjects[f.ID]
	s.subjects[f.ID] = f
	ns := s.byNamespace[f.ID.Namespace]
	if ns == nil {
		ns = map[ID]struct{}{}
		s.byNamespace[f.ID.Namespace] = ns
	}
	ns[f.ID] = struct{}{}
	for name, st := range s.policies {
		v, selected := judge(st, f)
		prev, had := st.results[f.ID]
		switch {
		case selected && (!had || !sameVerdict(prev, v) || f.differs(old)):
			st.results[f.ID] = v
			changed = append(changed, name)
		case !selected && had:
			delete(st.results, f.ID)
			changed = append(changed, name)
		}
	}
	slices.Sort(changed)
	return changed
}

// Remove forgets a certificate and returns the policies that judged it.
func (s *Store) Remove(k ID) (changed []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.subjects[k]; !ok {
		return nil
	}
	delete(s.subjects, k)
	delete(s.byNamespace[k.Namespace], k)
	if len(s.byNamespace[k.Namespace]) == 0 {
		delete(s.byNamespace, k.Namespace)
	}
	for name, st := range s.policies {
		if _, ok := st.results[k]; ok {
			delete(st.results, k)
			changed = append(changed, name)
		}
	}
	slices.Sort(changed)
	return changed
}

// InNamespace lists the certificates known in a namespace, for a namespace
// whose labels changed.
func (s *Store) InNamespace(ns string) []ID {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]ID, 0, len(s.byNamespace[ns]))
	for k := range s.byNamespace[ns] {
		out = append(out, k)
	}
	slices.SortFunc(out, compareIDs)
	return out
}

// Get returns a certificate's facts and a policy's verdict on it.
func (s *Store) Get(k ID, st *PolicyState) (*Facts, Verdict) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.subjects[k], st.results[k]
}

// Facts returns a certificate's facts; nil when unknown.
func (s *Store) Facts(k ID) *Facts {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.subjects[k]
}

// PodStateCounts counts, for every policy, the pod certificates it
// selects in each state.
func (s *Store) PodStateCounts() map[string]map[PodState]int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string]map[PodState]int, len(s.policies))
	for name, st := range s.policies {
		counts := map[PodState]int{}
		for _, v := range st.results {
			if v.PodState != "" {
				counts[v.PodState]++
			}
		}
		if len(counts) > 0 {
			out[name] = counts
		}
	}
	return out
}

// Violating lists, in order, the certificates that break a rule of the
// policy.
func (s *Store) Violating(st *PolicyState) []ID {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []ID
	for k, v := range st.results {
		if len(v.Violations) > 0 {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, compareIDs)
	return out
}

// EachCertificate calls fn with the facts of every certificate, for the
// metrics scraper. fn must not call the store.
func (s *Store) EachCertificate(fn func(*Facts)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, f := range s.subjects {
		fn(f)
	}
}

// ViolationCounts counts, for every policy and every rule, the certificates
// that break it.
func (s *Store) ViolationCounts() map[string]map[Rule]int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string]map[Rule]int, len(s.policies))
	for name, st := range s.policies {
		counts := map[Rule]int{}
		for _, v := range st.results {
			for _, x := range v.Violations {
				counts[x.Rule]++
			}
		}
		out[name] = counts
	}
	return out
}

func sameVerdict(a, b Verdict) bool {
	return a.Recheck.Equal(b.Recheck) && a.PodState == b.PodState && slices.Equal(a.Violations, b.Violations)
}

// Aggregate is a policy's status summary.
type Aggregate struct {
	Evaluated, Violating int32
	OldestKey            *v1alpha1.KeyAgeRef
	SoonestExpiry        *v1alpha1.ExpiryRef
	// Violations are the first MaxStatusViolations, in certificate order;
	// Omitted counts the rest.
	Violations []v1alpha1.Violation
	Omitted    int32
	// ByRule counts the certificates that break each rule.
	ByRule map[Rule]int
	// Recheck is the soonest a verdict may change with time alone.
	Recheck time.Time
	// PodStates counts the pod certificates by state; nil when none is
	// selected.
	PodStates map[PodState]int32
}

// Aggregate summarises a policy's verdicts for its status.
func (s *Store) Aggregate(st *PolicyState) Aggregate {
	s.mu.RLock()
	defer s.mu.RUnlock()
	a := Aggregate{ByRule: map[Rule]int{}}
	keys := make([]ID, 0, len(st.results))
	for k := range st.results {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareIDs) // ties go to the first in order
	for _, k := range keys {
		v, f := st.results[k], s.subjects[k]
		a.Evaluated++
		if !v.Recheck.IsZero() && (a.Recheck.IsZero() || v.Recheck.Before(a.Recheck)) {
			a.Recheck = v.Recheck
		}
		if v.PodState != "" {
			if a.PodStates == nil {
				a.PodStates = map[PodState]int32{}
			}
			a.PodStates[v.PodState]++
		}
		if c, ok := f.Subject.CAs.SoonestExpiry(); ok && f.Subject.Cert == nil {
			// A trust bundle: its soonest CA.
			if a.SoonestExpiry == nil || c.NotAfter.Before(a.SoonestExpiry.NotAfter.Time) {
				a.SoonestExpiry = &v1alpha1.ExpiryRef{CertificateRef: k.Ref(), NotAfter: metav1.NewTime(c.NotAfter)}
			}
		}
		if c := f.Subject.Cert; c != nil {
			if since := f.Subject.KeySince; !since.IsZero() && (a.OldestKey == nil || since.Before(a.OldestKey.Since.Time)) {
				a.OldestKey = &v1alpha1.KeyAgeRef{CertificateRef: k.Ref(), Since: metav1.NewTime(since)}
			}
			if a.SoonestExpiry == nil || c.NotAfter.Before(a.SoonestExpiry.NotAfter.Time) {
				a.SoonestExpiry = &v1alpha1.ExpiryRef{CertificateRef: k.Ref(), NotAfter: metav1.NewTime(c.NotAfter)}
			}
		}
		if len(v.Violations) == 0 {
			continue
		}
		a.Violating++
		for _, x := range v.Violations {
			a.ByRule[x.Rule]++
			if len(a.Violations) < MaxStatusViolations {
				a.Violations = append(a.Violations, v1alpha1.Violation{CertificateRef: k.Ref(), Rule: string(x.Rule), Message: x.Message})
			} else {
				a.Omitted++
			}
		}
	}
	return a
}

// ByRuleSummary says how many certificates break each rule, e.g.
// "maxKeyAge (2), keyAlgorithms (1)".
func (a Aggregate) ByRuleSummary() string {
	var parts []string
	for _, r := range Rules {
		if n := a.ByRule[r]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s (%d)", r, n))
		}
	}
	return strings.Join(parts, ", ")
}
