#!/usr/bin/env bash
# Stops the single-node cluster of hack/cluster/up.sh (make cluster-down) and
# removes everything it created: its processes, each ended by its own pid;
# the pods' containers, shims, mounts and network namespaces; the cluster's
# network namespace with its interfaces and iptables chains; its cgroups; its
# files under /run and /var/lib; and the kernel settings the kubelet changed
# are put back. It is safe to run at any time, also on a half-started or
# already stopped cluster. Logs stay in bin/$RINGMASTER_CLUSTER/logs.
#
# With --keep-state it stops the node as a power cut would, and keeps what a
# node keeps across a reboot, for up.sh --reuse-state: every process is
# ended (the pods are not deleted first), every mount, the network
# namespace, the cgroups and /run/$RINGMASTER_CLUSTER go, and
# /var/lib/$RINGMASTER_CLUSTER (etcd's data, the PKI, the kubelet's and
# containerd's state) stays. A down.sh without it removes that too.

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_root
lock_cluster

KEEP=0
[[ "${1:-}" == --keep-state ]] && KEEP=1
started=$(date +%s.%N)
BINS="$(cat "$RUN/bins" 2>/dev/null || echo "$BIN/cluster-bin")"

# kill_pids SIGNAL PID...: each by its own pid.
kill_pids() {
	local sig=$1 pid
	shift
	for pid in "$@"; do kill "-$sig" "$pid" 2>/dev/null || true; done
}

# Processes in the cluster's cgroups (containers), the cluster's containerd
# shims (a shim's command line names the cluster's containerd socket, which
# no other process on the machine uses), and any process given a file under
# $RUN as a flag's value.
cluster_pids() {
	local h
	for h in /sys/fs/cgroup/*/; do
		[[ -d "$h${CGROUP#/}" ]] && find "$h${CGROUP#/}" -name cgroup.procs -exec cat {} + 2>/dev/null
	done
	local p cmd
	for p in /proc/[0-9]*; do
		cmd=$({ tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null) || continue
		# A shim, or what a test ran under the cluster's run directory (the
		# fault specs' Vault).
		if [[ "$cmd" == *"-address $RUN/containerd.sock "* || ("$cmd" == *"=$RUN/"* && "$cmd" != *down.sh*) ]]; then
			echo "${p#/proc/}"
		fi
	done
	true
}

if ((KEEP == 0)) && [[ -f "$RUN/pids/kubelet" ]] && pid_alive "$RUN/pids/kubelet" && [[ -f "$RUN/pids/kube-apiserver" ]] && pid_alive "$RUN/pids/kube-apiserver"; then
	# Pods go through the kubelet, so that their CNI teardown runs: first
	# nothing may re-create them.
	stop kube-controller-manager
	stop kube-scheduler
	kc() { in_netns "$BINS/kubectl" --kubeconfig "$STATE/admin.kubeconfig" --request-timeout 10s "$@"; }
	kc delete pods --all --all-namespaces --grace-period 1 --wait=false >/dev/null 2>&1 || true
	for _ in $(seq 120); do
		[[ -z "$(kc get pods --all-namespaces -o name 2>/dev/null)" ]] && break
		sleep 0.5
	done
	# The kubelet stops each deleted pod's sandbox (CNI DEL) before it
	# lets the pod go; give containerd a moment to reap the shims.
	for _ in $(seq 40); do
		[[ -z "$(cluster_pids)" ]] && break
		sleep 0.25
	done
fi

for c in forward registry-forward kube-proxy kubelet kube-controller-manager kube-scheduler; do stop "$c"; done
stop containerd 20
stop registry
# Whatever the kubelet left running (a failed start, a crash): end each
# container process and shim by its pid.
for sig in TERM KILL; do
	left=$(cluster_pids | sort -u)
	[[ -z "$left" ]] && break
	# shellcheck disable=SC2086 # a list of pids
	kill_pids "$sig" $left
	for _ in $(seq 50); do
		[[ -z "$(cluster_pids)" ]] && break
		sleep 0.1
	done
done
stop kube-apiserver 30
stop etcd

# Mounts under the cluster's directories (Secret volumes, container root
# filesystems, pod network namespaces, shm), deepest first.
mapfile -t mounts < <(awk -v run="$RUN/" -v state="$STATE/" 'index($5, run) == 1 || index($5, state) == 1 {print $5}' /proc/self/mountinfo | sort -r)
for m in "${mounts[@]}"; do
	m=$(printf '%b' "$m") # mountinfo escapes spaces as \040
	umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || echo "could not unmount $m" >&2
done

# The network namespace takes its interfaces (node0, cni0, the pods' veths)
# and every iptables chain (kube-proxy's, the kubelet's, CNI's) with it.
if [[ -e "$NSPATH" ]]; then
	ip netns delete "$NETNS"
fi

for h in /sys/fs/cgroup/*/; do
	[[ -d "$h${CGROUP#/}" ]] || continue
	find "$h${CGROUP#/}" -depth -type d -exec rmdir {} + 2>/dev/null || true
	[[ -d "$h${CGROUP#/}" ]] && echo "could not remove cgroup $h${CGROUP#/}" >&2
done

if [[ -f "$RUN/sysctls" ]]; then
	while IFS== read -r k v; do
		[[ "$(sysctl -n "$k")" == "$v" ]] || sysctl -qw "$k=$v"
	done <"$RUN/sysctls"
fi

if ((KEEP == 1)); then
	# What the final down.sh needs: the directories up.sh created.
	[[ -f "$RUN/created-dirs" ]] && mv "$RUN/created-dirs" "$STATE/created-dirs"
	rm -rf "$RUN"
	log "Node $NAME is down in $(awk -v s="$started" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}') s; its state stays in $STATE for up.sh --reuse-state"
	exit 0
fi

# What CNI and the kubelet keep in fixed places: cached CNI results of this
# network, and the kubelet's symlinks to container logs.
rm -f /var/lib/cni/results/"$NAME"-* 2>/dev/null || true
for l in /var/log/containers/*.log; do
	[[ -L "$l" && "$(readlink "$l")" == "$STATE"/* ]] && rm -f "$l"
done

[[ -f "$RUN/created-dirs" ]] || { [[ -f "$STATE/created-dirs" ]] && mkdir -p "$RUN" && mv "$STATE/created-dirs" "$RUN/created-dirs"; }
if [[ -f "$RUN/created-dirs" ]]; then
	others=0
	for f in /run/*/pids/kubelet; do
		[[ "$f" != "$RUN/pids/kubelet" && -f "$f" ]] && pid_alive "$f" && others=1
	done
	if ((others == 0)); then
		while read -r d; do
			if [[ "$d" == /run/netns ]]; then
				# ip netns bind-mounts the directory onto itself.
				[[ -z "$(ls -A "$d" 2>/dev/null)" ]] && { umount "$d" 2>/dev/null || true; rmdir "$d" 2>/dev/null || true; }
				continue
			fi
			rm -rf "$d"
		done <"$RUN/created-dirs"
	fi
fi

rm -rf "$RUN" "$STATE"
rm -f "$INFO/kubeconfig"
log "Cluster $NAME is down in $(awk -v s="$started" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}') s"
