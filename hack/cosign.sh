#!/usr/bin/env bash
# Builds cosign (github.com/sigstore/cosign/v3) through the Go module proxy
# into the tool cache, once per machine, links it as bin/cosign and prints
# its path.
#
#   hack/cosign.sh            cosign's path
#   hack/cosign.sh test-key   the directory of the TEST key pair (cosign.key,
#                             cosign.pub; empty password), generated once into
#                             the cache: what the tests and a make release
#                             without COSIGN_KEY sign with. Never a release key.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

COSIGN_VERSION=v3.1.3
cosign="$("$ROOT/hack/gotool.sh" cosign github.com/sigstore/cosign/v3/cmd/cosign "$COSIGN_VERSION")"

case "${1:-}" in
"") echo "$cosign" ;;
test-key)
	dir="$CACHE/cosign-test-key"
	generate() {
		[[ -f "$dir/cosign.key" && -f "$dir/cosign.pub" ]] && return 0
		log "Generating the test signing key pair in $dir"
		mkdir -p "$dir.tmp"
		(cd "$dir.tmp" && COSIGN_PASSWORD="" "$cosign" generate-key-pair >/dev/null)
		rm -rf "$dir"
		mv "$dir.tmp" "$dir"
	}
	with_lock cosign-test-key generate
	echo "$dir"
	;;
*)
	echo "usage: hack/cosign.sh [test-key]" >&2
	exit 2
	;;
esac
