"""The daemon's placement records over a real socket (`nri_resmgr.runtime.record_store`).

The daemon's store puts its writes off until the reply is sent (the event loop's next
step): the records of what the runtime was answered reach the file without a further
event, and a daemon started on the same state directory restores them and moves
nothing.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from nri_api import api
from nri_api.testing import FakeRuntime
from nri_resmgr.model import ContainerID, QoSClass
from nri_resmgr.policy.kit.records import PlacementRecord
from nri_resmgr.runtime.daemon import ResmgrPlugin
from nri_resmgr.runtime.record_store import RecordStore
from nri_resmgr.topology.cpuset import CPUSet
from nri_resmgr.topology.model import Topology
from tests.support.daemon import STATIC, daemon_session, resmgr_plugin, run, stop_daemon
from tests.support.logs import QUIET
from tests.support.messages import ctr, guaranteed, pod
from tests.support.waiting import wait_until


def test_records_follow_the_reply_and_a_restart_restores_them(
    topology: Topology, tmp_path: Path
) -> None:
    state = str(tmp_path / "state")
    web, db = pod("web", QoSClass.BURSTABLE), pod("db", QoSClass.GUARANTEED)
    running = api.ContainerState.CONTAINER_RUNNING

    async def scenario() -> None:
        async with daemon_session(topology, state_dir=state) as (rt, plugin, _hs):
            store = plugin.pipeline.record_store
            assert store is not None and store.defer is not None, "the daemon's store defers"
            for p in (web, db):
                assert await rt.run_pod_sandbox(p)
            await rt.create_container(web, ctr(web, "app", cpu="500m"))
            reply = await rt.create_container(db, guaranteed(db, "pg", "2"))
            assert reply.adjust.linux.resources.cpu.cpus == "1,5"

            def on_disk() -> dict[ContainerID, PlacementRecord] | None:
                kept = RecordStore(store.path, scope=store.scope, log=QUIET).load()
                return kept if set(kept) == {"web-app", "db-pg"} else None

            kept = await wait_until(on_disk, what="the records of both replies", timeout=5)
            assert kept[ContainerID("web-app")].cpus == CPUSet.parse("0,2-4,6-7")
            assert kept[ContainerID("db-pg")].cpus == CPUSet.parse("1,5")
        listed = {
            "pods": [web, db],
            "containers": [
                ctr(web, "app", cpu="500m", cpus="0,2-4,6-7", state=running),
                guaranteed(db, "pg", "2", cpus="1,5", state=running),
            ],
        }
        async with daemon_session(topology, state_dir=state, rt_kw=listed) as (_rt, again, hs):
            assert hs.sync_updates == ()
            assert again.pipeline.assignments[ContainerID("db-pg")].cpus == CPUSet.parse("1,5")

    run(scenario)


def test_records_wait_until_a_large_synchronize_reply_has_left(
    topology: Topology, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The reply to a Synchronize of 1,000 running containers (an update each, 26 KB) is
    # more than the daemon's socket takes at once here (its send buffer made small, as a
    # 10,000-container reply of 1.5 MB is against the default 208 KiB): the daemon's
    # records, written after the reply (`runtime.after_reply`), wait until it has left
    # whole rather than hold its rest back (issue 25: a fifth of a 10,000 Synchronize).
    web = pod("web", QoSClass.BURSTABLE)
    running = api.ContainerState.CONTAINER_RUNNING
    many = [ctr(web, f"c{i}", cpu="10m", state=running) for i in range(1000)]
    daemons: list[ResmgrPlugin] = []
    writing_at_flush: list[bool] = []
    writing_seen: list[bool] = []
    flush = RecordStore.flush

    def flushed(self: RecordStore) -> None:
        writing_at_flush.append(any(d.writing for d in daemons))
        flush(self)

    monkeypatch.setattr(RecordStore, "flush", flushed)

    async def watch() -> None:
        while True:
            writing_seen.append(any(d.writing for d in daemons))
            await asyncio.sleep(0)

    async def scenario() -> None:
        rt = FakeRuntime(pods=[web], containers=many)
        sock = await rt.socketpair()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
        plugin = resmgr_plugin(STATIC, topology, connection=sock, state_dir=str(tmp_path))
        daemons.append(plugin)
        watching = asyncio.create_task(watch())
        task = asyncio.create_task(plugin.serve())
        try:
            hs = await rt.wait_ready()
            assert len(hs.sync_updates) == len(many)
            await wait_until(lambda: writing_at_flush, what="the records written")
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
            await stop_daemon(rt, plugin, task)
        assert any(writing_seen), "the reply was never seen being written: not a large one"
        assert not any(writing_at_flush), "records written while the reply was being written"

    run(scenario)
