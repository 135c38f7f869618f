"""Attaching a Python plugin to the Go fake runtime either way (`MODES`): pre-registered
(installed before the runtime starts, synchronized at start-up on NRI v0.8+) or external
(started after the runtime, connecting to its socket); `attach_plugin` returns the
plugin's Synchronize result.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tests.conformance.harness import GoRuntime, Json, SyncResult

MODES = ("external", "preregistered")


def attach_plugin(
    rt: GoRuntime,
    plugin: Path,
    *,
    mode: str,
    idx: str,
    name: str,
    config: str = "",
    external_args: Sequence[str] = (),
    preregistered_args: Sequence[str] = (),
    pods: Sequence[Json] = (),
    containers: Sequence[Json] = (),
    request_timeout_ms: int | None = None,
    sync_timeout: float = 30.0,
) -> SyncResult | None:
    """Start `rt` with `plugin` attached and synchronized; return its Synchronize result.

    preregistered: install the launcher (passing `preregistered_args` to the plugin)
    and `config` as the conf.d file, then start
    (the result is the start-up sync of NRI v0.8+, None on older versions, which
    never synchronize pre-registered plugins). external: start, run the plugin with
    `external_args` (`config` is not passed: the runtime sends "" to external
    plugins), and wait until it has synchronized.
    """
    if mode == "preregistered":
        rt.install_preregistered(plugin, idx=idx, name=name, config=config, args=preregistered_args)
        return rt.start(pods=pods, containers=containers, request_timeout_ms=request_timeout_ms)
    if mode == "external":
        rt.start(pods=pods, containers=containers, request_timeout_ms=request_timeout_ms)
        rt.start_external(plugin, idx=idx, name=name, args=external_args)
        return rt.wait_synced(timeout=sync_timeout)
    raise ValueError(f"plugin attach mode {mode!r}: expected one of {', '.join(MODES)}")
