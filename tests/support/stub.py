"""The plugin stub's test kit: a recording plugin, the events to send and a bounded run.

`Recorder` records every call a runtime makes into a `nri_api.Plugin`; its subclasses
choose the event hooks a test's plugin has (`Creator`: CreateContainer; `Simple`: every
event without a reply, half of them async).  `send_all_simple` sends those events from a
`nri_api.testing.FakeRuntime`, `ALL_SIMPLE` is what the recorder then holds.  `serving`
runs a plugin's `serve()` for the block and stops it after; `run` runs a test coroutine
within a timeout, so that a hang fails the test instead of the session.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from nri_api import Adjustment, Plugin, RuntimeInfo, Update, api
from nri_api.stub import ConfigureResult
from nri_api.testing import FakeRuntime, make_container, make_pod

POD = make_pod("pod1", name="web", annotations={"a": "b"})


CTR = make_container("ctr1", pod=POD, name="nginx")


def run(test: Callable[[], Awaitable[None]], timeout: float = 30.0) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(timeout):
            await test()

    asyncio.run(bounded())


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
