package dnswork_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ringmaster-io/ringmaster/internal/dnspub"
	"github.com/ringmaster-io/ringmaster/internal/dnswork"
	"github.com/ringmaster-io/ringmaster/internal/testing/knot"
)

// list is an ECHConfigList of one config per id, as the ech param carries it.
func list(ids ...uint8) []byte {
	var configs []byte
	for _, id := range ids {
		c := []byte{id, 0x00, 0x20, 0x00, 0x20}
		for i := range 32 {
			c = append(c, id^byte(i))
		}
		c = append(c, 0x00, 0x04, 0x00, 0x01, 0x00, 0x01, 64, 0x00, 0x0e)
		c = append(c, "public.example"...)
		c = append(c, 0x00, 0x00)
		configs = append(configs, 0xfe, 0x0d, byte(len(c)>>8), byte(len(c)))
		configs = append(configs, c...)
	}
	return append([]byte{byte(len(configs) >> 8), byte(len(configs))}, configs...)
}

func target(s *knot.Server, name string) dnspub.Target {
	return dnspub.Target{Zone: s.Zone, Name: name + "." + s.Zone, Primary: s.Addr, TTL: 120,
		TSIG: &dnspub.TSIG{Name: s.Key.Name, Algorithm: s.Key.Algorithm, Secret: s.Key.Secret}}
}

func key(name string) dnswork.Key {
	return dnswork.Key{Kind: "ECHKeyRing", NamespacedName: types.NamespacedName{Namespace: "shop", Name: name}}
}

// silent is a DNS server that takes queries and never answers, over UDP
// and TCP on one port.
func silent(t *testing.T) string {
	t.Helper()
	for range 20 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp", pc.LocalAddr().String())
		if err != nil {
			pc.Close()
			continue
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				t.Cleanup(func() { c.Close() })
			}
		})
		t.Cleanup(func() { pc.Close(); l.Close(); wg.Wait() })
		return pc.LocalAddr().String()
	}
	t.Fatal("no free port for a silent server")
	return ""
}

func start(t *testing.T, w *dnswork.Worker) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// answer waits for the answer to j (bounded), asking again as a reconcile
// would.
func answer(t *testing.T, w *dnswork.Worker, j dnswork.Job, ok func(dnswork.Result) bool) dnswork.Result {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if r, found := w.Want(j); found && ok(r) {
			return r
		}
		time.Sleep(50 * time.Millisecond)
	}
	r, found := w.Want(j)
	t.Fatalf("no answer to %s %s: %+v (found %v)", j.Mode, j.Target.Name, r, found)
	return r
}

func holds(r dnswork.Result) bool { return r.Holds }

func ech(t *testing.T, s *knot.Server, name string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rrs, err := s.Query(ctx, name, dns.TypeHTTPS)
	if err != nil || len(rrs) != 1 {
		t.Fatalf("%s HTTPS = %v, %v; want one record", name, rrs, err)
	}
	for _, kv := range rrs[0].(*dns.HTTPS).Value {
		if e, ok := kv.(*dns.SVCBECHConfig); ok {
			return e.ECH
		}
	}
	return nil
}

// A zone whose server never answers holds up none of another zone's jobs.
func TestDeadZoneDelaysOnlyItself(t *testing.T) {
	s := knot.Run(t, "example.test.", knot.Key{})
	dead := silent(t)
	w := &dnswork.Worker{Budget: dnswork.Budget{Exchange: 5 * time.Second}}
	start(t, w)
	stuck := dnswork.Job{Key: key("stuck"), Zone: "dead", Mode: dnswork.Publish, List: list(1),
		Target: dnspub.Target{Zone: "example.test.", Name: "www.example.test.", Primary: dead}}
	if _, ok := w.Want(stuck); ok {
		t.Fatal("an answer before any run")
	}
	time.Sleep(200 * time.Millisecond) // the dead zone's job is running first
	fine := dnswork.Job{Key: key("web"), Zone: "live", Mode: dnswork.Publish, List: list(2), Target: target(s, "www")}
	answer(t, w, fine, holds)
	if got := ech(t, s, "www.example.test."); string(got) != string(list(2)) {
		t.Fatalf("ech = %x, want %x", got, list(2))
	}
	if r, ok := w.Want(stuck); ok {
		t.Fatalf("the dead zone's job answered %+v before its exchange timed out", r)
	}
}

// Writes beyond a zone's budget wait; Remove takes off only the value it
// names; a Verify job writes nothing.
func TestBudgetRemoveAndVerify(t *testing.T) {
	s := knot.Run(t, "example.test.", knot.Key{})
	var mu sync.Mutex
	counts := map[string]int{}
	w := &dnswork.Worker{Budget: dnswork.Budget{UpdatesPerMinute: 1, Burst: 1},
		Updates: func(zone, outcome string) { mu.Lock(); counts[zone+" "+outcome]++; mu.Unlock() }}
	start(t, w)
	a := dnswork.Job{Key: key("a"), Zone: "z", Mode: dnswork.Publish, List: list(1), Target: target(s, "www")}
	answer(t, w, a, holds)
	b := dnswork.Job{Key: key("b"), Zone: "z", Mode: dnswork.Publish, List: list(3), Target: target(s, "api")}
	r := answer(t, w, b, func(r dnswork.Result) bool { return r.Err != nil })
	if !errors.Is(r.Err, dnswork.ErrRateLimited) {
		t.Fatalf("a second write within the minute = %+v, want it rate limited", r)
	}
	mu.Lock()
	if counts["z written"] != 1 || counts["z rate_limited"] < 1 {
		t.Errorf("updates counted %v, want 1 written and the limited one", counts)
	}
	mu.Unlock()

	// Another value at www: nothing of list(9) to remove, nothing written.
	other := dnswork.Job{Key: key("other"), Zone: "z2", Mode: dnswork.Remove, List: list(9), Target: target(s, "www")}
	answer(t, w, other, holds)
	if got := ech(t, s, "www.example.test."); string(got) != string(list(1)) {
		t.Fatalf("ech after removing another value = %x, want %x kept", got, list(1))
	}
	own := dnswork.Job{Key: key("a"), Zone: "z2", Mode: dnswork.Remove, List: list(1), Target: target(s, "www")}
	answer(t, w, own, holds)
	if got := ech(t, s, "www.example.test."); got != nil {
		t.Fatalf("ech after removing its own value = %x, want none", got)
	}

	v := dnswork.Job{Key: key("v"), Zone: "z3", Mode: dnswork.Verify, List: list(4), Target: target(s, "www")}
	r = answer(t, w, v, func(dnswork.Result) bool { return true })
	if r.Holds || r.Err != nil {
		t.Fatalf("verify of a value DNS does not hold = %+v, want not holding, no error (another system publishes)", r)
	}
	if got := ech(t, s, "www.example.test."); got != nil {
		t.Fatalf("a verify job wrote %x", got)
	}
}

func TestForTenantNamesNoServer(t *testing.T) {
	err := errors.Join(
		&dnspub.Error{Op: "verify", Server: "10.1.2.3:53", Zone: "example.test.", Name: "www.example.test.", Rcode: -1, Err: context.DeadlineExceeded},
		&dnspub.Error{Op: "publish", Server: "ns1.example.test:53", Zone: "example.test.", Name: "www.example.test.", Rcode: dns.RcodeRefused},
	)
	got := dnswork.ForTenant(err)
	for _, leak := range []string{"10.1.2.3", "ns1.example.test"} {
		if contains(got, leak) {
			t.Errorf("ForTenant = %q names %s", got, leak)
		}
	}
	for _, want := range []string{"2 of the zone's servers", "timed out", "REFUSED"} {
		if !contains(got, want) {
			t.Errorf("ForTenant = %q, want it to say %q", got, want)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
