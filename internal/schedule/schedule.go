// Package schedule says when a controller looks at an object again.
package schedule

import (
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// After is how long to wait, from now, to act at instant at: until at, plus
// a second so that the whole-second times of rings and certificates have
// surely passed, plus up to 1% jitter so that many objects created together
// do not all come due in one burst. Zero when at is zero: nothing is due.
func After(now, at time.Time) time.Duration {
	if at.IsZero() {
		return 0
	}
	d := max(at.Sub(now), 0) + time.Second
	return wait.Jitter(d, 0.01)
}
