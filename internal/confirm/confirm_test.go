package confirm

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/agentstatus"
)

func TestTally(t *testing.T) {
	status := func(ring string, epoch int64, ids ...string) agentstatus.Status {
		s := agentstatus.Status{Ring: ring, Epoch: epoch}
		for _, id := range ids {
			s.Keys = append(s.Keys, agentstatus.KeyStatus{ID: id})
		}
		return s
	}
	at := func(name string) Target { return Target{Namespace: "shop", Name: name, Node: "node-" + name} }
	answers := []Answer{
		{Target: at("a"), Status: status("shop/web", 2, "k1", "k2")},
		{Target: at("b"), Status: status("shop/web", 1, "k1")},
		{Target: at("c"), Status: status("shop/api", 2, "k2")},
		{Target: at("d"), Err: context.DeadlineExceeded},
	}
	r := Tally("shop/web", "k2", answers, []v1alpha1.PodReport{{Namespace: "shop", Name: "e", Reason: "declares no container port"}})
	if r.Pods != 5 || r.Holding != 1 || r.MissingCount != 4 || r.Confirmed() {
		t.Fatalf("result %+v", r)
	}
	want := map[string]string{"b": "holds epoch 1, without key k2", "c": `serves ring "shop/api"`, "d": "cannot be asked", "e": "declares no container port"}
	for _, m := range r.Missing {
		if !strings.Contains(m.Reason, want[m.Name]) {
			t.Errorf("pod %s: %q, want %q", m.Name, m.Reason, want[m.Name])
		}
	}
	if r := Tally("shop/web", "k2", answers[:1], nil); !r.Confirmed() {
		t.Errorf("every pod holds the key, yet %+v", r)
	}
	if r := Tally("shop/web", "k2", nil, nil); !r.Confirmed() || r.Pods != 0 {
		t.Errorf("no pod: %+v", r)
	}
}

func TestAsk(t *testing.T) {
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(agentstatus.Status{Ring: "shop/web", Epoch: 3, Keys: []agentstatus.KeyStatus{{ID: "k3"}}})
	}))
	defer good.Close()
	var followed atomic.Int64
	elsewhere := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { followed.Add(1) }))
	defer elsewhere.Close()
	redirect := httptest.NewServer(http.RedirectHandler(elsewhere.URL, http.StatusFound))
	defer redirect.Close()
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("<html>")) }))
	defer garbage.Close()
	huge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"ring":"` + strings.Repeat("x", 2*maxAnswer) + `"}`))
	}))
	defer huge.Close()

	answers := (&Asker{}).Ask(context.Background(), []Target{{Name: "good", URL: good.URL}, {Name: "redirect", URL: redirect.URL},
		{Name: "garbage", URL: garbage.URL}, {Name: "huge", URL: huge.URL}})
	if a := answers[0]; a.Err != nil || a.Status.Epoch != 3 || a.Status.Keys[0].ID != "k3" {
		t.Errorf("good: %+v", a)
	}
	for _, a := range answers[1:] {
		if a.Err == nil {
			t.Errorf("%s: no error", a.Name)
		}
	}
	if followed.Load() != 0 {
		t.Error("a redirect was followed")
	}
}
