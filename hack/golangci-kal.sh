#!/usr/bin/env bash
# Builds golangci-lint with the kube-api-linter module plugin compiled in
# (hack/tools/golangci-kal: what `golangci-lint custom` would build from
# .custom-gcl.yml, but from the Go module proxy, without cloning
# golangci-lint's repository), caches it outside the clone keyed by the
# module's go.sum, links it as bin/golangci-kal and prints its path.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

mod="$ROOT/hack/tools/golangci-kal"
dir="$CACHE/golangci-kal-$(sha256sum "$mod/go.mod" "$mod/go.sum" "$mod/main.go" | sha256sum | cut -c1-12)"

build() {
	if [[ ! -x "$dir/golangci-kal" ]]; then
		log "Building golangci-lint with kube-api-linter (a few minutes cold)"
		mkdir -p "$dir"
		(cd "$mod" && go build -trimpath -o "$dir/golangci-kal.tmp" .)
		mv "$dir/golangci-kal.tmp" "$dir/golangci-kal"
	fi
}

with_lock golangci-kal build
link "$dir/golangci-kal" golangci-kal
echo "$BIN/golangci-kal"
