// Package apiaudit counts the requests one user makes of the API server, as
// the API server saw them: it writes kube-apiserver's audit policy that
// records each request of that user once, at Metadata level (no object, no
// Secret data), when the response completes, and reads the JSON log
// kube-apiserver writes under it. make bench-scale (hack/scale) and the
// request-count test (test/requests) count the operator's requests with it,
// by verb and resource, leaving out its Lease renewals.
//
// It is test and benchmark support, imported by no part of the operator.
package apiaudit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
)

// ServiceAccountUser is the user name a service account's token
// authenticates as: system:serviceaccount:NAMESPACE:NAME.
func ServiceAccountUser(namespace, name string) string {
	return serviceaccount.MakeUsername(namespace, name)
}

// Policy is the audit policy that records every request of users, and
// nothing else: at Metadata level (who, what, which object, the response
// code; never a request or response body), once per request, when its
// response completes. A watch is recorded when it ends.
func Policy(users ...string) auditv1.Policy {
	return auditv1.Policy{
		TypeMeta:   metav1.TypeMeta{APIVersion: auditv1.SchemeGroupVersion.String(), Kind: "Policy"},
		OmitStages: []auditv1.Stage{auditv1.StageRequestReceived, auditv1.StageResponseStarted},
		Rules: []auditv1.PolicyRule{
			{Level: auditv1.LevelMetadata, Users: users},
			{Level: auditv1.LevelNone},
		},
	}
}

// WritePolicy writes Policy(users...) to path, as JSON (which
// kube-apiserver reads as YAML).
func WritePolicy(path string, users ...string) error {
	if len(users) == 0 {
		return errors.New("an audit policy for no user records nothing")
	}
	b, err := json.MarshalIndent(Policy(users...), "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// Flags are kube-apiserver's flags that write the audit log to logPath
// under the policy at policyPath: JSON, one event a line, written before
// the request returns (the log backend's default blocking mode), and never
// rotated (a maximum size of 0), so that a reader never loses a line to a
// rotation however long the run.
func Flags(policyPath, logPath string) map[string]string {
	return map[string]string{
		"audit-policy-file": policyPath,
		"audit-log-path":    logPath,
		"audit-log-format":  "json",
		"audit-log-maxsize": "0",
	}
}

// Request is one request as the audit log recorded it.
type Request struct {
	User      string
	UserAgent string
	Verb      string // get, list, watch, create, update, patch, delete, ...
	Group     string // the API group; "" for the core group
	Resource  string
	// Subresource is status, for instance; "" for the object itself.
	Subresource string
	Namespace   string
	Name        string
	Code        int32 // the response's HTTP status code
	Received    time.Time
}

// Write reports whether the request asks to change something: create,
// update, patch, delete or deletecollection.
func (r Request) Write() bool {
	switch r.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// Key is how a request is counted: its verb, its resource and
// subresource, and its response code when that is not a success.
type Key struct {
	Verb string
	// Resource is the resource, and its subresource after a slash:
	// "ticketkeyrings/status".
	Resource string
	// Failed is the response code of a request that did not succeed (409
	// for a conflict), and 0 for one that did.
	Failed int32
}

// String is "patch ticketkeyrings/status", or "patch
// ticketkeyrings/status 409" for a request that failed.
func (k Key) String() string {
	s := k.Verb + " " + k.Resource
	if k.Failed != 0 {
		s += fmt.Sprintf(" %d", k.Failed)
	}
	return s
}

// Key is the request's Key.
func (r Request) Key() Key {
	k := Key{Verb: r.Verb, Resource: r.Resource}
	if r.Subresource != "" {
		k.Resource += "/" + r.Subresource
	}
	if r.Code != 0 && (r.Code < 200 || r.Code > 299) {
		k.Failed = r.Code
	}
	return k
}

// PerRing reports whether a request counts toward what a ring costs. Two
// kinds do not, whatever the number of rings: the Lease's (leader
// election renews it every RetryPeriod, 2 s by default, a GET and a PUT of
// resource leases), and watches (the informers' long-running requests, one
// per kind watched, recorded when they end and are renewed).
func PerRing(r Request) bool {
	return r.Resource != "leases" && r.Verb != "watch"
}

// ParseLine parses one line of the JSON audit log.
func ParseLine(line []byte) (Request, error) {
	var ev auditv1.Event
	if err := json.Unmarshal(line, &ev); err != nil {
		return Request{}, fmt.Errorf("parse audit event: %w", err)
	}
	r := Request{
		User: ev.User.Username, UserAgent: ev.UserAgent, Verb: ev.Verb,
		Received: ev.RequestReceivedTimestamp.Time,
	}
	if o := ev.ObjectRef; o != nil {
		r.Group, r.Resource, r.Subresource, r.Namespace, r.Name = o.APIGroup, o.Resource, o.Subresource, o.Namespace, o.Name
	}
	if ev.ResponseStatus != nil {
		r.Code = ev.ResponseStatus.Code
	}
	return r, nil
}

// Reader reads an audit log as kube-apiserver appends to it.
type Reader struct {
	path    string
	offset  int64
	partial []byte // a line not yet complete at the last Read
}

// NewReader reads the log at path from its start. The file need not exist
// yet.
func NewReader(path string) *Reader { return &Reader{path: path} }

// Read returns the requests of the lines appended since the last Read;
// a line still being written is left for the next.
func (r *Reader) Read() ([]Request, error) {
	f, err := os.Open(r.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(r.offset, io.SeekStart); err != nil {
		return nil, err
	}
	var out []Request
	br := bufio.NewReaderSize(f, 1<<20)
	for {
		chunk, err := br.ReadBytes('\n')
		r.offset += int64(len(chunk))
		if errors.Is(err, io.EOF) {
			r.partial = append(r.partial, chunk...)
			return out, nil
		}
		if err != nil {
			return out, err
		}
		line := chunk
		if len(r.partial) > 0 {
			line = append(r.partial, chunk...)
			r.partial = nil
		}
		if line = bytes.TrimSpace(line); len(line) == 0 {
			continue
		}
		req, err := ParseLine(line)
		if err != nil {
			return out, fmt.Errorf("%s at byte %d: %w", r.path, r.offset, err)
		}
		out = append(out, req)
	}
}

// Counts are requests counted by Key.
type Counts map[Key]int

// Add counts r.
func (c Counts) Add(r Request) { c[r.Key()]++ }

// Total is the number of requests counted.
func (c Counts) Total() int { return c.sum(func(Key) bool { return true }) }

// Writes is the number of requests counted that changed something: writes
// (Request.Write) that succeeded.
func (c Counts) Writes() int {
	return c.sum(func(k Key) bool { return k.Failed == 0 && (Request{Verb: k.Verb}).Write() })
}

// Reads is the number of get and list requests counted, whatever their
// outcome.
func (c Counts) Reads() int {
	return c.sum(func(k Key) bool { return k.Verb == "get" || k.Verb == "list" })
}

// Failed is the number of requests counted that did not succeed, such as
// writes refused for a conflict.
func (c Counts) Failed() int { return c.sum(func(k Key) bool { return k.Failed != 0 }) }

func (c Counts) sum(which func(Key) bool) int {
	n := 0
	for k, v := range c {
		if which(k) {
			n += v
		}
	}
	return n
}

// ByVerb adds the counts up by verb.
func (c Counts) ByVerb() map[string]int {
	out := map[string]int{}
	for k, v := range c {
		out[k.Verb] += v
	}
	return out
}

// Per lists the counts divided by n, most frequent first: "create secrets
// 2.00, list secrets 1.40, ...". n of 0 lists the counts themselves.
func (c Counts) Per(n float64) string {
	keys := slices.SortedFunc(maps.Keys(c), func(a, b Key) int {
		if c[a] != c[b] {
			return c[b] - c[a]
		}
		return strings.Compare(a.String(), b.String())
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k.String() + " " + ratio(c[k], n)
	}
	return strings.Join(parts, ", ")
}

// PerVerb lists the counts by verb divided by n, in the order of the
// verbs' names: "create 2.00, delete 1.00, list 1.40, ...". n of 0 lists
// the counts themselves.
func (c Counts) PerVerb(n float64) string {
	by := c.ByVerb()
	var parts []string
	for _, v := range slices.Sorted(maps.Keys(by)) {
		parts = append(parts, v+" "+ratio(by[v], n))
	}
	return strings.Join(parts, ", ")
}

func ratio(count int, n float64) string {
	if n == 0 {
		return fmt.Sprint(count)
	}
	return fmt.Sprintf("%.2f", float64(count)/n)
}
