"""One daemon session for the integration tests: a `FakeRuntime` listening on a socket and
a `ResmgrPlugin` registered with it, ready once Synchronize is done."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from nri_api.stub import OnClose
from nri_api.testing import FakeRuntime
from nri_resmgr.config import config_from_mapping
from nri_resmgr.runtime.daemon import ResmgrPlugin
from nri_resmgr.topology.model import Topology


async def start_daemon(
    sock: str,
    config: Mapping[str, Any],
    topology: Topology,
    *,
    rt_kw: Mapping[str, Any] | None = None,
    **plugin_kw: Any,
) -> tuple[FakeRuntime, ResmgrPlugin, asyncio.Task[int]]:
    """The runtime (built with `rt_kw`), the plugin (`plugin_kw`: roots, state dir) and
    its serving task, after the plugin has registered and synchronized."""
    rt = FakeRuntime(**dict(rt_kw or {}))
    await rt.listen(sock)
    plugin = ResmgrPlugin(
        config=config_from_mapping(dict(config)),
        topology=topology,
        name="resmgr",
        idx="90",
        socket_path=sock,
        on_close=OnClose.EXIT,
        **plugin_kw,
    )
    task = asyncio.create_task(plugin.serve())
    await rt.wait_ready()
    return rt, plugin, task
