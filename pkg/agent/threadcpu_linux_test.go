package agent_test

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU returns the processor time, user and system, that the calling
// OS thread has used so far. The caller locks its goroutine to the thread
// (runtime.LockOSThread) for as long as it compares two readings.
func threadCPU() (time.Duration, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
