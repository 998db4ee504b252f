//go:build integration

package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/testing/atomicdir"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
)

// The HAProxy ingress shape (docs/gateways.md#haproxy-ingress-controllers):
// several HAProxy instances behind one Service, each with its own
// ringmaster-agent sidecar on the same ring, as the replicas of an
// HAProxy-based ingress controller run it. make test runs it with 3
// rotations; make measure-gateways with more, for the figures the docs
// quote.
var ingressRotations = flag.Int("ingress-rotations", 3, "rotations TestHAProxyIngressFleet drives its ring through")

// ingressConfig is an HAProxy configuration in the shape the HAProxy
// ingress controllers run: master-worker, the runtime API on a stats
// socket of level admin (with expose-fd listeners, as haproxytech's image
// declares it), TLS options for every bind set in the global section, and
// one HTTPS frontend. keys is the bind's ticket key option, if any;
// bindOptions the global ssl-default-bind-options.
func ingressConfig(r *fleet.Replica, bindOptions, keys string) string {
	return fmt.Sprintf(`global
    master-worker
    stats socket %[1]s/haproxy.sock mode 600 level admin expose-fd listeners
    ssl-default-bind-options %[5]s
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend https
    bind %[2]s ssl crt %[3]s/tls.crt %[4]s alpn http/1.1
    http-request return status 200 content-type text/plain lf-string "hello from %%[dst]:%%[dst_port]\n"
`, r.Shared, r.Addr, r.Dir, keys, bindOptions)
}

// ingressVariant is one way of running the fleet's tickets.
type ingressVariant struct {
	name string
	// bindOptions are the global ssl-default-bind-options.
	bindOptions string
	// ring: tls-ticket-keys from the sidecar, on a rotating ring.
	ring bool
	// sameResumes: a reconnect to the instance that issued the client's
	// ticket or session resumes. Not with tickets off over TLS 1.2: that
	// takes a session ID, which Go's client does not offer.
	sameResumes func(version uint16) bool
}

var ingressVariants = []ingressVariant{
	{name: "ring", bindOptions: "ssl-min-ver TLSv1.2", ring: true, sameResumes: func(uint16) bool { return true }},
	{name: "own-keys", bindOptions: "ssl-min-ver TLSv1.2", sameResumes: func(uint16) bool { return true }},
	{name: "tickets-off", bindOptions: "ssl-min-ver TLSv1.2 no-tls-tickets", sameResumes: func(v uint16) bool { return v == tls.VersionTLS13 }},
}

// ingressTally counts one variant's reconnects under one TLS version: a
// client's first connection is not one.
type ingressTally struct {
	reconnects, resumed int
	// other counts the reconnects that went to another instance than the
	// one the client last connected to (whose ticket or session it holds);
	// otherResumed, those of them that resumed.
	other, otherResumed int
	failed              int
}

func (c ingressTally) String() string {
	pct := func(a, b int) float64 {
		if b == 0 {
			return 0
		}
		return 100 * float64(a) / float64(b)
	}
	return fmt.Sprintf("reconnects=%d resumed=%d (%.1f%%) to-another-instance=%d resumed-there=%d (%.1f%%) failed=%d",
		c.reconnects, c.resumed, pct(c.resumed, c.reconnects), c.other, c.otherResumed, pct(c.otherResumed, c.other), c.failed)
}

// TestHAProxyIngressFleet runs 3 real HAProxy instances in the ingress
// controllers' shape, each beside its own sidecar, all on one ring whose
// epochs reach each instance at its own moment (as each pod's kubelet
// delivers them), and clients that reconnect to an instance a seeded
// balancer picks, through rotations. With the ring every reconnect
// resumes, whichever instance it lands on, while the keys rotate. Side by
// side, the same instances with HAProxy's own keys (tickets on, no
// tls-ticket-keys) and with the controllers' default (no-tls-tickets)
// resume only on the instance that issued the ticket or session: about one
// reconnect in three.
func TestHAProxyIngressFleet(t *testing.T) {
	const instances, clients = 3, 6
	interval := 4 * time.Second
	for _, v := range ingressVariants {
		t.Run(v.name, func(t *testing.T) {
			rigs := make([]*rig, instances)
			for i := range rigs {
				rigs[i] = newRig(t, fleet.HAProxy)
				if i > 0 {
					rigs[i].pki = rigs[0].pki // one certificate for the fleet, as one Ingress has
				}
				keys := ""
				if v.ring {
					keys = "tls-ticket-keys " + filepath.Join(rigs[i].r.Shared, haproxyKeys)
				}
				if err := os.WriteFile(rigs[i].r.ConfFile(fleet.HAProxy), []byte(ingressConfig(rigs[i].r, v.bindOptions, keys)), 0o600); err != nil {
					t.Fatal(err)
				}
			}

			// The ring: keys activating every interval from start, each
			// staged one interval ahead, one decrypt-only key kept (all
			// HAProxy holds), expiring one interval after it retires. The
			// first rotation comes once the fleet has had time to start.
			start := time.Now().Add(2 * interval).Truncate(time.Second)
			key := func(n int) keyring.Key {
				af := start.Add(time.Duration(n-1) * interval)
				if n == 0 {
					af = start.Add(-time.Hour)
				}
				return keyAt(fmt.Sprintf("%s-%d", t.Name(), n), af, start.Add(time.Duration(n)*interval), start.Add(time.Duration(n+1)*interval))
			}
			epoch := func(n int) keyring.Ring { // the epoch published as key n activates
				keys := []keyring.Key{key(n + 1), key(n)}
				if n > 0 {
					keys = append(keys, key(n-1))
				}
				return ringOf(int64(n+1), keys...)
			}
			for _, g := range rigs {
				g.write(epoch(0))
				if v.ring {
					g.startSidecar()
					if err := fleet.WaitFile(t.Context(), filepath.Join(g.r.Shared, haproxyKeys), nil); err != nil {
						t.Fatal(err)
					}
				}
				g.startServer()
				if v.ring {
					g.waitFor("the first epoch taken", func() bool { ok, _ := g.ready(); return ok && g.report().Epoch == 1 })
				}
			}
			// The clients run through the rotations on the ring; two
			// intervals without it, where nothing rotates.
			end := start.Add(time.Duration(*ingressRotations) * interval)
			if !v.ring {
				end = time.Now().Add(2 * interval)
			}

			// The operator: at each activation, the next epoch, delivered to
			// each instance 0.5 s + 0.3 s × its index later.
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var wg sync.WaitGroup
			var deliverErr error
			if v.ring {
				wg.Go(func() {
					for n := 1; n <= *ingressRotations; n++ {
						for i, g := range rigs {
							at := start.Add(time.Duration(n-1)*interval + 500*time.Millisecond + time.Duration(i)*300*time.Millisecond)
							select {
							case <-ctx.Done():
								return
							case <-time.After(time.Until(at)):
							}
							data, err := keyring.Encode(epoch(n))
							if err == nil {
								files := g.pki.Files()
								files["tls.crt.key"] = files["tls.key"]
								files[keyring.FileName] = atomicdir.File{Data: data}
								err = g.vol.Write(files)
							}
							if err != nil && deliverErr == nil {
								deliverErr = err
							}
						}
					}
				})
			}

			// The clients: half on TLS 1.2, half on TLS 1.3, each with its
			// own session cache, reconnecting until the last rotation is
			// past, each to an instance the balancer picks.
			tallies := map[uint16]*ingressTally{tls.VersionTLS12: {}, tls.VersionTLS13: {}}
			var mu sync.Mutex
			for c := range clients {
				version := []uint16{tls.VersionTLS12, tls.VersionTLS13}[c%2]
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(c), 35))
					cfg := rigs[0].client(version, tls.NewLRUClientSessionCache(1))
					last := -1
					for time.Now().Before(end) {
						i := rng.IntN(instances)
						s := fleet.Connect(ctx, rigs[i].r.Addr, cfg, 5*time.Second)
						mu.Lock()
						tl := tallies[version]
						if last >= 0 {
							tl.reconnects++
							if s.Err != "" {
								tl.failed++
							}
							if s.Resumed {
								tl.resumed++
							}
							if i != last {
								tl.other++
								if s.Resumed {
									tl.otherResumed++
								}
							}
						}
						mu.Unlock()
						if s.Err == "" {
							last = i
						}
						time.Sleep(time.Duration(40+rng.IntN(40)) * time.Millisecond)
					}
				})
			}
			wg.Wait()
			if deliverErr != nil {
				t.Fatal(deliverErr)
			}

			for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
				tl := tallies[version]
				t.Logf("MEASURE haproxy-ingress instances=%d variant=%s rotations=%d %s %s",
					instances, v.name, *ingressRotations, strings.ReplaceAll(tls.VersionName(version), " ", ""), tl)
				switch {
				case tl.reconnects == 0 || tl.other == 0:
					t.Errorf("%s: no reconnect to another instance: %s", tls.VersionName(version), tl)
				case tl.failed > 0:
					t.Errorf("%s: %d connections failed", tls.VersionName(version), tl.failed)
				case v.ring && tl.resumed != tl.reconnects:
					t.Errorf("%s on the ring: %d of %d reconnects paid a full handshake", tls.VersionName(version), tl.reconnects-tl.resumed, tl.reconnects)
				case !v.ring && tl.otherResumed != 0:
					t.Errorf("%s with per-instance keys: %d reconnects resumed on another instance", tls.VersionName(version), tl.otherResumed)
				case v.sameResumes(version) && tl.resumed-tl.otherResumed != tl.reconnects-tl.other:
					t.Errorf("%s: %d reconnects to the same instance, %d resumed", tls.VersionName(version), tl.reconnects-tl.other, tl.resumed-tl.otherResumed)
				}
			}
			if v.ring {
				// Every instance took every epoch, and encrypts with the
				// key active now.
				last, _ := epoch(*ingressRotations).Active(time.Now())
				for i, g := range rigs {
					g.waitTaken(int64(*ingressRotations+1), last)
					if !g.encryptsWith(last) {
						t.Errorf("instance %d does not encrypt with the active key %s", i, last.ID)
					}
				}
			}
		})
	}
}
