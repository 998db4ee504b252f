//go:build integration || e2e

package main

// requireTools is true under make test's tags: a missing Helm fails the
// test.
const requireTools = true
