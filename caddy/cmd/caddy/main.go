// Command caddy is Caddy with the tls.stek.ringmaster module, as xcaddy
// would build it: go build ./cmd/caddy in the caddy module.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/ringmaster-io/ringmaster/caddy"
)

func main() {
	caddycmd.Main()
}
