package operator_test

import (
	"testing"

	"github.com/ringmaster-io/ringmaster/internal/operator"
)

func TestSoftMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name, limit, goMemLimit string
		ratio                   float64
		want                    int64
		err                     string
	}{
		{name: "the chart's 256Mi at the default ratio", limit: "268435456", ratio: operator.DefaultMemoryLimitRatio, want: 192 << 20},
		{name: "the whole limit", limit: "1073741824", ratio: 1, want: 1 << 30},
		{name: "no container limit", limit: "", ratio: 0.75, want: 0},
		{name: "GOMEMLIMIT wins", limit: "268435456", goMemLimit: "230MiB", ratio: 0.75, want: 0},
		{name: "a quantity, not bytes", limit: "256Mi", ratio: 0.75, err: `$RINGMASTER_MEMORY_LIMIT "256Mi": want the container's memory limit in bytes`},
		{name: "zero bytes", limit: "0", ratio: 0.75, err: `$RINGMASTER_MEMORY_LIMIT "0": want the container's memory limit in bytes`},
		{name: "a ratio over one", limit: "268435456", ratio: 1.5, err: "--memory-limit-ratio 1.5: want a fraction in (0, 1]"},
		{name: "a ratio of zero", limit: "268435456", ratio: 0, err: "--memory-limit-ratio 0: want a fraction in (0, 1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := operator.SoftMemoryLimit(tc.limit, tc.goMemLimit, tc.ratio)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

func TestGCPercent(t *testing.T) {
	for _, tc := range []struct {
		name string
		flag int
		goGC string
		want int
		set  bool
	}{
		{name: "the default", flag: operator.DefaultGCPercent, want: 50, set: true},
		{name: "a flag", flag: 80, want: 80, set: true},
		{name: "GOGC wins", flag: 50, goGC: "200"},
		{name: "GOGC off wins", flag: 50, goGC: "off"},
		{name: "Go's default asked for", flag: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, set := operator.GCPercent(tc.flag, tc.goGC)
			if got != tc.want || set != tc.set {
				t.Errorf("GCPercent(%d, %q) = %d, %v; want %d, %v", tc.flag, tc.goGC, got, set, tc.want, tc.set)
			}
		})
	}
}
