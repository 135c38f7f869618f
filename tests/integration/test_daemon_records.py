"""The daemon's placement records over a real socket (`nri_resmgr.runtime.record_store`).

The daemon's store puts its writes off until the reply is sent (the event loop's next
step): the records of what the runtime was answered reach the file without a further
event, and a daemon started on the same state directory restores them and moves
nothing.
"""

from __future__ import annotations

from pathlib import Path

from nri_api import api
from nri_resmgr.model import ContainerID, QoSClass
from nri_resmgr.policy.kit.records import PlacementRecord
from nri_resmgr.runtime.record_store import RecordStore
from nri_resmgr.topology.cpuset import CPUSet
from nri_resmgr.topology.model import Topology
from tests.support.daemon import daemon_session, run
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
