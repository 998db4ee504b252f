package echring

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

var (
	t0     = time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	policy = Policy{RotationInterval: time.Hour, DeliveryDelay: 5 * time.Minute, TTL: 5 * time.Minute, RetirementMargin: 10 * time.Minute, MaxDelay: 30 * time.Minute}
	dnsOK  = DNS{Checked: true, Holds: true}
)

// cfg is a config of the given id and state, created at the given offset
// from t0 and expiring policy.Life() later; published and retired ones carry
// their times, retired ones expiring TTL + margin after retiredAt.
func cfg(id uint8, st State, created, published, retired time.Duration) Config {
	c := Config{ID: id, State: st, CreatedAt: t0.Add(created), ExpiresAt: t0.Add(created + policy.Life())}
	if st != Staged {
		c.PublishedAt = t0.Add(published)
	}
	if st == Retired {
		c.RetiredAt = t0.Add(retired)
		c.ExpiresAt = c.RetiredAt.Add(policy.TTL + policy.RetirementMargin)
	}
	return c
}

func ring(cs ...Config) Ring { return Ring{Ring: "shop/web", Epoch: 7, Configs: cs} }

// show is a ring's configs as "id:state" newest first.
func show(r Ring) string {
	var s []string
	for _, c := range r.Configs {
		s = append(s, fmt.Sprintf("%d:%s", c.ID, c.State))
	}
	return strings.Join(s, " ")
}

func ids(cs []Config) []uint8 {
	var out []uint8
	for _, c := range cs {
		out = append(out, c.ID)
	}
	return out
}

func TestNext(t *testing.T) {
	steady := ring(cfg(2, Published, 0, 10*time.Minute, 0), cfg(1, Retired, -2*time.Hour, -time.Hour, 10*time.Minute))
	staged := ring(cfg(3, Staged, 65*time.Minute, 0, 0), cfg(2, Published, 0, 10*time.Minute, 0))
	for _, tc := range []struct {
		name      string
		at        time.Duration
		in        Ring
		confirmed bool
		dns       DNS
		want      string // the ring after, without Mint's config
		mint      int    // the id minted, -1 for none
		held      Hold
		changed   bool
		next      time.Duration // 0: none
		destroyed []uint8
	}{
		{name: "a new ring stages its first config at once", in: ring(), mint: 1, changed: true, want: ""},
		{name: "the first config waits out the delivery delay, confirmed or not",
			at: 4 * time.Minute, in: ring(cfg(1, Staged, 0, 0, 0)), confirmed: true, dns: dnsOK,
			want: "1:staged", mint: -1, held: HoldDelivery, next: 5 * time.Minute},
		{name: "the first config waits for its fleet",
			at: 6 * time.Minute, in: ring(cfg(1, Staged, 0, 0, 0)), dns: dnsOK,
			want: "1:staged", mint: -1, held: HoldConfirmation, next: 35 * time.Minute},
		{name: "a confirmed first config waits for DNS to answer it",
			at: 6 * time.Minute, in: ring(cfg(1, Staged, 0, 0, 0)), confirmed: true, dns: DNS{Checked: true},
			want: "1:staged", mint: -1, held: HoldDNS, next: 140 * time.Minute},
		{name: "DNS down: nothing is published",
			at: 6 * time.Minute, in: ring(cfg(1, Staged, 0, 0, 0)), confirmed: true, dns: DNS{Checked: true, Err: errors.New("refused")},
			want: "1:staged", mint: -1, held: HoldDNS, next: 140 * time.Minute},
		{name: "confirmed and in DNS: published",
			at: 6 * time.Minute, in: ring(cfg(1, Staged, 0, 0, 0)), confirmed: true, dns: dnsOK,
			want: "1:published", mint: -1, changed: true, next: 61 * time.Minute},
		{name: "the next config is staged deliveryDelay before the published one falls due",
			at: 65 * time.Minute, in: steady, dns: dnsOK,
			want: "2:published", mint: 3, changed: true, next: 140 * time.Minute, destroyed: []uint8{1}},
		{name: "before that, nothing to do until the retired config expires",
			at: 20 * time.Minute, in: steady, dns: dnsOK,
			want: "2:published 1:retired", mint: -1, next: 25 * time.Minute},
		{name: "a retired config past expiresAt is destroyed",
			at: 25 * time.Minute, in: steady, dns: dnsOK,
			want: "2:published", mint: -1, changed: true, next: 65 * time.Minute, destroyed: []uint8{1}},
		{name: "a staged config waits for its predecessor's interval, even confirmed",
			at: 69 * time.Minute, in: staged, confirmed: true, dns: dnsOK,
			want: "3:staged 2:published", mint: -1, held: HoldDelivery, next: 70 * time.Minute},
		{name: "rotation: the staged config is published, the published one retires",
			at: 70 * time.Minute, in: staged, confirmed: true, dns: dnsOK,
			want: "3:published 2:retired", mint: -1, changed: true, next: 85 * time.Minute},
		{name: "a lagging pod holds publication back until the ceiling",
			at: 99 * time.Minute, in: staged, dns: dnsOK,
			want: "3:staged 2:published", mint: -1, held: HoldConfirmation, next: 100 * time.Minute},
		{name: "at the ceiling the staged config is published unconfirmed",
			at: 100 * time.Minute, in: staged, dns: dnsOK,
			want: "3:published 2:retired", mint: -1, changed: true, next: 115 * time.Minute},
		{name: "at the ceiling DNS still gates",
			at: 100 * time.Minute, in: staged, dns: DNS{Checked: true},
			want: "3:staged 2:published", mint: -1, held: HoldDNS, next: 140 * time.Minute},
		{name: "held past its expiresAt, the published config is destroyed; the staged one is published once DNS answers",
			at: 140 * time.Minute, in: staged, dns: DNS{Checked: true, Err: errors.New("timeout")},
			want: "3:staged", mint: -1, held: HoldDNS, changed: true, next: 205 * time.Minute, destroyed: []uint8{2}},
		{name: "a staged config that never reached DNS is destroyed at its expiresAt, and a new one staged",
			at: 205 * time.Minute, in: ring(cfg(3, Staged, 65*time.Minute, 0, 0)), dns: DNS{Checked: true, Err: errors.New("timeout")},
			want: "", mint: 1, changed: true, destroyed: []uint8{3}},
		{name: "DNS down at rotation: the published config stays, the retired one still expires on time",
			at: 70 * time.Minute, in: ring(cfg(3, Staged, 65*time.Minute, 0, 0), cfg(2, Published, 0, 10*time.Minute, 0), cfg(1, Retired, -2*time.Hour, -time.Hour, 60*time.Minute)),
			confirmed: true, dns: DNS{Checked: true, Err: errors.New("timeout")},
			want: "3:staged 2:published 1:retired", mint: -1, held: HoldDNS, next: 75 * time.Minute},
		{name: "a full ring mints nothing until a retired config expires",
			at: 3 * time.Hour, in: ring(cfg(4, Published, 2*time.Hour, 2*time.Hour, 0), cfg(3, Retired, 0, 0, 2*time.Hour+55*time.Minute), cfg(2, Retired, 0, 0, 2*time.Hour+50*time.Minute), cfg(1, Retired, 0, 0, 2*time.Hour+49*time.Minute)),
			want: "4:published 3:retired 2:retired 1:retired", mint: -1, held: HoldFull, next: 3*time.Hour + 4*time.Minute},
		{name: "ids skip those in use and wrap",
			at: 2 * time.Hour, in: ring(cfg(255, Published, 0, 0, 0), cfg(0, Retired, 0, 0, 2*time.Hour-time.Minute)),
			want: "255:published 0:retired", mint: 1, changed: true, next: 2*time.Hour + 14*time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl := Next(Input{Now: t0.Add(tc.at), Policy: policy, Ring: tc.in, Confirmed: tc.confirmed, DNS: tc.dns})
			if got := show(pl.Ring); got != tc.want {
				t.Errorf("ring = %q, want %q", got, tc.want)
			}
			switch {
			case tc.mint < 0 && pl.Mint != nil:
				t.Errorf("mints %d, want none", *pl.Mint)
			case tc.mint >= 0 && (pl.Mint == nil || int(*pl.Mint) != tc.mint):
				t.Errorf("mints %v, want %d", pl.Mint, tc.mint)
			}
			if pl.Held != tc.held {
				t.Errorf("held = %q, want %q", pl.Held, tc.held)
			}
			if pl.Changed != tc.changed {
				t.Errorf("changed = %v, want %v", pl.Changed, tc.changed)
			}
			var want time.Time
			if tc.next != 0 {
				want = t0.Add(tc.next)
			}
			if !pl.Next.Equal(want) {
				t.Errorf("next = %v, want %v", pl.Next, want)
			}
			if pl.Unconfirmed != (pl.Published != nil && !tc.confirmed) {
				t.Errorf("unconfirmed = %v with published %v, confirmed %v", pl.Unconfirmed, pl.Published, tc.confirmed)
			}
			if !slices.Equal(pl.Destroyed, tc.destroyed) {
				t.Errorf("destroyed %v, want %v", pl.Destroyed, tc.destroyed)
			}
		})
	}
}

// A rotation's times: the published config is stamped with the time DNS
// answered it; the one it replaces retires then and expires TTL + margin
// later.
func TestNextStampsRotation(t *testing.T) {
	now := t0.Add(70 * time.Minute)
	in := ring(cfg(3, Staged, 65*time.Minute, 0, 0), cfg(2, Published, 0, 10*time.Minute, 0))
	pl := Next(Input{Now: now, Policy: policy, Ring: in, Confirmed: true, DNS: dnsOK})
	pub, ret := pl.Ring.Configs[0], pl.Ring.Configs[1]
	if !pub.PublishedAt.Equal(now) || !pub.ExpiresAt.Equal(in.Configs[0].ExpiresAt) {
		t.Errorf("published config: publishedAt %v, expiresAt %v", pub.PublishedAt, pub.ExpiresAt)
	}
	if !ret.RetiredAt.Equal(now) || !ret.ExpiresAt.Equal(now.Add(15*time.Minute)) || !ret.PublishedAt.Equal(t0.Add(10*time.Minute)) {
		t.Errorf("retired config: %v, retiredAt %v, expiresAt %v", ret.PublishedAt, ret.RetiredAt, ret.ExpiresAt)
	}
	if *pl.Published != 3 || !slices.Equal(pl.Retired, []uint8{2}) {
		t.Errorf("published %d, retired %v", *pl.Published, pl.Retired)
	}
	if in.Configs[0].State != Staged {
		t.Error("Next changed its input")
	}
}

// Retirement only ever shortens a config's expiresAt: one due to expire
// sooner than TTL + margin after its retirement keeps its expiresAt.
func TestRetirementNeverExtends(t *testing.T) {
	now := t0.Add(70 * time.Minute)
	soon := cfg(2, Published, 0, 10*time.Minute, 0)
	soon.ExpiresAt = now.Add(time.Minute)
	pl := Next(Input{Now: now, Policy: policy, Ring: ring(cfg(3, Staged, 65*time.Minute, 0, 0), soon), Confirmed: true, DNS: dnsOK})
	if ret := pl.Ring.Configs[1]; ret.State != Retired || !ret.ExpiresAt.Equal(soon.ExpiresAt) {
		t.Errorf("retired config %s expires %v, want %v", ret.State, ret.ExpiresAt, soon.ExpiresAt)
	}
}

// The formula is tight and holds with the operator stopped: a fleet that
// never confirms has every config published at its ceiling, and the retired
// config's TTL + margin end meets the expiresAt it was minted with; the
// snapshot left behind after any pass expires every config by the reader's
// own clock at createdAt + Life, with no further plan.
func TestLifeAtTheCeilings(t *testing.T) {
	p := policy
	now := t0
	pl := Next(Input{Now: now, Policy: p, Ring: ring()})
	r, err := pl.Stage(now, Config{ID: *pl.Mint})
	if err != nil {
		t.Fatal(err)
	}
	first := r.Configs[0]
	if !first.ExpiresAt.Equal(now.Add(p.Life())) {
		t.Fatalf("minted config expires %v, want createdAt + %s", first.ExpiresAt, p.Life())
	}
	var retired Config
	for step := 0; step < 20 && retired.ID == 0; step++ {
		switch {
		case !pl.Changed && pl.Next.After(now):
			now = pl.Next
		default: // look again at what was written, as the controller does
			now = now.Add(time.Second)
		}
		pl = Next(Input{Now: now, Policy: p, Ring: r, DNS: dnsOK})
		var c Config
		if pl.Mint != nil {
			c = Config{ID: *pl.Mint}
		}
		if r, err = pl.Stage(now, c); err != nil {
			t.Fatal(err)
		}
		for _, c := range r.Configs {
			if c.ID == first.ID && c.State == Retired {
				retired = c
			}
		}
	}
	if retired.ID == 0 {
		t.Fatalf("config %d never retired: %s", first.ID, show(r))
	}
	if !retired.PublishedAt.Equal(first.CreatedAt.Add(p.DeliveryDelay + p.MaxDelay)) {
		t.Errorf("published at %v, want at its ceiling", retired.PublishedAt)
	}
	if !retired.ExpiresAt.Equal(first.ExpiresAt) || !retired.RetiredAt.Add(p.TTL+p.RetirementMargin).Equal(first.ExpiresAt) {
		t.Errorf("retired at %v, expires %v; minted to expire %v", retired.RetiredAt, retired.ExpiresAt, first.ExpiresAt)
	}
	// Left alone from here, readers drop every config by their clocks.
	for _, c := range r.Configs {
		if !c.Expired(c.CreatedAt.Add(p.Life())) {
			t.Errorf("config %d outlives createdAt + Life: expires %v", c.ID, c.ExpiresAt)
		}
	}
}

func TestWant(t *testing.T) {
	staged := ring(cfg(3, Staged, 65*time.Minute, 0, 0), cfg(2, Published, 0, 10*time.Minute, 0), cfg(1, Retired, 0, 0, 0))
	for _, tc := range []struct {
		name      string
		at        time.Duration
		r         Ring
		confirmed bool
		want      []uint8
	}{
		{"a new ring: no config in DNS", 0, ring(), true, nil},
		{"the published config, never the retired one", 69 * time.Minute, staged, true, []uint8{2}},
		{"unconfirmed, the staged config stays out", 80 * time.Minute, staged, false, []uint8{2}},
		{"due and confirmed: the staged config alone", 70 * time.Minute, staged, true, []uint8{3}},
		{"unconfirmed before the ceiling: the published config", 99 * time.Minute, staged, false, []uint8{2}},
		{"unconfirmed at the ceiling: the staged config alone", 100 * time.Minute, staged, false, []uint8{3}},
		{"never a config past its expiresAt", 140 * time.Minute, ring(cfg(2, Published, 0, 10*time.Minute, 0)), true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ids(Want(t0.Add(tc.at), policy, tc.r, tc.confirmed)); !slices.Equal(got, tc.want) {
				t.Errorf("Want = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestStage(t *testing.T) {
	pl := Next(Input{Now: t0, Policy: policy, Ring: ring(cfg(2, Published, -2*time.Hour, -2*time.Hour, 0))})
	if pl.Mint == nil {
		t.Fatal("no mint")
	}
	r, err := pl.Stage(t0, Config{ID: *pl.Mint, State: Published, PublishedAt: t0})
	if err != nil {
		t.Fatal(err)
	}
	if show(r) != "3:staged 2:published" || r.Epoch != 8 || !r.IssuedAt.Equal(t0) || !r.Configs[0].CreatedAt.Equal(t0) || !r.Configs[0].PublishedAt.IsZero() {
		t.Errorf("staged ring %s epoch %d issued %v", show(r), r.Epoch, r.IssuedAt)
	}
	if want := t0.Add(5*time.Minute + 30*time.Minute + time.Hour + 30*time.Minute + 5*time.Minute + 10*time.Minute); !r.Configs[0].ExpiresAt.Equal(want) {
		t.Errorf("staged config expires %v, want %v", r.Configs[0].ExpiresAt, want)
	}
	if _, err := pl.Stage(t0, Config{ID: 9}); err == nil {
		t.Error("a config of another id was staged")
	}
	same := Next(Input{Now: t0.Add(-time.Hour - 30*time.Minute), Policy: policy, Ring: ring(cfg(2, Published, -2*time.Hour, -2*time.Hour, 0))})
	if r, _ := same.Stage(t0, Config{}); r.Epoch != 7 {
		t.Errorf("an unchanged ring moved to epoch %d", r.Epoch)
	}
}

func TestPolicyValidate(t *testing.T) {
	if err := policy.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []Policy{
		{RotationInterval: 9 * time.Second, TTL: time.Minute},
		{RotationInterval: time.Hour, DeliveryDelay: time.Hour, TTL: time.Minute},
		{RotationInterval: time.Hour},
		{RotationInterval: time.Hour, TTL: time.Minute, RetirementMargin: -1},
		{RotationInterval: time.Hour, TTL: time.Minute, MaxDelay: -1},
	} {
		if p.Validate() == nil {
			t.Errorf("%+v passes", p)
		}
	}
}
