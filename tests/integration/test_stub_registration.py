"""The plugin stub against the in-project runtime peer: registration and configuration
(subscription masks per NRI version, the configure exchange, their bounds and misuse).
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from nri_api import RPCError, RuntimeInfo, StatusCode, api
from nri_api.events import Event, NRIVersion
from nri_api.testing import FakeRuntime, PluginRejected
from nri_api.version import VersionSource
from tests.support.stub import CTR, POD, Creator, Simple, run, serving


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
