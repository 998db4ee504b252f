package echring

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Policy is an ECHKeyRing's timing, as the lifecycle reads it.
type Policy struct {
	// RotationInterval is how long one config stays published before the
	// next replaces it.
	RotationInterval time.Duration
	// DeliveryDelay is the least time a config is staged before it is
	// published.
	DeliveryDelay time.Duration
	// TTL is the HTTPS record's TTL.
	TTL time.Duration
	// RetirementMargin is how long past the TTL a retired config keeps
	// decrypting.
	RetirementMargin time.Duration
	// MaxDelay is the confirmation ceiling: how long past its due time a
	// staged config waits for pods that do not report it before it is
	// published anyway (spec.confirmation.maxDelay, or timeout).
	MaxDelay time.Duration
	// RetainedConfigs is how many retired configs the ring keeps at once
	// (spec.retainedConfigs); 0 means as many as MaxConfigs allows. With
	// the staged and the published config, the ring holds at most
	// RetainedConfigs + 2: a new config waits for a retired one to expire
	// rather than exceed it.
	RetainedConfigs int
}

// maxConfigs is how many live configs the ring holds at most.
func (p Policy) maxConfigs() int {
	if p.RetainedConfigs <= 0 {
		return MaxConfigs
	}
	return min(p.RetainedConfigs+2, MaxConfigs)
}

// Life is the longest a config of the ring lives, from its createdAt to
// its expiresAt: staged for DeliveryDelay before it falls due, held back
// by its fleet up to MaxDelay, published for RotationInterval, until its
// successor falls due and is held back up to MaxDelay in turn, then
// retired for TTL + RetirementMargin:
//
//	deliveryDelay + maxDelay + rotationInterval + maxDelay + ttl + retirementMargin
//
// A config is minted with expiresAt = createdAt + Life, and nothing
// extends it: pods left alone drop it by their own clocks.
func (p Policy) Life() time.Duration {
	return p.DeliveryDelay + p.MaxDelay + p.RotationInterval + p.MaxDelay + p.TTL + p.RetirementMargin
}

// Validate reports a policy the lifecycle cannot follow (the API's rules
// should have refused it).
func (p Policy) Validate() error {
	switch {
	case p.RotationInterval < 10*time.Second:
		return fmt.Errorf("rotationInterval %s is under 10s", p.RotationInterval)
	case p.DeliveryDelay < 0 || p.DeliveryDelay >= p.RotationInterval:
		return fmt.Errorf("deliveryDelay %s is not between 0s and rotationInterval", p.DeliveryDelay)
	case p.TTL <= 0:
		return errors.New("the DNS TTL is not positive")
	case p.RetirementMargin < 0:
		return errors.New("retirementMargin is negative")
	case p.MaxDelay < 0:
		return errors.New("the confirmation ceiling is negative")
	}
	return nil
}

// Hold says why a staged config is not published yet.
type Hold string

const (
	// HoldNone: no config is staged, or the staged one was just published.
	HoldNone Hold = ""
	// HoldDelivery: the staged config has not been staged for the delivery
	// delay yet, or the published one has not served its interval.
	HoldDelivery Hold = "Delivery"
	// HoldConfirmation: some selected pod does not report holding it.
	HoldConfirmation Hold = "Confirmation"
	// HoldDNS: DNS did not take it, or its servers do not answer it yet.
	HoldDNS Hold = "DNS"
	// HoldFull: the ring holds as many configs as it may already
	// (retainedConfigs + 2, at most MaxConfigs); the next is minted when a
	// retired one expires.
	HoldFull Hold = "Full"
)

// DNS is what the authoritative servers answered about the configs the
// ring asked them to hold (Want).
type DNS struct {
	// Checked says the servers were asked.
	Checked bool
	// Holds says every server answers exactly the configs wanted.
	Holds bool
	// Err is why DNS could not be written or asked.
	Err error
}

// Input is what one pass of the lifecycle reads.
type Input struct {
	Now    time.Time
	Policy Policy
	// Ring is the current ring (from the newest snapshot); zero for a new
	// ring.
	Ring Ring
	// Confirmed says every selected pod reports holding the staged config.
	Confirmed bool
	// DNS is what the servers answered about Want(...).
	DNS DNS
}

// Plan is the outcome of one pass.
type Plan struct {
	// Ring is the next ring, without the config Mint asks for (Stage adds
	// it).
	Ring Ring
	// Changed says Ring (or Stage's) differs from the input's: a new
	// snapshot is due.
	Changed bool
	// Mint, when set, is the config_id of a new config to stage.
	Mint *uint8
	// Published is the config published by this pass, if any; Retired
	// those it retired.
	Published *uint8
	Retired   []uint8
	// Destroyed are the configs dropped past their expiresAt.
	Destroyed []uint8
	// Unconfirmed says the config published by this pass was published at
	// its ceiling without every pod reporting it.
	Unconfirmed bool
	// Held says why the staged config is not published.
	Held Hold
	// Life is how long past its createdAt the config Mint asks for
	// expires (Policy.Life).
	Life time.Duration
	// Next is when the lifecycle next has something to do by the clock.
	Next time.Time
}

// Staged is the ring's staged config: the newest, when staged.
func (r Ring) Staged() (Config, bool) {
	if len(r.Configs) > 0 && r.Configs[0].State == Staged {
		return r.Configs[0], true
	}
	return Config{}, false
}

// ReadyAt is when r's staged config may be published by the clock (it
// still waits for its fleet and DNS); zero when none is staged.
func ReadyAt(p Policy, r Ring) time.Time {
	s, ok := r.Staged()
	if !ok {
		return time.Time{}
	}
	return readyAt(p, r, s)
}

// CeilingAt is when r's staged config is published even unconfirmed
// (once DNS answers it): MaxDelay past its ReadyAt; zero when none is
// staged.
func CeilingAt(p Policy, r Ring) time.Time {
	at := ReadyAt(p, r)
	if at.IsZero() {
		return at
	}
	return at.Add(p.MaxDelay)
}

// MintAt is when r stages its next config, once none is staged: zero (at
// once) for a ring with no published config.
func MintAt(p Policy, r Ring) time.Time { return mintAt(p, r) }

// readyAt is when the staged config s may be published by the clock: once
// staged for the delivery delay, and once the published config served its
// interval.
func readyAt(p Policy, r Ring, s Config) time.Time {
	at := s.CreatedAt.Add(p.DeliveryDelay)
	for _, c := range r.Published() {
		if due := c.PublishedAt.Add(p.RotationInterval); due.After(at) {
			at = due
		}
	}
	return at
}

// Want is the configs DNS must hold at now: the staged config alone, once
// it may be published (the one it replaces leaves DNS in the same update),
// or else the published ones; never a config past its expiresAt. The
// caller writes them to DNS when the servers do not answer them, verifies,
// and passes the answer to Next.
func Want(now time.Time, p Policy, r Ring, confirmed bool) []Config {
	r = live(now, r)
	if s, ok := r.Staged(); ok && publishable(now, p, r, s, confirmed) {
		return []Config{s}
	}
	return r.Published()
}

// publishable says whether the staged config s may be published at now,
// DNS permitting: it is due and confirmed, or past its ceiling.
func publishable(now time.Time, p Policy, r Ring, s Config, confirmed bool) bool {
	ready := readyAt(p, r, s)
	return !now.Before(ready) && (confirmed || !now.Before(ready.Add(p.MaxDelay)))
}

// live is r without the configs past their expiresAt at now.
func live(now time.Time, r Ring) Ring {
	r.Configs = slices.DeleteFunc(slices.Clone(r.Configs), func(c Config) bool { return c.Expired(now) })
	return r
}

// Next is one pass of the lifecycle. A config past its expiresAt is
// dropped first, whatever its state. A staged config is published once the
// clock allows (deliveryDelay since it was staged, rotationInterval since
// its predecessor was published), every pod confirmed it or it is MaxDelay
// past that due time (the ceiling), and DNS answers it; then the config it
// replaces retires, its expiresAt shortened to TTL + retirementMargin later
// if that is sooner. A new config is staged deliveryDelay before the
// published one falls due (at once for a ring that has none), unless the
// ring already holds MaxConfigs, and expires Policy.Life after. Nothing is
// ever published before its ceiling unconfirmed, or before DNS answers it;
// nothing is dropped before its expiresAt, whatever DNS does, and nothing
// extends an expiresAt.
func Next(in Input) Plan {
	p, now := in.Policy, in.Now
	next := in.Ring
	next.Configs = slices.Clone(in.Ring.Configs)
	out := Plan{Life: p.Life()}

	kept := next.Configs[:0]
	for _, c := range next.Configs {
		if c.Expired(now) {
			out.Destroyed = append(out.Destroyed, c.ID)
			continue
		}
		kept = append(kept, c)
	}
	next.Configs = kept
	out.Changed = len(out.Destroyed) > 0

	if s, ok := next.Staged(); ok {
		ready := readyAt(p, next, s)
		switch {
		case now.Before(ready):
			out.Held = HoldDelivery
		case !publishable(now, p, next, s, in.Confirmed):
			out.Held = HoldConfirmation
		case !in.DNS.Checked || !in.DNS.Holds || in.DNS.Err != nil:
			out.Held = HoldDNS
		default:
			for i := range next.Configs {
				c := &next.Configs[i]
				switch {
				case i == 0:
					c.State, c.PublishedAt = Published, now
					out.Published, out.Unconfirmed = &c.ID, !in.Confirmed
				case c.State == Published:
					c.State, c.RetiredAt = Retired, now
					if end := now.Add(p.TTL + p.RetirementMargin); c.ExpiresAt.IsZero() || end.Before(c.ExpiresAt) {
						c.ExpiresAt = end
					}
					out.Retired = append(out.Retired, c.ID)
				}
			}
			out.Changed = true
		}
	}

	if _, staged := next.Staged(); !staged {
		due := mintAt(p, next)
		switch {
		case now.Before(due):
			out.Next = due
		case len(next.Configs) >= p.maxConfigs():
			out.Held = HoldFull
		default:
			id := freeID(next)
			out.Mint = &id
			out.Changed = true
		}
	} else if s, _ := next.Staged(); out.Held == HoldDelivery {
		out.Next = readyAt(p, next, s)
	} else if out.Held == HoldConfirmation {
		out.Next = readyAt(p, next, s).Add(p.MaxDelay)
	}
	for _, c := range next.Configs {
		if !c.ExpiresAt.IsZero() && (out.Next.IsZero() || c.ExpiresAt.Before(out.Next)) {
			out.Next = c.ExpiresAt
		}
	}
	out.Ring = next
	return out
}

// mintAt is when the ring stages its next config: deliveryDelay before the
// newest published config falls due, or at once without one.
func mintAt(p Policy, r Ring) time.Time {
	var at time.Time
	for _, c := range r.Published() {
		if due := c.PublishedAt.Add(p.RotationInterval - p.DeliveryDelay); due.After(at) {
			at = due
		}
	}
	return at
}

// freeID is a config_id no live config of r holds: the one after the
// newest config's, skipping those in use.
func freeID(r Ring) uint8 {
	id := uint8(1)
	if len(r.Configs) > 0 {
		id = r.Configs[0].ID + 1
	}
	for slices.ContainsFunc(r.Configs, func(c Config) bool { return c.ID == id }) {
		id++
	}
	return id
}

// Stage completes a plan that mints: c, made by NewConfig with the id
// Mint named, joins the ring as its staged config, created at now and
// expiring the plan's Life after. The
// ring takes the next epoch when the plan changed it.
func (pl Plan) Stage(now time.Time, c Config) (Ring, error) {
	r := pl.Ring
	r.Configs = slices.Clone(r.Configs)
	if pl.Mint != nil {
		if c.ID != *pl.Mint {
			return Ring{}, fmt.Errorf("minted config %d, the plan asked for %d", c.ID, *pl.Mint)
		}
		c.State, c.CreatedAt = Staged, now
		if pl.Life <= 0 {
			return Ring{}, fmt.Errorf("minted config %d has no life: the plan sets none", c.ID)
		}
		c.PublishedAt, c.RetiredAt, c.ExpiresAt = time.Time{}, time.Time{}, now.Add(pl.Life)
		r.Configs = append([]Config{c}, r.Configs...)
	}
	if pl.Changed {
		r.Epoch++
		r.IssuedAt = now
	}
	return r, nil
}
