//go:build !integration && !e2e

package prometheus

// requireTools is false in the unit layer: without promtool or Helm the
// test skips.
const requireTools = false
