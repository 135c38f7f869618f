"""Build every peer the test suite drives, before pytest starts.

Theory of operation: the suite drives real programs built from their Go modules (the NRI
runtime library at each release, containerd and crictl, kube-apiserver, helm, the kubelet
and its peers, nri-plugins' topology-aware and balloons plugins for the differential test)
and the nri-resmgr image. Each build function caches its result under
`.cache/` keyed by its sources, so a warm run costs a few stat calls. On a new machine the
builds take most of the first run (about 35 minutes on 2 cores), and a cold build inside a
test would count against that test's timeout (pytest-timeout, 600 s) and compete with the
tests around it. `tools/test.sh` therefore runs ``python3 -m tests.build_peers`` first; the
tests then find everything built.

A build that cannot run here (no Go, no root, a failed build) is reported and the next one
goes on: the tests that need it skip or, under NRI_RESMGR_STRICT=1, fail with the reason.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from tests.conformance.harness_build import VERSIONS, build_harness
from tests.e2e import containerd as ctd
from tests.e2e import crio
from tests.e2e_kube.image import ImageBuildError, build_image
from tests.k8s.cluster import build_kube_apiserver
from tests.k8s.components import ComponentBuildError, build_node_components
from tests.peers import NriPluginsBuildError, build_helm, make_nri_plugins
from tests.support.requirements import go_binary

#: what a build that cannot run here raises: require()'s skip or strict-mode failure, a
#: failed or timed-out command
NOT_BUILT = (
    pytest.skip.Exception,
    pytest.fail.Exception,
    OSError,
    subprocess.SubprocessError,
    ComponentBuildError,
    ImageBuildError,
    NriPluginsBuildError,
)


def builds(go: str) -> list[tuple[str, Callable[[], object]]]:
    """Every peer build, named, in the order they run."""
    steps: list[tuple[str, Callable[[], object]]] = [
        (f"NRI runtime library {v}", partial(build_harness, v)) for v in VERSIONS
    ]
    steps += [(r.name, partial(ctd.build, r, go)) for r in ctd.RELEASES.values()]
    steps += [(f"CRI-O {crio.CRIO.version} (crio, load-image, pinns)", partial(crio.build, go))]
    steps += [("kube-apiserver", build_kube_apiserver), ("helm", build_helm)]
    steps += [("nri-plugins topology-aware and balloons (differential test)", make_nri_plugins)]
    steps += [("kubelet, scheduler, controller manager, kubectl", build_node_components)]
    steps += [("nri-resmgr image", build_image)]
    return steps


def main() -> int:
    go = go_binary()
    if go is None:
        print("build-peers: no Go toolchain; the tests that need Go will say so", file=sys.stderr)
        return 0
    failed = 0
    for name, build in builds(go):
        start = time.monotonic()
        try:
            result = build()
        except NOT_BUILT as exc:
            failed += 1
            print(f"build-peers: {name}: not built: {exc}", file=sys.stderr)
            continue
        took = time.monotonic() - start
        where = result if isinstance(result, Path) else ""
        print(f"build-peers: {name}: ready in {took:.1f}s {where}".rstrip(), file=sys.stderr)
    if failed:
        print(f"build-peers: {failed} not built; the tests that need them say why", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
