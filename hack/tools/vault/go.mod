module github.com/ringmaster-io/ringmaster/hack/tools/vault

go 1.26

require github.com/hashicorp/vault v1.21.4

// Vault's own replaces (its go.mod), which a dependent module must repeat.
replace (
	github.com/99designs/keyring => github.com/Jeffail/keyring v1.2.3
	github.com/ma314smith/signedxml v1.1.1 => github.com/moov-io/signedxml v1.1.1
)

// hack/vault.sh adds: replace github.com/hashicorp/vault => ./vault-src,
// a patched copy of the module (see there).
