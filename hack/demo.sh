#!/usr/bin/env bash
# make demo: the fleet story. A local control plane, the operator and a
# TicketKeyRing; four replicas of examples/server fed by a stand-in kubelet,
# behind a round-robin load balancer; clients resuming their TLS sessions on
# whichever replica they land, through three rotations; then the same load
# without a shared ring, for contrast. hack/fleet tells it (the harness of
# test/e2e); this script builds it and checks afterwards, with ps, that no
# process it started is left running, also after Ctrl-C or a failure.
#
# Extra flags go to the story: make demo DEMOFLAGS='-n 6 -rotations 5'
# (hack/fleet demo -h lists them).

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

KUBEBUILDER_ASSETS="$(hack/envtest.sh)"
export KUBEBUILDER_ASSETS
pids="$(mktemp -t ringmaster-demo-pids.XXXXXX)"
trap 'rm -f "$pids"' EXIT

go build -o "$BIN/fleet" ./hack/fleet
status=0
# shellcheck disable=SC2086 # DEMOFLAGS is a list of flags
"$BIN/fleet" demo -pids "$pids" ${DEMOFLAGS:-} || status=$?

if [[ -s "$pids" ]]; then
	# A zombie (state Z) has ended and only awaits its reaping by init.
	left="$(ps -o pid=,stat=,args= -p "$(cut -d' ' -f1 "$pids" | paste -sd, -)" | awk '$2 !~ /^Z/' || true)"
	if [[ -n "$left" ]]; then
		printf 'Still running after the demo:\n%s\n' "$left" >&2
		exit 1
	fi
	echo "  ps -p $(cut -d' ' -f1 "$pids" | paste -sd, -): none of the $(wc -l <"$pids") processes is running"
fi
exit "$status"
