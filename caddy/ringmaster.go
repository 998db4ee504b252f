// Package ringmaster is a Caddy STEK provider, tls.stek.ringmaster: Caddy's
// TLS session ticket keys come from a ringmaster TicketKeyRing projected
// into the pod, read through pkg/agent, instead of Caddy's own rotation.
//
// Caddy gets the ring's keys in the order the clock says: the active key
// first (the one that encrypts), then staged keys soonest first, then
// decrypt-only keys newest first, at every new epoch and at every key's
// activation and expiry. A bad snapshot keeps the last good keys (pkg/agent
// does not publish it). When every key has expired, Caddy gets one random
// key of the provider's own, so that it never resumes under a dead key.
//
//	"session_tickets": {"key_source": {"provider": "ringmaster",
//	    "dir": "/var/run/ringmaster", "ring": "shop/web"}}
//
// The keys are the same as a Go server embedding pkg/agent serves, so
// Caddy and such servers on one ring resume each other's sessions.
package ringmaster

import (
	"context"
	"crypto/rand"
	"errors"
	"sync"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddytls"

	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

func init() {
	caddy.RegisterModule(new(Provider))
}

// Provider is the tls.stek.ringmaster module.
type Provider struct {
	// Dir is the projected volume holding ticketkeys.json (mounted
	// without subPath). Required.
	Dir string `json:"dir,omitempty"`
	// Ring, if set, is the ring served, "<namespace>/<name>" (or "<name>"
	// of a ClusterTicketKeyRing); empty: the first ring read, pinned.
	Ring string `json:"ring,omitempty"`

	agent *agent.Agent
	swaps chan struct{}

	mu     sync.Mutex
	random *[32]byte // the stand-in key while the ring has none
}

// CaddyModule returns the Caddy module information.
func (*Provider) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "tls.stek.ringmaster",
		New: func() caddy.Module { return new(Provider) },
	}
}

// Provision reads the volume once: a missing or unusable ring fails the
// config load.
func (p *Provider) Provision(ctx caddy.Context) error {
	if p.Dir == "" {
		return errors.New("tls.stek.ringmaster: dir is required")
	}
	p.swaps = make(chan struct{}, 1)
	a, err := agent.New(agent.Options{
		Dir:     p.Dir,
		Ring:    p.Ring,
		Require: agent.TicketKeys,
		Logger:  ctx.Slogger(),
		OnSwap: func(agent.Status) {
			select {
			case p.swaps <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		return err
	}
	p.agent = a
	return nil
}

// Initialize returns the keys served now.
func (p *Provider) Initialize(*caddytls.SessionTicketService) ([][32]byte, error) {
	return p.keys(), nil
}

// Next watches the volume until done is closed, and sends the keys at each
// change: a new epoch, a key's activation or expiry.
func (p *Provider) Next(done <-chan struct{}) <-chan [][32]byte {
	out := make(chan [][32]byte)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_ = p.agent.Start(ctx) // returns when ctx ends
	}()
	go func() {
		defer cancel()
		for {
			select {
			case <-done:
				return
			case <-p.swaps:
			}
			select {
			case out <- p.keys():
			case <-done:
				return
			}
		}
	}()
	return out
}

// keys are the ring's keys in serving order, or the stand-in random key
// while the ring has none.
func (p *Provider) keys() [][32]byte {
	var out [][32]byte
	p.agent.ExportTicketKeys(func(_ agent.Status, keys []agent.TicketKey) {
		for _, k := range keys {
			out = append(out, [32]byte(k.Secret))
		}
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(out) > 0 {
		if p.random != nil {
			clear(p.random[:])
			p.random = nil
		}
		return out
	}
	if p.random == nil {
		p.random = new([32]byte)
		_, _ = rand.Read(p.random[:]) // never fails (crypto/rand)
	}
	return [][32]byte{*p.random}
}

// Interface guards.
var (
	_ caddy.Provisioner     = (*Provider)(nil)
	_ caddytls.STEKProvider = (*Provider)(nil)
)
