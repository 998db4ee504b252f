package agent

import "time"

// SetReadHook installs f to run between resolving ..data and reading the
// files, on every read attempt. Call it before Start.
func SetReadHook(a *Agent, f func(attempt int)) { a.readHook = f }

// SetParseHook installs f to run when a read starts parsing what it read.
// Call it before Start.
func SetParseHook(a *Agent, f func()) { a.parseHook = f }

// SetWindow makes f open the debounce window in place of a real timer, so
// that a test closes it when it chooses. Call it before Start.
func SetWindow(a *Agent, f func(time.Duration) <-chan time.Time) { a.window = f }

// ForceSwap rebuilds and publishes every config from the current material,
// exactly as a change would, without reading the directory.
func ForceSwap(a *Agent) {
	a.publish(a.snap.Load())
	a.swaps.Add(1)
}

// WithoutTicketHooks makes a's configs built from now on carry no
// WrapSession or UnwrapSession, as before tickets were scoped: the
// baseline of BenchmarkTicketScope. Call it before TLSConfig.
func WithoutTicketHooks(a *Agent) { a.tickets.own = true }
