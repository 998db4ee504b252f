// Package version is ringmaster's release version, the one every binary,
// image and the chart carry.
//
// The version is written in one place, the file VERSION beside this
// package: the Makefile reads it for the images' tags, the chart and make
// release, and it is embedded here, so that a plain `go build`, `go run` or
// `go test` reports it too. A release build may set another with
//
//	-ldflags "-X github.com/ringmaster-io/ringmaster/internal/version.version=v1.2.3"
//
// which hack/images does with the version it is given.
package version

import (
	_ "embed"
	"runtime/debug"
	"strings"
)

//go:embed VERSION
var file string

// version is set by -ldflags -X; empty means VERSION's.
var version string

// Version is the release version, e.g. v0.1.0.
func Version() string {
	if version != "" {
		return version
	}
	return strings.TrimSpace(file)
}

// String is what --version prints: the program's name, the version, and
// the Go toolchain that built it.
func String(program string) string {
	goVersion := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
	}
	return program + " " + Version() + " (" + goVersion + ")"
}
