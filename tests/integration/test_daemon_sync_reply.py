"""The Synchronize reply's updates are best effort: one the runtime cannot apply must not
cost the daemon its events.

CRI-O 1.36.3 (NRI v0.11.0) applies the reply's updates inside its `syncPlugin` and fails
the whole synchronization when one not marked ``ignore_failure`` fails; the plugin is
then never sent an event while its connection stays open (found by the e2e churn test,
`test_kill9_during_churn_keeps_invariants[crio]`: a restored placement hit a container
the churn was stopping).  The fake runtime emulates that rule (`failing_sync_updates`).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from nri_api import Update, api
from nri_api.testing import FakeRuntime, SyncUpdateFailed
from nri_resmgr.model import ContainerID, QoSClass
from nri_resmgr.topology.model import Topology
from tests.support.daemon import daemon_session, run
from tests.support.messages import cpus_of, ctr, guaranteed, pod
from tests.support.stub import CTR, POD, Creator, serving
from tests.support.stub import run as run_stub

RUNNING = api.ContainerState.CONTAINER_RUNNING
#: the runtime the e2e failure was seen on (`FakeRuntime`'s arguments)
CRIO = {"nri_version": "v0.11.0", "runtime_name": "cri-o", "runtime_version": "1.36.3"}


def _double_allocation() -> tuple[api.PodSandbox, api.Container, api.Container]:
    """Two running Guaranteed containers reported on the same core: ``db-b`` must move."""
    db = pod("db", QoSClass.GUARANTEED)
    a = guaranteed(db, "a", "2", cpus="1,5", state=RUNNING)
    b = guaranteed(db, "b", "2", cpus="1,5", state=RUNNING)
    return db, a, b


def test_a_sync_update_the_runtime_cannot_apply_leaves_the_daemon_served(
    topology: Topology,
) -> None:
    db, a, b = _double_allocation()
    listed = {"pods": [db], "containers": [a, b], "failing_sync_updates": ["db-b"], **CRIO}

    async def scenario() -> None:
        async with daemon_session(topology, rt_kw=listed) as (rt, plugin, hs):
            # the mover is in the reply, marked so that its failure is the runtime's to log
            assert [(u.container_id, u.ignore_failure) for u in hs.sync_updates] == [("db-b", True)]
            assert rt.failures == []
            moved = plugin.pipeline.assignments[ContainerID("db-b")].cpus
            assert moved.isdisjoint(plugin.pipeline.assignments[ContainerID("db-a")].cpus)
            assert cpus_of(hs.sync_updates[0]) == str(moved)
            # the daemon is sent events: the container being stopped is released ...
            stop = await rt.stop_container(db, b)
            assert list(stop.update) == []
            await rt.remove_container(db, b)
            assert ContainerID("db-b") not in plugin.pipeline.assignments
            # ... and its CPUs go to the next exclusive request
            reply = await rt.create_container(db, guaranteed(db, "c", "2"))
            assert reply.adjust.linux.resources.cpu.cpus == str(moved)
            # an event's own updates are not best effort: that rule is the reply's only
            web = pod("web", QoSClass.BURSTABLE)
            await rt.run_pod_sandbox(web)
            await rt.create_container(web, ctr(web, "app", cpu="500m"))
            grant = await rt.create_container(db, guaranteed(db, "d", "2"))
            assert [(u.container_id, u.ignore_failure) for u in grant.update] == [
                ("web-app", False)
            ]

    run(scenario)


@pytest.mark.parametrize(
    ("failing", "marked", "dropped"),
    [
        pytest.param(["ctr1"], False, True, id="unmarked-fails-drops"),
        pytest.param(["ctr1"], True, False, id="marked-fails-kept"),
        pytest.param(["other"], False, False, id="unmarked-succeeds-kept"),
    ],
)
def test_the_fake_runtime_drops_a_plugin_as_crio_does(
    sock_path: str, failing: list[str], marked: bool, dropped: bool
) -> None:
    """The emulation the test above relies on: a failing unmarked update of the reply
    fails the handshake and leaves the connection open; a marked one does not."""

    class Restorer(Creator):
        def synchronize(
            self, pods: Sequence[api.PodSandbox], containers: Sequence[api.Container]
        ) -> list[api.ContainerUpdate]:
            return [Update(CTR.id).set_cpuset("5").ignore_failure(marked).build()]

    async def body() -> None:
        rt = FakeRuntime(
            nri_version="v0.11.0",
            runtime_name="cri-o",
            runtime_version="1.36.3",
            containers=[CTR],
            pods=[POD],
            failing_sync_updates=failing,
        )
        async with rt:
            await rt.listen(sock_path)
            plugin = Restorer(name="r", idx="10", socket_path=sock_path, environ={})
            async with serving(plugin):
                if dropped:
                    with pytest.raises(SyncUpdateFailed, match="ctr1"):
                        await rt.wait_ready()
                    assert rt.connected
                    assert rt.failures == [
                        "failed to synchronize plugin: NRI update of containers failed: ctr1"
                    ]
                else:
                    hs = await rt.wait_ready()
                    assert [u.ignore_failure for u in hs.sync_updates] == [marked]
                    assert rt.failures == []

    run_stub(body)
