"""Updates that reach a container before it starts are reasserted once it has started.

A runtime starts a task from the OCI bundle it wrote at CreateContainer; an update sent
between creation and start (a Synchronize after a daemon restart, a shared pool shrinking
while a container is still starting) can be recorded by the runtime and still never reach
the task (found by the e2e suite on containerd 1.7.35 and 2.3.7). The daemon keeps such
containers in mind and sends their assignment again at PostStartContainer.
"""

from __future__ import annotations

import asyncio

import pytest

from nri_api import api
from nri_resmgr.model import QoSClass
from nri_resmgr.topology.model import Topology
from tests.support.daemon import daemon_session, run
from tests.support.messages import cpus_of, ctr, guaranteed, pod

CREATED = api.ContainerState.CONTAINER_CREATED
RUNNING = api.ContainerState.CONTAINER_RUNNING


def test_synchronize_update_of_a_created_container_is_reasserted(topology: Topology) -> None:
    db, web = pod("db", QoSClass.GUARANTEED), pod("web", QoSClass.BURSTABLE)
    pg = guaranteed(db, "pg", "2", cpus="1,5", state=RUNNING)
    # created while the daemon was down: the runtime's default cpuset, overlapping pg's
    app = ctr(web, "app", cpu="500m", cpus="0-7", state=CREATED)

    async def scenario() -> None:
        listed = {"pods": [db, web], "containers": [pg, app]}
        async with daemon_session(topology, rt_kw=listed) as (rt, _p, hs):
            assert [(u.container_id, cpus_of(u)) for u in hs.sync_updates] == [
                ("web-app", "0,2-4,6-7")]
            # starting the correctly placed, running container asks for nothing
            await rt.post_start_container(db, pg)
            with pytest.raises(TimeoutError):
                await rt.next_update(timeout=0.5)
            # the created one starts: its placement is sent again, unsolicited
            await rt.post_start_container(web, app)
            update = await rt.next_update(timeout=10)
            assert [(u.container_id, cpus_of(u)) for u in update.update] == [
                ("web-app", "0,2-4,6-7")]
            # once only
            await rt.post_start_container(web, app)
            with pytest.raises(TimeoutError):
                await rt.next_update(timeout=0.5)

    run(scenario)


def test_pool_shrink_before_start_is_reasserted(topology: Topology) -> None:
    async def scenario() -> None:
        async with daemon_session(topology) as (rt, _plugin, _):
            web, db = pod("web", QoSClass.BURSTABLE), pod("db", QoSClass.GUARANTEED)
            await rt.run_pod_sandbox(web)
            app = ctr(web, "app", cpu="500m")
            await rt.create_container(web, app)  # not started yet
            await rt.run_pod_sandbox(db)
            reply = await rt.create_container(db, guaranteed(db, "pg", "2"))
            assert [(u.container_id, cpus_of(u)) for u in reply.update] == [
                ("web-app", "0,2-4,6-7")]
            await rt.post_start_container(web, app)
            update = await asyncio.wait_for(rt.next_update(), 10)
            assert [(u.container_id, cpus_of(u)) for u in update.update] == [
                ("web-app", "0,2-4,6-7")]

    run(scenario)
