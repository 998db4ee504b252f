package probe

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// Target is one endpoint and the server name asked of it.
type Target struct {
	// Addr is host:port.
	Addr string `json:"address"`
	// ServerName is the SNI sent; empty: Addr's host, unless an IP
	// address.
	ServerName string `json:"serverName,omitempty"`
}

func (t Target) String() string {
	if t.ServerName == "" {
		return t.Addr + " (no server name)"
	}
	return fmt.Sprintf("%s (server name %s)", t.Addr, t.ServerName)
}

// CrossOptions configure a cross-scope probe: a ticket taken from From,
// offered to To.
type CrossOptions struct {
	From, To Target
	// Versions are the TLS versions probed, each on its own; empty: TLS 1.3
	// and TLS 1.2.
	Versions []uint16
	// RootCAs verify From; nil: the system roots. To is never verified:
	// see CrossScope.
	RootCAs *x509.CertPool
	// Insecure skips the verification of From.
	Insecure bool
	// Offers is how many connections offer the ticket to each of From and
	// To: several, so that behind a balancer the replicas are sampled.
	Offers int
	// Timeout bounds each connection; TicketWait the wait for a ticket.
	Timeout, TicketWait time.Duration
}

// Outcomes of a cross-scope probe, for one version.
const (
	// CrossResumed: To resumed the ticket From issued.
	CrossResumed = "resumed"
	// CrossRefused: To resumed none of the offers, while From resumed it.
	CrossRefused = "refused"
	// CrossInconclusive: From did not resume its own ticket either (or
	// every offer failed), so To's refusal says nothing.
	CrossInconclusive = "inconclusive"
	// CrossNoTicket: From issued no ticket.
	CrossNoTicket = "no-ticket"
)

// CrossVersion is what one TLS version showed.
type CrossVersion struct {
	Version string `json:"version"`
	// Control is the ticket offered back to From; Cross, to To.
	Control Run `json:"control"`
	Cross   Run `json:"cross"`
	// Outcome is one of the Cross* constants.
	Outcome string `json:"outcome"`
}

// CrossResult is a cross-scope probe's findings.
type CrossResult struct {
	From     Target         `json:"from"`
	To       Target         `json:"to"`
	Versions []CrossVersion `json:"versions"`
	// Crossed: To resumed From's ticket under at least one version.
	Crossed bool `json:"crossed"`
	// Verdict says it in words.
	Verdict string `json:"verdict"`
}

// CrossScope takes a ticket from o.From and offers it to o.To, for each
// version: do tickets issued under one name (or by one endpoint) resume
// under another? It offers the ticket back to From too, as the control
// that tells "To refused" from "the ticket resumes nowhere".
//
// The connections to To skip certificate verification. A careful client
// offers a session only to a name the session's certificate covers (Go's
// does), so an honest client rarely offers From's ticket to To; an
// attacker, or a client whose cache is keyed by address, does. What is
// probed is whether To's server accepts it. A resumed handshake sends no
// certificate anyway: it is what the ticket would let skip.
func CrossScope(ctx context.Context, o CrossOptions) (CrossResult, error) {
	if o.Offers < 1 {
		return CrossResult{}, errors.New("probe: at least 1 offer per target")
	}
	for _, t := range []*Target{&o.From, &o.To} {
		host, _, err := net.SplitHostPort(t.Addr)
		if err != nil {
			return CrossResult{}, fmt.Errorf("probe %q: want HOST:PORT: %w", t.Addr, err)
		}
		if t.ServerName == "" && net.ParseIP(host) == nil {
			t.ServerName = host
		}
	}
	if o.From == o.To {
		return CrossResult{}, errors.New("probe: the ticket's source and target are the same address and server name")
	}
	if len(o.Versions) == 0 {
		o.Versions = []uint16{tls.VersionTLS13, tls.VersionTLS12}
	}
	res := CrossResult{From: o.From, To: o.To}
	for _, v := range o.Versions {
		from := Options{Addr: o.From.Addr, ServerName: o.From.ServerName, Version: v, RootCAs: o.RootCAs, Insecure: o.Insecure, Timeout: o.Timeout, TicketWait: o.TicketWait}
		to := Options{Addr: o.To.Addr, ServerName: o.To.ServerName, Version: v, Insecure: true, Timeout: o.Timeout, TicketWait: o.TicketWait}
		cv := CrossVersion{Version: tls.VersionName(v)}
		first, issue := from.run(ctx, &ticketCache{}, 1)
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		if issue.Failed > 0 {
			return res, fmt.Errorf("%s, %s: %v", o.From, tls.VersionName(v), issue.Errors)
		}
		if first == nil {
			cv.Outcome = CrossNoTicket
			res.Versions = append(res.Versions, cv)
			continue
		}
		_, cv.Control = from.run(ctx, &ticketCache{session: first, keep: true}, o.Offers)
		_, cv.Cross = to.run(ctx, &ticketCache{session: first, keep: true}, o.Offers)
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		switch {
		case cv.Cross.Resumed > 0:
			cv.Outcome = CrossResumed
			res.Crossed = true
		case cv.Control.Resumed > 0 && cv.Cross.Attempts > 0:
			cv.Outcome = CrossRefused
		default:
			cv.Outcome = CrossInconclusive
		}
		res.Versions = append(res.Versions, cv)
	}
	res.Verdict = crossVerdict(res)
	return res, nil
}

func crossVerdict(r CrossResult) string {
	by := map[string][]string{}
	for _, v := range r.Versions {
		by[v.Outcome] = append(by[v.Outcome], v.Version)
	}
	from, to := r.From.String(), r.To.String()
	switch {
	case r.Crossed:
		return fmt.Sprintf("%s resumed a ticket that %s issued (%s): the two share a ticket scope, and a session begun at the first skips the second's certificate, and on some servers its client authentication. If they are not one trust scope, give each a ring of its own (docs/agent.md, \"One ring per trust scope\").",
			to, from, strings.Join(by[CrossResumed], ", "))
	case len(by[CrossRefused]) == len(r.Versions):
		return fmt.Sprintf("%s refused every ticket that %s issued and resumed itself (%s): tickets do not cross from the first to the second.",
			to, from, strings.Join(by[CrossRefused], ", "))
	}
	var parts []string
	if v := by[CrossRefused]; len(v) > 0 {
		parts = append(parts, fmt.Sprintf("refused under %s", strings.Join(v, ", ")))
	}
	if v := by[CrossInconclusive]; len(v) > 0 {
		parts = append(parts, fmt.Sprintf("inconclusive under %s (%s did not resume its own ticket)", strings.Join(v, ", "), r.From.Addr))
	}
	if v := by[CrossNoTicket]; len(v) > 0 {
		parts = append(parts, fmt.Sprintf("no ticket issued under %s", strings.Join(v, ", ")))
	}
	return fmt.Sprintf("No ticket of %s resumed at %s: %s.", from, to, strings.Join(parts, "; "))
}
