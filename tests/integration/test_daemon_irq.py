"""Interrupt affinities through the daemon: a placed container's balloon claims or sinks
interrupts in the ``smp_affinity_list`` files, and the files go back to what they were
when the balloon goes and when the daemon stops.

The daemon plugin runs in-process against `nri_api.testing.FakeRuntime` over a real Unix
socket, with a synthetic root (sysfs topology and a procfs with ``interrupts`` and
``irq/N/smp_affinity_list``) as its ``sysfs_root``.  Their n4c16 test25 sink
configuration; no real interrupt moves on this machine.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

import pytest

from nri_api import api
from nri_api.testing import FakeRuntime
from nri_resmgr.control.irq import write_synthetic_proc
from nri_resmgr.model import ConfigError, QoSClass
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.discover import discover
from nri_resmgr.topology.synthetic import write_sysfs
from tests.parity.machines import N4C16
from tests.support.daemon import resmgr_plugin, start_daemon
from tests.support.messages import ctr, pod

BALLOON = "balloon.balloons.resource-policy.nri.io"
TTYS0, RTC0, ACPI = 4, 8, 9
IRQS = {
    TTYS0: "IO-APIC   4-edge      ttyS0",
    RTC0: "IO-APIC   8-edge      rtc0",
    ACPI: "IO-APIC   9-fasteoi   acpi",
}
ORIGINAL = {TTYS0: "0-15", RTC0: "1", ACPI: "0-15"}
TYPES = [
    {"name": "claimer", "minCPUs": 2, "maxCPUs": 2, "irqClaim": ["*ttyS0*", "*rtc0*"]},
    {"name": "sink", "minCPUs": 2, "maxCPUs": 2, "irqMode": "sink"},
]
CONFIG = {
    "policy": "balloons",
    "policyConfig": {"reservedResources": {"cpu": "1000m"}, "balloonTypes": TYPES},
}


def affinities(proc: Path) -> dict[int, str]:
    return {n: (proc / f"irq/{n}/smp_affinity_list").read_text().strip() for n in IRQS}


def test_balloons_steer_interrupts_and_the_originals_come_back(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write_sysfs(N4C16, root)
    proc = write_synthetic_proc(root / "proc", IRQS, cpus=16, affinity=ORIGINAL)
    topology = discover(root)
    sock_dir = Path(tempfile.mkdtemp(prefix="nri-", dir="/tmp"))
    sock = str(sock_dir / "nri.sock")

    pods: dict[str, api.PodSandbox] = {}

    async def place(rt: FakeRuntime, name: str, balloon: str) -> IDSet:
        p = pods[name] = pod(name, QoSClass.BEST_EFFORT)
        p.annotations[BALLOON] = balloon
        await rt.run_pod_sandbox(p)
        reply = await rt.create_container(p, ctr(p, "c0"))
        return IDSet.parse(reply.adjust.linux.resources.cpu.cpus)

    async def scenario() -> None:
        rt, plugin, task = await start_daemon(sock, CONFIG, topology, sysfs_root=str(root))
        assert affinities(proc) == ORIGINAL  # no balloon with wishes yet
        sink = await place(rt, "p0", "sink")
        assert len(sink) == 2
        assert affinities(proc) == dict.fromkeys(IRQS, str(sink))
        claimer = await place(rt, "p1", "claimer")
        assert claimer.isdisjoint(sink)
        assert affinities(proc) == {TTYS0: str(claimer), RTC0: str(claimer), ACPI: str(sink)}
        # the sink balloon goes with its pod: acpi gets its original back
        await rt.remove_pod_sandbox(pods["p0"])
        assert affinities(proc) == {TTYS0: str(claimer), RTC0: str(claimer), ACPI: "0-15"}
        await plugin.stop()
        await asyncio.wait_for(task, 10)
        plugin.close()  # what the daemon process does when it stops
        await rt.close()

    try:
        asyncio.run(asyncio.wait_for(scenario(), 60))
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)
    assert affinities(proc) == ORIGINAL


def test_a_claim_on_a_denied_interrupt_refuses_the_configuration(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write_sysfs(N4C16, root)
    write_synthetic_proc(root / "proc", IRQS, cpus=16)
    denied = {
        "policy": "balloons",
        "policyConfig": {
            "reservedResources": {"cpu": "1000m"},
            "controllableInterrupts": ["*rtc0*"],
            "balloonTypes": TYPES[:1],
        },
    }
    with pytest.raises(ConfigError, match=r"claim '\*ttyS0\*' matches irq 4 .*denied interrupt"):
        resmgr_plugin(
            denied,
            discover(root),
            sysfs_root=str(root),
            socket_path=str(tmp_path / "unused.sock"),
        )
