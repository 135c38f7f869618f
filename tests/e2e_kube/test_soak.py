"""The soak on the real kubelet node: churn, faults every minute, invariants every step.

Five minutes here (NRI_RESMGR_SOAK_MINUTES, default 5): pods of every QoS class created
and deleted, and once a minute in turn the daemon `kill -9`, containerd restarted, the
configuration changed live, and a `helm upgrade` rolling the daemon out
(tests/e2e_kube/soak.py, `run_soak`). After every step the kernel's cpusets must satisfy
the invariants of tests/e2e_kube/churn.py; the daemon's RSS, open fds and /healthz round
trip are sampled. The hour in docs/e2e.md is `sudo python -m tests.e2e_kube.soak
--minutes 60`. The node's containerd 2.3 requires the plugin (`enable-nri --require`).
"""

from __future__ import annotations

import os

import pytest

from tests.e2e_kube import soak
from tests.e2e_kube.image import Image
from tests.e2e_kube.node import Node
from tests.e2e_kube.test_upgrades import release, required  # noqa: F401 - same setup

MINUTES = float(os.environ.get("NRI_RESMGR_SOAK_MINUTES", "5"))
SEED = int(os.environ.get("NRI_RESMGR_SOAK_SEED", "29"))


@pytest.mark.timeout(int(1800 + 90 * MINUTES))
def test_soak_keeps_every_invariant(
    node: Node,
    nri_image: Image,
    required: dict[str, object],  # noqa: F811
) -> None:
    report = soak.run_soak(node, nri_image, dict(required), MINUTES, SEED)
    soak.write_report("soak", report)
    assert not report["violations"], report["violations"]
    assert not report["faults_failed"], report["faults_failed"]
    kinds = {f["fault"] for f in report["faults"]}
    assert kinds == set(soak.FAULTS), f"faults injected: {sorted(kinds)}"
    assert report["samples"] > 0, "the daemon was never sampled"
