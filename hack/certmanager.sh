#!/usr/bin/env bash
# Builds cert-manager's controllers from the served cert-manager module
# (hack/tools/certmanager: certificates, issuers, and the self-signed and CA
# issuers), caches the binary outside the clone and prints its path. The
# upstream cmd/controller is a module the Go module proxy does not serve.
#
# The cache key is the tools module's content, so editing it rebuilds.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SRC="$ROOT/hack/tools/certmanager"
VERSION=$(awk '$1 == "github.com/cert-manager/cert-manager" {print $2; exit}' "$SRC/go.mod")
KEY=$(cat "$SRC/main.go" "$SRC/go.mod" "$SRC/go.sum" | sha256sum | cut -c1-12)
DIR="$CACHE/cert-manager-controller-$VERSION-$KEY"

build() {
	if [[ ! -x "$DIR/cert-manager-controller" ]]; then
		log "Building cert-manager $VERSION controllers (about 6-9 minutes cold)"
		mkdir -p "$DIR"
		(cd "$SRC" && go build -trimpath -ldflags "-s -w" -o "$DIR/cert-manager-controller.tmp" .)
		mv "$DIR/cert-manager-controller.tmp" "$DIR/cert-manager-controller"
	fi
}

with_lock cert-manager build
link "$DIR/cert-manager-controller" cert-manager-controller
echo "$BIN/cert-manager-controller"
