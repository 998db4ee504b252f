#!/usr/bin/env bash
# Builds the local control plane (kube-apiserver, kubectl and etcd) from source
# through the Go module proxy, caches it outside the clone and prints the
# directory to use as KUBEBUILDER_ASSETS.
#
# setup-envtest is not used: it downloads prebuilt binaries, and this project
# builds everything it runs from the module proxy.
#
# Versions come from the tools modules in hack/tools/{kube,etcd}; the cache key
# below must change with them.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ETCD_VERSION=v3.7.3
ASSETS="$CACHE/envtest-$KUBE_VERSION-etcd-$ETCD_VERSION"

build() {
	mkdir -p "$ASSETS"
	if [[ ! -x "$ASSETS/etcd" ]]; then
		log "Building etcd $ETCD_VERSION (about 1 minute on 2 cores)"
		(cd "$ROOT/hack/tools/etcd" && go build -trimpath -o "$ASSETS/etcd.tmp" go.etcd.io/etcd/server/v3)
		mv "$ASSETS/etcd.tmp" "$ASSETS/etcd"
	fi
	local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$KUBE_MINOR"
	local cmd
	for cmd in kube-apiserver kubectl; do
		if [[ ! -x "$ASSETS/$cmd" ]]; then
			log "Building $cmd $KUBE_VERSION (kube-apiserver takes about 5 minutes cold)"
			(cd "$ROOT/hack/tools/kube" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$ASSETS/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd")
			mv "$ASSETS/$cmd.tmp" "$ASSETS/$cmd"
		fi
	done
}

with_lock envtest build
link "$ASSETS" k8s
echo "$BIN/k8s"
