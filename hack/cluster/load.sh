#!/usr/bin/env bash
# Loads image tar files (OCI layouts from make images or make release, or
# docker save archives) into the single-node cluster's containerd, where the
# kubelet finds them without pulling: the air-gapped path, for pods with
# imagePullPolicy: Never (or IfNotPresent). The cluster's registry is the
# other (hack/cluster/up.sh; go run ./hack/images push). containerd takes
# the node's platform of an image index; the SBOMs and signatures beside
# it in the layout are stored, not imported as images.
#
#   hack/cluster/load.sh bin/images/*.tar
#
# Each image keeps the name its archive gives it, e.g.
# ghcr.io/ringmaster-io/ringmaster:v0.1.0 (make images tags VERSION).

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_root
lock_cluster

(($#)) || { echo "usage: hack/cluster/load.sh IMAGE.tar..." >&2; exit 2; }
[[ -S "$RUN/containerd.sock" ]] || { echo "cluster $NAME is not running (make cluster)" >&2; exit 1; }
BINS="$(cat "$RUN/bins")"
for tar in "$@"; do
	"$BINS/ctr" --address "$RUN/containerd.sock" -n k8s.io images import --local "$tar" | sed 's/^/  /' >&2
done
