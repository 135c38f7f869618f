"""The plugin stub against the in-project runtime peer, over real Unix sockets."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence

import pytest

from nri_api import Adjustment, OnClose, Plugin, RPCError, RuntimeInfo, StatusCode, Update, api
from nri_api.errors import ConnectionClosed
from nri_api.events import Event, NRIVersion
from nri_api.stub import ConfigureResult, CreateResult
from nri_api.testing import FakeRuntime, PluginRejected, make_container, make_pod
from nri_api.version import VersionSource

POD = make_pod("pod1", name="web", annotations={"a": "b"})
CTR = make_container("ctr1", pod=POD, name="nginx")


def run(test: Callable[[], Awaitable[None]], timeout: float = 30.0) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(timeout):
            await test()

    asyncio.run(bounded())


@pytest.fixture
def sock_path() -> Iterator[str]:
    directory = tempfile.mkdtemp(prefix="nri-", dir="/tmp")  # short: AF_UNIX path limit
    try:
        yield os.path.join(directory, "nri.sock")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.asynccontextmanager
async def serving(plugin: Plugin) -> AsyncIterator[asyncio.Task[int]]:
    task = asyncio.create_task(plugin.serve())
    try:
        yield task
    finally:
        await plugin.stop()
        with contextlib.suppress(Exception):
            await task


class Recorder(Plugin):
    """Records every call; the event hooks it has are chosen per test by subclassing."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.seen: list[tuple[str, tuple[str, ...]]] = []
        self.config: str | None = None
        self.configured_runtime: RuntimeInfo | None = None
        self.synced: tuple[list[str], list[str]] | None = None
        self.sync_calls = 0

    def record(self, hook: str, *objs: api.PodSandbox | api.Container) -> None:
        self.seen.append((hook, tuple(o.id for o in objs)))

    def configure(self, config: str, runtime: RuntimeInfo) -> ConfigureResult:
        self.config = config
        self.configured_runtime = runtime
        return None

    def synchronize(
        self, pods: Sequence[api.PodSandbox], containers: Sequence[api.Container]
    ) -> list[api.ContainerUpdate]:
        self.sync_calls += 1
        self.synced = ([p.id for p in pods], [c.id for c in containers])
        return [Update(containers[0].id).set_cpuset("5").build()] if containers else []


class Creator(Recorder):
    def create_container(self, pod: api.PodSandbox, container: api.Container) -> Adjustment:
        self.record("create_container", pod, container)
        return Adjustment().set_cpuset("0-3", "0").add_env("PINNED", "yes")


class Simple(Recorder):
    """Implements every simple (no-reply) event, half sync, half async."""

    def run_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self.record("run_pod_sandbox", pod)

    async def stop_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self.record("stop_pod_sandbox", pod)

    def remove_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self.record("remove_pod_sandbox", pod)

    async def post_create_container(self, pod: api.PodSandbox, ctr: api.Container) -> None:
        self.record("post_create_container", pod, ctr)

    def start_container(self, pod: api.PodSandbox, ctr: api.Container) -> None:
        self.record("start_container", pod, ctr)

    async def post_start_container(self, pod: api.PodSandbox, ctr: api.Container) -> None:
        self.record("post_start_container", pod, ctr)

    def post_update_container(self, pod: api.PodSandbox, ctr: api.Container) -> None:
        self.record("post_update_container", pod, ctr)

    def remove_container(self, pod: api.PodSandbox, ctr: api.Container) -> None:
        self.record("remove_container", pod, ctr)


ALL_SIMPLE = [
    ("run_pod_sandbox", ("pod1",)),
    ("stop_pod_sandbox", ("pod1",)),
    ("remove_pod_sandbox", ("pod1",)),
    ("post_create_container", ("pod1", "ctr1")),
    ("start_container", ("pod1", "ctr1")),
    ("post_start_container", ("pod1", "ctr1")),
    ("post_update_container", ("pod1", "ctr1")),
    ("remove_container", ("pod1", "ctr1")),
]


async def send_all_simple(rt: FakeRuntime) -> None:
    assert await rt.run_pod_sandbox(POD)
    assert await rt.stop_pod_sandbox(POD)
    assert await rt.remove_pod_sandbox(POD)
    assert await rt.post_create_container(POD, CTR)
    assert await rt.start_container(POD, CTR)
    assert await rt.post_start_container(POD, CTR)
    assert await rt.post_update_container(POD, CTR)
    assert await rt.remove_container(POD, CTR)


# -- registration and configuration -----------------------------------------------------


def test_registration_configure_and_runtime_info(sock_path: str) -> None:
    async def body() -> None:
        async with FakeRuntime(
            nri_version="v0.12.2",
            config="policy: none",
            registration_timeout=7.0,
            request_timeout=3.0,
        ) as rt:
            await rt.listen(sock_path)
            plugin = Creator(name="pinner", idx="42", socket_path=sock_path, environ={})
            async with serving(plugin):
                ready = await rt.wait_ready()
                assert ready.registration.plugin_name == "pinner"
                assert ready.registration.plugin_idx == "42"
                assert ready.registration.NRI_version == "v0.12.2"
                assert ready.events == Event.CREATE_CONTAINER.bit
                assert plugin.config == "policy: none"
                assert plugin.configured_runtime == RuntimeInfo(
                    name="containerd",
                    version="2.4.0",
                    nri_version=NRIVersion(0, 12, 2),
                    nri_version_source=VersionSource.REPORTED,
                    registration_timeout=7.0,
                    request_timeout=3.0,
                )
                assert plugin.runtime == plugin.configured_runtime
                assert plugin.ready
                assert plugin.events == Event.CREATE_CONTAINER.bit
                reply = await rt.create_container(POD, CTR)
                assert reply.adjust.linux.resources.cpu.cpus == "0-3"
                assert [(e.key, e.value) for e in reply.adjust.env] == [("PINNED", "yes")]
                assert plugin.seen == [("create_container", ("pod1", "ctr1"))]

    run(body)


def test_configure_narrows_subscription(sock_path: str) -> None:
    class Narrow(Simple):
        def configure(self, config: str, runtime: RuntimeInfo) -> list[Event]:
            return [Event.START_CONTAINER]

    async def body() -> None:
        async with FakeRuntime(nri_version="v0.12.2") as rt:
            await rt.listen(sock_path)
            plugin = Narrow(name="n", idx="10", socket_path=sock_path, environ={})
            async with serving(plugin):
                assert (await rt.wait_ready()).events == Event.START_CONTAINER.bit
                assert not await rt.run_pod_sandbox(POD)
                assert await rt.start_container(POD, CTR)
                assert plugin.seen == [("start_container", ("pod1", "ctr1"))]

    run(body)


def test_configure_asking_for_unimplemented_events_fails_configure(sock_path: str) -> None:
    class Greedy(Creator):
        def configure(self, config: str, runtime: RuntimeInfo) -> int:
            return Event.CREATE_CONTAINER.bit | Event.STOP_CONTAINER.bit

    async def body() -> None:
        async with FakeRuntime(nri_version="v0.12.2") as rt:
            await rt.listen(sock_path)
            plugin = Greedy(name="g", idx="10", socket_path=sock_path, environ={})
            async with serving(plugin) as task:
                with pytest.raises(RPCError, match=r"STOP_CONTAINER.*no hook") as caught:
                    await rt.wait_ready()
                assert caught.value.code is StatusCode.UNKNOWN
                # the runtime drops a plugin whose Configure fails: EXIT mode returns 1
                assert await task == 1

    run(body)


@pytest.mark.parametrize(
    ("nri_version", "runtime_name", "expected_version", "source"),
    [
        pytest.param("v0.8.0", None, NRIVersion(0, 8, 0), VersionSource.RUNTIME_TABLE, id="v0.8"),
        pytest.param(
            None, "some-runtime", NRIVersion(0, 3, 0), VersionSource.DEFAULT, id="unknown"
        ),
    ],
)
def test_old_runtime_gets_a_clipped_mask(
    sock_path: str,
    nri_version: str | None,
    runtime_name: str | None,
    expected_version: NRIVersion,
    source: VersionSource,
) -> None:
    class Validator(Creator):
        def validate_container_adjustment(
            self, request: api.ValidateContainerAdjustmentRequest
        ) -> None:
            return None

        def update_pod_sandbox(
            self, pod: api.PodSandbox, overhead: api.LinuxResources, res: api.LinuxResources
        ) -> None:
            return None

    async def body() -> None:
        # The fake rejects, like a real pre-v0.10 runtime, any bit beyond 0x7FF.
        async with FakeRuntime(nri_version=nri_version, runtime_name=runtime_name) as rt:
            await rt.listen(sock_path)
            plugin = Validator(name="v", idx="10", socket_path=sock_path, environ={})
            async with serving(plugin):
                assert (await rt.wait_ready()).events == Event.CREATE_CONTAINER.bit
                assert plugin.runtime is not None
                assert plugin.runtime.nri_version == expected_version
                assert plugin.runtime.nri_version_source is source

    run(body)


def test_fake_runtime_rejects_a_mask_beyond_its_version(sock_path: str) -> None:
    """Control for the test above: the fake really does refuse unknown bits."""

    async def body() -> None:
        async with FakeRuntime(nri_version="v0.8.0", auto_start=False) as rt:
            await rt.listen(sock_path)

            class Liar(Creator):
                async def _dispatch(
                    self, service: str, method: str, payload: bytes, deadline: float | None
                ) -> bytes:
                    if method == "Configure":
                        return api.ConfigureResponse(events=0x2008).SerializeToString()
                    return await super()._dispatch(service, method, payload, deadline)

            plugin = Liar(name="l", idx="10", socket_path=sock_path, environ={})
            async with serving(plugin):
                await rt.wait_registered()
                with pytest.raises(PluginRejected, match="invalid plugin events: 0x2008"):
                    await rt.configure()

    run(body)


# -- synchronize -------------------------------------------------------------------------


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


# -- event delivery ----------------------------------------------------------------------


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


# -- errors ------------------------------------------------------------------------------


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


# -- unsolicited updates -----------------------------------------------------------------


def test_update_containers_inside_a_hook_is_deferred(sock_path: str) -> None:
    """On v0.12.1 the runtime's lock would deadlock a synchronous call from a hook."""

    class Rebalancer(Plugin):
        def __init__(self, **kwargs: object) -> None:
            super().__init__(**kwargs)  # type: ignore[arg-type]
            self.in_hook_result: object = "unset"

        async def post_start_container(self, pod: api.PodSandbox, ctr: api.Container) -> None:
            self.in_hook_result = await self.update_containers(
                [Update("ctr-other").set_cpuset("4-7")]
            )

    async def body() -> None:
        async with FakeRuntime(nri_version="v0.12.1", request_timeout=5.0) as rt:
            await rt.listen(sock_path)
            plugin = Rebalancer(name="r", idx="10", socket_path=sock_path, environ={})
            async with serving(plugin):
                await rt.wait_ready()
                # Would raise TimeoutError (and drop the plugin) if the hook waited for it.
                assert await rt.post_start_container(POD, CTR)
                assert plugin.in_hook_result is None
                sent = await rt.next_update()
                assert [(u.container_id, u.linux.resources.cpu.cpus) for u in sent.update] == [
                    ("ctr-other", "4-7")
                ]
                assert rt.failures == []

    run(body)


def test_synchronous_update_inside_a_hook_would_deadlock(sock_path: str) -> None:
    """Control: the fake runtime really emulates the pre-v0.12.2 lock."""

    class Naive(Plugin):
        async def post_start_container(self, pod: api.PodSandbox, ctr: api.Container) -> None:
            session = self._session
            assert session is not None
            request = api.UpdateContainersRequest(update=[Update("x").set_cpuset("1").build()])
            await session.trunk.call(
                api.RUNTIME_SERVICE,
                "UpdateContainers",
                request.SerializeToString(),
                timeout=None,
            )

    async def body() -> None:
        async with FakeRuntime(nri_version="v0.12.1", request_timeout=0.5) as rt:
            await rt.listen(sock_path)
            plugin = Naive(name="n", idx="10", socket_path=sock_path, environ={})
            async with serving(plugin) as task:
                await rt.wait_ready()
                with pytest.raises(TimeoutError):
                    await rt.post_start_container(POD, CTR)
                assert any("timed out" in failure for failure in rt.failures)
                assert await task == 1  # dropped by the runtime

    run(body)


def test_update_containers_outside_hooks_returns_failures(sock_path: str) -> None:
    def fail_odd(request: api.UpdateContainersRequest) -> list[api.ContainerUpdate]:
        return [u for u in request.update if u.container_id.endswith(("1", "3"))]

    async def body() -> None:
        async with FakeRuntime(update_result=fail_odd) as rt:
            await rt.listen(sock_path)
            plugin = Creator(name="u", idx="10", socket_path=sock_path, environ={})
            async with serving(plugin):
                await rt.wait_ready()
                failed = await plugin.update_containers(
                    [Update(f"c{i}").set_cpuset(str(i)) for i in range(4)],
                    [api.ContainerEviction(container_id="c9", reason="test")],
                )
                assert failed is not None
                assert [u.container_id for u in failed] == ["c1", "c3"]
                sent = rt.update_requests[-1]
                assert [u.container_id for u in sent.update] == ["c0", "c1", "c2", "c3"]
                assert [e.container_id for e in sent.evict] == ["c9"]

    run(body)


def test_update_containers_waits_for_running_hooks(sock_path: str) -> None:
    """A call from a background task while a hook runs is sent only after the hook."""

    order: list[str] = []

    class Slow(Plugin):
        def __init__(self, **kwargs: object) -> None:
            super().__init__(**kwargs)  # type: ignore[arg-type]
            self.entered = asyncio.Event()
            self.release = asyncio.Event()

        async def start_container(self, pod: api.PodSandbox, ctr: api.Container) -> None:
            self.entered.set()
            await self.release.wait()
            order.append("hook done")

    async def body() -> None:
        async with FakeRuntime(nri_version="v0.12.2", request_timeout=10.0) as rt:
            await rt.listen(sock_path)
            plugin = Slow(name="s", idx="10", socket_path=sock_path, environ={})
            async with serving(plugin):
                await rt.wait_ready()
                event = asyncio.create_task(rt.start_container(POD, CTR))
                await plugin.entered.wait()

                async def background() -> None:
                    await plugin.update_containers([Update("c").set_cpuset("1")])
                    order.append("update done")

                update = asyncio.create_task(background())
                for _ in range(20):
                    await asyncio.sleep(0)
                assert rt.update_requests == []  # held back while the hook runs
                plugin.release.set()
                await event
                await update
                assert order == ["hook done", "update done"]
                assert len(rt.update_requests) == 1

    run(body)


def test_update_containers_when_not_connected() -> None:
    plugin = Creator(name="x", idx="10", environ={})

    async def body() -> None:
        from nri_api.errors import ConnectionClosed

        with pytest.raises(ConnectionClosed, match="not connected"):
            await plugin.update_containers([Update("c").set_cpuset("1")])

    run(body)


# -- connection loss ---------------------------------------------------------------------


def test_reconnect_after_runtime_closes(sock_path: str) -> None:
    class Reconnecting(Creator):
        def __init__(self, **kwargs: object) -> None:
            super().__init__(**kwargs)
            self.closes = 0

        async def on_close(self) -> None:
            self.closes += 1

    async def body() -> None:
        async with FakeRuntime(pods=[POD], containers=[CTR]) as rt:
            await rt.listen(sock_path)
            plugin = Reconnecting(
                name="r",
                idx="10",
                socket_path=sock_path,
                on_close=OnClose.RECONNECT,
                environ={},
            )
            async with serving(plugin) as task:
                await rt.wait_ready()
                await rt.disconnect()
                second = await rt.wait_ready()
                assert second.registration.plugin_name == "r"
                assert plugin.closes == 1
                assert plugin.sync_calls == 2
                assert len(rt.registrations) == 2
                assert (await rt.create_container(POD, CTR)).adjust.linux.resources.cpu.cpus
                await plugin.stop()
                assert await task == 0
                assert plugin.closes == 1  # stop() is not a connection loss

    run(body)


def test_reconnect_waits_for_the_runtime_to_come_back(sock_path: str) -> None:
    async def body() -> None:
        plugin = Creator(
            name="r", idx="10", socket_path=sock_path, on_close=OnClose.RECONNECT, environ={}
        )
        async with serving(plugin):
            for _ in range(3):  # nobody listens yet: the plugin keeps retrying
                await asyncio.sleep(0.05)
            async with FakeRuntime() as rt:
                await rt.listen(sock_path)
                await rt.wait_ready()

    run(body)


def test_exit_on_close(sock_path: str) -> None:
    class Exiting(Creator):
        def __init__(self, **kwargs: object) -> None:
            super().__init__(**kwargs)
            self.closes = 0

        def on_close(self) -> None:
            self.closes += 1

    async def body() -> None:
        async with FakeRuntime() as rt:
            await rt.listen(sock_path)
            plugin = Exiting(name="e", idx="10", socket_path=sock_path, environ={})
            async with serving(plugin) as task:
                await rt.wait_ready()
                assert plugin.ready
                await rt.disconnect()
                assert await task == 1
                assert not plugin.ready
                assert plugin.closes == 1
                assert len(rt.registrations) == 1

    run(body)


def test_connect_failure_in_exit_mode(sock_path: str) -> None:
    async def body() -> None:
        plugin = Creator(name="e", idx="10", socket_path=sock_path, environ={})
        assert await plugin.serve() == 1

    run(body)


def test_socketpair_connection(sock_path: str) -> None:
    async def body() -> None:
        async with FakeRuntime() as rt:
            theirs = await rt.socketpair()
            plugin = Creator(name="sp", idx="10", connection=theirs, environ={})
            async with serving(plugin):
                assert (await rt.wait_ready()).registration.plugin_name == "sp"

    run(body)


def test_registration_refused_for_a_bad_name_on_the_wire(sock_path: str) -> None:
    async def body() -> None:
        async with FakeRuntime() as rt:
            theirs = await rt.socketpair()
            plugin = Creator(name="ok", idx="10", connection=theirs, environ={})
            # bypass local validation to see the runtime's check (the fake mirrors it)
            object.__setattr__(plugin, "identity", type(plugin.identity)("bad name", "10"))
            assert await plugin.serve() == 1
            assert rt.registrations == []

    run(body)


def test_stop_before_serve_runs(sock_path: str) -> None:
    async def body() -> None:
        plugin = Creator(name="s", idx="10", socket_path=sock_path, environ={})
        task = asyncio.create_task(plugin.serve())
        await plugin.stop()  # serve() has not started yet
        assert await task == 0

    run(body)


def test_configure_before_the_registration_reply(sock_path: str) -> None:
    async def body() -> None:
        async with FakeRuntime(configure_before_reply=True) as rt:
            await rt.listen(sock_path)
            plugin = Creator(name="c", idx="10", socket_path=sock_path, environ={})
            async with serving(plugin):
                ready = await rt.wait_ready()
                assert ready.events == Event.CREATE_CONTAINER.bit
                assert rt.calls[:2] == ["Configure", "Synchronize"]

    run(body)


def test_tasks_started_by_a_hook_wait_normally_once_it_returned(sock_path: str) -> None:
    """A background task inherits the hook's context; after the hook it is 'outside'."""

    def fail_all(request: api.UpdateContainersRequest) -> list[api.ContainerUpdate]:
        return list(request.update)

    class Spawner(Plugin):
        def __init__(self, **kwargs: object) -> None:
            super().__init__(**kwargs)  # type: ignore[arg-type]
            self.hook_done = asyncio.Event()
            self.results: list[object] = []
            self.tasks: list[asyncio.Task[None]] = []

        async def later(self) -> None:
            # while the hook runs: deferred (None), even via wait_for's inner task
            self.results.append(
                await asyncio.wait_for(self.update_containers([Update("a").set_cpuset("1")]), 5)
            )
            await self.hook_done.wait()
            await asyncio.sleep(0)
            self.results.append(await self.update_containers([Update("b").set_cpuset("2")]))

        async def start_container(self, pod: api.PodSandbox, ctr: api.Container) -> None:
            self.tasks.append(asyncio.create_task(self.later()))
            for _ in range(5):
                await asyncio.sleep(0)
            self.hook_done.set()

    async def body() -> None:
        async with FakeRuntime(update_result=fail_all) as rt:
            await rt.listen(sock_path)
            plugin = Spawner(name="s", idx="10", socket_path=sock_path, environ={})
            async with serving(plugin):
                await rt.wait_ready()
                await rt.start_container(POD, CTR)
                await plugin.tasks[0]
                assert plugin.results[0] is None
                failed = plugin.results[1]
                assert isinstance(failed, list)
                assert [u.container_id for u in failed] == ["b"]
                assert [r.update[0].container_id for r in rt.update_requests] == ["a", "b"]

    run(body)


# -- bounds and misuse (issue 11 item 6, 7 and the Low items) ----------------------------


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


def test_a_second_configure_is_refused(sock_path: str) -> None:
    async def body() -> None:
        async with FakeRuntime() as rt:
            await rt.listen(sock_path)
            plugin = Creator(name="c", idx="10", socket_path=sock_path, environ={})
            async with serving(plugin):
                await rt.wait_ready()
                first = plugin.configured_runtime
                with pytest.raises(RPCError) as info:
                    await rt.configure("something else")
                assert info.value.code is StatusCode.FAILED_PRECONDITION
                assert info.value.message == (
                    "Configure: expected once per connection, found a second call; plugin "
                    "10-c keeps the configuration of the first"
                )
                assert plugin.config == "" and plugin.configured_runtime is first
                assert plugin.ready

    run(body)


async def _silent_runtime(path: str) -> asyncio.AbstractServer:
    """A listener that accepts and reads, and never answers (RegisterPlugin hangs)."""

    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while await reader.read(65536):
                pass
        writer.close()

    return await asyncio.start_unix_server(accepted, path=path)


def test_stop_during_registration_is_prompt(sock_path: str) -> None:
    # was 5.2 s: the registration call ran to its timeout first
    async def body() -> None:
        server = await _silent_runtime(sock_path)
        plugin = Creator(name="s", idx="10", socket_path=sock_path, environ={})
        task = asyncio.create_task(plugin.serve())
        await asyncio.sleep(0.3)
        loop = asyncio.get_running_loop()
        start = loop.time()
        plugin.request_stop()
        assert await task == 0
        assert loop.time() - start < 0.5
        server.close()

    run(body)


def test_registration_timeout_names_what_was_waited_for(
    sock_path: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nri_api.connection

    monkeypatch.setattr(nri_api.connection, "DEFAULT_REGISTRATION_TIMEOUT", 0.2)

    async def body() -> None:
        server = await _silent_runtime(sock_path)
        plugin = Creator(name="s", idx="10", socket_path=sock_path, environ={})
        assert await plugin.serve() == 1
        server.close()

    run(body)
    failed = [r.getMessage() for r in caplog.records if "registration failed" in r.getMessage()]
    assert failed == [
        f"plugin 10-s: registration failed: no reply to RegisterPlugin from {sock_path} "
        "within 0.2s (the registration timeout)"
    ]


def test_an_unanswered_update_is_reported_with_its_timeout(
    sock_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    class Hearing(Creator):
        def __init__(self, **kwargs: object) -> None:
            super().__init__(**kwargs)
            self.failed: list[tuple[list[str], str]] = []

        def updates_failed(
            self, updates: Sequence[api.ContainerUpdate], error: BaseException
        ) -> None:
            self.failed.append(([u.container_id for u in updates], type(error).__name__))

    async def body() -> None:
        async with FakeRuntime(unanswered_updates=1) as rt:
            await rt.listen(sock_path)
            plugin = Hearing(name="u", idx="10", socket_path=sock_path, environ={})
            async with serving(plugin):
                await rt.wait_ready()
                with pytest.raises(TimeoutError):
                    await plugin.update_containers([Update("c1").set_cpuset("1")], timeout=0.2)
                assert plugin.failed == [(["c1"], "TimeoutError")]
                # the next one is answered
                assert await plugin.update_containers([Update("c1").set_cpuset("1")]) == []
                assert len(plugin.failed) == 1

    run(body)
    lines = [r.getMessage() for r in caplog.records if "UpdateContainers" in r.getMessage()]
    assert lines == [
        "plugin 10-u: UpdateContainers of 1 update(s) failed: no reply within 0.2s "
        "(the update_containers timeout)"
    ]


def test_a_socket_path_beyond_the_unix_limit_is_refused() -> None:
    # was retried forever (connect fails with "AF_UNIX path too long")
    path = "/tmp/" + "d" * 100 + "/nri.sock"
    with pytest.raises(ValueError) as info:
        Creator(name="s", idx="10", socket_path=path, environ={})
    assert str(info.value).startswith(
        "NRI socket path: expected at most 108 bytes (the Unix socket path limit), found 114"
    )
    Creator(name="s", idx="10", socket_path="/tmp/" + "d" * 103, environ={})  # 108: fine


def test_a_bad_inherited_fd_is_named_in_the_error(caplog: pytest.LogCaptureFixture) -> None:
    fd = 999
    with contextlib.suppress(OSError):
        os.close(fd)

    async def body() -> None:
        plugin = Creator(name="s", idx="10", environ={"NRI_PLUGIN_SOCKET": str(fd)})
        assert await plugin.serve() == 1

    run(body)
    errors = [r.getMessage() for r in caplog.records if "cannot connect" in r.getMessage()]
    assert len(errors) == 1
    assert errors[0].startswith(
        "plugin 10-s: cannot connect to the inherited socket fd 999 ($NRI_PLUGIN_SOCKET): "
    )
    assert "/var/run/nri/nri.sock" not in errors[0]


def test_connect_failures_reach_the_hook(sock_path: str) -> None:
    class Counting(Creator):
        def __init__(self, **kwargs: object) -> None:
            super().__init__(**kwargs)
            self.attempts: list[tuple[int, str]] = []

        def connect_failed(self, error: OSError, attempt: int) -> None:
            self.attempts.append((attempt, type(error).__name__))

    async def body() -> None:
        plugin = Counting(
            name="r", idx="10", socket_path=sock_path, on_close=OnClose.RECONNECT, environ={}
        )
        async with serving(plugin):
            while len(plugin.attempts) < 3:
                await asyncio.sleep(0.05)
            async with FakeRuntime() as rt:
                await rt.listen(sock_path)
                await rt.wait_ready()
        assert plugin.attempts[:3] == [
            (1, "FileNotFoundError"),
            (2, "FileNotFoundError"),
            (3, "FileNotFoundError"),
        ]

    run(body)
