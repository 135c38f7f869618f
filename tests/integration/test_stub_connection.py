"""The plugin stub against the in-project runtime peer: losing and regaining the connection
(reconnect, exit on close, socket pairs and inherited fds, connect failures).
"""

from __future__ import annotations

import asyncio
import contextlib
import os

import pytest

from nri_api import OnClose, Plugin, Update, api
from nri_api.events import Event
from nri_api.testing import FakeRuntime
from tests.support.stub import CTR, POD, Creator, run, serving


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
