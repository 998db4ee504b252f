//go:build tools

// Package envoygateway tests ringmaster's Envoy Gateway recipe
// (docs/gateways.md) through Envoy Gateway's own translator. It is a Go
// module of its own, so that Envoy Gateway's dependencies stay out of the
// operator's go.mod; the blank imports keep the two commands the tests
// build in this module's go.sum.
package envoygateway

import (
	_ "github.com/envoyproxy/gateway/cmd/egctl"
	_ "github.com/ringmaster-io/ringmaster/cmd/ringmaster-agent"
)
