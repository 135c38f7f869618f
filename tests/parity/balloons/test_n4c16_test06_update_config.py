"""n4c16/test06-update-config: balloon types removed, restored and re-classed by live
configuration updates, in the daemon.

Their test applies a new ``BalloonsPolicy`` through the agent; here the running daemon
(`ResmgrPlugin` on a real socket, as in tests/integration/test_daemon.py) is given each
configuration with ``reconfigure``, which is where the agent's update lands.  Their
metric checks are evaluated as written over the daemon's balloons rendered as their
metric lines (`tests.parity.ports.metric_lines`).  Their ``cpuClasses``
definitions (frequencies for their cpu controller) are left out, the types keep their
``cpuClass`` names.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from nri_resmgr.config import config_from_mapping
from nri_resmgr.model import QoSClass
from nri_resmgr.runtime.daemon import ResmgrPlugin
from nri_resmgr.topology.discover import discover
from nri_resmgr.topology.model import Topology
from nri_resmgr.topology.synthetic import write_sysfs
from tests.parity.balloons._sim import BALLOON, N4C16
from tests.parity.ports import check_metrics, metric_lines, port
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


def n4c16() -> Topology:
    root = Path(tempfile.mkdtemp(prefix="nri-sysfs-"))
    try:
        write_sysfs(N4C16, root)
        return discover(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


#: their pods: name -> namespace (each has one container, podNc0, requesting 1 CPU)
PODS = {"pod0": "default", "pod1": "btype1ns0", "pod2": NS}


def metrics(plugin: ResmgrPlugin, topology: Topology, conf: Mapping[str, Any]) -> list[str]:
    """The daemon's balloons as their metrics lines (`tests.parity.ports.metric_lines`)."""
    names = {f"{p}-{p}c0": f"{p}/{p}c0" for p in PODS}
    balloons = [
        replace(b, containers=tuple(names.get(c, c) for c in b.containers))
        for b in plugin.state_snapshot().balloons
    ]
    types = {t["name"]: t for t in conf["policyConfig"]["balloonTypes"]}
    milli = {f"{p}/{p}c0": 1000 for p in PODS}
    return metric_lines(balloons, topology, PODS, milli, types)


@port("balloons/n4c16/test06-update-config")
def test_update_config() -> None:
    topology = n4c16()

    async def scenario() -> None:
        initial = config_from_mapping({"policy": "balloons", "policyConfig": INITIAL})
        async with daemon_session(topology, initial) as (rt, plugin, _):
            conf = policy(btype0(), btype1(max_cpus=0), btype2(), available="cpuset:0,4-15")
            assert await plugin.reconfigure(config_from_mapping(conf)) == []
            pod0 = pod("pod0", QoSClass.GUARANTEED)
            pod0.annotations[BALLOON] = "btype0"
            pod1 = pod("pod1", QoSClass.GUARANTEED, namespace="btype1ns0")
            pod2 = pod("pod2", QoSClass.GUARANTEED, namespace=NS)
            for p in (pod0, pod1, pod2):
                await rt.create_container(p, guaranteed(p, f"{p.name}c0", "1"))
            check_metrics(
                metrics(plugin, topology, conf),
                has=[
                    r'btype0\[0\].*containers=".*pod0/pod0c0',
                    r'btype1\[0\].*containers=".*pod1/pod1c0',
                    r'btype2\[0\].*containers=".*pod2/pod2c0',
                ],
            )

            # btype0 and btype1 removed, btype2 takes every namespace; where pod0 goes is
            # undefined in theirs, so it is not checked (their check is commented out)
            conf = policy(btype2())
            await plugin.reconfigure(config_from_mapping(conf))
            check_metrics(
                metrics(plugin, topology, conf),
                has=[r'"btype2\[0\]".*pod1/pod1c0', r'"btype2\[0\]".*pod2/pod2c0'],
            )

            # btype0 back: pod0 returns to it by its annotation
            conf = policy(btype0(), btype2())
            await plugin.reconfigure(config_from_mapping(conf))
            check_metrics(
                metrics(plugin, topology, conf),
                has=[
                    r'"btype0\[0\]".*pod0/pod0c0',
                    r'"btype2\[0\]".*pod1/pod1c0',
                    r'"btype2\[0\]".*pod2/pod2c0',
                ],
            )
            check_metrics(
                metrics(plugin, topology, conf),
                has=[
                    r'btype0\[0\].*pod0/pod0c0.*cpu_class="classA"',
                    r'btype2\[0\].*pod1/pod1c0.*cpu_class="classC"',
                    r'btype2\[0\].*pod2/pod2c0.*cpu_class="classC"',
                ],
            )

            # only CPU classes change: nobody moves
            before = dict(plugin.pipeline.assignments)
            conf = policy(btype0(cpu_class="classC"), btype2(cpu_class="classB"))
            await plugin.reconfigure(config_from_mapping(conf))
            after = plugin.pipeline.assignments
            assert {k: (a.cpus, a.pool) for k, a in after.items()} == {
                k: (a.cpus, a.pool) for k, a in before.items()
            }
            check_metrics(
                metrics(plugin, topology, conf),
                has=[
                    r'btype0\[0\].*pod0/pod0c0.*cpu_class="classC"',
                    r'btype2\[0\].*pod1/pod1c0.*cpu_class="classB"',
                    r'btype2\[0\].*pod2/pod2c0.*cpu_class="classB"',
                ],
            )

    run(scenario)
