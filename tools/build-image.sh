#!/bin/sh
# Build the nri-resmgr image from ./Containerfile without pulling anything from an image
# registry, and write it as an OCI archive that `ctr images import` (and `skopeo copy`,
# `podman load`) accept.
#
#   tools/build-image.sh [-t REF] [-o ARCHIVE] [--arch ARCH[,ARCH]]
#
#   -t REF      the image reference (default nri-resmgr:<version in pyproject.toml>);
#               a name without a registry is stored as docker.io/library/NAME, the name
#               the kubelet asks containerd for when a pod says `image: NAME:TAG`
#   -o ARCHIVE  where the OCI archive goes (default ./nri-resmgr-image.oci.tar)
#   -a, --arch  Debian architecture(s), comma-separated: amd64, arm64 (default: this
#               machine's). Another architecture than this machine's runs its package
#               scripts and pip under qemu-user emulation (Debian's qemu-user-static and
#               binfmt-support, binfmt_misc mounted: tools/install-test-deps.sh); two or
#               more make a multi-architecture OCI index under REF, one image per arch.
#
# How: mmdebstrap makes a minimal Debian rootfs with python3 and its venv module (from the
# Debian package mirror, as the host's apt does); buildah turns it into a local base image
# and then builds ./Containerfile FROM it (BASE build argument), pip installing the
# daemon's dependencies from the Python package index. Everything buildah stores lives in
# a temporary directory that is removed at the end. Needs root, mmdebstrap and buildah
# (Debian packages of the same names).
#
# BASE_CACHE=DIR keeps each architecture's Debian rootfs (the slow part under emulation; it
# does not depend on this repository) as DIR/rootfs-SUITE-ARCH.tar and reuses one younger
# than BASE_MAX_AGE days (default 7), so a rebuild after a source change only reruns pip.
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

HOST_ARCH=$(dpkg --print-architecture)
ARCHES=$HOST_ARCH
# --arch X / --arch=X as -a X (getopts knows short options only)
for arg in "$@"; do
    shift
    case $arg in
        --arch) set -- "$@" -a ;;
        --arch=*) set -- "$@" -a "${arg#--arch=}" ;;
        *) set -- "$@" "$arg" ;;
    esac
done
while getopts t:o:a:h opt; do
    case $opt in
        t) REF=$OPTARG ;;
        o) OUT=$OPTARG ;;
        a) ARCHES=$(echo "$OPTARG" | tr ',' ' ') ;;
        *) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
    esac
done
for arch in $ARCHES; do
    case $arch in
        amd64|arm64) ;;
        *) echo "build-image: --arch $arch: expected amd64 or arm64" >&2; exit 2 ;;
    esac
    if [ "$arch" != "$HOST_ARCH" ]; then
        qemu=/proc/sys/fs/binfmt_misc/qemu-$(echo "$arch" | sed 's/^arm64$/aarch64/; s/^amd64$/x86_64/')
        grep -qs '^enabled' "$qemu" || {
            echo "build-image: --arch $arch on $HOST_ARCH needs qemu-user emulation: $qemu is not" \
                "enabled (apt-get install qemu-user-static binfmt-support; mount binfmt_misc:" \
                "tools/install-test-deps.sh does both)" >&2
            exit 1
        }
    fi
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

set --
[ -n "${PIP_INDEX_URL:-}" ] && set -- "$@" --build-arg "PIP_INDEX_URL=$PIP_INDEX_URL"
if [ -n "${PIP_CERT:-}" ]; then
    # a proxy's CA bundle: visible to pip during the build only, not stored in the image
    set -- "$@" --volume "$PIP_CERT:/run/pip-cert.pem:ro" --build-arg PIP_CERT=/run/pip-cert.pem
fi

# the Debian packages of the base: python3 and its venv module, and the C++ runtime the
# grpcio wheel (the kubelet's PodResources API) links against
PACKAGES=python3,python3-venv,libstdc++6

# build_rootfs ARCH: a minimal Debian rootfs with python3 as $WORK/rootfs.tar
build_rootfs() {
    echo "build-image: Debian $SUITE $1 rootfs with python3 (mmdebstrap)" >&2
    # essential + python3 without Recommends, /usr merged by mmdebstrap's hook rather than
    # the usrmerge package (which would pull in perl): about 100 MB instead of 150 MB
    mmdebstrap --quiet --variant=essential --architectures="$1" \
        --include="$PACKAGES" \
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
        --aptopt='Apt::Install-Recommends "false"' \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
        "$SUITE" "$WORK/rootfs.tar" \
        "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" \
        "deb $SECURITY $SUITE-security main"
}

# build_one ARCH NAME: the Debian base and the Containerfile on it, for one architecture
build_one() {
    arch=$1 name=$2
    shift 2
    # named by its package list too: a rootfs made for another list is not reused
    packages_sum=$(printf %s "$PACKAGES" | cksum | cut -d' ' -f1)
    cached=${BASE_CACHE:+$BASE_CACHE/rootfs-$SUITE-$arch-$packages_sum.tar}
    if [ -n "$cached" ] && [ -n "$(find "$cached" -mtime -"${BASE_MAX_AGE:-7}" 2>/dev/null)" ]; then
        echo "build-image: Debian $SUITE $arch rootfs from $cached" >&2
        cp "$cached" "$WORK/rootfs.tar"
    else
        build_rootfs "$arch"
        [ -z "$cached" ] || { mkdir -p "$BASE_CACHE" && cp "$WORK/rootfs.tar" "$cached"; }
    fi

    base=localhost/nri-resmgr-base:$SUITE-$arch
    echo "build-image: base image $base (buildah)" >&2
    ctr=$(bah from scratch)
    bah add --quiet "$ctr" "$WORK/rootfs.tar" / >/dev/null
    bah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --cmd /bin/sh --os linux --arch "$arch" "$ctr"
    bah commit --quiet --rm "$ctr" "$base" >/dev/null
    rm -f "$WORK/rootfs.tar"

    echo "build-image: $name ($arch) from $REPO/Containerfile (buildah build)" >&2
    bah build --quiet --isolation chroot --network host --layers=false --arch "$arch" \
        --build-arg "BASE=$base" "$@" -f "$REPO/Containerfile" -t "$name" "$REPO" >/dev/null
}

mkdir -p "$(dirname "$OUT")"
rm -f "$OUT"
set -- $ARCHES "--" "$@"
count=0
for a in $ARCHES; do count=$((count + 1)); done
if [ "$count" -eq 1 ]; then
    arch=$1
    shift 2
    build_one "$arch" "$FULL" "$@"
    bah push --quiet "$FULL" "oci-archive:$OUT:$FULL"
    echo "build-image: wrote $OUT ($FULL, $arch)" >&2
    exit 0
fi
# several: one image per architecture, then an OCI index naming them all under FULL
arches=""
while [ "$1" != "--" ]; do arches="$arches $1"; shift; done
shift
bah manifest create "$FULL" >/dev/null
for arch in $arches; do
    build_one "$arch" "$FULL-$arch" "$@"
    bah manifest add --arch "$arch" --os linux "$FULL" "containers-storage:$FULL-$arch" >/dev/null
done
bah manifest push --quiet --all --format oci "$FULL" "oci-archive:$OUT:$FULL"
echo "build-image: wrote $OUT ($FULL, an OCI index of:$arches)" >&2
