#!/usr/bin/env bash
# gotool.sh NAME PACKAGE VERSION: go-installs PACKAGE@VERSION into the tool
# cache (once per machine) and links it as bin/NAME. Prints the binary's path.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

name=$1 pkg=$2 version=$3
dir="$CACHE/$name-$version"

install_tool() {
	if [[ ! -x "$dir/$name" ]]; then
		log "Building $name $version"
		GOBIN="$dir" go install "$pkg@$version"
		local built
		built="$dir/$(basename "$pkg")"
		[[ "$built" == "$dir/$name" ]] || mv "$built" "$dir/$name"
	fi
}

with_lock "$name" install_tool
link "$dir/$name" "$name"
echo "$BIN/$name"
