#!/usr/bin/env bash
# Builds HashiCorp Vault from the Go module proxy into the tool cache (once per
# machine; about 12 minutes and 6 GB of memory cold on 2 cores, 24 with an
# empty module cache) and links it as bin/vault. Prints the binary's path.
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
dir="$CACHE/vault-$VERSION"

build() {
	[[ -x "$dir/vault" ]] && return
	log "Building Vault $VERSION (about 12-24 minutes cold)"
	local work="$CACHE/vault-build-$VERSION"
	rm -rf "$work"
	mkdir -p "$work"
	cp "$ROOT/hack/tools/vault/main.go" "$ROOT/hack/tools/vault/go.mod" "$work/"
	[[ -f "$ROOT/hack/tools/vault/go.sum" ]] && cp "$ROOT/hack/tools/vault/go.sum" "$work/"
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
PY
	(
		cd "$work"
		go mod edit -replace "github.com/hashicorp/vault=./vault-src"
		GOFLAGS=-mod=mod go mod tidy
		mkdir -p "$dir"
		go build -trimpath -ldflags "-s -w" -o "$dir/vault.tmp" .
	)
	mv "$dir/vault.tmp" "$dir/vault"
	rm -rf "$work"
}

with_lock vault build
link "$dir/vault" vault
echo "$BIN/vault"
