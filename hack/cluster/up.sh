#!/usr/bin/env bash
# Starts a real single-node Kubernetes cluster (make cluster): etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
# kube-proxy and containerd with runc and the CNI bridge, all built by
# hack/cluster/build.sh (Kubernetes at hack/tools/kube/go.mod's version).
#
# Everything that listens on a non-loopback address lives in a network
# namespace of its own, /run/netns/$RINGMASTER_CLUSTER (default
# ringmaster-node): the node address 10.240.0.2, the pod bridge 10.244.0.0/24
# and the Service range 10.96.0.0/16. Nothing of the cluster is in the
# machine's own namespace except a forwarder on loopback, which lets
# kubectl, helm and tests reach kube-apiserver: bin/$NAME/kubeconfig points
# at it.
#
# The kubelet's syncFrequency is 10s (the kubelet's default is 1m): a pod's
# Secret volumes are then refreshed within about 6-15 s of a change instead
# of up to 90 s, so the test suite's rotations are quick. SYNC_FREQUENCY
# (a duration, e.g. SYNC_FREQUENCY=1m) sets it, as make measure-cluster does
# to measure a default kubelet.
#
# It runs an image registry too, the CNCF distribution registry (built by
# hack/registry.sh), in the namespace at $NODE_IP:5000 (REGISTRY_ADDR),
# storing under /var/lib/$RINGMASTER_CLUSTER/registry. containerd pulls every
# image from it, whatever registry the image names (ghcr.io/... included):
# its hosts directory has only _default/hosts.toml, whose server is that
# registry, so no pull ever leaves the namespace. A second forwarder on
# loopback reaches it from the machine: bin/$NAME/registry holds that
# address, where make images' tars are pushed (go run ./hack/images push)
# and the chart (helm push --plain-http).
#
# Stop it with hack/cluster/down.sh (make cluster-down), which removes every
# process, mount, namespace, cgroup and file this script created. If this
# script fails midway, it runs down.sh itself.
#
# With --reuse-state it starts the node again on the state down.sh
# --keep-state left (a node restart): the same etcd data, PKI, encryption
# key, kubelet and containerd state, and the API forwarder on the same
# loopback port, so that clients of bin/$NAME/kubeconfig carry on.

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
SYNC_FREQUENCY="${SYNC_FREQUENCY:-10s}"
[[ "$SYNC_FREQUENCY" =~ ^([0-9]+(ms|s|m|h))+$ ]] || { echo "SYNC_FREQUENCY=$SYNC_FREQUENCY is not a duration such as 10s or 1m" >&2; exit 2; }
need_root
lock_cluster

BINS="$("$ROOT/hack/cluster/build.sh")"
started=$(date +%s.%N)

REUSE=0
[[ "${1:-}" == --reuse-state ]] && REUSE=1
if ((REUSE == 1)); then
	[[ -d "$STATE/etcd" ]] || { echo "up.sh --reuse-state: no state in $STATE (down.sh --keep-state leaves it)" >&2; exit 1; }
	"$ROOT/hack/cluster/down.sh" --keep-state >/dev/null
else
	# A previous cluster of the same name is stopped first.
	"$ROOT/hack/cluster/down.sh" >/dev/null
fi

fail() {
	local status=$?
	trap - EXIT
	if ((status != 0)); then
		echo "hack/cluster/up.sh failed; logs in $INFO/logs. Stopping what it started." >&2
		"$ROOT/hack/cluster/down.sh" >&2 || true
	fi
	exit "$status"
}
trap fail EXIT
# A stop signal ends the script through its EXIT trap, which cleans up.
trap 'exit 143' TERM
trap 'exit 130' INT

if ((REUSE == 1)); then
	mkdir -p "$RUN/pids" "$INFO/logs"
	mv "$STATE/created-dirs" "$RUN/created-dirs"
else
	for d in "${GLOBAL_DIRS[@]}"; do
		[[ -e "$d" ]] || echo "$d"
	done >"$STATE.created-dirs"
	mkdir -p "$RUN/pids" "$STATE" "$INFO/logs"
	mv "$STATE.created-dirs" "$RUN/created-dirs"
	rm -f "$INFO"/logs/*.log "$INFO/kubeconfig"
fi

# Helpers of this repository: PKI and the API forwarder.
(cd "$ROOT" && go build -o "$RUN/bin/" ./hack/cluster/pki ./hack/cluster/forward)

# start NAME CMD...: runs CMD in the background inside the network namespace
# (nsenter switches only that: the mounts and cgroups stay the machine's),
# in a session of its own, logging to $INFO/logs/NAME.log, and records its
# pid with the pid's start time for down.sh. start_host runs CMD in the
# machine's own network namespace.
start() {
	local name=$1
	shift
	spawn "$name" nsenter --net="$NSPATH" -- setsid "$@"
}
start_host() {
	local name=$1
	shift
	spawn "$name" setsid "$@"
}

# wait_for WHAT SECONDS CMD...: polls CMD every half second.
wait_for() {
	local what=$1 secs=$2 i
	shift 2
	for ((i = 0; i < secs * 2; i++)); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.5
	done
	echo "Timed out after ${secs}s waiting for $what" >&2
	return 1
}

log "Creating network namespace $NETNS: node address $NODE_IP, pods $POD_CIDR, services $SERVICE_CIDR"
ip netns add "$NETNS"
ip -n "$NETNS" link set lo up
# The node's address sits on a veth whose peer is in the same namespace: the
# kernel has no dummy interfaces here. The default route leads nowhere but
# inside the namespace.
ip -n "$NETNS" link add node0 type veth peer name node0-peer
ip -n "$NETNS" addr add "$NODE_IP/24" dev node0
ip -n "$NETNS" link set node0 up
ip -n "$NETNS" link set node0-peer up
ip -n "$NETNS" route add default dev node0
in_netns sysctl -qw net.ipv4.ip_forward=1

log "Writing PKI and configuration under $STATE"
((REUSE == 1)) || "$RUN/bin/pki" -dir "$STATE/pki" -node "$NAME" -node-ip "$NODE_IP" -service-ip "$SERVICE_IP"
P="$STATE/pki"
kubeconfig() { # kubeconfig USER SERVER
	cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $NAME
  cluster: {server: "$2", certificate-authority: "$P/ca.crt"}
users:
- name: $1
  user: {client-certificate: "$P/$1.crt", client-key: "$P/$1.key"}
contexts:
- name: $NAME
  context: {cluster: $NAME, user: $1}
current-context: $NAME
EOF
}
for u in admin kube-controller-manager kube-scheduler kube-proxy kubelet; do
	kubeconfig "$u" "https://$NODE_IP:6443" >"$STATE/$u.kubeconfig"
done

# The kernel settings the kubelet will change, to restore at down.
for s in "${KUBELET_SYSCTLS[@]}"; do
	printf '%s=%s\n' "$s" "$(sysctl -n "$s")"
done >"$RUN/sysctls"

# The kubelet's cgroup root, in every cgroup v1 hierarchy (the machine boots
# cgroup v1 hybrid, without systemd).
for h in /sys/fs/cgroup/*/; do
	[[ "$h" == */unified/ ]] && continue
	mkdir -p "$h$CGROUP"
	if [[ -f "${h}cpuset.cpus" ]]; then
		cat "${h}cpuset.cpus" >"$h$CGROUP/cpuset.cpus"
		cat "${h}cpuset.mems" >"$h$CGROUP/cpuset.mems"
	fi
done

mkdir -p "$STATE/cni/net.d"
cat >"$STATE/cni/net.d/10-$NAME.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$NAME",
  "plugins": [{
    "type": "bridge", "bridge": "cni0", "isGateway": true, "hairpinMode": true,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]],
             "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$STATE/cni/ipam"}
  }]
}
EOF

cat >"$STATE/containerd.toml" <<EOF
version = 3
root = "$STATE/containerd"
state = "$RUN/containerd"
[grpc]
  address = "$RUN/containerd.sock"
[ttrpc]
  address = "$RUN/containerd.sock.ttrpc"
[plugins.'io.containerd.internal.v1.opt']
  path = "$STATE/opt"
[plugins.'io.containerd.nri.v1.nri']
  disable = true
[plugins.'io.containerd.shim.v1.manager']
  socket_dir = "$RUN/s"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "$STATE/certs.d"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "localhost/ringmaster-pause:dev"
[plugins.'io.containerd.cri.v1.runtime']
  # root here lacks CAP_SYS_RESOURCE: runc fails to lower oom_score_adj.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = "/usr/sbin/runc"
      Root = "$RUN/runc"
      SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$STATE/cni/net.d"
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
EOF

# Every pull goes to the cluster's registry, over plain HTTP inside the
# namespace: the only hosts file is _default's.
mkdir -p "$STATE/certs.d/_default" "$STATE/registry"
cat >"$STATE/certs.d/_default/hosts.toml" <<EOF
server = "http://$REGISTRY_ADDR"
EOF
cat >"$STATE/registry.yml" <<EOF
version: 0.1
log:
  level: warn
  accesslog: {disabled: true}
storage:
  filesystem: {rootdirectory: $STATE/registry}
  delete: {enabled: true}
http:
  addr: $REGISTRY_ADDR
EOF

cat >"$STATE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
tlsCertFile: $P/kubelet-serving.crt
tlsPrivateKeyFile: $P/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $P/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$RUN/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP
failCgroupV1: false
failSwapOn: false
# How often the kubelet re-syncs each pod, which is what refreshes its Secret
# volumes: the default 1m makes a change take up to 90 s to reach the files.
syncFrequency: $SYNC_FREQUENCY
podLogsDir: $STATE/pod-logs
resolvConf: ""
clusterDomain: cluster.local
serializeImagePulls: false
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF

cat >"$STATE/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $STATE/kube-proxy.kubeconfig}
hostnameOverride: $NAME
mode: iptables
clusterCIDR: $POD_CIDR
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
oomScoreAdj: 0
# Leave the machine-wide conntrack settings alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF

ADMIN="$STATE/admin.kubeconfig"
kc() { in_netns "$BINS/kubectl" --kubeconfig "$ADMIN" "$@"; }

# Secrets are encrypted at rest: ticket keys must leave no plaintext in
# etcd's files (member/snap/db, the WAL) nor in a copy of them. secretbox
# (XSalsa20-Poly1305) under a key generated at every start, kept only in
# $STATE (mode 0600, removed by down.sh), never committed; no identity
# provider follows, so a plaintext Secret could not even be read.
# docs/security.md ("Keys at rest") says why not KMS v2 here, and how to
# check it.
ENCRYPTION="$STATE/encryption.yaml"
((REUSE == 1)) || (
	umask 077
	cat >"$ENCRYPTION" <<EOF
apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [secrets]
  providers:
  - secretbox:
      keys:
      - name: ringmaster
        secret: $(head -c 32 /dev/urandom | base64 -w0)
EOF
)

log "Starting etcd and kube-apiserver"
start etcd "$BINS/etcd" --name "$NAME" --data-dir "$STATE/etcd" --unsafe-no-fsync \
	--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
	--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
	--initial-cluster "$NAME=http://127.0.0.1:2380" --listen-metrics-urls http://127.0.0.1:2381
start kube-apiserver "$BINS/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
	--bind-address 0.0.0.0 --secure-port 6443 --advertise-address "$NODE_IP" \
	--service-cluster-ip-range "$SERVICE_CIDR" \
	--client-ca-file "$P/ca.crt" --tls-cert-file "$P/apiserver.crt" --tls-private-key-file "$P/apiserver.key" \
	--kubelet-client-certificate "$P/apiserver-kubelet-client.crt" --kubelet-client-key "$P/apiserver-kubelet-client.key" \
	--kubelet-preferred-address-types InternalIP,Hostname \
	--service-account-issuer https://kubernetes.default.svc.cluster.local \
	--service-account-key-file "$P/sa.pub" --service-account-signing-key-file "$P/sa.key" \
	--authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction --profiling=false \
	--encryption-provider-config "$ENCRYPTION"
wait_for "kube-apiserver /readyz" 90 kc get --raw /readyz

log "Starting the registry at $REGISTRY_ADDR"
start registry "$BINS/registry" serve "$STATE/registry.yml"

log "Starting kube-controller-manager, kube-scheduler and containerd"
start kube-controller-manager "$BINS/kube-controller-manager" --kubeconfig "$STATE/kube-controller-manager.kubeconfig" \
	--authentication-kubeconfig "$STATE/kube-controller-manager.kubeconfig" --authorization-kubeconfig "$STATE/kube-controller-manager.kubeconfig" \
	--service-account-private-key-file "$P/sa.key" --root-ca-file "$P/ca.crt" --use-service-account-credentials \
	--cluster-signing-cert-file "$P/ca.crt" --cluster-signing-key-file "$P/ca.key" \
	--leader-elect=false --bind-address 127.0.0.1 --profiling=false
start kube-scheduler "$BINS/kube-scheduler" --kubeconfig "$STATE/kube-scheduler.kubeconfig" \
	--authentication-kubeconfig "$STATE/kube-scheduler.kubeconfig" --authorization-kubeconfig "$STATE/kube-scheduler.kubeconfig" \
	--leader-elect=false --bind-address 127.0.0.1 --profiling=false
PATH="$BINS:$PATH" start containerd "$BINS/containerd" --config "$STATE/containerd.toml"
wait_for "containerd" 30 "$BINS/ctr" --address "$RUN/containerd.sock" version

log "Importing the pause image"
(cd "$ROOT" && go run ./hack/images -out "$RUN/images" -tag dev -arch "$(go env GOARCH)" pause >/dev/null)
"$BINS/ctr" --address "$RUN/containerd.sock" -n k8s.io images import --local "$RUN/images/pause.tar" >/dev/null

log "Starting kubelet and kube-proxy"
start kubelet "$BINS/kubelet" --config "$STATE/kubelet.yaml" --kubeconfig "$STATE/kubelet.kubeconfig" \
	--root-dir "$STATE/kubelet" --volume-plugin-dir "$STATE/kubelet-plugins" --hostname-override "$NAME" --node-ip "$NODE_IP" --oom-score-adj 0 --v 1
start kube-proxy "$BINS/kube-proxy" --config "$STATE/kube-proxy.yaml"

log "Starting the API forwarder on loopback"
listen=127.0.0.1:0
before=$(grep -c '^forwarding' "$INFO/logs/forward.log" 2>/dev/null || true)
((REUSE == 1)) && [[ -f "$STATE/forward-addr" ]] && listen=$(cat "$STATE/forward-addr")
start_host forward "$RUN/bin/forward" -netns "$NSPATH" -to "$NODE_IP:6443" -listen "$listen"
addr=""
for _ in $(seq 100); do
	addr=$(awk -v n="${before:-0}" '/^forwarding/ && ++i > n {print $2; exit}' "$INFO/logs/forward.log")
	[[ -n "$addr" ]] && break
	sleep 0.1
done
[[ -n "$addr" ]] || { echo "the forwarder did not start" >&2; exit 1; }
echo "$addr" >"$STATE/forward-addr"
kubeconfig admin "https://$addr" >"$INFO/kubeconfig"

# The registry, from the machine's loopback.
listen=127.0.0.1:0
before=$(grep -c '^forwarding' "$INFO/logs/registry-forward.log" 2>/dev/null || true)
((REUSE == 1)) && [[ -f "$STATE/registry-forward-addr" ]] && listen=$(cat "$STATE/registry-forward-addr")
start_host registry-forward "$RUN/bin/forward" -netns "$NSPATH" -to "$REGISTRY_ADDR" -listen "$listen"
raddr=""
for _ in $(seq 100); do
	raddr=$(awk -v n="${before:-0}" '/^forwarding/ && ++i > n {print $2; exit}' "$INFO/logs/registry-forward.log")
	[[ -n "$raddr" ]] && break
	sleep 0.1
done
[[ -n "$raddr" ]] || { echo "the registry's forwarder did not start" >&2; exit 1; }
echo "$raddr" >"$STATE/registry-forward-addr"
echo "$raddr" >"$INFO/registry"
wait_for "the registry" 30 in_netns bash -c "exec 3<>/dev/tcp/${REGISTRY_ADDR%:*}/${REGISTRY_ADDR#*:}"

wait_for "node $NAME Ready" 120 kc wait --for=condition=Ready "node/$NAME" --timeout=1s
wait_for "the default ServiceAccount" 60 kc get serviceaccount default -n default

printf '%s\n' "$BINS" >"$RUN/bins"
log "Cluster $NAME is up in $(awk -v s="$started" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}') s (after the builds)"
# make cluster loads the images itself and says so (RINGMASTER_LOADING=1).
load_hint="  go run ./hack/images push -registry $raddr bin/images/*.tar   # the images, into the cluster's registry"
[[ "${RINGMASTER_LOADING:-}" == 1 ]] && load_hint="  # make cluster pushes bin/images/*.tar to the cluster's registry ($raddr) next"
cat >&2 <<EOF
  export KUBECONFIG=$INFO/kubeconfig     # kube-apiserver through the loopback forwarder
$load_hint
  nsenter --net=$NSPATH CMD              # run CMD in the cluster's network (pods, Services)
  make cluster-down                      # stop it and remove everything it created
EOF
echo "$INFO/kubeconfig"
