package nudge

import (
	"context"
	"sync"
)

// slots is a counting semaphore whose waiters are served urgent first, then
// in arrival order: a revoke's patches take the next free slot ahead of
// every rotation's that waits.
type slots struct {
	mu   sync.Mutex
	free int
	// waiting holds the waiters' channels: [0] urgent, [1] the others.
	waiting [2][]chan struct{}
}

func newSlots(n int) *slots { return &slots{free: n} }

func queue(urgent bool) int {
	if urgent {
		return 0
	}
	return 1
}

// acquire takes a slot, waiting within ctx. A waiter never overtakes one of
// its own priority, and an urgent one never waits behind another.
func (s *slots) acquire(ctx context.Context, urgent bool) error {
	s.mu.Lock()
	if s.free > 0 && len(s.waiting[0]) == 0 && (urgent || len(s.waiting[1]) == 0) {
		s.free--
		s.mu.Unlock()
		return nil
	}
	ch := make(chan struct{}, 1)
	q := queue(urgent)
	s.waiting[q] = append(s.waiting[q], ch)
	s.mu.Unlock()

	select {
	case <-ch:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, c := range s.waiting[q] {
		if c == ch {
			s.waiting[q] = append(s.waiting[q][:i], s.waiting[q][i+1:]...)
			return ctx.Err()
		}
	}
	// Granted meanwhile: hand the slot on.
	s.releaseLocked()
	return ctx.Err()
}

// release gives a slot back, to the first urgent waiter if there is one.
func (s *slots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked()
}

func (s *slots) releaseLocked() {
	for q := range s.waiting {
		if len(s.waiting[q]) > 0 {
			ch := s.waiting[q][0]
			s.waiting[q] = s.waiting[q][1:]
			ch <- struct{}{}
			return
		}
	}
	s.free++
}
