"""The plugin stub against the in-project runtime peer: unsolicited container updates
(deferred inside a hook, waiting for running hooks, failures and timeouts reported).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from nri_api import Plugin, Update, api
from nri_api.errors import ConnectionClosed
from nri_api.testing import FakeRuntime
from tests.support.stub import CTR, POD, Creator, run, serving


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

        with pytest.raises(ConnectionClosed, match="not connected"):
            await plugin.update_containers([Update("c").set_cpuset("1")])

    run(body)


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
