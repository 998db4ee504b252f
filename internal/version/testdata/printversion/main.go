// Command printversion prints version.Version(), for the package's test of
// -ldflags -X.
package main

import (
	"fmt"

	"github.com/ringmaster-io/ringmaster/internal/version"
)

func main() { fmt.Print(version.Version()) }
