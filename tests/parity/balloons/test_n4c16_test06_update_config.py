"""n4c16/test06-update-config: balloon types removed, restored and re-classed by live
configuration updates, in the daemon.

Their test applies a new ``BalloonsPolicy`` through the agent; here the running daemon
(`ResmgrPlugin` on a real socket, as in tests/integration/test_daemon.py) is given each
configuration with ``reconfigure``, which is where the agent's update lands.  Their
checks read the balloon instance of each container from the metrics; here from the
daemon's assignments (``pool`` is the instance, ``btype0[0]``).  Their ``cpuClasses``
definitions (frequencies for their cpu controller) are left out, the types keep their
``cpuClass`` names.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from nri_resmgr.config import config_from_mapping
from nri_resmgr.model import ContainerID, QoSClass
from nri_resmgr.runtime.daemon import ResmgrPlugin
from nri_resmgr.topology.discover import discover
from nri_resmgr.topology.model import Topology
from nri_resmgr.topology.synthetic import write_sysfs
from tests.parity.balloons._sim import BALLOON, N4C16
from tests.support.daemon import daemon_session, run
from tests.support.messages import guaranteed, pod

INITIAL: dict[str, Any] = {"reservedResources": {"cpu": "750m"}, "pinCPU": True, "pinMemory": True}
NS = "e2e-balloons-test06"


def btype0(cpu_class: str = "classA") -> dict[str, Any]:
    return {"name": "btype0", "minCPUs": 2, "maxCPUs": 2, "allocatorPriority": "high",
            "cpuClass": cpu_class, "preferNewBalloons": True,
            "preferSpreadingPods": False}  # fmt: skip


def btype1(max_cpus: int = 1) -> dict[str, Any]:
    return {"name": "btype1", "namespaces": ["btype1ns0"], "minCPUs": 1, "maxCPUs": max_cpus,
            "allocatorPriority": "normal", "cpuClass": "classB", "preferNewBalloons": False,
            "preferSpreadingPods": True}  # fmt: skip


def btype2(cpu_class: str = "classC") -> dict[str, Any]:
    return {"name": "btype2", "namespaces": ["*", "btype2ns1"], "minCPUs": 4, "maxCPUs": 8,
            "minBalloons": 1, "allocatorPriority": "low", "cpuClass": cpu_class,
            "preferNewBalloons": False, "preferSpreadingPods": False}  # fmt: skip


def policy(*types: dict[str, Any], available: str = "cpuset:0-15") -> dict[str, Any]:
    """Their balloons-config.yaml.in with the variables each step sets."""
    return {"policy": "balloons", "policyConfig": {
        "availableResources": {"cpu": available}, "reservedResources": {"cpu": "1000m"},
        "pinCPU": True, "pinMemory": True, "balloonTypes": list(types)}}  # fmt: skip


@pytest.fixture(scope="module")
def n4c16() -> Topology:
    root = Path(tempfile.mkdtemp(prefix="nri-sysfs-"))
    try:
        write_sysfs(N4C16, root)
        return discover(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def instance(plugin: ResmgrPlugin, cid: str) -> str:
    return plugin.pipeline.assignments[ContainerID(cid)].pool


def test_update_config(n4c16: Topology) -> None:
    async def scenario() -> None:
        initial = config_from_mapping({"policy": "balloons", "policyConfig": INITIAL})
        async with daemon_session(n4c16, initial) as (rt, plugin, _):
            assert await plugin.reconfigure(config_from_mapping(
                policy(btype0(), btype1(max_cpus=0), btype2(), available="cpuset:0,4-15")
            )) == []  # fmt: skip
            pod0 = pod("pod0", QoSClass.GUARANTEED)
            pod0.annotations[BALLOON] = "btype0"
            pod1 = pod("pod1", QoSClass.GUARANTEED, namespace="btype1ns0")
            pod2 = pod("pod2", QoSClass.GUARANTEED, namespace=NS)
            for p in (pod0, pod1, pod2):
                await rt.create_container(p, guaranteed(p, f"{p.name}c0", "1"))
            assert [instance(plugin, f"pod{i}-pod{i}c0") for i in range(3)] == [
                "btype0[0]", "btype1[0]", "btype2[0]",
            ]  # fmt: skip

            # btype0 and btype1 removed, btype2 takes every namespace; where pod0 goes is
            # undefined in theirs, so it is not checked
            await plugin.reconfigure(config_from_mapping(policy(btype2())))
            assert instance(plugin, "pod1-pod1c0") == "btype2[0]"
            assert instance(plugin, "pod2-pod2c0") == "btype2[0]"

            # btype0 back: pod0 returns to it by its annotation
            await plugin.reconfigure(config_from_mapping(policy(btype0(), btype2())))
            assert [instance(plugin, f"pod{i}-pod{i}c0") for i in range(3)] == [
                "btype0[0]", "btype2[0]", "btype2[0]",
            ]  # fmt: skip

            # only CPU classes change: nobody moves
            before = dict(plugin.pipeline.assignments)
            await plugin.reconfigure(config_from_mapping(
                policy(btype0(cpu_class="classC"), btype2(cpu_class="classB"))
            ))  # fmt: skip
            after = plugin.pipeline.assignments
            assert {k: (a.cpus, a.pool) for k, a in after.items()} == {
                k: (a.cpus, a.pool) for k, a in before.items()
            }

    run(scenario)
