// Command golangci-lint is golangci-lint with the kube-api-linter module
// plugin compiled in, what `golangci-lint custom` builds from .custom-gcl.yml,
// built from the Go module proxy instead of a clone of golangci-lint's
// repository (hack/golangci-kal.sh). make lint runs it on api/.
package main

import (
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	"github.com/golangci/golangci-lint/v2/pkg/commands"
	"github.com/golangci/golangci-lint/v2/pkg/exitcodes"

	// Registers the kubeapilinter module plugin.
	_ "sigs.k8s.io/kube-api-linter"
)

func main() {
	info := commands.BuildInfo{Version: "unknown", Commit: "?", Date: "(unknown)", GoVersion: "unknown"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		info.GoVersion = bi.GoVersion
		for _, m := range bi.Deps {
			if m.Path == "github.com/golangci/golangci-lint/v2" {
				info.Version = strings.TrimPrefix(m.Version, "v") + "-kal"
			}
		}
	}
	if err := commands.Execute(info); err != nil {
		_, _ = fmt.Fprintf(os.Stderr, "The command is terminated due to an error: %v\n", err)
		os.Exit(exitcodes.Failure)
	}
}
