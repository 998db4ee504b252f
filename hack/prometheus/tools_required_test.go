//go:build integration || e2e

package prometheus

// requireTools is true under make test's tags: a missing promtool or Helm
// fails the test.
const requireTools = true
