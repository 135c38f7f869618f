"""Pre-registered mode: a child process started the way a runtime starts a plugin.

The runtime execs the plugin with the socket on fd 3, an environment of exactly
NRI_PLUGIN_NAME, NRI_PLUGIN_IDX and NRI_PLUGIN_SOCKET=3 (no PATH), and stdout/stderr
discarded; the config file's content arrives in Configure.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from nri_api import api
from nri_api.testing import FakeRuntime, make_container, make_pod
from tests.support.preregistered import launch_preregistered, wait_exit


def run_async(test: Callable[[], Awaitable[None]], timeout: float = 60.0) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(timeout):
            await test()

    asyncio.run(bounded())


@pytest.fixture
def workdir() -> Iterator[Path]:
    directory = tempfile.mkdtemp(prefix="nri-", dir="/tmp")
    try:
        yield Path(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


PLUGIN = """
    from nri_api import Adjustment, Plugin

    class Pinner(Plugin):
        def configure(self, config, runtime):
            self.cpus = config.strip()

        def create_container(self, pod, container):
            return Adjustment().set_cpuset(self.cpus)

    raise SystemExit(Pinner.main(["--log-file", {log!r}]))
"""


def test_preregistered_plugin_in_a_bare_environment(workdir: Path) -> None:
    log = workdir / "plugin.log"
    script = workdir / "30-pinner"
    script.write_text(
        f"#!{sys.executable}\n" + textwrap.dedent(PLUGIN.format(log=str(log))), encoding="utf-8"
    )
    script.chmod(0o755)

    async def body() -> None:
        async with FakeRuntime(nri_version="v0.12.2", config="2-3\n") as rt:
            proc = launch_preregistered(
                [str(script)], await rt.socketpair(), name="pinner", idx="30"
            )
            try:
                ready = await rt.wait_ready(timeout=20)
                assert (ready.registration.plugin_name, ready.registration.plugin_idx) == (
                    "pinner",
                    "30",
                )
                reply = await rt.create_container(make_pod(), make_container())
                assert reply.adjust.linux.resources.cpu.cpus == "2-3"
                await rt.close()
                # pre-registered plugins never reconnect: the process ends, status 1
                assert await wait_exit(proc) == 1
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        text = log.read_text(encoding="utf-8")
        assert "registered" in text
        assert "connection to the runtime lost" in text

    run_async(body)


def test_preregistered_plugin_with_a_bad_socket_fd(workdir: Path) -> None:
    log = workdir / "plugin.log"
    script = workdir / "30-pinner"
    script.write_text(
        f"#!{sys.executable}\n" + textwrap.dedent(PLUGIN.format(log=str(log))), encoding="utf-8"
    )
    script.chmod(0o755)
    env = {"NRI_PLUGIN_NAME": "pinner", "NRI_PLUGIN_IDX": "30", "NRI_PLUGIN_SOCKET": "nope"}
    done = subprocess.run([str(script)], env=env, capture_output=True, timeout=30, check=False)
    assert done.returncode == 2
    assert b"NRI_PLUGIN_SOCKET: expected the number of an inherited socket fd" in done.stderr


def test_plugin_object_from_environment() -> None:
    """The same detection in-process: NRI_PLUGIN_SOCKET makes the plugin pre-registered."""
    from nri_api import Plugin

    class P(Plugin):
        def start_container(self, pod: api.PodSandbox, ctr: api.Container) -> None:
            return None

    env = {"NRI_PLUGIN_NAME": "p", "NRI_PLUGIN_IDX": "11", "NRI_PLUGIN_SOCKET": "3"}
    plugin = P(environ=env, argv0="/opt/nri/plugins/11-p")
    assert plugin.pre_registered
    assert plugin.full_name == "11-p"
    assert not P(environ={}, argv0="/x/12-q").pre_registered
