#!/usr/bin/env bash
# make release: builds, signs and writes every artifact of a release into
# DIR (default bin/release), and prints the versions and digests.
#
#   hack/release.sh [DIR]
#
# The version is internal/version/VERSION's, for the binaries, the images'
# tag and the chart (version without the v, appVersion with it). DIR gets:
#   images/NAME.tar          each image as an OCI layout: the index
#                            (linux/amd64, linux/arm64), a CycloneDX SBOM per
#                            platform and cosign's signatures of the index and
#                            of each platform, all as OCI referrers;
#   ringmaster-X.Y.Z.tgz     the chart, packaged;
#   ringmaster-X.Y.Z.tgz.sigstore.json  cosign's signature bundle of it;
#   cosign.pub               the public key that verifies them;
#   SHA256SUMS               the checksums of all of the above.
#
# The key: COSIGN_KEY, any key reference cosign takes (a file, env://VAR,
# a KMS URI: awskms://, gcpkms://, azurekms://, hashivault://, k8s://), and
# COSIGN_PASSWORD for an encrypted key file. Without COSIGN_KEY it signs
# with the TEST key of hack/cosign.sh test-key, and says so: never publish
# that. Signing is offline (no transparency log, no Fulcio): a key the
# release holds. Images are signed in a registry the script runs on
# loopback for the while (the CNCF distribution registry), then exported
# with their signatures; RELEASE_IMAGES (names, default the default set)
# narrows what is built, as the test of this script does.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OUT="${1:-$BIN/release}"
VERSION="$(tr -d '[:space:]' <"$ROOT/internal/version/VERSION")"
CHART_VERSION="${VERSION#v}"
HELM="${RINGMASTER_HELM:-$BIN/helm}"
SBOM_TOOL="${RINGMASTER_CYCLONEDX_GOMOD:-$BIN/cyclonedx-gomod}"
COSIGN="$("$ROOT/hack/cosign.sh")"
REGISTRY="$("$ROOT/hack/registry.sh")"
for t in "$HELM" "$SBOM_TOOL"; do
	[[ -x "$t" ]] || { echo "hack/release.sh: $t is missing: run make release (it builds helm and cyclonedx-gomod)" >&2; exit 1; }
done
if [[ -z "${COSIGN_KEY:-}" ]]; then
	COSIGN_KEY="$("$ROOT/hack/cosign.sh" test-key)/cosign.key"
	export COSIGN_PASSWORD=""
	log "WARNING: COSIGN_KEY is unset: signing with the TEST key $COSIGN_KEY. Set COSIGN_KEY (and COSIGN_PASSWORD) to sign a release."
fi
export COSIGN_PASSWORD="${COSIGN_PASSWORD-}"
# Offline signing with a key: no transparency log, no signing config from TUF.
SIGN=(--key "$COSIGN_KEY" --tlog-upload=false --use-signing-config=false --yes)

rm -rf "$OUT"
mkdir -p "$OUT"
work="$(mktemp -d)"
regpid=""
cleanup() {
	local status=$?
	if [[ -n "$regpid" ]]; then
		kill "$regpid" 2>/dev/null || true
		wait "$regpid" 2>/dev/null || true
	fi
	rm -rf "$work"
	exit "$status"
}
trap cleanup EXIT

log "Building the images $VERSION (linux/amd64, linux/arm64) with their SBOMs"
# shellcheck disable=SC2086 # a list of names
(cd "$ROOT" && go run ./hack/images -out "$work/images" -tag "$VERSION" -version "$VERSION" -sbom "$SBOM_TOOL" ${RELEASE_IMAGES:-}) >"$work/built.txt"

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
reg="127.0.0.1:$port"
cat >"$work/registry.yml" <<YAML
version: 0.1
log: {level: warn, accesslog: {disabled: true}}
storage:
  filesystem: {rootdirectory: $work/registry}
http:
  addr: $reg
YAML
"$REGISTRY" serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
regpid=$!
for ((i = 0; i < 100; i++)); do
	(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
	sleep 0.1
done

log "Pushing the images to a registry on $reg and signing them"
(cd "$ROOT" && go run ./hack/images push -registry "$reg" "$work"/images/*.tar) >"$work/pushed.txt"
while read -r ref digest _; do
	"$COSIGN" sign "${SIGN[@]}" --recursive "${ref%:*}@$digest" 2>>"$work/cosign.log"
done <"$work/pushed.txt"

log "Packaging the chart $CHART_VERSION and signing it"
"$HELM" package "$ROOT/charts/ringmaster" --version "$CHART_VERSION" --app-version "$VERSION" -d "$OUT" >/dev/null
chart="ringmaster-$CHART_VERSION.tgz"
"$COSIGN" sign-blob "${SIGN[@]}" --bundle "$OUT/$chart.sigstore.json" "$OUT/$chart" >/dev/null 2>>"$work/cosign.log"
export HELM_CACHE_HOME="$work/helm/cache" HELM_CONFIG_HOME="$work/helm/config" HELM_DATA_HOME="$work/helm/data"
chart_digest="$("$HELM" push "$OUT/$chart" "oci://$reg/charts" --plain-http 2>&1 | awk '/^Digest:/ {print $2}')"
[[ -n "$chart_digest" ]] || { echo "helm push printed no digest" >&2; exit 1; }
"$COSIGN" sign "${SIGN[@]}" "$reg/charts/ringmaster@$chart_digest" 2>>"$work/cosign.log"

"$COSIGN" public-key --key "$COSIGN_KEY" >"$OUT/cosign.pub"
log "Verifying every signature with cosign.pub"
while read -r ref digest _; do
	"$COSIGN" verify --key "$OUT/cosign.pub" --insecure-ignore-tlog=true "${ref%:*}@$digest" >/dev/null 2>>"$work/cosign.log"
done <"$work/pushed.txt"
"$COSIGN" verify --key "$OUT/cosign.pub" --insecure-ignore-tlog=true "$reg/charts/ringmaster@$chart_digest" >/dev/null 2>>"$work/cosign.log"
"$COSIGN" verify-blob --key "$OUT/cosign.pub" --insecure-ignore-tlog=true --bundle "$OUT/$chart.sigstore.json" "$OUT/$chart" 2>>"$work/cosign.log"

log "Exporting the images with their SBOMs and signatures"
(cd "$ROOT" && go run ./hack/images export -registry "$reg" -out "$OUT/images" "$work"/images/*.tar) >"$work/exported.txt"

(cd "$OUT" && sha256sum images/*.tar "$chart" "$chart.sigstore.json" cosign.pub >SHA256SUMS)

echo "ringmaster $VERSION: binaries $VERSION, images :$VERSION, chart $CHART_VERSION (appVersion $VERSION)"
echo "images (index digest; then each platform's image and its SBOM):"
sed 's/^/  /' "$work/built.txt"
echo "signatures and SBOMs exported (referrers per image):"
awk -v r="$reg/" '{sub(r, "", $1); print "  " $1, $2, $3, $4}' "$work/exported.txt"
echo "chart: $chart sha256:$(sha256sum "$OUT/$chart" | cut -d' ' -f1) (OCI manifest $chart_digest when pushed by helm push)"
echo "signed with: $(sed -n 2p "$OUT/cosign.pub" | cut -c1-24)... ($OUT/cosign.pub)"
echo "written to $OUT (SHA256SUMS lists every file)"
