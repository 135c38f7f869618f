#!/bin/sh
# Build the nri-resmgr image from ./Containerfile without pulling anything from an image
# registry, and write it as an OCI archive that `ctr images import` (and `skopeo copy`,
# `podman load`) accept.
#
#   tools/build-image.sh [-t REF] [-o ARCHIVE]
#
#   -t REF      the image reference (default nri-resmgr:<version in pyproject.toml>);
#               a name without a registry is stored as docker.io/library/NAME, the name
#               the kubelet asks containerd for when a pod says `image: NAME:TAG`
#   -o ARCHIVE  where the OCI archive goes (default ./nri-resmgr-image.oci.tar)
#
# How: mmdebstrap makes a minimal Debian rootfs with python3 and its venv module (from the
# Debian package mirror, as the host's apt does); buildah turns it into a local base image
# and then builds ./Containerfile FROM it (BASE build argument), pip installing the
# daemon's dependencies from the Python package index. Everything buildah stores lives in
# a temporary directory that is removed at the end. Needs root, mmdebstrap and buildah
# (Debian packages of the same names).
#
# With network access to a registry, the ordinary build is simply
#   docker build -t REGISTRY/nri-resmgr:TAG .    (podman/buildah build alike)
set -eu

REPO=$(cd "$(dirname "$0")/.." && pwd)
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$REPO/pyproject.toml" | head -n 1)
REF="nri-resmgr:$VERSION"
OUT="$PWD/nri-resmgr-image.oci.tar"
SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SECURITY=${SECURITY:-http://deb.debian.org/debian-security}

while getopts t:o:h opt; do
    case $opt in
        t) REF=$OPTARG ;;
        o) OUT=$OPTARG ;;
        *) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
    esac
done

for tool in mmdebstrap buildah; do
    command -v "$tool" >/dev/null || {
        echo "build-image: $tool is not installed (apt-get install $tool)" >&2
        exit 1
    }
done

# the full reference: docker.io/library/NAME for a bare NAME, docker.io/ORG/NAME for ORG/NAME
first=${REF%%/*}
case $REF in
    */*) case $first in *.*|*:*|localhost) FULL=$REF ;; *) FULL=docker.io/$REF ;; esac ;;
    *) FULL=docker.io/library/$REF ;;
esac
case $FULL in *:*/*|*@*) ;; *:*) ;; *) FULL=$FULL:$VERSION ;; esac

WORK=$(mktemp -d /tmp/nri-resmgr-image.XXXXXX)
cleanup() {
    buildah --root "$WORK/storage" --runroot "$WORK/run" --storage-driver vfs \
        rm --all >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM
bah() {
    buildah --root "$WORK/storage" --runroot "$WORK/run" --storage-driver vfs "$@"
}

echo "build-image: Debian $SUITE rootfs with python3 (mmdebstrap)" >&2
# essential + python3 without Recommends, /usr merged by mmdebstrap's hook rather than the
# usrmerge package (which would pull in perl): about 100 MB instead of 150 MB
mmdebstrap --quiet --variant=essential --include=python3,python3-venv \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --aptopt='Apt::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    "$SUITE" "$WORK/rootfs.tar" \
    "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" \
    "deb $SECURITY $SUITE-security main"

BASE=localhost/nri-resmgr-base:$SUITE
echo "build-image: base image $BASE (buildah)" >&2
ctr=$(bah from scratch)
bah add --quiet "$ctr" "$WORK/rootfs.tar" / >/dev/null
bah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --cmd /bin/sh --os linux --arch "$(dpkg --print-architecture)" "$ctr"
bah commit --quiet --rm "$ctr" "$BASE" >/dev/null
rm -f "$WORK/rootfs.tar"

echo "build-image: $FULL from $REPO/Containerfile (buildah build)" >&2
set --
[ -n "${PIP_INDEX_URL:-}" ] && set -- "$@" --build-arg "PIP_INDEX_URL=$PIP_INDEX_URL"
if [ -n "${PIP_CERT:-}" ]; then
    # a proxy's CA bundle: visible to pip during the build only, not stored in the image
    set -- "$@" --volume "$PIP_CERT:/run/pip-cert.pem:ro" --build-arg PIP_CERT=/run/pip-cert.pem
fi
bah build --quiet --isolation chroot --network host --layers=false \
    --build-arg "BASE=$BASE" "$@" -f "$REPO/Containerfile" -t "$FULL" "$REPO" >/dev/null

mkdir -p "$(dirname "$OUT")"
rm -f "$OUT"
bah push --quiet "$FULL" "oci-archive:$OUT:$FULL"
echo "build-image: wrote $OUT ($FULL)" >&2
