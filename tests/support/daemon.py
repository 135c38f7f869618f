"""Daemon sessions: the daemon's plugin registered with an in-process runtime over a real
Unix socket, as the integration and fuzz tests run it.

`resmgr_plugin` builds the plugin the way every test does (name ``resmgr``, index 90,
the configuration given as a `Config` or its mapping); `serve_daemon` has a
`FakeRuntime` listen on a socket and the plugin serve it, without waiting; `start_daemon`
also waits until the plugin has registered and synchronized; `stop_daemon` stops both.
`daemon_session` is the whole life in one ``async with``: a socket in a short temporary
directory (an AF_UNIX path is at most 107 bytes), the runtime, the plugin, the
handshake, and the cleanup; `daemon_serving` the same without waiting for the
handshake (for a registration that is to fail); `kube_side_serving` serves a plugin
already built with its Kubernetes side (the side reads the cluster's configuration
before the runtime connects), the side running beside it.  The configuration is `STATIC` unless
given; `MACHINE` is the tests' machine, `discovered` reads a machine back through
discovery, `run` runs a test's async scenario, and `http_get` reads the daemon's
HTTP endpoint (metrics, health).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from nri_api.stub import OnClose
from nri_api.testing import FakeRuntime, Handshake
from nri_resmgr.config import Config, config_from_mapping
from nri_resmgr.kube.agent import KubeSide
from nri_resmgr.runtime.daemon import ResmgrPlugin
from nri_resmgr.topology.discover import discover
from nri_resmgr.topology.model import Topology
from nri_resmgr.topology.synthetic import write_sysfs

__all__ = [
    "MACHINE",
    "STATIC",
    "daemon_serving",
    "daemon_session",
    "discovered",
    "http_get",
    "kube_side_serving",
    "resmgr_plugin",
    "run",
    "serve_daemon",
    "start_daemon",
    "stop_daemon",
]


#: the daemon tests' machine: 1 package, 1 node, 4 cores x 2 threads (CPU n and n+4 are
#: siblings)
MACHINE = {"packages": 1, "dies": 1, "nodes": 1, "cores": 4, "threads": 2, "memory": "4G"}
#: the static policy reserving CPU 0: the first 2-CPU exclusive grant is core 1 = {1,5}
STATIC = {"policy": "static", "policyConfig": {"reservedSystemCPUs": "0"}}


def discovered(spec: Mapping[str, Any]) -> Topology:
    """The machine of `spec` written as a sysfs tree and read back through discovery, as
    the daemon reads a real node."""
    root = Path(tempfile.mkdtemp(prefix="nri-sysfs-"))
    try:
        write_sysfs(spec, root)
        return discover(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    """Run an async `scenario` on a fresh event loop, 60 s at most."""
    asyncio.run(asyncio.wait_for(scenario(), 60))


def resmgr_plugin(
    config: Config | Mapping[str, Any], topology: Topology, **plugin_kw: Any
) -> ResmgrPlugin:
    """The daemon's plugin named ``resmgr`` at index 90 (`plugin_kw`: socket path, roots,
    state dir, ``on_close``, ...)."""
    return ResmgrPlugin(
        config=config if isinstance(config, Config) else config_from_mapping(dict(config)),
        topology=topology,
        name="resmgr",
        idx="90",
        **plugin_kw,
    )


async def serve_daemon(runtime: FakeRuntime, sock: str, plugin: ResmgrPlugin) -> asyncio.Task[int]:
    """`runtime` listening on `sock` and `plugin` serving (not waited for)."""
    await runtime.listen(sock)
    return asyncio.create_task(plugin.serve())


async def start_daemon(
    sock: str,
    config: Config | Mapping[str, Any],
    topology: Topology,
    *,
    runtime: FakeRuntime | None = None,
    rt_kw: Mapping[str, Any] | None = None,
    **plugin_kw: Any,
) -> tuple[FakeRuntime, ResmgrPlugin, asyncio.Task[int]]:
    """The runtime (`runtime`, or one built with `rt_kw`), the plugin (`plugin_kw`: roots,
    state dir; it exits when the connection closes unless ``on_close`` says otherwise)
    and its serving task, after the plugin has registered and synchronized."""
    rt = runtime or FakeRuntime(**dict(rt_kw or {}))
    plugin_kw.setdefault("on_close", OnClose.EXIT)
    plugin = resmgr_plugin(config, topology, socket_path=sock, **plugin_kw)
    task = await serve_daemon(rt, sock, plugin)
    await rt.wait_ready()
    return rt, plugin, task


async def stop_daemon(runtime: FakeRuntime, plugin: ResmgrPlugin, task: asyncio.Task[int]) -> None:
    """Stop the plugin, wait for its task (10 s at most) and close the runtime."""
    await plugin.stop()
    await asyncio.wait_for(task, 10)
    await runtime.close()


@asynccontextmanager
async def daemon_serving(
    topology: Topology,
    config: Config | Mapping[str, Any] = STATIC,
    *,
    runtime: FakeRuntime | None = None,
    rt_kw: Mapping[str, Any] | None = None,
    **plugin_kw: Any,
) -> AsyncIterator[tuple[FakeRuntime, ResmgrPlugin]]:
    """A runtime listening on a socket in a short temporary directory and the daemon's
    plugin serving it, not waited for (a test of a refused registration waits itself);
    both are stopped and the directory removed on the way out."""
    directory = tempfile.mkdtemp(prefix="nri-", dir="/tmp")
    sock = f"{directory}/nri.sock"
    rt = runtime or FakeRuntime(**dict(rt_kw or {}))
    plugin_kw.setdefault("on_close", OnClose.EXIT)
    plugin = resmgr_plugin(config, topology, socket_path=sock, **plugin_kw)
    task = await serve_daemon(rt, sock, plugin)
    try:
        yield rt, plugin
    finally:
        await stop_daemon(rt, plugin, task)
        shutil.rmtree(directory, ignore_errors=True)


@asynccontextmanager
async def daemon_session(
    topology: Topology,
    config: Config | Mapping[str, Any] = STATIC,
    *,
    runtime: FakeRuntime | None = None,
    rt_kw: Mapping[str, Any] | None = None,
    **plugin_kw: Any,
) -> AsyncIterator[tuple[FakeRuntime, ResmgrPlugin, Handshake]]:
    """`daemon_serving`, once the plugin has registered and synchronized; the handshake
    is the runtime's record of registration, Configure and Synchronize."""
    async with daemon_serving(topology, config, runtime=runtime, rt_kw=rt_kw, **plugin_kw) as (
        rt,
        plugin,
    ):
        yield rt, plugin, await rt.wait_ready()


@asynccontextmanager
async def kube_side_serving(
    plugin: ResmgrPlugin, side: KubeSide, directory: Path | str
) -> AsyncIterator[FakeRuntime]:
    """A runtime listening on ``nri.sock`` in `directory` (the socket `plugin` was built
    with), the plugin serving it and `side` running, after the plugin has registered and
    synchronized; on the way out the side, the plugin and the runtime are stopped and
    `directory` is removed."""
    rt = FakeRuntime()
    await rt.listen(f"{directory}/nri.sock")
    serving = asyncio.create_task(plugin.serve())
    kube = asyncio.create_task(side.run())
    try:
        await rt.wait_ready()
        yield rt
    finally:
        side.stop()
        await plugin.stop()
        await asyncio.wait_for(serving, 10)
        kube.cancel()
        await asyncio.gather(kube, return_exceptions=True)
        await rt.close()
        shutil.rmtree(directory, ignore_errors=True)


async def http_get(port: int, path: str) -> tuple[int, bytes]:
    """GET `path` from the daemon's HTTP endpoint on localhost `port`: status and body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body
