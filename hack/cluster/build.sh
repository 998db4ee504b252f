#!/usr/bin/env bash
# Builds (once per machine, cached outside the clone) and installs what the
# single-node cluster of hack/cluster/up.sh runs, and prints the directory
# holding the binaries:
#
#   - kubelet, kube-controller-manager, kube-scheduler and kube-proxy (KUBE_VERSION, hack/lib.sh)
#     from the kube tools module (hack/tools/kube), in ONE go build with the
#     flags of hack/envtest.sh (CGO_ENABLED=0, -trimpath, version ldflags), so
#     that they share their compiled packages with each other and with
#     kube-apiserver and kubectl;
#   - containerd v2.4.2, its runc shim and ctr from hack/tools/containerd
#     (Debian's containerd 1.6 is too old: kubelet >= 1.36 refuses 1.x);
#   - the CNCF distribution registry (hack/registry.sh), the node's only
#     image source;
#   - from Debian, if missing: runc (crun 1.8 rejects containerd 2.4's
#     runtime spec), containernetworking-plugins (bridge, host-local,
#     loopback), iptables and conntrack for kube-proxy.
#
# kube-apiserver, etcd and kubectl come from hack/envtest.sh, which this
# script runs too. The output directory links all of them.

source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

CONTAINERD_VERSION=$(awk '$1 == "github.com/containerd/containerd/v2" {print $2; exit}' "$ROOT/hack/tools/containerd/go.mod")
NODE="$CACHE/node-$KUBE_VERSION"
CONTAINERD="$CACHE/containerd-$CONTAINERD_VERSION"
DEBS=(runc containernetworking-plugins iptables conntrack)

build_node() {
	local cmds=(kubelet kube-controller-manager kube-scheduler kube-proxy) missing=0 cmd
	for cmd in "${cmds[@]}"; do [[ -x "$NODE/$cmd" ]] || missing=1; done
	((missing)) || return 0
	log "Building ${cmds[*]} $KUBE_VERSION (about 3 minutes on 2 cores after kube-apiserver, whose packages they share; 9 alone)"
	mkdir -p "$NODE/tmp"
	local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$KUBE_MINOR"
	local pkgs=()
	for cmd in "${cmds[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$cmd"); done
	(cd "$ROOT/hack/tools/kube" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$NODE/tmp/" "${pkgs[@]}")
	for cmd in "${cmds[@]}"; do mv "$NODE/tmp/$cmd" "$NODE/$cmd"; done
	rmdir "$NODE/tmp"
}

build_containerd() {
	local cmds=(containerd containerd-shim-runc-v2 ctr) missing=0 cmd
	for cmd in "${cmds[@]}"; do [[ -x "$CONTAINERD/$cmd" ]] || missing=1; done
	((missing)) || return 0
	log "Building containerd $CONTAINERD_VERSION (about 1.5-2 minutes cold)"
	mkdir -p "$CONTAINERD/tmp"
	local pkgs=()
	for cmd in "${cmds[@]}"; do pkgs+=("github.com/containerd/containerd/v2/cmd/$cmd"); done
	(cd "$ROOT/hack/tools/containerd" && CGO_ENABLED=0 go build -trimpath -tags "no_btrfs no_devmapper no_zfs" \
		-ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" -o "$CONTAINERD/tmp/" "${pkgs[@]}")
	for cmd in "${cmds[@]}"; do mv "$CONTAINERD/tmp/$cmd" "$CONTAINERD/$cmd"; done
	rmdir "$CONTAINERD/tmp"
}

install_debs() {
	local missing=() pkg
	for pkg in "${DEBS[@]}"; do
		dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
	done
	((${#missing[@]})) || return 0
	if ((EUID != 0)); then
		echo "hack/cluster/build.sh: the cluster needs ${missing[*]} from Debian; run as root (apt-get install)" >&2
		return 1
	fi
	log "Installing ${missing[*]} from Debian"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

assets="$("$ROOT/hack/envtest.sh")"
registry="$("$ROOT/hack/registry.sh")"
with_lock cluster-node build_node
with_lock cluster-containerd build_containerd
with_lock apt install_debs

OUT="$BIN/cluster-bin"
mkdir -p "$OUT"
for f in kubelet kube-controller-manager kube-scheduler kube-proxy; do ln -sfn "$NODE/$f" "$OUT/$f"; done
for f in containerd containerd-shim-runc-v2 ctr; do ln -sfn "$CONTAINERD/$f" "$OUT/$f"; done
for f in kube-apiserver etcd kubectl; do ln -sfn "$(readlink -f "$assets/$f")" "$OUT/$f"; done
ln -sfn "$(readlink -f "$registry")" "$OUT/registry"
echo "$OUT"
