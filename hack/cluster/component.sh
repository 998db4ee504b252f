#!/usr/bin/env bash
# Stops or starts one component of the single-node cluster of
# hack/cluster/up.sh, for the cluster suite's fault specs:
#
#   hack/cluster/component.sh stop|start|restart COMPONENT
#
# COMPONENT is one of the processes up.sh started: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, containerd, kubelet, kube-proxy,
# forward. stop ends it as down.sh does (SIGTERM, SIGKILL after a grace);
# what it runs goes on without it (containerd's shims keep the containers,
# the kubelet's pods keep running). start runs it again with the command
# line up.sh gave it, logging after its earlier log. Nothing else changes:
# down.sh still stops and removes everything.

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_root
lock_cluster

usage() {
	echo "usage: $0 stop|start|restart etcd|kube-apiserver|kube-controller-manager|kube-scheduler|containerd|kubelet|kube-proxy|forward" >&2
	exit 2
}
(($# == 2)) || usage
action=$1 name=$2
[[ "$name" =~ ^(etcd|kube-apiserver|kube-controller-manager|kube-scheduler|containerd|kubelet|kube-proxy|forward)$ ]] || usage
[[ -f "$RUN/cmds/$name" ]] || { echo "$name was not started by hack/cluster/up.sh for cluster $NAME" >&2; exit 1; }
# containerd finds its shim, and the kubelet its tools, on the PATH up.sh
# gave them.
PATH="$(cat "$RUN/bins"):$PATH"

do_start() {
	if [[ -f "$RUN/pids/$name" ]] && pid_alive "$RUN/pids/$name"; then
		echo "$name already runs" >&2
		return 0
	fi
	local -a cmd
	eval "cmd=($(cat "$RUN/cmds/$name"))"
	spawn "$name" "${cmd[@]}"
	if [[ "$name" == containerd ]]; then
		# Its clients (the kubelet, ctr) find it answering.
		local i
		for ((i = 0; i < 60; i++)); do
			"$(cat "$RUN/bins")/ctr" --address "$RUN/containerd.sock" version >/dev/null 2>&1 && break
			sleep 0.5
		done
	fi
	log "Started $name"
}

case "$action" in
stop)
	stop "$name" 20
	log "Stopped $name"
	;;
start) do_start ;;
restart)
	stop "$name" 20
	do_start
	;;
*) usage ;;
esac
