//go:build integration || e2e

package knot

// required is true under make test's tags: without knotd, Run fails its
// test.
const required = true
