//go:build !integration && !e2e

package knot

// required is false in the unit layer: without knotd, Run skips its test.
const required = false
