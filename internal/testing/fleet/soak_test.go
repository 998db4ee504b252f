package fleet

import (
	"math"
	"testing"
	"time"
)

// series samples f once a minute over an hour.
func series(f func(min float64) float64) []Reading {
	var rs []Reading
	for m := 0; m <= 60; m++ {
		rs = append(rs, Reading{At: time.Duration(m) * time.Minute, Value: f(float64(m))})
	}
	return rs
}

// sawtooth is a garbage-collected heap's shape: up 1 MiB a minute, back
// down every 4 minutes.
func sawtooth(min float64) float64 { return float64(int(min)%4) * (1 << 20) }

func TestGrowthOf(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name      string
		rs        []Reading
		levelsOff bool
	}{
		{"flat", series(func(float64) float64 { return 50 * mib }), true},
		{"steady leak", series(func(m float64) float64 { return 50*mib + m*mib }), false},
		{"warm-up, then flat", series(func(m float64) float64 { return 50*mib + 20*mib*min(m, 10)/10 }), true},
		{"slowing down", series(func(m float64) float64 { return 50*mib + 10*mib*math.Sqrt(m) }), true},
		{"sawtooth without trend", series(func(m float64) float64 { return 10*mib + sawtooth(m) }), true},
		{"sawtooth on a leak", series(func(m float64) float64 { return 10*mib + sawtooth(m) + m*mib/2 }), false},
		{"goroutines leaking one a minute", series(func(m float64) float64 { return 160 + m }), false},
		{"goroutines steady with a blip", series(func(m float64) float64 {
			if int(m)%7 == 0 {
				return 163
			}
			return 160
		}), true},
		{"too few readings", []Reading{{0, 1}, {time.Hour, 100}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := GrowthOf(tc.rs, time.Hour)
			if g.LevelsOff != tc.levelsOff {
				t.Errorf("LevelsOff = %t, want %t (first %.0f/h, last %.0f/h ± %.0f, median %.0f)", g.LevelsOff, tc.levelsOff, g.First, g.Last, g.LastErr, g.Median)
			}
		})
	}
}

func TestSumMetric(t *testing.T) {
	exp := `# HELP rest_client_requests_total Number of HTTP requests.
# TYPE rest_client_requests_total counter
rest_client_requests_total{code="200",host="127.0.0.1:1",method="GET"} 12
rest_client_requests_total{code="201",host="127.0.0.1:1",method="POST"} 3
rest_client_requests_total_other 100
go_goroutines 42
`
	for _, tc := range []struct {
		name string
		want float64
		err  bool
	}{
		{"rest_client_requests_total", 15, false},
		{"go_goroutines", 42, false},
		{"go_memstats_heap_inuse_bytes", 0, true},
		{"rest_client", 0, true},
	} {
		got, err := SumMetric(exp, tc.name)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("SumMetric(%s) = %v, %v; want %v, error %t", tc.name, got, err, tc.want, tc.err)
		}
	}
}

func TestSumMetricBy(t *testing.T) {
	exp := `rest_client_requests_total{code="200",host="h",method="GET"} 12
rest_client_requests_total{code="404",host="h",method="GET"} 1
rest_client_requests_total{code="201",host="h",method="POST"} 3
rest_client_requests_total_other{method="GET"} 100
`
	got := SumMetricBy(exp, "rest_client_requests_total", "method")
	if len(got) != 2 || got["GET"] != 13 || got["POST"] != 3 {
		t.Errorf("SumMetricBy = %v, want GET 13, POST 3", got)
	}
}

func TestDataDigest(t *testing.T) {
	a := DataDigest(map[string][]byte{"ticketkeys.json": []byte("x"), "b": []byte("y")})
	if a != DataDigest(map[string][]byte{"b": []byte("y"), "ticketkeys.json": []byte("x")}) {
		t.Error("equal data, different digests")
	}
	for _, other := range []map[string][]byte{
		{"ticketkeys.json": []byte("x"), "b": []byte("z")},
		{"ticketkeys.jsonb": []byte("xy")},
		{"ticketkeys.json": []byte("xb"), "": []byte("y")},
	} {
		if DataDigest(other) == a {
			t.Errorf("%v: same digest as different data", other)
		}
	}
}
