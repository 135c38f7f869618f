"""`nri-resmgr reset` against the in-project runtime peer, over a real Unix socket.

The daemon first places containers (static policy on the synthetic 8-CPU machine of
test_daemon: CPU 0 reserved, exclusive grants are whole cores), with RDT pod and class
groups on a synthetic resctrl tree; the test keeps each container's cpuset as a runtime
would, applying the daemon's adjustments and updates.  Then the daemon is stopped and the
reset command (in process, and as the real CLI in a subprocess) connects to a runtime that
reports those containers: every pinned one must come back as an UpdateContainers update
to CPUs 0-7 and memory node 0, and the daemon's resctrl groups must be gone.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from nri_api import api
from nri_api.errors import RPCError, StatusCode
from nri_api.testing import FakeRuntime
from nri_resmgr.commands.reset import sync_and_reset
from nri_resmgr.control.host_reset import read_allowed_sets, remove_owned_rdt_groups
from nri_resmgr.control.synthetic import INTEL_SKX, make_resctrl_tree
from nri_resmgr.model import QoSClass
from nri_resmgr.ops.reset import ResetError
from nri_resmgr.topology.cpuset import CPUSet
from nri_resmgr.topology.model import Topology
from nri_resmgr.topology.synthetic import write_sysfs
from tests.support.daemon import MACHINE, start_daemon, stop_daemon
from tests.support.messages import ctr, guaranteed, pod
from tests.support.requirements import REPO

RUNNING = api.ContainerState.CONTAINER_RUNNING
ANNOTATION = "node.koordinator.sh/resctrl"
POD_RDT = json.dumps({"llc": {"schemata": {"range": [20, 80]}}})
CONFIG = {
    "policy": "static",
    "policyConfig": {"reservedSystemCPUs": "0"},
    "control": {
        "rdt": {
            "enable": True,
            "partitions": {
                "all": {"l3Allocation": "100%", "classes": {"gold": {"l3Allocation": "50-100%"}}}
            },
        }
    },
}


#: the reset every test here runs: CPUs 0-7 and node 0 are the whole machine
reset_all = functools.partial(
    sync_and_reset,
    index="99",
    name="resmgr-reset",
    cpus=CPUSet.parse("0-7"),
    mems=CPUSet.parse("0"),
)


@pytest.fixture
def base() -> Iterator[Path]:
    # short: a Unix socket path has a 108-byte limit
    path = Path(tempfile.mkdtemp(prefix="nri-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _apply(containers: dict[str, api.Container], updates: list[api.ContainerUpdate]) -> None:
    for u in updates:
        cpu = containers[u.container_id].linux.resources.cpu
        if u.linux.resources.cpu.cpus:
            cpu.cpus = u.linux.resources.cpu.cpus
        if u.linux.resources.cpu.mems:
            cpu.mems = u.linux.resources.cpu.mems


async def _place_with_daemon(
    topo: Topology, base: Path
) -> tuple[list[api.PodSandbox], dict[str, api.Container]]:
    """The daemon pins an exclusive and two shared containers; returns the runtime's view."""
    sock = str(base / "daemon.sock")
    rt, daemon, task = await start_daemon(
        sock, CONFIG, topo, resctrl_root=str(base / "resctrl"), state_dir=str(base / "state")
    )
    web, db = pod("web", QoSClass.BURSTABLE), pod("db", QoSClass.GUARANTEED)
    db.annotations[ANNOTATION] = POD_RDT
    containers: dict[str, api.Container] = {}
    for sandbox, c in [
        (web, ctr(web, "app", cpu="500m", state=RUNNING)),
        (web, ctr(web, "side", state=RUNNING)),
        (db, guaranteed(db, "pg", "2", state=RUNNING)),
    ]:
        await rt.run_pod_sandbox(sandbox)
        reply = await rt.create_container(sandbox, c)
        c.linux.resources.cpu.cpus = reply.adjust.linux.resources.cpu.cpus
        c.linux.resources.cpu.mems = reply.adjust.linux.resources.cpu.mems
        containers[c.id] = c
        _apply(containers, list(reply.update))
    await stop_daemon(rt, daemon, task)
    return [web, db], containers


def _daemon_placed(topo: Topology, base: Path) -> tuple[list[api.PodSandbox], list[api.Container]]:
    make_resctrl_tree(base / "resctrl", INTEL_SKX)
    pods, by_id = asyncio.run(_place_with_daemon(topo, base))
    # what the daemon left: the exclusive core 1,5 and a pool without it
    assert by_id["db-pg"].linux.resources.cpu.cpus == "1,5"
    assert by_id["web-app"].linux.resources.cpu.cpus == "0,2-4,6-7"
    assert by_id["web-side"].linux.resources.cpu.cpus == "0,2-4,6-7"
    return pods, list(by_id.values())


def _groups(root: Path) -> set[str]:
    return {
        p.name
        for p in root.iterdir()
        if p.is_dir() and p.name not in ("info", "mon_groups", "mon_data")
    }


def test_reset_sends_every_pinned_container_back_and_removes_owned_groups(
    topology: Topology, base: Path
) -> None:
    pods, containers = _daemon_placed(topology, base)
    root, state = base / "resctrl", base / "state"
    assert _groups(root) == {"gold", f"nri-resmgr-pod-{pods[1].uid}"}
    foreign = root / "someone-elses"
    foreign.mkdir()

    async def scenario() -> None:
        sock = str(base / "nri.sock")
        rt = FakeRuntime(pods=pods, containers=containers)
        await rt.listen(sock)
        outcome = await reset_all(
            socket_path=sock,
            timeout=10,
        )
        await rt.close()
        assert outcome.failures == []
        assert rt.registrations[0].plugin_name == "resmgr-reset"
        assert rt.registrations[0].plugin_idx == "99"
        (request,) = rt.update_requests
        got = {
            u.container_id: (u.linux.resources.cpu.cpus, u.linux.resources.cpu.mems)
            for u in request.update
        }
        assert got == {c.id: ("0-7", "0") for c in containers}
        assert outcome.plan is not None
        assert not outcome.plan.kept

    asyncio.run(asyncio.wait_for(scenario(), 60))
    removed = remove_owned_rdt_groups(resctrl_root=root, state_dir=state)
    assert sorted(removed) == sorted(["gold", f"nri-resmgr-pod-{pods[1].uid}"])
    # what the record does not list stays, whatever it is called
    assert _groups(root) == {"someone-elses"}
    # a second run finds nothing left to remove
    assert remove_owned_rdt_groups(resctrl_root=root, state_dir=state) == []


def test_a_group_that_will_not_go_is_a_named_failure(topology: Topology, base: Path) -> None:
    pods, _ = _daemon_placed(topology, base)
    root, state = base / "resctrl", base / "state"
    group = f"nri-resmgr-pod-{pods[1].uid}"
    (root / group / "stray").write_text("not resctrl's")  # rmdir now fails: ENOTEMPTY
    with pytest.raises(ResetError) as err:
        remove_owned_rdt_groups(resctrl_root=root, state_dir=state)
    assert group in str(err.value)
    assert str(root) in str(err.value)


def test_no_record_means_resctrl_is_not_even_read(base: Path) -> None:
    # no resctrl tree at all: a node where RDT was never managed
    assert remove_owned_rdt_groups(resctrl_root=base / "absent", state_dir=base) == []


def test_dry_run_sends_nothing(topology: Topology, base: Path) -> None:
    pods, containers = _daemon_placed(topology, base)

    async def scenario() -> None:
        sock = str(base / "nri.sock")
        rt = FakeRuntime(pods=pods, containers=containers)
        await rt.listen(sock)
        outcome = await reset_all(
            socket_path=sock,
            timeout=10,
            dry_run=True,
        )
        await rt.close()
        assert outcome.plan is not None and len(outcome.plan.reset) == 3
        assert rt.update_requests == []

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_updates_the_runtime_could_not_apply_are_failures(base: Path) -> None:
    p = pod("web", QoSClass.BURSTABLE)
    c = ctr(p, "app", cpu="500m", cpus="2-3", state=RUNNING)

    async def scenario() -> None:
        sock = str(base / "nri.sock")
        rt = FakeRuntime(pods=[p], containers=[c], update_result=lambda req: list(req.update))
        await rt.listen(sock)
        outcome = await reset_all(
            socket_path=sock,
            timeout=10,
        )
        await rt.close()
        assert outcome.failed_updates == ["web-app"]
        assert outcome.failures == ["container web-app: the runtime could not apply the reset"]

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_an_update_the_runtime_answers_with_an_error_is_reported(base: Path) -> None:
    p = pod("web", QoSClass.BURSTABLE)
    c = ctr(p, "app", cpu="500m", cpus="2-3", state=RUNNING)

    def refuse(request: api.UpdateContainersRequest) -> list[api.ContainerUpdate]:
        raise RPCError(StatusCode.UNKNOWN, "container web-app: cgroup write failed")

    async def scenario() -> None:
        sock = str(base / "nri.sock")
        rt = FakeRuntime(pods=[p], containers=[c], update_result=refuse)
        await rt.listen(sock)
        with pytest.raises(ResetError) as err:
            await reset_all(
                socket_path=sock,
                timeout=10,
            )
        await rt.close()
        assert "expected UpdateContainers of 1 containers to be answered; found" in str(err.value)
        assert "cgroup write failed" in str(err.value)

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_a_bad_identity_is_refused_before_connecting(base: Path) -> None:
    with pytest.raises(ResetError, match="reset plugin identity: plugin index"):
        asyncio.run(
            sync_and_reset(
                socket_path=str(base / "absent.sock"),
                index="9",
                name="resmgr-reset",
                cpus=CPUSet.parse("0"),
                mems=CPUSet.parse("0"),
            )
        )


def test_a_runtime_that_never_synchronizes_is_bounded_by_the_timeout(base: Path) -> None:
    async def scenario() -> None:
        sock = str(base / "nri.sock")
        rt = FakeRuntime(auto_start=False)  # registers, then never configures
        await rt.listen(sock)
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(ResetError, match=r"expected Synchronize within 0.5 s"):
            await reset_all(
                socket_path=sock,
                timeout=0.5,
            )
        assert loop.time() - start < 5
        await rt.close()

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_a_runtime_that_refuses_the_plugin_is_reported(base: Path) -> None:
    async def scenario() -> None:
        sock = str(base / "nri.sock")
        # the runtime's answer to Configure is refused: an event mask it does not know
        rt = FakeRuntime(nri_version="v0.12.2", config="x")
        rt.valid_events = 0x1  # RunPodSandbox only: our RemoveContainer subscription fails
        await rt.listen(sock)
        with pytest.raises(ResetError) as err:
            await reset_all(
                socket_path=sock,
                timeout=10,
            )
        await rt.close()
        assert f"runtime at {sock}: expected registration, Configure and Synchronize" in str(
            err.value
        )

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_missing_and_stale_sockets_are_named(base: Path) -> None:
    async def attempt(path: str) -> str:
        with pytest.raises(ResetError) as err:
            await sync_and_reset(
                socket_path=path,
                index="99",
                name="resmgr-reset",
                cpus=CPUSet.parse("0"),
                mems=CPUSet.parse("0"),
                timeout=1,
            )
        return str(err.value)

    missing = asyncio.run(attempt(str(base / "absent.sock")))
    assert "found no such file" in missing and "enable-nri" in missing
    stale = base / "stale.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(stale))  # bound, never listening: what a crashed runtime leaves
    try:
        assert "found nobody listening" in asyncio.run(attempt(str(stale)))
    finally:
        s.close()


def test_allowed_sets_come_from_sysfs(base: Path) -> None:
    write_sysfs({**MACHINE, "packages": 2, "nodes": 1}, base)
    cpus, mems = read_allowed_sets(base)
    assert (str(cpus), str(mems)) == ("0-15", "0-1")
    (base / "sys/devices/system/cpu/online").write_text("0-3,6-15\n")
    assert str(read_allowed_sets(base)[0]) == "0-3,6-15"
    (base / "sys/devices/system/cpu/online").unlink()
    with pytest.raises(ResetError, match=r"cpu/online: expected the list of online CPUs"):
        read_allowed_sets(base)


def test_the_command_line_end_to_end(topology: Topology, base: Path) -> None:
    """The real CLI in a subprocess: sysfs, socket, printed report, exit status."""
    pods, containers = _daemon_placed(topology, base)
    sysfs = base / "host"
    write_sysfs(MACHINE, sysfs)

    async def scenario() -> tuple[int, str, str]:
        sock = str(base / "nri.sock")
        rt = FakeRuntime(pods=pods, containers=containers)
        await rt.listen(sock)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "nri_resmgr.cli",
            "reset",
            "--socket",
            sock,
            "--sysfs-root",
            str(sysfs),
            "--resctrl-root",
            str(base / "resctrl"),
            "--state-dir",
            str(base / "state"),
            "--timeout",
            "20",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        out, err = await proc.communicate()
        await rt.close()
        assert len(rt.update_requests) == 1
        assert {u.linux.resources.cpu.cpus for u in rt.update_requests[0].update} == {"0-7"}
        return proc.returncode or 0, out.decode(), err.decode()

    code, out, err = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert code == 0, err
    assert "3 containers, 3 pinned; allowed cpus 0-7, mems 0" in out
    assert "reset pod default/db container pg (db-pg): cpus 1,5 -> 0-7, mems - -> 0" in out
    assert "removed resctrl group gold" in out
    assert _groups(base / "resctrl") == set()
