# Shared by the hack/ scripts: where built tools are cached.
#
# Tools are built once per machine into a cache outside the clone, keyed by
# version, and linked into ./bin. A fresh clone on the same machine (CI) then
# reuses them and builds only what is missing.

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${RINGMASTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ringmaster}"
BIN="$ROOT/bin"
mkdir -p "$CACHE" "$BIN"

# KUBE_VERSION (e.g. v1.37.2) is the Kubernetes every script builds, tests and
# renders for: hack/tools/kube/go.mod's k8s.io/kubernetes, the one place it
# is written (the Makefile reads it there too). KUBE_MINOR is its minor.
KUBE_VERSION="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$ROOT/hack/tools/kube/go.mod")"
[[ -n "$KUBE_VERSION" ]] || { echo "no k8s.io/kubernetes version in hack/tools/kube/go.mod" >&2; exit 1; }
KUBE_MINOR="$(cut -d. -f2 <<<"$KUBE_VERSION")"

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# with_lock NAME CMD...: runs CMD holding an exclusive lock on NAME, so that two
# builds of the same tool (make test and make demo started together) never race.
with_lock() {
	local name=$1
	shift
	exec 9>"$CACHE/.$name.lock"
	flock 9
	"$@"
	exec 9>&-
}

# link TARGET NAME: bin/NAME -> TARGET.
link() { ln -sfn "$1" "$BIN/$2"; }
