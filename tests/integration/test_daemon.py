"""The daemon plugin against the in-project runtime peer, over a real Unix socket.

The machine is a synthetic sysfs root written by `write_sysfs` and read back through
discovery, exactly as the daemon reads a real node: one package, one NUMA node, 4 cores
with 2 threads (CPUs 0-7; CPU n and n+4 are siblings).  The static policy reserves CPU 0
(kubelet semantics: the reserved CPU stays in the shared pool, exclusive CPUs never
come from it), so the first 2-CPU exclusive grant is the whole core 1 = {1,5}.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from nri_api import api
from nri_api.errors import ConnectionClosed, RPCError, StatusCode
from nri_api.stub import OnClose
from nri_api.testing import FakeRuntime, PluginRejected
from nri_resmgr.config import config_from_mapping
from nri_resmgr.model import ContainerID, QoSClass, ResmgrError
from nri_resmgr.simulator.kubelet import container_resources
from nri_resmgr.simulator.scenario import ContainerSpec, Resources
from nri_resmgr.topology.cpuset import CPUSet
from nri_resmgr.topology.model import Topology
from tests.support.daemon import STATIC, daemon_serving, daemon_session, resmgr_plugin, run
from tests.support.messages import cpus_of, ctr, guaranteed, pod
from tests.support.waiting import wait_until


def test_exact_cpusets_and_shared_pool_updates(topology: Topology) -> None:
    async def scenario() -> None:
        async with daemon_session(topology) as (rt, _plugin, handshake):
            assert handshake.sync_updates == ()
            web = pod("web", QoSClass.BURSTABLE)
            db = pod("db", QoSClass.GUARANTEED)
            assert await rt.run_pod_sandbox(web)
            reply = await rt.create_container(web, ctr(web, "app", cpu="500m"))
            assert reply.adjust.linux.resources.cpu.cpus == "0-7"
            assert list(reply.update) == []

            assert await rt.run_pod_sandbox(db)
            reply = await rt.create_container(db, guaranteed(db, "pg", "2"))
            assert reply.adjust.linux.resources.cpu.cpus == "1,5"
            assert [(u.container_id, cpus_of(u)) for u in reply.update] == [
                ("web-app", "0,2-4,6-7")
            ]

            reply = await rt.create_container(db, guaranteed(db, "cache", "2"))
            assert reply.adjust.linux.resources.cpu.cpus == "2,6"
            assert [(u.container_id, cpus_of(u)) for u in reply.update] == [
                ("web-app", "0,3-4,7")
            ]

            # stopping the database's first container gives its core back to the pool
            stop = await rt.stop_container(db, guaranteed(db, "pg", "2"))
            assert [(u.container_id, cpus_of(u)) for u in stop.update] == [
                ("web-app", "0-1,3-5,7")
            ]

    run(scenario)


def test_overcommit_error_reaches_the_runtime_and_changes_nothing(topology: Topology) -> None:
    async def scenario() -> None:
        async with daemon_session(topology) as (rt, plugin, _):
            big = pod("big", QoSClass.GUARANTEED)
            await rt.run_pod_sandbox(big)
            with pytest.raises(RPCError) as err:
                await rt.create_container(big, guaranteed(big, "hog", "8"))
            assert "pod default/big container hog: requested 8 exclusive CPUs" in err.value.message
            assert plugin.pipeline.containers == {}
            # the same node still serves a fitting request exactly as before
            reply = await rt.create_container(big, guaranteed(big, "ok", "2"))
            assert reply.adjust.linux.resources.cpu.cpus == "1,5"

    run(scenario)


def test_synchronize_after_restart_keeps_valid_placements(topology: Topology) -> None:
    web = pod("web", QoSClass.BURSTABLE)
    db = pod("db", QoSClass.GUARANTEED)
    running_state = api.ContainerState.CONTAINER_RUNNING
    containers = [
        ctr(web, "app", cpu="500m", cpus="0,3-4,7", state=running_state),
        guaranteed(db, "pg", "2", cpus="1,5", state=running_state),
        guaranteed(db, "cache", "2", cpus="2,6", state=running_state),
    ]

    async def scenario() -> None:
        listed = {"pods": [web, db], "containers": containers}
        async with daemon_session(topology, rt_kw=listed) as (rt, plugin, hs):
            assert hs.sync_updates == ()
            # and the rebuilt state is the real one: the next grant avoids 1,5 and 2,6
            reply = await rt.create_container(db, guaranteed(db, "more", "2"))
            assert reply.adjust.linux.resources.cpu.cpus == "3,7"
            assert [(u.container_id, cpus_of(u)) for u in reply.update] == [("web-app", "0,4")]
            assert plugin.pipeline.assignments[ContainerID("db-pg")].cpus == CPUSet.parse("1,5")

    run(scenario)


def test_synchronize_fixes_a_double_allocation(topology: Topology) -> None:
    db = pod("db", QoSClass.GUARANTEED)
    running_state = api.ContainerState.CONTAINER_RUNNING
    containers = [
        guaranteed(db, "a", "2", cpus="1,5", state=running_state),
        guaranteed(db, "b", "2", cpus="1,5", state=running_state),  # invalid: same core
    ]

    async def scenario() -> None:
        listed = {"pods": [db], "containers": containers}
        async with daemon_session(topology, rt_kw=listed) as (_rt, plugin, hs):
            moved = {u.container_id: cpus_of(u) for u in hs.sync_updates}
            assert set(moved) == {"db-b"}
            assert moved["db-b"] != "1,5"
            a = plugin.pipeline.assignments
            assert a[ContainerID("db-a")].cpus.isdisjoint(a[ContainerID("db-b")].cpus)

    run(scenario)


def test_update_container_short_circuit_reasserts_our_cpuset(topology: Topology) -> None:
    async def scenario() -> None:
        async with daemon_session(topology) as (rt, _plugin, _):
            db = pod("db", QoSClass.GUARANTEED)
            await rt.run_pod_sandbox(db)
            c = guaranteed(db, "pg", "2")
            await rt.create_container(db, c)
            # a kubelet reconcile with the same resources (and its own idea of cpus)
            same = container_resources(
                ContainerSpec(
                    name="pg",
                    requests=Resources(cpu="2", memory="100M"),
                    limits=Resources(cpu="2", memory="100M"),
                )
            )
            same.cpu.cpus = "0-7"
            c.linux.resources.cpu.cpus = "1,5"
            reply = await rt.update_container(db, c, same)
            assert [(u.container_id, cpus_of(u)) for u in reply.update] == [("db-pg", "1,5")]

    run(scenario)


def test_remove_without_stop_sends_unsolicited_updates(topology: Topology) -> None:
    async def scenario() -> None:
        async with daemon_session(topology) as (rt, _plugin, _):
            web = pod("web", QoSClass.BURSTABLE)
            db = pod("db", QoSClass.GUARANTEED)
            await rt.create_container(web, ctr(web, "app", cpu="500m"))
            await rt.create_container(db, guaranteed(db, "pg", "2"))
            assert await rt.remove_container(db, guaranteed(db, "pg", "2"))
            request = await rt.next_update()
            assert [(u.container_id, cpus_of(u)) for u in request.update] == [("web-app", "0-7")]

    run(scenario)


def test_configure_string_replaces_the_config(topology: Topology) -> None:
    async def scenario() -> None:
        runtime = FakeRuntime(config="policy: none\n")
        async with daemon_session(topology, runtime=runtime) as (rt, plugin, _):
            assert plugin.pipeline.policy.name == "none"
            db = pod("db", QoSClass.GUARANTEED)
            reply = await rt.create_container(db, guaranteed(db, "pg", "2"))
            assert not reply.adjust.linux.resources.cpu.cpus

    run(scenario)


def test_bad_configure_string_is_rejected(topology: Topology) -> None:
    async def scenario() -> None:
        refused = "policy: static\npolicyConfig: {reservedSystemCPUs: 0-7}\n"
        async with daemon_serving(topology, STATIC, rt_kw={"config": refused}) as (rt, _):
            with pytest.raises((RPCError, PluginRejected)) as err:
                await rt.wait_ready()
            assert "reserved" in str(err.value)

    run(scenario)


def test_reconnect_after_runtime_restart_resynchronizes(topology: Topology) -> None:
    async def scenario() -> None:
        async with daemon_session(topology, STATIC, on_close=OnClose.RECONNECT) as (
            rt,
            plugin,
            _,
        ):
            assert plugin.health.ready
            db = pod("db", QoSClass.GUARANTEED)
            reply = await rt.create_container(db, guaranteed(db, "pg", "2"))
            assert reply.adjust.linux.resources.cpu.cpus == "1,5"
            # the runtime restarts: the plugin notices, reconnects and is synchronized
            # with what the runtime reports now
            rt.pods = [db]
            rt.containers = [guaranteed(db, "pg", "2", cpus="1,5",
                                        state=api.ContainerState.CONTAINER_RUNNING)]
            await rt.disconnect()
            handshake = await rt.wait_ready()
            assert handshake.sync_updates == ()
            assert len(rt.registrations) == 2
            reply = await rt.create_container(db, guaranteed(db, "more", "2"))
            assert reply.adjust.linux.resources.cpu.cpus == "2,6"

    run(scenario)


def test_metrics_and_health_follow_the_events(topology: Topology) -> None:
    async def scenario() -> None:
        async with daemon_session(topology) as (rt, plugin, _):
            assert plugin.health.ready
            big = pod("big", QoSClass.GUARANTEED)
            await rt.create_container(big, guaranteed(big, "ok", "2"))
            with pytest.raises(RPCError):
                await rt.create_container(big, guaranteed(big, "hog", "8"))
            text = plugin.metrics.exposition().decode()
            assert 'nri_resmgr_events_total{event="CreateContainer",outcome="ok"} 1.0' in text
            assert 'nri_resmgr_events_total{event="CreateContainer",outcome="error"} 1.0' in text
            assert ('nri_resmgr_errors_total{event="CreateContainer",kind="AllocationError"} 1.0'
                    in text)
            assert 'nri_resmgr_containers{kind="exclusive"} 1.0' in text

    run(scenario)


def test_live_reconfigure_moves_only_what_must_move(topology: Topology) -> None:
    async def scenario() -> None:
        async with daemon_session(topology) as (rt, plugin, _):
            db = pod("db", QoSClass.GUARANTEED)
            await rt.create_container(db, guaranteed(db, "pg", "2"))  # 1,5
            await rt.create_container(db, guaranteed(db, "cache", "2"))  # 2,6
            new = config_from_mapping(
                {"policy": "static", "policyConfig": {"reservedSystemCPUs": "0-1,4-5"}}
            )
            failed = await plugin.reconfigure(new)
            assert failed == []
            request = await rt.next_update()
            assert [(u.container_id, cpus_of(u)) for u in request.update] == [("db-pg", "3,7")]
            assert plugin.config is new
            # a configuration that cannot be applied changes nothing
            bad = config_from_mapping(
                {"policy": "static", "policyConfig": {"reservedSystemCPUs": "0-7"}}
            )
            with pytest.raises(ResmgrError):
                await plugin.reconfigure(bad)
            assert plugin.config is new
            assert plugin.pipeline.assignments[ContainerID("db-pg")].cpus == CPUSet.parse("3,7")

    run(scenario)


# -- hostile input and protocol misuse (issue 11) ----------------------------------------

NESTED = "[" * 5000 + "]" * 5000


def test_nested_annotation_fails_one_create_and_never_a_synchronize(topology: Topology) -> None:
    bad = pod("bad", QoSClass.GUARANTEED)
    bad.annotations["noderesource.dev/resources"] = NESTED
    good = pod("good", QoSClass.GUARANTEED)
    running_state = api.ContainerState.CONTAINER_RUNNING
    containers = [
        guaranteed(bad, "old", "2", cpus="1,5", state=running_state),
        guaranteed(good, "pg", "2", cpus="2,6", state=running_state),
    ]

    async def scenario() -> None:
        listed = {"pods": [bad, good], "containers": containers}
        async with daemon_session(topology, rt_kw=listed) as (rt, plugin, hs):
            # the Synchronize went through; the bad pod's container is accounted for
            assert hs.sync_updates == ()
            assert plugin.health.ready
            assert plugin.pipeline.assignments[ContainerID("bad-old")].cpus == CPUSet.parse("1,5")
            with pytest.raises(RPCError) as err:
                await rt.create_container(bad, guaranteed(bad, "new", "2"))
            assert err.value.code is not StatusCode.INTERNAL
            assert err.value.message == (
                "pod default/bad container new: annotation noderesource.dev/resources: "
                "expected JSON nested at most 32 deep (limits.maxJSONDepth), found 5000"
            )
            # and the node carries on: the next grant avoids both running containers
            reply = await rt.create_container(good, guaranteed(good, "more", "2"))
            assert reply.adjust.linux.resources.cpu.cpus == "3,7"

    run(scenario)


def test_huge_cpuset_fails_one_create_at_once(topology: Topology) -> None:
    async def scenario() -> None:
        config = config_from_mapping({**STATIC, "limits": {"maxCPUID": 63}})
        async with daemon_session(topology, config) as (rt, _plugin, _):
            db = pod("db", QoSClass.GUARANTEED)
            loop = asyncio.get_running_loop()
            for cpus, found in (("0-9999999", "above 63"), ("0-64", "above 63"),
                                ("1," * 9000, "expected at most 16384 characters")):
                start = loop.time()
                with pytest.raises(RPCError) as err:
                    await rt.create_container(db, guaranteed(db, "pg", "2", cpus=cpus))
                assert loop.time() - start < 0.5
                assert err.value.code is not StatusCode.INTERNAL
                assert err.value.message.startswith("pod default/db container pg: cpuset.cpus")
                assert found in err.value.message
            reply = await rt.create_container(db, guaranteed(db, "pg", "2", cpus="0-7"))
            assert reply.adjust.linux.resources.cpu.cpus == "1,5"

    run(scenario)


def test_an_internal_error_for_one_container_skips_only_that_container(
    topology: Topology, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nri_resmgr.runtime import adapter

    real = adapter.container_from_nri

    def broken(pod: Any, container: api.Container, **kw: Any) -> Any:
        if container.id == "db-broken":
            raise KeyError("a bug that only this container's input reaches")
        return real(pod, container, **kw)

    monkeypatch.setattr(adapter, "container_from_nri", broken)
    db = pod("db", QoSClass.GUARANTEED)
    running_state = api.ContainerState.CONTAINER_RUNNING
    containers = [
        guaranteed(db, "broken", "2", cpus="3,7", state=running_state),
        guaranteed(db, "pg", "2", cpus="1,5", state=running_state),
    ]

    async def scenario() -> None:
        listed = {"pods": [db], "containers": containers}
        async with daemon_session(topology, rt_kw=listed) as (_rt, plugin, hs):
            assert hs.sync_updates == ()
            assert plugin.health.ready
            assert set(plugin.pipeline.containers) == {ContainerID("db-pg")}

    run(scenario)


def test_a_second_configure_is_refused_and_grants_stay(topology: Topology) -> None:
    async def scenario() -> None:
        async with daemon_session(topology) as (rt, plugin, _):
            db = pod("db", QoSClass.GUARANTEED)
            reply = await rt.create_container(db, guaranteed(db, "pg", "2"))
            assert reply.adjust.linux.resources.cpu.cpus == "1,5"
            with pytest.raises(RPCError) as err:
                await rt.configure(config=json.dumps(STATIC))
            assert err.value.code is StatusCode.FAILED_PRECONDITION
            assert "expected once per connection" in err.value.message
            # the state was not wiped: the next grant does not reuse 1,5
            reply = await rt.create_container(db, guaranteed(db, "cache", "2"))
            assert reply.adjust.linux.resources.cpu.cpus == "2,6"
            assert plugin.health.ready

    run(scenario)


def test_an_unanswered_update_is_reasserted_at_the_next_event(topology: Topology) -> None:
    async def scenario() -> None:
        runtime = FakeRuntime(unanswered_updates=1)
        async with daemon_session(topology, runtime=runtime) as (rt, plugin, _):
            plugin.update_timeout = 0.3
            web = pod("web", QoSClass.BURSTABLE)
            db = pod("db", QoSClass.GUARANTEED)
            await rt.create_container(web, ctr(web, "app", cpu="500m"))
            await rt.create_container(db, guaranteed(db, "pg", "2"))
            assert await rt.remove_container(db, guaranteed(db, "pg", "2"))
            lost = await rt.next_update()  # never answered
            assert [(u.container_id, cpus_of(u)) for u in lost.update] == [("web-app", "0-7")]
            await wait_until(lambda: plugin.reassert_pending, what="a re-assert pending")
            assert plugin.reassert_pending == {ContainerID("web-app"): 1}
            # the next event re-sends what holds now (not the stale request)
            await rt.create_container(db, guaranteed(db, "cache", "2"))
            again = await rt.next_update()
            assert [(u.container_id, cpus_of(u)) for u in again.update] == [
                ("web-app", "0,2-4,6-7")
            ]
            # answered this time: the next event sends nothing more
            assert plugin.reassert_pending == {}
            await rt.run_pod_sandbox(pod("other", QoSClass.BURSTABLE))
            await asyncio.sleep(0.2)
            assert len(rt.update_requests) == 2

    run(scenario)


def test_a_missing_socket_is_explained_first_and_then_periodically(topology: Topology) -> None:
    from structlog.testing import capture_logs

    plugin = resmgr_plugin(
        STATIC, topology, socket_path="/nonexistent/nri.sock", on_close=OnClose.RECONNECT,
        environ={},
    )
    missing = FileNotFoundError(2, "No such file or directory")
    with capture_logs() as logs:
        for attempt in range(1, 26):
            plugin.connect_failed(missing, attempt)
    assert [e["attempt"] for e in logs] == [1, 13, 25]
    assert logs[0]["event"] == (
        "the NRI socket does not exist; usually NRI is not enabled in the runtime. See what "
        "enabling it would change with: nri-resmgr enable-nri --runtime containerd --dry-run"
    )
    assert logs[0]["socket"] == "/nonexistent/nri.sock"
    with capture_logs() as logs:
        plugin.connect_failed(ConnectionRefusedError(111, "Connection refused"), 1)
    assert logs[0]["event"].startswith("cannot connect to the NRI socket; is the runtime")


def test_configured_sync_bound_closes_with_one_line_and_the_daemon_carries_on(
    topology: Topology, caplog: pytest.LogCaptureFixture
) -> None:
    from structlog.testing import capture_logs

    db = pod("db", QoSClass.GUARANTEED)
    running_state = api.ContainerState.CONTAINER_RUNNING
    containers = [guaranteed(db, f"c{i}", "1", state=running_state) for i in range(5)]
    config = config_from_mapping({**STATIC, "limits": {"maxSyncChunks": 2}})

    async def scenario() -> None:
        chunked = {"pods": [db], "containers": containers, "sync_chunk": 1}
        async with daemon_serving(
            topology, config, rt_kw=chunked, on_close=OnClose.RECONNECT
        ) as (rt, plugin):
            with pytest.raises((RPCError, ConnectionClosed)):
                await rt.wait_ready()  # 6 objects in chunks of 1: over the bound of 2
            rt.sync_chunk = None
            await rt.wait_ready()  # the reconnect, in one piece
            assert plugin.health.ready
            reply = await rt.create_container(db, guaranteed(db, "new", "2"))
            assert reply.adjust.linux.resources.cpu.cpus == "3,7"  # c0-c4 hold 1,5,2,6

    caplog.set_level("INFO")
    with capture_logs() as logs:
        run(scenario)
    lines = [r.getMessage() for r in caplog.records] + [str(e.get("event")) for e in logs]
    lost = [line for line in lines if "lost" in line]
    assert len(lost) == 1, lost
    assert "Synchronize: expected at most 2 chunks" in lost[0]


def test_protocol_limits_from_the_config_reach_the_stub(topology: Topology) -> None:
    config = config_from_mapping({**STATIC, "limits": {
        "maxRequestsInFlight": 7, "maxRejectedPending": 5, "maxSyncChunks": 3,
        "maxSyncBytes": 4096,
    }})
    plugin = resmgr_plugin(config, topology, environ={})
    assert (plugin.max_in_flight, plugin.max_rejected_pending, plugin.max_sync_chunks,
            plugin.max_sync_bytes) == (7, 5, 3, 4096)
    assert plugin.pipeline.limits is config.limits


def test_nested_resctrl_annotation_fails_one_pod_and_never_a_synchronize(
    topology: Topology,
) -> None:
    from nri_resmgr.control.synthetic import INTEL_SKX, make_resctrl_tree

    key = "node.koordinator.sh/resctrl"
    good_spec = json.dumps({"llc": {"schemata": {"range": [20, 80]}}})
    config = config_from_mapping({**STATIC, "control": {"rdt": {"enable": True, "partitions": {
        "all": {"l3Allocation": "100%", "classes": {"gold": {"l3Allocation": "50-100%"}}}}}}})
    bad, good, late = (pod(n, QoSClass.BURSTABLE) for n in ("bad", "good", "late"))
    bad.annotations[key] = late.annotations[key] = "[" * 5000 + "]" * 5000
    good.annotations[key] = good_spec
    running_state = api.ContainerState.CONTAINER_RUNNING
    containers = [ctr(bad, "a", cpu="500m", state=running_state),
                  ctr(good, "b", cpu="500m", state=running_state)]

    async def scenario() -> None:
        base = Path(tempfile.mkdtemp(prefix="nri-", dir="/tmp"))
        root = base / "resctrl"
        make_resctrl_tree(root, INTEL_SKX)
        listed = {"pods": [bad, good], "containers": containers}
        state = str(base / "state")
        try:
            # was INTERNAL RecursionError: never ready
            async with daemon_session(
                topology, config, rt_kw=listed, resctrl_root=str(root), state_dir=state
            ) as (rt, plugin, _):
                assert plugin.health.ready
                assert (root / f"nri-resmgr-pod-{good.uid}").is_dir()  # the other pods' groups
                with pytest.raises(RPCError) as err:
                    await rt.run_pod_sandbox(late)
                assert err.value.code is not StatusCode.INTERNAL
                assert err.value.message == (
                    f"pod default/late: annotation {key}: expected JSON nested at most 32 deep "
                    "(limits.maxJSONDepth), found 5000"
                )
        finally:
            shutil.rmtree(base, ignore_errors=True)

    run(scenario)
