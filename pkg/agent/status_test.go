package agent_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

// The status handler tells what the agent holds, to GET alone, and never a
// key byte.
func TestStatusHandler(t *testing.T) {
	s := newSchedule(time.Now())
	v := newVolume(t)
	v.write(s.ring(t, 7), nil, nil)
	a, err := agent.New(agent.Options{Dir: v.dir, Clock: newFakeClock(s.t0)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.StatusHandler())
	defer srv.Close()

	resp, err := http.Get(srv.URL + agent.StatusPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st agent.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: %d, %v", resp.StatusCode, err)
	}
	if st.Epoch != 7 || len(st.Keys) == 0 || st.Keys[0].ID != s.k1.ID && st.Keys[0].ID != s.k2.ID {
		t.Errorf("status %+v", st)
	}
	raw, _ := json.Marshal(st)
	assertNoSecrets(t, "status", string(raw), s.k1, s.k2)

	post, err := http.Post(srv.URL+agent.StatusPath, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	post.Body.Close()
	if post.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", post.StatusCode)
	}
}
