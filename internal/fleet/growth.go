package fleet

import (
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
	// Median is the series' median value, the scale Last is judged against.
	Median float64
	// LevelsOff says the series stopped growing: over the last third it
	// grows less than half as fast as over the first, or by less than
	// FlatShare of its median per hour (a series that never grew).
	LevelsOff bool
}

// FlatShare is the growth per hour, as a share of a series' median, below
// which a series counts as flat whatever its first third did: the noise of
// a garbage-collected heap and of RSS is of that order.
const FlatShare = 0.05

// GrowthOf judges a series sampled over a run of total length. It needs at
// least two readings in each third; with fewer it reports the series as
// levelling off, having nothing to judge by (Last and First are then 0).
func GrowthOf(rs []Reading, total time.Duration) Growth {
	var first, last, all []Reading
	for _, r := range rs {
		all = append(all, r)
		switch {
		case r.At <= total/3:
			first = append(first, r)
		case r.At >= total-total/3:
			last = append(last, r)
		}
	}
	g := Growth{LevelsOff: true}
	if len(all) > 0 {
		vs := make([]float64, len(all))
		for i, r := range all {
			vs[i] = r.Value
		}
		slices.Sort(vs)
		g.Median = vs[len(vs)/2]
	}
	if len(first) < 2 || len(last) < 2 {
		return g
	}
	g.First, g.Last = slopePerHour(first), slopePerHour(last)
	g.LevelsOff = g.Last <= g.First/2 || g.Last <= FlatShare*g.Median
	return g
}

// slopePerHour fits a line through rs by least squares and returns its
// slope per hour.
func slopePerHour(rs []Reading) float64 {
	n := float64(len(rs))
	var sx, sy, sxx, sxy float64
	for _, r := range rs {
		x := r.At.Hours()
		sx += x
		sy += r.Value
		sxx += x * x
		sxy += x * r.Value
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}
