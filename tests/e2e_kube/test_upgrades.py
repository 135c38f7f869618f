"""Rolling updates of the DaemonSet under pod churn, on the real kubelet node.

The node's containerd 2.3 requires the plugin (`nri-resmgr enable-nri --require`, its
default validator): a container the runtime would create while no daemon is connected is
refused and retried by the kubelet, so none runs undecided. Pods of every QoS class are
created and deleted on a thread while the chart is upgraded to a new image tag, a new
configuration and a new chart version in turn (tests/e2e_kube/soak.py, `run_upgrades`).
After each upgrade and at the end the kernel's cpusets must satisfy the invariants of
tests/e2e_kube/churn.py (no CPU exclusive to two containers, no shared container on an
exclusive CPU, every running container placed), and every pod must run in the end.

Two upgrades here (about two minutes); the ten-upgrade measurement in docs/e2e.md is
`sudo python -m tests.e2e_kube.soak --upgrades 10` (NRI_RESMGR_UPGRADES).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e import containerd as ctdmod
from tests.e2e_kube import soak
from tests.e2e_kube.chart import (
    helm_install,
    runtime_requires,
    values,
)
from tests.e2e_kube.image import Image
from tests.e2e_kube.node import Node

UPGRADES = int(os.environ.get("NRI_RESMGR_UPGRADES", "2"))
SEED = int(os.environ.get("NRI_RESMGR_SOAK_SEED", "29"))


@pytest.fixture(scope="session")
def release() -> ctdmod.Release:
    """containerd 2.3 only: the release with the default validator that closes the window."""
    return ctdmod.CONTAINERD_2


@pytest.fixture(scope="module")
def required(node: Node, nri_image: Image) -> Iterator[dict[str, Any]]:
    """The runtime requires the plugin; the chart installed with the suite's values."""
    node.ctd.import_image(nri_image.archive)
    runtime_requires(node, "--require")
    doc = values(node, nri_image)
    try:
        helm_install(node, doc)
        soak.wait_daemon(node)
        yield doc
    finally:
        node.run("helm", "uninstall", soak.RELEASE, "--namespace", soak.NAMESPACE, "--wait",
                 check=False, timeout=180)  # fmt: skip
        node.kubectl("delete", "pods", "--all", "--wait=true", "--timeout=120s", check=False)
        runtime_requires(node, "--no-require")


def test_rolling_updates_under_churn_leave_no_container_unplaced(
    node: Node,
    nri_image: Image,
    required: dict[str, Any],
) -> None:
    report = soak.run_upgrades(node, nri_image, required, UPGRADES, SEED)
    soak.write_report("upgrades", report)
    assert report["runtime_requires_plugin"], "the node's containerd lost --require"
    assert len(report["upgrades"]) == UPGRADES
    assert len(report["windows"]) >= UPGRADES, (
        f"containerd's log shows {len(report['windows'])} disconnects for {UPGRADES} "
        f"rolling updates: {report['windows']}"
    )
    # the window stays (the old daemon is gone before the new one synchronized), but the
    # validator refused every container that would have been created in it undecided
    assert report["created_in_windows"] == 0, report["windows"]
    assert not report["violations"], report["violations"]
    assert not report["pods_not_running_at_end"], report["pods_not_running_at_end"]
    assert report["startup"]["pods"] >= 10, report["startup"]
