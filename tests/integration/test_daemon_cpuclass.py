"""CPU classes through the daemon: a balloon's CPUs get their class's frequencies and
C-states in the sysfs files, and the files go back to what they were when the balloon
deflates, when a reconfiguration drops the classes and when the daemon stops.

The daemon plugin runs in-process against `nri_api.testing.FakeRuntime` over a real Unix
socket, with a synthetic sysfs root (topology, cpufreq, cpuidle and uncore files) as its
``sysfs_root``.  Their n4c16 test17 configuration (C-states) plus frequencies.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import Any

from nri_resmgr.config import config_from_mapping
from nri_resmgr.control.cpuclass.synthetic import CPUFreqLayout, write_cpu_class_tree
from nri_resmgr.model import ContainerID, QoSClass
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.discover import discover
from nri_resmgr.topology.synthetic import write_sysfs
from tests.parity.machines import N4C16
from tests.support.daemon import start_daemon
from tests.support.messages import ctr, pod

BALLOON = "balloon.balloons.resource-policy.nri.io"
CONFIG: dict[str, Any] = {
    "policy": "balloons",
    "policyConfig": {
        "availableResources": {"cpu": "cpuset:2-7,10-13"},
        "reservedResources": {"cpu": "750m"},
        "idleCPUClass": "default-class",
        "balloonTypes": [{"name": "lowlatency-bln", "cpuClass": "lowlatency-class"}],
        "cpuClasses": [
            {
                "name": "lowlatency-class",
                "disabledCstates": ["C4", "C6", "C8", "C10"],
                "minFreq": "turbo",
                "maxFreq": "turbo",
                "freqGovernor": "performance",
            },
            {"name": "default-class", "disabledCstates": [], "maxFreq": "base"},
        ],
    },
}
LAYOUT = CPUFreqLayout(cstates=("C1E", "C2", "C4", "C8"))


def turbo_idle() -> dict[str, Any]:
    classes = [dict(c) for c in CONFIG["policyConfig"]["cpuClasses"]]
    classes[1]["maxFreq"] = "turbo"
    return {**CONFIG, "policyConfig": {**CONFIG["policyConfig"], "cpuClasses": classes}}


def files(cpu_dir: Path) -> dict[str, str]:
    return {
        str(p.relative_to(cpu_dir)): p.read_text().strip()
        for p in sorted(cpu_dir.rglob("*"))
        if p.is_file() and ("cpufreq" in p.parts or "cpuidle" in p.parts)
    }


def disabled(cpu_dir: Path, cpu: int) -> list[str]:
    return [
        (cpu_dir / f"cpu{cpu}/cpuidle/state{i}/name").read_text().strip()
        for i in range(4)
        if (cpu_dir / f"cpu{cpu}/cpuidle/state{i}/disable").read_text().strip() == "1"
    ]


def scaling(cpu_dir: Path, cpu: int) -> tuple[str, str, str]:
    d = cpu_dir / f"cpu{cpu}/cpufreq"
    return tuple(  # type: ignore[return-value]
        (d / n).read_text().strip()
        for n in ("scaling_min_freq", "scaling_max_freq", "scaling_governor")
    )


def test_balloon_cpus_get_their_class_and_files_come_back(tmp_path: Path) -> None:
    root = tmp_path / "root"
    topo = write_sysfs(N4C16, root)
    cpu_dir = write_cpu_class_tree(root, topo, LAYOUT)
    start = files(cpu_dir)
    topology = discover(root)
    sock_dir = Path(tempfile.mkdtemp(prefix="nri-", dir="/tmp"))
    sock = str(sock_dir / "nri.sock")

    async def scenario() -> None:
        rt, plugin, task = await start_daemon(sock, CONFIG, topology, sysfs_root=str(root))
        available = IDSet.parse("2-7,10-13")
        # Synchronize placed the reserved balloon: every other available CPU is idle
        assert all(disabled(cpu_dir, c) == [] for c in available)
        assert {scaling(cpu_dir, c)[1] for c in available} <= {"2900000", "3800000"}
        assert all(scaling(cpu_dir, c)[1] == "3800000" for c in (0, 1, 8, 9, 14, 15))
        p0 = pod("p0", QoSClass.BURSTABLE)
        p0.annotations[BALLOON] = "lowlatency-bln"
        await rt.run_pod_sandbox(p0)
        c0 = ctr(p0, "c0", cpu="750m", limit="750m")
        reply = await rt.create_container(p0, c0)
        (cpu,) = IDSet.parse(reply.adjust.linux.resources.cpu.cpus)
        assert disabled(cpu_dir, cpu) == ["C4", "C8"]
        assert scaling(cpu_dir, cpu) == ("3800000", "3800000", "performance")
        p1 = pod("p1", QoSClass.BURSTABLE)
        p1.annotations[BALLOON] = "lowlatency-bln"
        await rt.run_pod_sandbox(p1)
        reply = await rt.create_container(p1, ctr(p1, "c0", cpu="3"))
        inflated = IDSet.parse(reply.adjust.linux.resources.cpu.cpus)
        assert len(inflated) == 4
        assert all(disabled(cpu_dir, c) == ["C4", "C8"] for c in inflated)
        # pod1 goes: the balloon deflates to one CPU (the one it keeps is the allocator's
        # choice), the freed CPUs are idle again
        await rt.remove_pod_sandbox(p1)
        kept = [c for c in inflated if disabled(cpu_dir, c) == ["C4", "C8"]]
        assert len(kept) == 1, kept
        freed = inflated - IDSet(kept)
        assert all(disabled(cpu_dir, c) == [] for c in freed)
        assert all(scaling(cpu_dir, c) == ("800000", "2900000", "powersave") for c in freed)
        # CPUs outside availableResources were never written
        never = {k: v for k, v in files(cpu_dir).items() if k.split("/")[0] in
                 ("cpu0", "cpu1", "cpu8", "cpu9", "cpu14", "cpu15")}  # fmt: skip
        assert never == {k: v for k, v in start.items() if k in never}
        # live reconfiguration: the idle class now allows turbo; the balloon keeps its CPU
        assert await plugin.reconfigure(config_from_mapping(turbo_idle())) == []
        assert all(scaling(cpu_dir, c)[1] == "3800000" for c in freed)
        assert all(disabled(cpu_dir, c) == ["C4", "C8"] for c in kept)
        # and a policy without CPU classes: every file written is back to its original
        static = {"policy": "static", "policyConfig": {"reservedSystemCPUs": "0"}}
        await plugin.reconfigure(config_from_mapping(static))
        assert files(cpu_dir) == start
        # back to the classes: the container's balloon (wherever the rebuild put it)
        await plugin.reconfigure(config_from_mapping(CONFIG))
        (now,) = plugin.pipeline.assignments[ContainerID(c0.id)].cpus
        assert disabled(cpu_dir, now) == ["C4", "C8"]
        await plugin.stop()
        await asyncio.wait_for(task, 10)
        plugin.close()  # what the daemon process does when it stops
        await rt.close()

    try:
        asyncio.run(asyncio.wait_for(scenario(), 60))
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)
    assert files(cpu_dir) == start
