//go:build integration

package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
)

// TestNginxReloadsPerRotation drives a real nginx through rotations as the
// operator and the kubelet deliver them: at each rotation the staged key
// activates by the clock, the epoch that stages its successor arrives a
// second later, and an old key expires 2.5 s after the activation. With
// --reload-window 0 the sidecar reloads nginx at each of the three; with
// the default window the expiring key goes with the activation's reload,
// and the new staged key is loaded by a reload of its own (2 s after it
// came: window before its activeFrom): two. Clients on kept-alive
// connections run throughout: one that retries an idempotent request when
// the server closed the idle connection under it (as browsers and Go's
// http.Transport do) never fails; the figures of one that does not are
// logged.
func TestNginxReloadsPerRotation(t *testing.T) {
	for _, tc := range []struct {
		window  string
		reloads int // per rotation
	}{
		{"0s", 3},
		{"5s", 2},
	} {
		t.Run("reload-window "+tc.window, func(t *testing.T) { rotateUnderKeepAlive(t, tc.window, tc.reloads) })
	}
}

func rotateUnderKeepAlive(t *testing.T, window string, perRotation int) {
	const (
		rotations = 3
		period    = 8 * time.Second         // between activations
		lag       = time.Second             // the epoch staging the successor, after an activation
		expiry    = 2500 * time.Millisecond // an old key expires after an activation
	)
	g := newRig(t, fleet.Nginx)
	base := time.Now().Add(4 * time.Second).Truncate(time.Second)
	// K[i] activates at base + (i-3) period: K[2] is active first, K[r+2]
	// activates at rotation r. K[i] expires `expiry` after K[i+3]
	// activates, so that rotation r drops K[r-1].
	K := make([]keyring.Key, rotations+4)
	for i := range K {
		from := base.Add(time.Duration(i-3) * period)
		K[i] = keyAt(fmt.Sprintf("K%d", i), from, from.Add(period), from.Add(3*period+expiry))
	}
	// The ring at epoch e (e = 1 before the first rotation): K[e+2]
	// staged, K[e+1] active, and the older keys that have not expired.
	ringAt := func(e int, now time.Time) keyring.Ring {
		var keys []keyring.Key
		for i := e + 2; i >= 0; i-- {
			if now.Before(K[i].ExpiresAt) {
				keys = append(keys, K[i])
			}
		}
		return ringOf(int64(e), keys...)
	}
	g.write(ringAt(1, time.Now()))
	g.startSidecar("--check-command", fleet.NginxCheckCommand(g.r), "--reload-window", window)
	g.startServer()
	g.waitTaken(1, K[2])
	reloads0, _ := strconv.Atoi(g.metric("ringmaster_sidecar_reloads_total"))

	ctx, cancel := context.WithCancel(context.Background())
	retrying, plain := startKeepAlive(ctx, g, true), startKeepAlive(ctx, g, false)
	for r := 1; r <= rotations; r++ {
		at := K[r+2].ActiveFrom.Add(lag)
		time.Sleep(time.Until(at))
		g.write(ringAt(r+1, time.Now()))
	}
	// The last rotation's staged key waits out the window; then some more
	// requests.
	time.Sleep(time.Until(K[rotations+2].ActiveFrom.Add(lag + 6*time.Second)))
	cancel()
	rs, ps := retrying.wait(), plain.wait()

	g.waitTaken(int64(rotations+1), K[rotations+2])
	// Active, staged, then the retired keys.
	want := keyIDs(K[rotations+2], K[rotations+3], K[rotations+1], K[rotations])
	if held := g.report().ServerKeys; !slices.Equal(held, want) {
		t.Errorf("nginx holds %v, want %v", held, want)
	}
	reloads, _ := strconv.Atoi(g.metric("ringmaster_sidecar_reloads_total"))
	t.Logf("--reload-window %s: %d nginx reloads over %d rotations (%.1f per rotation); retrying client: %d requests, %d failed, %d new connections; "+
		"client that does not retry: %d requests, %d failed on a kept-alive connection",
		window, reloads-reloads0, rotations, float64(reloads-reloads0)/rotations, rs.requests, rs.failed, rs.reconnects, ps.requests, ps.failed)
	if got := reloads - reloads0; got != perRotation*rotations {
		t.Errorf("%d reloads over %d rotations, want %d per rotation", got, rotations, perRotation)
	}
	if rs.failed != 0 {
		t.Errorf("the retrying client saw %d failed requests: %v", rs.failed, rs.errs)
	}
	if rs.requests < 100 || ps.requests < 100 {
		t.Errorf("too few requests to measure: %d and %d", rs.requests, ps.requests)
	}
	if got := g.metric(`ringmaster_sidecar_reload_errors_total{cause="not_taken"}`); got != "0" {
		t.Errorf("reload errors (not_taken) = %s", got)
	}
}

func keyIDs(keys ...keyring.Key) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.ID
	}
	return out
}

// keepAlive is a few clients that each send GET / on one kept-alive
// connection every 20-60 ms.
type keepAlive struct {
	wg                           sync.WaitGroup
	requests, failed, reconnects atomic.Int64
	mu                           sync.Mutex
	errs                         map[string]int
}

type keepAliveResult struct {
	requests, failed, reconnects int64
	errs                         map[string]int
}

func (k *keepAlive) fail(err error) {
	k.failed.Add(1)
	k.mu.Lock()
	k.errs[err.Error()]++
	k.mu.Unlock()
}

func (k *keepAlive) wait() keepAliveResult {
	k.wg.Wait()
	return keepAliveResult{k.requests.Load(), k.failed.Load(), k.reconnects.Load(), k.errs}
}

// startKeepAlive starts 4 clients on the rig's nginx until ctx ends. With
// retry, each is an http.Client of its own (Go's Transport resends an
// idempotent request that met a connection the server had closed, and
// counts in reconnects the connections it dialled after the first); without,
// each writes its requests on one connection and counts a request that
// gets no response as failed, then dials again.
func startKeepAlive(ctx context.Context, g *rig, retry bool) *keepAlive {
	k := &keepAlive{errs: map[string]int{}}
	pause := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Duration(20+rand.IntN(40)) * time.Millisecond):
			return true
		}
	}
	url := "https://" + g.r.Addr + "/"
	for range 4 {
		k.wg.Go(func() {
			tc := g.client(tls.VersionTLS13, tls.NewLRUClientSessionCache(1))
			if retry {
				var dials atomic.Int64
				tr := &http.Transport{TLSClientConfig: tc, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
					dials.Add(1)
					return (&net.Dialer{}).DialContext(ctx, network, addr)
				}}
				defer tr.CloseIdleConnections()
				c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
				for pause() {
					resp, err := c.Get(url)
					k.requests.Add(1)
					if err != nil {
						k.fail(err)
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				k.reconnects.Add(dials.Load() - 1)
				return
			}
			var conn *tls.Conn
			var br *bufio.Reader
			defer func() {
				if conn != nil {
					conn.Close()
				}
			}()
			for pause() {
				if conn == nil {
					c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", g.r.Addr, tc)
					if err != nil {
						k.requests.Add(1)
						k.fail(err)
						continue
					}
					conn, br = c, bufio.NewReader(c)
				}
				k.requests.Add(1)
				_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
				_, err := fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", fleet.ServerName)
				var resp *http.Response
				if err == nil {
					resp, err = http.ReadResponse(br, nil)
				}
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				if err != nil {
					k.fail(err)
				}
				if err != nil || resp.Close {
					conn.Close()
					conn = nil
				}
			}
		})
	}
	return k
}
