"""The asyncio `Trunk` over real Unix sockets: closing, locally, by the peer, on a protocol
error or a flood, and from inside a handler, with no task leaked.
"""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest

from nri_api.errors import ConnectionClosed, RemoteProtocolError
from nri_api.transport import Trunk
from nri_api.ttrpc import (
    HEADER,
    ResponseReceived,
)
from tests.support.trunk import PLUGIN, RUNTIME, RawPeer, close_all, echo_handler, run, trunk_pair


def test_local_close_fails_pending_calls_and_leaks_no_task() -> None:
    async def main() -> None:
        plugin, runtime = await trunk_pair()
        never = asyncio.Event()

        async def hang(service: str, method: str, payload: bytes, deadline: float | None) -> bytes:
            await never.wait()
            return b""

        plugin.serve(hang)
        runtime.serve(hang)
        pending = [
            asyncio.ensure_future(runtime.call(PLUGIN, "Hang", b"", timeout=None)) for _ in range(3)
        ]
        await asyncio.sleep(0.01)
        await runtime.close()
        for call in pending:
            with pytest.raises(ConnectionClosed):
                await call
        assert runtime.closed
        with pytest.raises(ConnectionClosed):
            await runtime.call(PLUGIN, "Hang", b"", timeout=1)
        await plugin.wait_closed()  # the peer sees EOF and closes too
        assert isinstance(plugin.close_reason, ConnectionClosed)

    run(main)


def test_peer_eof_fails_pending_calls() -> None:
    async def main() -> None:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        plugin = await Trunk.from_socket(a)
        peer = await RawPeer.open(b)
        call = asyncio.ensure_future(plugin.call(RUNTIME, "RegisterPlugin", b"", timeout=None))
        await peer.expect_request(2)
        await peer.close()
        with pytest.raises(ConnectionClosed, match="EOF"):
            await call
        await plugin.wait_closed()
        assert plugin.closed

    run(main)


def test_protocol_error_from_peer_closes_the_trunk() -> None:
    async def main() -> None:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        plugin = await Trunk.from_socket(a)
        peer = await RawPeer.open(b)
        call = asyncio.ensure_future(plugin.call(RUNTIME, "RegisterPlugin", b"", timeout=None))
        await peer.expect_request(2)
        peer.writer.write(struct.pack(">II", 0, 1) + b"x")  # ConnID 0 is reserved
        await peer.writer.drain()
        with pytest.raises(ConnectionClosed):
            await call
        await plugin.wait_closed()
        assert isinstance(plugin.close_reason, RemoteProtocolError)
        await peer.close()

    run(main)


def test_close_from_inside_a_handler() -> None:
    async def main() -> None:
        plugin, runtime = await trunk_pair()

        async def shutdown(
            service: str, method: str, payload: bytes, deadline: float | None
        ) -> bytes:
            await plugin.close()
            return b""

        plugin.serve(shutdown)
        with pytest.raises(ConnectionClosed):
            await runtime.call(PLUGIN, "Shutdown", b"", timeout=5)
        await plugin.wait_closed()
        await runtime.wait_closed()

    run(main)


def test_flood_of_unanswered_requests_is_a_protocol_error() -> None:
    async def main() -> None:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        plugin = await Trunk.from_socket(a, max_in_flight=4)
        never = asyncio.Event()

        async def hang(service: str, method: str, payload: bytes, deadline: float | None) -> bytes:
            await never.wait()
            return b""

        plugin.serve(hang)
        peer = await RawPeer.open(b)
        for _ in range(5):
            await peer.request(1, method="Hang")
        await plugin.wait_closed()
        assert isinstance(plugin.close_reason, RemoteProtocolError)
        assert "at most 4 unanswered requests" in str(plugin.close_reason)
        await peer.close()

    run(main)


def _rejected_headers(count: int) -> bytes:
    """`count` ttrpc Request headers with even (client-illegal) stream ids, in one frame."""
    body = b"".join(HEADER.pack(0, 2 * (i + 1), 1, 0) for i in range(count))
    return struct.pack(">II", 1, len(body)) + body


def test_flood_of_rejected_headers_closes_the_connection_at_once() -> None:
    # 100,000 rejected headers (1 MB) spawned 100,000 write tasks: 154 MiB and 47 s of CPU
    async def main() -> None:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        plugin = await Trunk.from_socket(a)
        plugin.serve(echo_handler(b""))
        b.setblocking(False)
        loop = asyncio.get_running_loop()
        start = loop.time()
        await loop.sock_sendall(b, _rejected_headers(100_000))
        async with asyncio.timeout(5):
            await plugin.wait_closed()
        assert loop.time() - start < 2.0
        assert isinstance(plugin.close_reason, RemoteProtocolError)
        assert str(plugin.close_reason).startswith(
            "conn 1: expected at most 256 rejected requests awaiting their error reply, "
            "found 257 (last: stream 514: StreamID must be odd"
        )
        b.close()

    run(main)


def test_rejected_headers_within_the_bound_are_all_answered() -> None:
    async def main() -> None:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        plugin = await Trunk.from_socket(a, max_rejected_pending=50)
        plugin.serve(echo_handler(b""))
        peer = await RawPeer.open(b)
        peer.conns[1]._pending.update(range(2, 102, 2))  # forged ids, as in request()
        peer.writer.write(_rejected_headers(50))
        replies = await peer.replies(1, count=50)
        assert all(isinstance(r, ResponseReceived) for r in replies)
        assert {r.stream_id for r in replies if isinstance(r, ResponseReceived)} == set(
            range(2, 102, 2)
        )
        assert not plugin.closed
        # and the connection still serves a good request
        await peer.request(1, method="Echo", payload=b"ok")
        (reply,) = (await peer.replies(1, count=51))[50:]
        assert isinstance(reply, ResponseReceived) and reply.payload == b"ok"
        await peer.close()
        await plugin.wait_closed()

    run(main)


def test_from_fd_serves_the_plugin_side() -> None:
    async def main() -> None:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        plugin = await Trunk.from_fd(a.detach())
        runtime = await Trunk.from_socket(b, server_conn=2, client_conn=1)
        plugin.serve(echo_handler(b"fd:"))
        assert await runtime.call(PLUGIN, "Echo", b"3", timeout=5) == b"fd:3"
        await close_all(plugin, runtime)

    run(main)
