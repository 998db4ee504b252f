package apiaudit

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// A line as kube-apiserver v1.37 writes it at Metadata level.
const patchStatus = `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"5a4b","stage":"ResponseComplete","requestURI":"/apis/ringmaster.io/v1alpha1/namespaces/shop/ticketkeyrings/web/status?fieldManager=ringmaster\u0026force=true","verb":"patch","user":{"username":"system:serviceaccount:ringmaster-system:ringmaster","groups":["system:serviceaccounts","system:authenticated"]},"sourceIPs":["127.0.0.1"],"userAgent":"ringmaster/v0.0.0 (linux/amd64) kubernetes/$Format","objectRef":{"resource":"ticketkeyrings","namespace":"shop","name":"web","apiGroup":"ringmaster.io","apiVersion":"v1alpha1","subresource":"status"},"responseStatus":{"metadata":{},"code":409},"requestReceivedTimestamp":"2026-12-02T10:00:00.123456Z","stageTimestamp":"2026-12-02T10:00:00.130000Z"}`

func line(verb, group, resource, sub string, code int32) string {
	ev := auditv1.Event{
		Verb: verb, Stage: auditv1.StageResponseComplete,
		ObjectRef: &auditv1.ObjectReference{APIGroup: group, Resource: resource, Subresource: sub, Namespace: "shop", Name: "web"},
	}
	if code != 0 {
		ev.ResponseStatus = &metav1.Status{Code: code}
	}
	b, err := json.Marshal(ev)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestParseLine(t *testing.T) {
	r, err := ParseLine([]byte(patchStatus))
	if err != nil {
		t.Fatal(err)
	}
	want := Request{User: "system:serviceaccount:ringmaster-system:ringmaster", UserAgent: "ringmaster/v0.0.0 (linux/amd64) kubernetes/$Format",
		Verb: "patch", Group: "ringmaster.io", Resource: "ticketkeyrings", Subresource: "status", Namespace: "shop", Name: "web", Code: 409}
	got := r
	got.Received = want.Received
	if got != want {
		t.Errorf("ParseLine = %+v, want %+v", got, want)
	}
	if r.Received.IsZero() || r.Received.Nanosecond() != 123456000 {
		t.Errorf("received at %v, want 10:00:00.123456", r.Received)
	}
	if _, err := ParseLine([]byte(`{"verb":`)); err == nil {
		t.Error("ParseLine of a cut line succeeded")
	}
}

func TestKeyWriteAndPerRing(t *testing.T) {
	for _, tc := range []struct {
		r       Request
		key     string
		write   bool
		perRing bool
	}{
		{Request{Verb: "create", Resource: "secrets", Code: 201}, "create secrets", true, true},
		{Request{Verb: "create", Group: "events.k8s.io", Resource: "events", Code: 201}, "create events", true, true},
		{Request{Verb: "patch", Resource: "ticketkeyrings", Subresource: "status", Code: 200}, "patch ticketkeyrings/status", true, true},
		{Request{Verb: "patch", Resource: "ticketkeyrings", Subresource: "status", Code: 409}, "patch ticketkeyrings/status 409", true, true},
		{Request{Verb: "update", Resource: "secrets"}, "update secrets", true, true},
		{Request{Verb: "delete", Resource: "secrets", Code: 404}, "delete secrets 404", true, true},
		{Request{Verb: "deletecollection", Resource: "secrets"}, "deletecollection secrets", true, true},
		{Request{Verb: "list", Resource: "secrets", Code: 200}, "list secrets", false, true},
		{Request{Verb: "get", Resource: "secrets", Code: 200}, "get secrets", false, true},
		{Request{Verb: "watch", Resource: "secrets", Code: 200}, "watch secrets", false, false},
		{Request{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Code: 200}, "get leases", false, false},
		{Request{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Code: 200}, "update leases", true, false},
	} {
		if got := tc.r.Key().String(); got != tc.key {
			t.Errorf("%+v: Key = %q, want %q", tc.r, got, tc.key)
		}
		if got := tc.r.Write(); got != tc.write {
			t.Errorf("%+v: Write = %t, want %t", tc.r, got, tc.write)
		}
		if got := PerRing(tc.r); got != tc.perRing {
			t.Errorf("%+v: PerRing = %t, want %t", tc.r, got, tc.perRing)
		}
	}
}

func TestCounts(t *testing.T) {
	c := Counts{}
	for _, r := range []Request{
		{Verb: "create", Resource: "secrets"}, {Verb: "create", Resource: "secrets"},
		{Verb: "create", Resource: "events"}, {Verb: "list", Resource: "secrets"},
		{Verb: "list", Resource: "secrets"}, {Verb: "list", Resource: "secrets"},
		{Verb: "patch", Resource: "ticketkeyrings", Subresource: "status", Code: 409},
	} {
		c.Add(r)
	}
	if c.Total() != 7 || c.Writes() != 3 || c.Reads() != 3 || c.Failed() != 1 {
		t.Errorf("Total %d, Writes %d, Reads %d, Failed %d; want 7, 3, 3, 1", c.Total(), c.Writes(), c.Reads(), c.Failed())
	}
	if got, want := c.Per(2), "list secrets 1.50, create secrets 1.00, create events 0.50, patch ticketkeyrings/status 409 0.50"; got != want {
		t.Errorf("Per(2) = %q, want %q", got, want)
	}
	if got, want := c.Per(0), "list secrets 3, create secrets 2, create events 1, patch ticketkeyrings/status 409 1"; got != want {
		t.Errorf("Per(0) = %q, want %q", got, want)
	}
	if got, want := c.PerVerb(2), "create 1.50, list 1.50, patch 0.50"; got != want {
		t.Errorf("PerVerb(2) = %q, want %q", got, want)
	}
}

func TestReaderReadsWhatIsAppended(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	r := NewReader(path)
	if got, err := r.Read(); err != nil || len(got) != 0 {
		t.Fatalf("Read of a log not yet written = %v, %v; want nothing", got, err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	write := func(s string) {
		t.Helper()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	full, half := line("create", "", "secrets", "", 0), line("list", "", "secrets", "", 0)
	write(full + "\n" + half[:20])
	got, err := r.Read()
	if err != nil || len(got) != 1 || got[0].Verb != "create" {
		t.Fatalf("Read after one line and a half = %+v, %v; want the create", got, err)
	}
	write(half[20:] + "\n")
	got, err = r.Read()
	if err != nil || len(got) != 1 || got[0].Verb != "list" {
		t.Fatalf("Read after the rest of the line = %+v, %v; want the list", got, err)
	}
	if got, err := r.Read(); err != nil || len(got) != 0 {
		t.Fatalf("Read with nothing new = %+v, %v", got, err)
	}
	write("{not json}\n")
	if _, err := r.Read(); err == nil {
		t.Error("Read of a malformed line succeeded")
	}
}

func TestPolicy(t *testing.T) {
	p := Policy(ServiceAccountUser("ringmaster-system", "ringmaster"))
	if len(p.Rules) != 2 || p.Rules[0].Level != auditv1.LevelMetadata || p.Rules[1].Level != auditv1.LevelNone {
		t.Fatalf("rules %+v: want Metadata for the user, then None", p.Rules)
	}
	if got := p.Rules[0].Users; len(got) != 1 || got[0] != "system:serviceaccount:ringmaster-system:ringmaster" {
		t.Errorf("users %v", got)
	}
	if err := WritePolicy(filepath.Join(t.TempDir(), "p.json")); err == nil {
		t.Error("WritePolicy for no user succeeded")
	}
}
