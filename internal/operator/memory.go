package operator

import (
	"fmt"
	"strconv"
)

// MemoryLimitEnv names the container's memory limit in bytes, which the
// chart sets from the downward API (resourceFieldRef limits.memory).
const MemoryLimitEnv = "RINGMASTER_MEMORY_LIMIT"

// DefaultMemoryLimitRatio is the share of the container's memory limit
// that the Go runtime's soft limit takes. The rest is the operator's own
// headroom: the binary's pages that the process maps (about 47 MiB
// resident, which the container's memory counts as well), goroutine
// stacks, and a burst between two collections.
const DefaultMemoryLimitRatio = 0.75

// SoftMemoryLimit is the Go runtime's soft memory limit for a container
// limit of limit bytes (MemoryLimitEnv's value) at ratio, or 0 for none:
// no container limit, or GOMEMLIMIT set (goMemLimit), which the runtime has
// applied already and which wins.
func SoftMemoryLimit(limit, goMemLimit string, ratio float64) (int64, error) {
	if limit == "" || goMemLimit != "" {
		return 0, nil
	}
	if ratio <= 0 || ratio > 1 {
		return 0, fmt.Errorf("--memory-limit-ratio %v: want a fraction in (0, 1]", ratio)
	}
	n, err := strconv.ParseInt(limit, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("$%s %q: want the container's memory limit in bytes", MemoryLimitEnv, limit)
	}
	return int64(float64(n) * ratio), nil
}

// DefaultGCPercent is the garbage collector's target when GOGC is not set:
// a collection once the heap has grown by half of what was live after the
// last, not by all of it (Go's 100). The operator's heap is mostly its
// cache, which changes little between bulks: the smaller target keeps the
// heap nearer what is live, and costs processor only while a bulk of rings
// is being written (at 10,000 rings, with the cache's interned strings:
// settled RSS 220 MiB rather than 227 MiB, 3% more processor for the
// creates, make bench-scale).
const DefaultGCPercent = 50

// GCPercent is the garbage collector's target for --gc-percent (flag), or
// false for none to set: GOGC set (goGC), which the runtime has applied
// already and which wins, or a flag below 0, Go's own default.
func GCPercent(flag int, goGC string) (int, bool) {
	if goGC != "" || flag < 0 {
		return 0, false
	}
	return flag, true
}
