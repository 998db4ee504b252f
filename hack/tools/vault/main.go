// Command vault is HashiCorp Vault's own CLI and server, built from the Go
// module proxy for ringmaster's integration tests (hack/vault.sh).
package main

import (
	"os"

	"github.com/hashicorp/vault/command"
)

func main() {
	os.Exit(command.Run(os.Args[1:]))
}
