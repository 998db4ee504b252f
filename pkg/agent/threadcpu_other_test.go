//go:build !linux

package agent_test

import "time"

// threadCPU reports no per-thread processor clock: the benchmarks that need
// one skip.
func threadCPU() (time.Duration, bool) { return 0, false }
