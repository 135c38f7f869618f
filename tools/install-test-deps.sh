#!/usr/bin/env bash
# System packages the integration and e2e suites use (Debian's runc, etcd, busybox-static;
# conmon and libseccomp-dev for CRI-O; mmdebstrap and buildah for the image; the CNI
# plugins and iptables for the real kubelet's node; chromium and chromium-driver for the
# node page read in a real browser, tests/integration/test_view_browser.py).
# Installs only what is missing, only as root with apt-get; otherwise says what is missing
# and leaves it to the tests to skip (or, under NRI_RESMGR_STRICT=1, fail) with a reason.
set -uo pipefail
want=(runc etcd-server busybox-static openssl mmdebstrap buildah containernetworking-plugins
      iptables conmon libseccomp-dev pkg-config chromium chromium-driver)
missing=()
for pkg in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
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
exit 0
