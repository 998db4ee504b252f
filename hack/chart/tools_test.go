//go:build !integration && !e2e

package main

// requireTools is false in the unit layer: without Helm the chart
// rendering test skips.
const requireTools = false
