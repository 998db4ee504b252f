package fleet

import (
	"math"
	"slices"
	"time"
)

// Reading is one value of a series a soak samples (a process's RSS, heap or
// goroutines), At after the soak's start.
type Reading struct {
	At    time.Duration
	Value float64
}

// Growth is how a series moved over a soak: its slope, per hour, over the
// first and the last third of the run, by least squares.
type Growth struct {
	First, Last float64
	// LastErr is the standard error of Last: how far noise alone (a
	// garbage-collected heap's sawtooth) moves such a slope.
	LastErr float64
	// Median is the series' median value, the scale Last is judged against.
	Median float64
	// LevelsOff says the series stopped growing. It does when its slope
	// over the last third is any of: not above zero by more than two
	// standard errors (no trend beyond the noise), at most half its slope
	// over the first third (slowing down), or less than FlatShare of its
	// median per hour (too small to matter over the run).
	LevelsOff bool
}

// FlatShare is the growth per hour, as a share of a series' median, below
// which a series counts as flat whatever its first third did.
const FlatShare = 0.05

// GrowthOf judges a series sampled over a run of total length. It needs at
// least three readings in each third; with fewer it reports the series as
// levelling off, having nothing to judge by (the slopes are then 0).
func GrowthOf(rs []Reading, total time.Duration) Growth {
	var first, last []Reading
	vs := make([]float64, 0, len(rs))
	for _, r := range rs {
		vs = append(vs, r.Value)
		switch {
		case r.At <= total/3:
			first = append(first, r)
		case r.At >= total-total/3:
			last = append(last, r)
		}
	}
	g := Growth{LevelsOff: true}
	if len(vs) > 0 {
		slices.Sort(vs)
		g.Median = vs[len(vs)/2]
	}
	if len(first) < 3 || len(last) < 3 {
		return g
	}
	g.First, _ = slopePerHour(first)
	g.Last, g.LastErr = slopePerHour(last)
	g.LevelsOff = g.Last <= 2*g.LastErr || g.Last <= g.First/2 || g.Last <= FlatShare*g.Median
	return g
}

// slopePerHour fits a line through rs by least squares and returns its
// slope per hour and the slope's standard error.
func slopePerHour(rs []Reading) (slope, stderr float64) {
	n := float64(len(rs))
	var mx, my float64
	for _, r := range rs {
		mx += r.At.Hours()
		my += r.Value
	}
	mx, my = mx/n, my/n
	var sxx, sxy float64
	for _, r := range rs {
		dx := r.At.Hours() - mx
		sxx += dx * dx
		sxy += dx * (r.Value - my)
	}
	if sxx == 0 {
		return 0, 0
	}
	slope = sxy / sxx
	var sse float64
	for _, r := range rs {
		e := r.Value - (my + slope*(r.At.Hours()-mx))
		sse += e * e
	}
	if n > 2 {
		stderr = math.Sqrt(sse / (n - 2) / sxx)
	}
	return slope, stderr
}
