#!/usr/bin/env bash
# Renders charts/ringmaster with several sets of values and has a real
# kube-apiserver (the local control plane of make envtest) validate every
# object with a server-side dry run: schemas, CRD structure, defaulting,
# RBAC escalation checks, the prometheus-operator kinds. Part of make verify.
# Nothing is created. Needs no root.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

PROMETHEUS_OPERATOR_VERSION=v0.85.0
HELM="$("$ROOT/hack/gotool.sh" helm helm.sh/helm/v3/cmd/helm v3.22.0)"
KUBEBUILDER_ASSETS="$("$ROOT/hack/envtest.sh")"
export KUBEBUILDER_ASSETS
KUBECTL="$KUBEBUILDER_ASSETS/kubectl"

work="$(mktemp -d -t ringmaster-chart-dryrun.XXXXXX)"
cp_pid=""
cleanup() {
	if [[ -n "$cp_pid" ]] && kill -0 "$cp_pid" 2>/dev/null; then
		kill -TERM "$cp_pid"
		# hack/controlplane stops etcd and kube-apiserver, each given 20 s.
		for _ in $(seq 500); do kill -0 "$cp_pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$cp_pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/controlplane" ./hack/controlplane
"$work/controlplane" -write-kubeconfig "$work/kubeconfig" >"$work/controlplane.log" 2>&1 </dev/null &
cp_pid=$!
for _ in $(seq 900); do
	grep -qx ready "$work/controlplane.log" && break
	kill -0 "$cp_pid" 2>/dev/null || { cat "$work/controlplane.log" >&2; exit 1; }
	sleep 0.1
done
grep -qx ready "$work/controlplane.log" || { echo "the control plane did not start" >&2; cat "$work/controlplane.log" >&2; exit 1; }
export KUBECONFIG="$work/kubeconfig"

# The ServiceMonitor and PrometheusRule kinds, from prometheus-operator's
# module.
pomod="$(go mod download -json "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
for kind in servicemonitors prometheusrules; do
	"$KUBECTL" apply --server-side -f "$pomod/example/prometheus-operator-crd/monitoring.coreos.com_$kind.yaml" >/dev/null
done
"$KUBECTL" wait --for condition=Established crd/servicemonitors.monitoring.coreos.com crd/prometheusrules.monitoring.coreos.com --timeout 60s >/dev/null
"$KUBECTL" create namespace ringmaster-system >/dev/null

sets=(
	""
	"--set metrics.serviceMonitor.enabled=true --set metrics.tls.secretName=ringmaster-metrics-tls --set metrics.prometheusRule.enabled=true --set podDisruptionBudget.enabled=true --set crds.keep=false --set image.digest=sha256:$(printf '0%.0s' {1..64}) --set maxRenewalsPerMinute=5 --set grafana.dashboards.enabled=true"
	"--set crds.enabled=false --set serviceAccount.create=false --set serviceAccount.name=custom --set metrics.enabled=false --set fullnameOverride=rm --set excludeSecretsFromBackup=false --set grafana.dashboards.enabled=true --set grafana.dashboards.label=grafana.example.com/dashboard --set grafana.dashboards.labelValue=ringmaster"
	"--set certificatePolicy.enabled=false --set watchNamespaces={default}"
	"--set nudge.enabled=false --set watchNamespaces={default}"
)
for set in "${sets[@]}"; do
	# shellcheck disable=SC2086 # a list of flags
	"$HELM" template ringmaster charts/ringmaster --namespace ringmaster-system --kube-version "${KUBE_VERSION#v}" $set >"$work/rendered.yaml"
	n=$(grep -c '^kind:' "$work/rendered.yaml")
	"$KUBECTL" apply --server-side --dry-run=server --field-manager helm -f "$work/rendered.yaml" >"$work/applied.txt"
	echo "chart dry run ${set:-(defaults)}: $n objects accepted by kube-apiserver ${KUBE_VERSION#v}"
done
