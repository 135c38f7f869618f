"""nri_api.loop: uvloop when installed (or demanded), asyncio's loop otherwise."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import sys
import types

import pytest

from nri_api import loop
from tests.support.requirements import require
from tests.support.trunk import PLUGIN, RUNTIME, echo_handler, trunk_pair


class MarkedLoop(asyncio.SelectorEventLoop):
    """Stands in for uvloop's loop: a loop whose type tells where it came from."""


def fake_uvloop() -> types.ModuleType:
    module = types.ModuleType("uvloop")
    module.new_event_loop = MarkedLoop  # type: ignore[attr-defined]
    return module


async def loop_type() -> type[asyncio.AbstractEventLoop]:
    return type(asyncio.get_running_loop())


def test_auto_takes_uvloop_when_it_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", fake_uvloop())
    monkeypatch.delenv(loop.ENV, raising=False)
    assert loop.run(loop_type()) is MarkedLoop
    monkeypatch.setenv(loop.ENV, "uvloop")
    assert loop.run(loop_type()) is MarkedLoop


def test_asyncio_is_kept_when_asked_for_or_without_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", fake_uvloop())
    monkeypatch.setenv(loop.ENV, "asyncio")
    assert loop.loop_factory() is None
    assert loop.run(loop_type()) is not MarkedLoop
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop -> ImportError
    monkeypatch.setenv(loop.ENV, "auto")
    assert loop.loop_factory() is None


def test_demanding_a_missing_uvloop_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)
    coro = loop_type()
    with pytest.raises(ValueError, match=r"NRI_API_EVENT_LOOP=uvloop: expected the uvloop mod"):
        loop.run(coro, choice="uvloop")
    assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED  # no "never awaited"


def test_an_unknown_choice_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(loop.ENV, "trio")
    with pytest.raises(ValueError, match=r"expected one of auto, asyncio, uvloop, found 'trio'"):
        loop.loop_factory()


def test_trunks_talk_on_the_real_uvloop() -> None:
    """The transport (data_received feed, flow control, close) on uvloop's transports."""
    require(importlib.util.find_spec("uvloop"), "uvloop (the `fast` extra) is not installed")

    async def main() -> str:
        plugin, runtime = await trunk_pair()
        plugin.serve(echo_handler(b"plugin:"))
        runtime.serve(echo_handler(b"runtime:"))
        big = b"x" * (3 << 20)  # more than a socket buffer: the writer must wait to drain
        assert await runtime.call(PLUGIN, "Echo", big, timeout=10) == b"plugin:" + big
        assert await plugin.call(RUNTIME, "Echo", b"b", timeout=10) == b"runtime:b"
        await runtime.close()
        await asyncio.wait_for(plugin.wait_closed(), 10)
        assert "EOF" in str(plugin.close_reason)
        return type(asyncio.get_running_loop()).__module__

    assert loop.run(main(), choice="uvloop").startswith("uvloop")
