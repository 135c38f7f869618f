"""The asyncio `Trunk` over real Unix sockets: calls both ways between two trunks, their
errors, large and oversized payloads, and requests held until serve().
"""

from __future__ import annotations

import asyncio

import pytest

from nri_api.errors import RPCError, StatusCode
from nri_api.ttrpc import (
    MAX_MESSAGE_LENGTH,
)
from tests.support.trunk import PLUGIN, RUNTIME, Handler, close_all, echo_handler, run, trunk_pair


def test_calls_both_ways_and_unimplemented() -> None:
    async def main() -> None:
        plugin, runtime = await trunk_pair()
        plugin.serve(echo_handler(b"plugin:"))
        runtime.serve(echo_handler(b"runtime:"))
        assert await runtime.call(PLUGIN, "Echo", b"a", timeout=5) == b"plugin:a"
        assert await plugin.call(RUNTIME, "Echo", b"b", timeout=None) == b"runtime:b"
        assert await runtime.call(PLUGIN, "Echo", b"", timeout=5) == b"plugin:"
        with pytest.raises(RPCError) as info:
            await plugin.call(RUNTIME, "Nope", b"", timeout=5)
        assert info.value.code is StatusCode.UNIMPLEMENTED
        assert str(info.value) == "rpc error: code = Unimplemented desc = method Nope"
        await close_all(plugin, runtime)

    run(main)


def test_concurrent_calls_both_ways() -> None:
    """Every handler waits until all N requests of its side are in flight: this completes
    only if requests are served concurrently and replies are matched by stream id."""
    n = 16

    def gathering_handler(tag: bytes) -> Handler:
        arrived: list[bytes] = []
        everyone = asyncio.Event()

        async def handler(
            service: str, method: str, payload: bytes, deadline: float | None
        ) -> bytes:
            arrived.append(payload)
            if len(arrived) == n:
                everyone.set()
            await everyone.wait()
            return tag + payload

        return handler

    async def main() -> None:
        plugin, runtime = await trunk_pair()
        plugin.serve(gathering_handler(b"P"))
        runtime.serve(gathering_handler(b"R"))
        to_plugin = [runtime.call(PLUGIN, "M", b"%d" % i, timeout=10) for i in range(n)]
        to_runtime = [plugin.call(RUNTIME, "M", b"%d" % i, timeout=10) for i in range(n)]
        results = await asyncio.gather(*to_plugin, *to_runtime)
        assert results == [b"P%d" % i for i in range(n)] + [b"R%d" % i for i in range(n)]
        await close_all(plugin, runtime)

    run(main)


def test_handler_errors_reach_the_caller() -> None:
    async def handler(service: str, method: str, payload: bytes, deadline: float | None) -> bytes:
        if method == "NotFound":
            raise RPCError(StatusCode.NOT_FOUND, "container c1 not found")
        if method == "OwnTimeout":
            raise TimeoutError("backend slow")
        if method == "OwnCancel":
            raise asyncio.CancelledError
        raise ValueError("plugin exploded")

    async def main() -> None:
        plugin, runtime = await trunk_pair()
        plugin.serve(handler)
        with pytest.raises(RPCError) as info:
            await runtime.call(PLUGIN, "NotFound", b"", timeout=5)
        assert (info.value.code, info.value.message) == (
            StatusCode.NOT_FOUND,
            "container c1 not found",
        )
        with pytest.raises(RPCError) as info:
            await runtime.call(PLUGIN, "Other", b"", timeout=5)
        assert (info.value.code, info.value.message) == (StatusCode.UNKNOWN, "plugin exploded")
        with pytest.raises(RPCError) as info:
            await runtime.call(PLUGIN, "OwnTimeout", b"", timeout=5)
        assert (info.value.code, info.value.message) == (StatusCode.UNKNOWN, "backend slow")
        with pytest.raises(RPCError) as info:
            await runtime.call(PLUGIN, "OwnCancel", b"", timeout=5)
        assert info.value.code is StatusCode.CANCELLED
        assert not plugin.closed and not runtime.closed
        await close_all(plugin, runtime)

    run(main)


def test_megabyte_payload_round_trips() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB

    async def main() -> None:
        plugin, runtime = await trunk_pair()
        plugin.serve(echo_handler(b""))
        runtime.serve(echo_handler(b""))
        assert await runtime.call(PLUGIN, "Echo", payload, timeout=10) == payload
        assert await plugin.call(RUNTIME, "Echo", payload, timeout=10) == payload
        await close_all(plugin, runtime)

    run(main)


def test_oversized_messages_fail_the_call_not_the_trunk() -> None:
    async def big_reply(service: str, method: str, payload: bytes, deadline: float | None) -> bytes:
        return b"\x00" * MAX_MESSAGE_LENGTH

    async def main() -> None:
        plugin, runtime = await trunk_pair()
        plugin.serve(big_reply)
        with pytest.raises(RPCError) as info:
            await runtime.call(PLUGIN, "Big", b"", timeout=10)
        assert info.value.code is StatusCode.RESOURCE_EXHAUSTED
        with pytest.raises(RPCError) as info:
            await plugin.call(RUNTIME, "Big", b"\x00" * MAX_MESSAGE_LENGTH, timeout=10)
        assert info.value.code is StatusCode.RESOURCE_EXHAUSTED
        assert "exceed maximum message size of 4194304" in info.value.message
        assert not plugin.closed and not runtime.closed
        await close_all(plugin, runtime)

    run(main)


def test_requests_wait_for_serve() -> None:
    async def main() -> None:
        plugin, runtime = await trunk_pair()
        call = asyncio.ensure_future(runtime.call(PLUGIN, "Echo", b"early", timeout=10))
        await asyncio.sleep(0.01)
        assert not call.done()
        plugin.serve(echo_handler(b"late:"))
        assert await call == b"late:early"
        await close_all(plugin, runtime)

    run(main)
