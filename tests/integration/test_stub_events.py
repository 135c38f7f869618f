"""The plugin stub against the in-project runtime peer: Synchronize, event delivery per NRI
version, and the errors a hook or a validation returns to the runtime.
"""

from __future__ import annotations

import pytest

from nri_api import Adjustment, OnClose, Plugin, RPCError, StatusCode, Update, api
from nri_api.errors import ConnectionClosed
from nri_api.events import Event
from nri_api.stub import CreateResult
from nri_api.testing import FakeRuntime, make_container, make_pod
from tests.support.stub import (
    ALL_SIMPLE,
    CTR,
    POD,
    Creator,
    Recorder,
    Simple,
    run,
    send_all_simple,
    serving,
)


@pytest.mark.parametrize("chunk", [None, 1, 2, 7], ids=["whole", "chunk1", "chunk2", "chunk7"])
def test_synchronize_chunks_are_hidden(sock_path: str, chunk: int | None) -> None:
    pods = [make_pod(f"p{i}") for i in range(3)]
    ctrs = [make_container(f"c{i}") for i in range(5)]

    async def body() -> None:
        async with FakeRuntime(pods=pods, containers=ctrs, sync_chunk=chunk) as rt:
            await rt.listen(sock_path)
            plugin = Creator(name="s", idx="10", socket_path=sock_path, environ={})
            async with serving(plugin):
                ready = await rt.wait_ready()
                assert plugin.sync_calls == 1
                assert plugin.synced == (["p0", "p1", "p2"], ["c0", "c1", "c2", "c3", "c4"])
                assert [u.container_id for u in ready.sync_updates] == ["c0"]
                assert ready.sync_updates[0].linux.resources.cpu.cpus == "5"
                expected_calls = 1 if chunk is None else -(-8 // chunk)
                assert rt.calls.count("Synchronize") == expected_calls

    run(body)


def test_state_change_dispatch_on_v0_8(sock_path: str) -> None:
    async def body() -> None:
        async with FakeRuntime(nri_version="v0.8.0") as rt:
            await rt.listen(sock_path)
            plugin = Simple(name="s", idx="10", socket_path=sock_path, environ={})
            async with serving(plugin):
                await rt.wait_ready()
                await send_all_simple(rt)
                assert plugin.seen == ALL_SIMPLE
                assert rt.calls.count("StateChange") == len(ALL_SIMPLE)
                assert "RunPodSandbox" not in rt.calls

    run(body)


def test_dedicated_rpcs_on_v0_12(sock_path: str) -> None:
    async def body() -> None:
        async with FakeRuntime(nri_version="v0.12.2") as rt:
            await rt.listen(sock_path)
            plugin = Simple(name="s", idx="10", socket_path=sock_path, environ={})
            async with serving(plugin):
                await rt.wait_ready()
                await send_all_simple(rt)
                assert plugin.seen == ALL_SIMPLE
                assert "StateChange" not in rt.calls
                assert rt.calls[-8:] == [
                    "RunPodSandbox",
                    "StopPodSandbox",
                    "RemovePodSandbox",
                    "PostCreateContainer",
                    "StartContainer",
                    "PostStartContainer",
                    "PostUpdateContainer",
                    "RemoveContainer",
                ]
                # a raw StateChange still reaches the same hook (v0.12 fallback path)
                await rt.state_change(Event.START_CONTAINER, POD, CTR)
                assert plugin.seen[-1] == ("start_container", ("pod1", "ctr1"))

    run(body)


def test_update_stop_and_pod_update_hooks(sock_path: str) -> None:
    class Full(Recorder):
        def update_container(
            self, pod: api.PodSandbox, ctr: api.Container, res: api.LinuxResources
        ) -> list[Update]:
            self.record("update_container", pod, ctr)
            return [Update(ctr.id).set_memory_limit(res.memory.limit.value)]

        async def stop_container(
            self, pod: api.PodSandbox, ctr: api.Container
        ) -> list[api.ContainerUpdate]:
            self.record("stop_container", pod, ctr)
            return [Update("other").set_cpuset("0-7").ignore_failure().build()]

        def update_pod_sandbox(
            self, pod: api.PodSandbox, overhead: api.LinuxResources, res: api.LinuxResources
        ) -> None:
            self.record("update_pod_sandbox", pod)

    async def body() -> None:
        async with FakeRuntime() as rt:
            await rt.listen(sock_path)
            plugin = Full(name="f", idx="10", socket_path=sock_path, environ={})
            async with serving(plugin):
                await rt.wait_ready()
                res = api.LinuxResources()
                res.memory.limit.value = 1 << 20
                updated = await rt.update_container(POD, CTR, res)
                assert [
                    (u.container_id, u.linux.resources.memory.limit.value) for u in updated.update
                ] == [("ctr1", 1 << 20)]
                stopped = await rt.stop_container(POD, CTR)
                assert [(u.container_id, u.ignore_failure) for u in stopped.update] == [
                    ("other", True)
                ]
                await rt.update_pod_sandbox(POD, api.LinuxResources(), res)
                assert [hook for hook, _ in plugin.seen] == [
                    "update_container",
                    "stop_container",
                    "update_pod_sandbox",
                ]

    run(body)


def test_create_container_result_forms(sock_path: str) -> None:
    results: list[CreateResult] = [
        None,
        api.ContainerAdjustment(annotations={"k": "v"}),
        Adjustment().add_annotation("k", "v"),
        (None, [Update("x").set_cpuset("1")]),
        (Adjustment().add_annotation("k", "v"), [Update("x").set_cpuset("1").build()]),
        api.CreateContainerResponse(update=[api.ContainerUpdate(container_id="x")]),
    ]

    class Forms(Plugin):
        async def create_container(self, pod: api.PodSandbox, ctr: api.Container) -> CreateResult:
            return results.pop(0)

    async def body() -> None:
        async with FakeRuntime() as rt:
            await rt.listen(sock_path)
            plugin = Forms(name="f", idx="10", socket_path=sock_path, environ={})
            async with serving(plugin):
                await rt.wait_ready()
                replies = [await rt.create_container(POD, CTR) for _ in range(6)]
                assert [dict(r.adjust.annotations) for r in replies] == [
                    {},
                    {"k": "v"},
                    {"k": "v"},
                    {},
                    {"k": "v"},
                    {},
                ]
                assert [[u.container_id for u in r.update] for r in replies] == [
                    [],
                    [],
                    [],
                    ["x"],
                    ["x"],
                    ["x"],
                ]

    run(body)


def test_unimplemented_hooks_methods_and_services(sock_path: str) -> None:
    async def body() -> None:
        async with FakeRuntime() as rt:
            await rt.listen(sock_path)
            plugin = Creator(name="u", idx="10", socket_path=sock_path, environ={})
            async with serving(plugin):
                await rt.wait_ready()
                request = api.StopContainerRequest(pod=POD, container=CTR)
                with pytest.raises(RPCError) as caught:
                    await rt.call("StopContainer", request, api.StopContainerResponse)
                assert caught.value.code is StatusCode.UNIMPLEMENTED
                assert "stop_container" in caught.value.message
                with pytest.raises(RPCError) as caught:
                    await rt.call("RunPodSandbox", api.RunPodSandboxRequest(pod=POD), api.Empty)
                assert caught.value.code is StatusCode.UNIMPLEMENTED
                with pytest.raises(RPCError) as caught:
                    await rt.call_raw(api.PLUGIN_SERVICE, "Bogus")
                assert (caught.value.code, caught.value.message) == (
                    StatusCode.UNIMPLEMENTED,
                    "method Bogus",
                )
                with pytest.raises(RPCError) as caught:
                    await rt.call_raw("nri.pkg.api.v1alpha1.Nope", "Configure")
                assert (caught.value.code, caught.value.message) == (
                    StatusCode.UNIMPLEMENTED,
                    "service nri.pkg.api.v1alpha1.Nope",
                )
                # the connection survives all of that
                assert (await rt.create_container(POD, CTR)).adjust.linux.resources.cpu.cpus

    run(body)


def test_v0_12_falls_back_to_state_change_on_unimplemented(sock_path: str) -> None:
    """A subscribed event without a dedicated handler: UNIMPLEMENTED, then StateChange."""

    class OnlyStateChange(Simple):
        async def _dispatch(
            self, service: str, method: str, payload: bytes, deadline: float | None
        ) -> bytes:
            if method == "StartContainer":
                raise RPCError(StatusCode.UNIMPLEMENTED, f"method {method}")
            return await super()._dispatch(service, method, payload, deadline)

    async def body() -> None:
        async with FakeRuntime(nri_version="v0.12.0") as rt:
            await rt.listen(sock_path)
            plugin = OnlyStateChange(name="o", idx="10", socket_path=sock_path, environ={})
            async with serving(plugin):
                await rt.wait_ready()
                assert await rt.start_container(POD, CTR)
                assert rt.calls[-2:] == ["StartContainer", "StateChange"]
                assert plugin.seen == [("start_container", ("pod1", "ctr1"))]

    run(body)


def test_hook_errors_reach_the_runtime(sock_path: str) -> None:
    class Failing(Plugin):
        def create_container(self, pod: api.PodSandbox, ctr: api.Container) -> None:
            raise ValueError(f"container {ctr.name}: no exclusive CPUs left (want 4, have 2)")

        async def start_container(self, pod: api.PodSandbox, ctr: api.Container) -> None:
            raise RPCError(StatusCode.FAILED_PRECONDITION, "not yet")

    async def body() -> None:
        async with FakeRuntime() as rt:
            await rt.listen(sock_path)
            plugin = Failing(name="f", idx="10", socket_path=sock_path, environ={})
            async with serving(plugin):
                await rt.wait_ready()
                with pytest.raises(RPCError) as caught:
                    await rt.create_container(POD, CTR)
                assert caught.value.code is StatusCode.UNKNOWN
                assert caught.value.message == (
                    "container nginx: no exclusive CPUs left (want 4, have 2)"
                )
                with pytest.raises(RPCError) as caught:
                    await rt.start_container(POD, CTR)
                assert caught.value.code is StatusCode.FAILED_PRECONDITION
                assert caught.value.message == "not yet"

    run(body)


def test_validation_rejects_with_reason(sock_path: str) -> None:
    verdicts: list[object] = [None, "no hooks allowed", ValueError("bad seccomp"), ""]

    class Validator(Plugin):
        def validate_container_adjustment(
            self, request: api.ValidateContainerAdjustmentRequest
        ) -> str | None:
            verdict = verdicts.pop(0)
            if isinstance(verdict, Exception):
                raise verdict
            assert verdict is None or isinstance(verdict, str)
            return verdict

    async def body() -> None:
        async with FakeRuntime() as rt:
            await rt.listen(sock_path)
            plugin = Validator(name="v", idx="10", socket_path=sock_path, environ={})
            async with serving(plugin):
                await rt.wait_ready()
                request = api.ValidateContainerAdjustmentRequest(pod=POD, container=CTR)
                replies = [await rt.validate_container_adjustment(request) for _ in range(4)]
                assert [(r.reject, r.reason) for r in replies] == [
                    (False, ""),
                    (True, "no hooks allowed"),
                    (True, "bad seccomp"),
                    (False, ""),
                ]

    run(body)


def _many_containers(count: int, *, note: str = "") -> list[api.Container]:
    return [
        make_container(f"c{i}", pod=POD, name=f"n{i}", annotations={"note": note} if note else None)
        for i in range(count)
    ]


@pytest.mark.parametrize(
    ("bounds", "found"),
    [({"max_sync_chunks": 3}, "found 4 chunks"), ({"max_sync_bytes": 3000}, "bytes")],
    ids=["chunks", "bytes"],
)
def test_endless_synchronize_chunks_close_the_connection_and_reconnect(
    sock_path: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    bounds: dict[str, int],
    found: str,
) -> None:
    import nri_api.connection

    trims: list[int] = []
    monkeypatch.setattr(nri_api.connection, "_return_freed_memory", lambda: trims.append(1))

    async def body() -> None:
        containers = _many_containers(10, note="x" * 1000)
        async with FakeRuntime(pods=[POD], containers=containers, sync_chunk=1) as rt:
            await rt.listen(sock_path)
            plugin = Creator(
                name="r",
                idx="10",
                socket_path=sock_path,
                on_close=OnClose.RECONNECT,
                environ={},
                **bounds,
            )
            async with serving(plugin):
                with pytest.raises((ConnectionClosed, RPCError)):
                    await rt.wait_ready()
                assert plugin.sync_calls == 0
                # the reconnect starts afresh; a Synchronize within the bounds goes through
                rt.sync_chunk = None
                rt.containers = containers[:2]
                await rt.wait_ready()
                assert plugin.synced == (["pod1"], ["c0", "c1"])
                # the dropped chunks' memory went back to the system, once
                assert trims == [1]
        lost = [
            r.getMessage()
            for r in caplog.records
            if "connection to the runtime lost" in r.getMessage()
        ]
        assert len(lost) == 1
        assert "Synchronize: expected at most" in lost[0] and found in lost[0]

    caplog.set_level("INFO")
    run(body)
