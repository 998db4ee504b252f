#!/usr/bin/env bash
# make demo: a local control plane, the operator, a TicketKeyRing, and a
# rotation, shown as a newcomer would watch them. Everything it starts is
# stopped on the way out, whatever happens.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

ASSETS="$(hack/envtest.sh)"
export KUBEBUILDER_ASSETS="$ASSETS"
KUBECTL="$ASSETS/kubectl"
WORK="$(mktemp -d -t ringmaster-demo.XXXXXX)"
export KUBECONFIG="$WORK/kubeconfig"
pids=()

cleanup() {
	local pid
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$WORK"
}
trap cleanup EXIT

say "Building the operator"
go build -o "$BIN/ringmaster" .
go build -o "$BIN/controlplane" ./hack/controlplane
go build -o "$BIN/showring" ./hack/showring

say "Starting a local control plane (etcd and kube-apiserver built from source)"
"$BIN/controlplane" -write-kubeconfig "$KUBECONFIG" >"$WORK/controlplane.out" 2>"$WORK/controlplane.log" &
pids+=($!)
for _ in $(seq 1 120); do
	grep -q ready "$WORK/controlplane.out" 2>/dev/null && break
	kill -0 "${pids[0]}" 2>/dev/null || { cat "$WORK/controlplane.log" >&2; exit 1; }
	sleep 0.5
done
grep -q ready "$WORK/controlplane.out" || { echo "the control plane did not start" >&2; exit 1; }
"$KUBECTL" version 2>/dev/null | sed 's/^/    /'

say "Installing the CRDs"
"$KUBECTL" apply --server-side -f config/crd/bases
"$KUBECTL" wait --for condition=established crd/ticketkeyrings.ringmaster.io >/dev/null

say "Starting the operator"
"$BIN/ringmaster" --leader-elect --leader-election-namespace default \
	--metrics-bind-address 0 --health-probe-bind-address 127.0.0.1:0 >"$WORK/operator.log" 2>&1 &
pids+=($!)

say "Applying config/samples"
"$KUBECTL" apply -k config/samples
"$KUBECTL" wait --for condition=Ready tkr/web tkr/demo --timeout 60s
"$KUBECTL" get tkr

show() {
	"$KUBECTL" get secret "$1" -o jsonpath='{.data.ticketkeys\.json}' | base64 -d | "$BIN/showring"
}

say "What the pods mounting demo-ticket-keys receive (key ids and times; key bytes never leave the Secret)"
show demo-ticket-keys
echo "    files in web-ticket-keys: $("$KUBECTL" get secret web-ticket-keys -o go-template='{{range $k, $v := .data}}{{$k}} {{end}}')"

delay=$("$KUBECTL" get tkr demo -o jsonpath='{.spec.activationDelay}')
say "Requesting a rotation of demo now; its staged key activates once it has been delivered for activationDelay ($delay)"
"$KUBECTL" annotate tkr demo --overwrite "ringmaster.io/rotate-requested-at=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
for _ in $(seq 1 60); do
	active=$("$KUBECTL" get tkr demo -o jsonpath='{.status.keys[?(@.state=="active")].id}')
	staged=$("$KUBECTL" get tkr demo -o jsonpath='{.status.keys[?(@.state=="staged")].id}')
	epoch=$("$KUBECTL" get tkr demo -o jsonpath='{.status.epoch}')
	printf '    epoch %s, active %s, staged %s\n' "$epoch" "$active" "$staged"
	[[ "$epoch" -ge 3 ]] && break
	sleep 2
done
"$KUBECTL" get tkr demo
show demo-ticket-keys

say "Snapshots (immutable, one per epoch; those holding a destroyed key are deleted)"
"$KUBECTL" get secrets -l ringmaster.io/component=snapshot -L ringmaster.io/ring,ringmaster.io/epoch

say "Events"
"$KUBECTL" get events --field-selector involvedObject.kind=TicketKeyRing -o custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message | cut -c1-160

say "Stopping everything"
