#!/usr/bin/env bash
# Builds the CNCF distribution registry (github.com/distribution/distribution/v3,
# cmd/registry) through the Go module proxy into the tool cache, once per
# machine, links it as bin/registry and prints its path. The single-node
# cluster runs it in its network namespace (hack/cluster/up.sh), and
# make release on loopback while it signs.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REGISTRY_VERSION=v3.1.2
exec "$ROOT/hack/gotool.sh" registry github.com/distribution/distribution/v3/cmd/registry "$REGISTRY_VERSION"
