#!/usr/bin/env bash
# kube-router.sh: builds kube-router (its NetworkPolicy controller is what
# the cluster suite runs, to enforce config/samples' NetworkPolicy on the
# single-node cluster's bridge network, which enforces none) through the Go
# module proxy into the tool cache, installs Debian's ipset, which it
# drives, and prints the binary's path. The cluster's iptables come with
# hack/cluster/build.sh.
#
# v2.1.0 is the one version the proxy serves here, and security flaws are
# reported for it: it runs only inside the suite's throwaway cluster, in the
# cluster's network namespace, and is stopped by its pid when the spec
# ends. A cold build took 23 minutes on the shared 2-core machine.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"$ROOT/hack/debian.sh" ipset
CGO_ENABLED=0 "$ROOT/hack/gotool.sh" kube-router github.com/cloudnativelabs/kube-router/v2/cmd/kube-router v2.1.0
