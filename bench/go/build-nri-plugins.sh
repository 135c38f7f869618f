#!/bin/sh
# Build containers/nri-plugins' topology-aware plugin from its public Go module, unchanged.
#
# The module's go.mod replaces pkg/topology with a relative path, which Go ignores in a
# dependency, so this generates a throw-away wrapper module under .cache/bench/ whose own
# go.mod points that replace (and the module's other replace) into the module cache copy.
# Nothing of nri-plugins is copied into the repository.
#
# pkg/topology is a nested module of its own, so the module zip leaves it out, and the
# module proxy refuses it (403 for v0.14.0 and for the tag commit's pseudo-version). Give
# its directory from a checkout of the tag in NRI_PLUGINS_TOPOLOGY_DIR, e.g.
#   git clone --depth 1 -b v0.14.0 https://github.com/containers/nri-plugins /tmp/np
#   NRI_PLUGINS_TOPOLOGY_DIR=/tmp/np/pkg/topology bench/go/build-nri-plugins.sh
# (default: .cache/bench/nri-plugins-topology, where a previous run left it).
#
# Usage: bench/go/build-nri-plugins.sh [VERSION]   (default v0.14.0)
# Output: .cache/bench/nri-plugins-VERSION/nri-resource-policy-topology-aware
set -eu
VERSION=${1:-v0.14.0}
MOD=github.com/containers/nri-plugins
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$ROOT/.cache/bench/nri-plugins-$VERSION
BIN=$OUT/nri-resource-policy-topology-aware
[ -x "$BIN" ] && { echo "$BIN"; exit 0; }
mkdir -p "$OUT/wrap"
go mod download -json "$MOD@$VERSION" > "$OUT/download.json"
SRC=$(go env GOMODCACHE)/$MOD@$VERSION
TOPO=${NRI_PLUGINS_TOPOLOGY_DIR:-$ROOT/.cache/bench/nri-plugins-topology}
[ -f "$TOPO/topology.go" ] || {
	echo "no $TOPO/topology.go: set NRI_PLUGINS_TOPOLOGY_DIR (see the header)" >&2; exit 2; }
GOVER=$(sed -n 's/^go //p' "$SRC/go.mod")
cd "$OUT/wrap"
cat > go.mod <<MOD
module nri-resmgr-bench/nri-plugins-wrapper

go $GOVER

require $MOD $VERSION

replace (
	$MOD/pkg/topology v0.0.0 => $TOPO
	github.com/opencontainers/runtime-tools => github.com/opencontainers/runtime-tools v0.0.0-20221026201742-946c877fa809
)
MOD
# Take the module's own dependency versions (its go.sum and require block), then resolve.
cp "$SRC/go.sum" go.sum
chmod u+w go.sum
sed -n '/^require (/,/^)/p' "$SRC/go.mod" | grep -v "pkg/topology" >> go.mod
GOFLAGS=-mod=mod go build -buildvcs=false -o "$BIN" "$MOD/cmd/plugins/topology-aware"
echo "$BIN"
