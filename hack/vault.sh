#!/usr/bin/env bash
# Builds HashiCorp Vault from the Go module proxy into the tool cache (once per
# machine) and links it as bin/vault. Prints the binary's path.
#
# The tests run Vault's own server (vault server -dev) with what they use:
# the transit and KV engines, the AppRole and Kubernetes auth methods, the
# file audit device. Vault's "minimal" build tag leaves out the plugins of
# clouds and databases, and the storage backends, that nothing here runs;
# Kubernetes auth, which the minimal registry lacks, is added back. The
# module list and checksums of that build are committed
# (hack/tools/vault/go.mod, go.sum: go mod tidy with the replace below), so
# a cold build downloads only the modules the binary is compiled from, not
# every module of Vault's graph.
#
# Only v1.21.4 of github.com/hashicorp/vault is served, and it was released
# against an unpublished in-repo sdk. The served sdk v0.21.0 differs at three
# call sites, which are adapted in a writable copy of the module:
#   - vault/identity_store.go: ActivationFunc now takes (ctx, req, string);
#   - vault/logical_system_activation_flags.go: its one caller passes "";
#   - builtin/logical/transit/path_restore.go: RestorePolicy returns only an
#     error, and the restored key is the one named in the request.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

VERSION=v1.21.4
dir="$CACHE/vault-$VERSION-minimal"

build() {
	[[ -x "$dir/vault" ]] && return
	log "Building Vault $VERSION, minimal and Kubernetes auth (about 10 minutes cold)"
	local work="$CACHE/vault-build-$VERSION"
	rm -rf "$work"
	mkdir -p "$work"
	cp "$ROOT/hack/tools/vault/main.go" "$ROOT/hack/tools/vault/go.mod" "$ROOT/hack/tools/vault/go.sum" "$work/"
	local src
	src=$(go mod download -json "github.com/hashicorp/vault@$VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
	cp -r "$src" "$work/vault-src"
	chmod -R u+w "$work/vault-src"
	python3 - "$work/vault-src" <<'PY'
import sys, pathlib
root = pathlib.Path(sys.argv[1])
def patch(rel, old, new):
    p = root / rel
    s = p.read_text()
    if old not in s:
        sys.exit(f"vault.sh: {rel}: the code to adapt is not there; was the version changed?")
    p.write_text(s.replace(old, new, 1))
patch("vault/identity_store.go",
      "ActivationFunc: iStore.activateDeduplication,",
      "ActivationFunc: func(ctx context.Context, req *logical.Request, _ string) error { return iStore.activateDeduplication(ctx, req) },")
patch("vault/logical_system_activation_flags.go",
      "b.idStoreBackend.ActivationFunc(ctx, nil)",
      "b.idStoreBackend.ActivationFunc(ctx, nil, \"\")")
patch("builtin/logical/transit/path_restore.go",
      "restoredKeyName, err := b.lm.RestorePolicy(ctx, req.Storage, keyName, backupB64, force)",
      "restoredKeyName, err := keyName, b.lm.RestorePolicy(ctx, req.Storage, keyName, backupB64, force)")
patch("helper/builtinplugins/registry_min.go",
      "package builtinplugins\n\nfunc extendAddonPlugins(_ *registry) {\n\t// No-op\n}",
      "package builtinplugins\n\nimport credKube \"github.com/hashicorp/vault-plugin-auth-kubernetes\"\n\n"
      "func extendAddonPlugins(r *registry) {\n\tr.credentialBackends[\"kubernetes\"] = credentialBackend{Factory: credKube.Factory}\n}")
PY
	(
		cd "$work"
		mkdir -p "$dir"
		go build -mod=readonly -tags minimal -trimpath -ldflags "-s -w" -o "$dir/vault.tmp" .
	)
	mv "$dir/vault.tmp" "$dir/vault"
	rm -rf "$work"
}

with_lock vault build
link "$dir/vault" vault
echo "$BIN/vault"
