# Shared by hack/cluster/{up,down,load}.sh: the cluster's name and where its
# pieces live. Several clusters may run at once under different names
# (RINGMASTER_CLUSTER): make cluster's and the test suite's.

source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

NAME="${RINGMASTER_CLUSTER:-ringmaster-node}"
[[ "$NAME" =~ ^[a-z][a-z0-9-]{0,30}$ ]] || { echo "RINGMASTER_CLUSTER=$NAME: want a short DNS label" >&2; exit 1; }
NETNS="$NAME"                  # the network namespace, /run/netns/$NAME
NSPATH="/run/netns/$NETNS"
RUN="/run/$NAME"               # sockets, pids, short paths
STATE="/var/lib/$NAME"         # etcd, kubelet, containerd, PKI
INFO="$BIN/$NAME"              # in the clone: kubeconfig and logs, kept after down
CGROUP="/$NAME"                # the kubelet's cgroupRoot, in every v1 hierarchy
NODE_IP=10.240.0.2             # on node0, a veth whose peer is also in the netns
POD_CIDR=10.244.0.0/24         # the CNI bridge cni0
SERVICE_CIDR=10.96.0.0/16
SERVICE_IP=10.96.0.1           # the kubernetes Service
REGISTRY_ADDR=$NODE_IP:5000    # the image registry, in the namespace
# The kernel settings the kubelet changes at start (protectKernelDefaults is
# false); up.sh saves them and down.sh puts them back.
KUBELET_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

# Directories outside $RUN and $STATE that the cluster's programs create
# where nothing can move them: the kubelet's device plugin socket
# directory, CNI's result cache, the kubelet's container log links, the
# default FlexVolume directory the kubelet creates regardless of its flag,
# /run/netns (ip netns), util-linux's /run/mount. up.sh records those that
# did not exist; down.sh removes them, unless another cluster still runs.
GLOBAL_DIRS=(/var/lib/kubelet /var/lib/cni /var/log/containers /usr/libexec/kubernetes /run/netns /run/mount)

# kubectl's discovery cache goes with the cluster, not into ~/.kube.
export KUBECACHEDIR="$RUN/kube-cache"

in_netns() { nsenter --net="$NSPATH" -- "$@"; }

# pid_alive FILE: the process recorded in FILE ("pid starttime") still runs:
# its pid has the same start time and is no zombie (reparented daemons wait
# for init to reap them).
pid_alive() {
	local pid start now state
	read -r pid start <"$1" 2>/dev/null || return 1
	read -r state now < <(awk '{sub(/.*\) /, ""); print $1, $20}' "/proc/$pid/stat" 2>/dev/null) || return 1
	[[ "$now" == "$start" && "$state" != Z ]]
}

# lock_cluster: one up.sh or down.sh at a time per cluster name. up.sh holds
# the lock through the down.sh it runs; the daemons never inherit it.
lock_cluster() {
	[[ "${RINGMASTER_CLUSTER_LOCKED:-}" == "$NAME" ]] && return 0
	exec 8>"$CACHE/.cluster-$NAME.lock"
	flock 8
	export RINGMASTER_CLUSTER_LOCKED="$NAME"
}

need_root() {
	if ((EUID != 0)); then
		echo "The single-node cluster needs root (network namespaces, mounts, cgroups); run make cluster / make test as root." >&2
		exit 1
	fi
}

# spawn NAME CMD...: runs CMD in the background, in a session of its own,
# logging to $INFO/logs/NAME.log (appended: a component started again by
# component.sh, or a node restarted by up.sh --reuse-state, adds to it),
# and records its pid with the pid's start time for down.sh, and CMD for
# component.sh start. up.sh's start and start_host call it.
spawn() {
	local name=$1
	shift
	mkdir -p "$RUN/cmds"
	printf '%q ' "$@" >"$RUN/cmds/$name"
	"$@" </dev/null >>"$INFO/logs/$name.log" 2>&1 8>&- 9>&- &
	local pid=$! st=""
	for _ in $(seq 50); do
		st=$(awk '{sub(/.*\) /, ""); print $20}' "/proc/$pid/stat" 2>/dev/null) && break
		sleep 0.01
	done
	echo "$pid $st" >"$RUN/pids/$name"
}

# stop NAME [GRACE]: SIGTERM to the recorded pid, SIGKILL after GRACE seconds.
stop() {
	local f="$RUN/pids/$1" grace=${2:-15} pid i
	[[ -f "$f" ]] || return 0
	if pid_alive "$f"; then
		read -r pid _ <"$f"
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < grace * 10; i++)); do
			pid_alive "$f" || break
			sleep 0.1
		done
		if pid_alive "$f"; then
			echo "$1 (pid $pid) ignored SIGTERM for ${grace}s; killing it" >&2
			kill -KILL "$pid" 2>/dev/null || true
			sleep 0.2
		fi
	fi
	rm -f "$f"
}
