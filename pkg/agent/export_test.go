package agent

// SetReadHook installs f to run between resolving ..data and reading the
// files, on every read attempt. Call it before Start.
func SetReadHook(a *Agent, f func(attempt int)) { a.readHook = f }

// ForceSwap rebuilds and publishes every config from the current material,
// exactly as a change would, without reading the directory.
func ForceSwap(a *Agent) {
	a.publish(a.snap.Load())
	a.swaps.Add(1)
}
