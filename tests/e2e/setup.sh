#!/bin/sh
# Install the Debian packages the e2e suite needs (runc, busybox-static, file), as root.
# The Go-built parts (containerd, its runc shim, ctr, crictl) are built and cached by
# tests/e2e/containerd.py on first use; `python -m tests.e2e.containerd` warms that cache.
set -eu
[ "$(id -u)" = 0 ] || { echo "setup.sh: needs root (apt-get install)" >&2; exit 1; }
need=""
command -v runc >/dev/null 2>&1 || [ -x /usr/sbin/runc ] || need="$need runc"
dpkg -s busybox-static >/dev/null 2>&1 || need="$need busybox-static"
command -v file >/dev/null 2>&1 || need="$need file"
[ -n "$need" ] || exit 0
export DEBIAN_FRONTEND=noninteractive
# shellcheck disable=SC2086
apt-get install -y --no-install-recommends $need || {
    apt-get update
    apt-get install -y --no-install-recommends $need
}
