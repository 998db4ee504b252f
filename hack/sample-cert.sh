#!/usr/bin/env bash
# Makes the web-tls Secret that config/samples' Deployments mount, without
# cert-manager: a CA of its own and a certificate for the samples' Services
# (web-nginx, web-haproxy), made with openssl, applied with kubectl.
#
#   hack/sample-cert.sh [NAMESPACE]   # default: kubectl's current namespace
#
# The CA's certificate is written to bin/sample-ca.crt (CA_FILE names
# another file), for clients:
#   kubectl ringmaster probe ADDR --sni web-nginx.NAMESPACE.svc --ca-file bin/sample-ca.crt
# KUBECTL names the kubectl to run (default: kubectl on the PATH). With
# DRY_RUN=1 the Secret is printed, not applied.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KUBECTL="${KUBECTL:-kubectl}"
CA_FILE="${CA_FILE:-$ROOT/bin/sample-ca.crt}"
ns="${1:-}"
if [[ -z "$ns" ]]; then
	ns="$("$KUBECTL" config view --minify -o 'jsonpath={..namespace}' 2>/dev/null || true)"
	ns="${ns:-default}"
fi

"$(dirname "${BASH_SOURCE[0]}")/debian.sh" openssl
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
names=()
for svc in web-nginx web-haproxy; do
	names+=("DNS:$svc" "DNS:$svc.$ns" "DNS:$svc.$ns.svc" "DNS:$svc.$ns.svc.cluster.local")
done
san="$(IFS=,; echo "${names[*]}")"

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 365 \
	-subj "/CN=ringmaster sample CA" -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign \
	-keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=web-nginx.$ns.svc" \
	-keyout "$dir/tls.key" -out "$dir/tls.csr" 2>/dev/null
printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature\n' "$san" >"$dir/ext"
openssl x509 -req -in "$dir/tls.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial -days 90 \
	-extfile "$dir/ext" -out "$dir/tls.crt" 2>/dev/null

secret=("$KUBECTL" create secret generic web-tls --namespace "$ns" --type kubernetes.io/tls
	--from-file "tls.crt=$dir/tls.crt" --from-file "tls.key=$dir/tls.key" --from-file "ca.crt=$dir/ca.crt"
	--dry-run=client -o yaml)
if [[ "${DRY_RUN:-}" == 1 ]]; then
	"${secret[@]}"
	exit 0
fi
mkdir -p "$(dirname "$CA_FILE")"
cp "$dir/ca.crt" "$CA_FILE"
"${secret[@]}" | "$KUBECTL" apply -f -
echo "Secret $ns/web-tls applied; its CA is $CA_FILE" >&2
