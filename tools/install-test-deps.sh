#!/usr/bin/env bash
# System packages the integration and e2e suites use (Debian's runc, etcd, busybox-static;
# conmon and libseccomp-dev for CRI-O; mmdebstrap and buildah for the image, with
# qemu-user-static and binfmt-support for its other architecture (arm64 on amd64); the CNI
# plugins and iptables for the real kubelet's node; chromium and chromium-driver for the
# node page read in a real browser, tests/integration/test_view_browser.py).
# Installs only what is missing, only as root with apt-get; otherwise says what is missing
# and leaves it to the tests to skip (or, under NRI_RESMGR_STRICT=1, fail) with a reason.
set -uo pipefail
want=(runc etcd-server busybox-static openssl mmdebstrap buildah containernetworking-plugins
      iptables conmon libseccomp-dev pkg-config chromium chromium-driver
      qemu-user-static binfmt-support)

# qemu-user emulation needs the kernel's binfmt_misc mounted (no systemd does it here) and
# the qemu handlers registered (binfmt-support's update-binfmts); root only, idempotent
binfmt() {
  [ "$(id -u)" -eq 0 ] || return 0
  [ -e /proc/sys/fs/binfmt_misc/register ] ||
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null || return 0
  command -v update-binfmts >/dev/null || return 0
  for handler in qemu-aarch64 qemu-x86_64; do
    [ -e "/usr/share/binfmts/$handler" ] && update-binfmts --enable "$handler" >/dev/null 2>&1
  done
  return 0
}
missing=()
for pkg in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && { binfmt; exit 0; }
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "install-test-deps: missing ${missing[*]} (need root and apt-get); dependent tests will skip" >&2
  exit 0
fi
echo "install-test-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 || {
  apt-get update -qq >/dev/null 2>&1
  apt-get install -y -qq "${missing[@]}" >/dev/null || echo "install-test-deps: apt-get failed" >&2
}
binfmt
exit 0
