"""The asyncio `Trunk` against a raw sans-IO peer: what goes on the wire (Go's frame
boundary rule, answers to bad streams), a named socket, and bytes going from the socket's
callback to the trunk with no reader task.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from nri_api.errors import ConnectionClosed, StatusCode
from nri_api.mux import BOUNDARY_FRAME_MAX
from nri_api.transport import Trunk
from nri_api.ttrpc import (
    ResponseReceived,
)
from tests.support.trunk import PLUGIN, RUNTIME, RawPeer, close_all, echo_handler, run, trunk_pair


def test_trunk_frames_obey_the_go_boundary_rule_and_answers_bad_streams() -> None:
    async def main() -> None:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        plugin = await Trunk.from_socket(a)
        plugin.serve(echo_handler(b""))
        peer = await RawPeer.open(b)
        await peer.request(1, method="Echo", payload=b"x" * 10_000)
        await peer.request(1, method="Echo", payload=b"")
        await peer.request(1, method="Echo", payload=b"y" * 5000, stream_id=2)  # even: rejected
        replies = await peer.replies(1, count=3)
        by_id = {r.stream_id: r for r in replies if isinstance(r, ResponseReceived)}
        assert by_id[1].payload == b"x" * 10_000
        assert by_id[3].payload == b""
        assert by_id[2].status is StatusCode.INVALID_ARGUMENT
        # Every frame that began at a ttrpc message boundary fitted Go's 4096-byte buffer.
        assert peer.boundary_frames and all(n <= BOUNDARY_FRAME_MAX for n in peer.boundary_frames)
        await peer.close()
        await plugin.wait_closed()

    run(main)


def test_through_a_named_unix_socket(tmp_path: Path) -> None:
    path = tmp_path / "nri.sock"

    async def main() -> None:
        accepted: asyncio.Future[Trunk] = asyncio.get_running_loop().create_future()

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.set_result(Trunk(reader, writer, server_conn=2, client_conn=1))

        server = await asyncio.start_unix_server(on_connect, path=str(path))
        plugin = await Trunk.connect(str(path))
        runtime = await accepted
        plugin.serve(echo_handler(b"plugin:"))
        runtime.serve(echo_handler(b"runtime:"))
        assert await plugin.call(RUNTIME, "Echo", b"register", timeout=5) == b"runtime:register"
        assert await runtime.call(PLUGIN, "Echo", b"configure", timeout=5) == b"plugin:configure"
        await plugin.close()
        await runtime.wait_closed()
        server.close()
        await server.wait_closed()

    run(main)


def test_an_idle_trunk_runs_no_task() -> None:
    """Received bytes are handled in the transport's callback: between requests neither
    side has a task waiting to read (one would cost an event-loop iteration per read)."""

    async def main() -> None:
        plugin, runtime = await trunk_pair()
        plugin.serve(echo_handler(b"plugin:"))
        runtime.serve(echo_handler(b"runtime:"))
        assert await runtime.call(PLUGIN, "Echo", b"a", timeout=5) == b"plugin:a"
        assert await plugin.call(RUNTIME, "Echo", b"b", timeout=5) == b"runtime:b"
        await asyncio.sleep(0)  # the handler tasks finish
        assert asyncio.all_tasks() == {asyncio.current_task()}
        await close_all(plugin, runtime)

    run(main)


def test_bytes_received_before_the_trunk_took_the_stream_are_served() -> None:
    """A request that reached the stream reader before `Trunk(reader, writer)` was built
    (the peer spoke first) is answered, and an EOF that came with it closes the trunk."""

    async def main() -> None:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        runtime = await Trunk.from_socket(b, server_conn=2, client_conn=1)
        reader, writer = await asyncio.open_unix_connection(sock=a)
        call = asyncio.ensure_future(runtime.call(PLUGIN, "Echo", b"early", timeout=5))
        while not vars(reader)["_buffer"]:  # the request lands in the reader's buffer
            await asyncio.sleep(0.001)
        plugin = Trunk(reader, writer)
        plugin.serve(echo_handler(b"plugin:"))
        assert await call == b"plugin:early"
        await close_all(plugin, runtime)

        c, d = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        reader, writer = await asyncio.open_unix_connection(sock=c)
        d.close()
        while not reader.at_eof():
            await asyncio.sleep(0.001)
        late = Trunk(reader, writer)
        await asyncio.wait_for(late.wait_closed(), 5)
        assert isinstance(late.close_reason, ConnectionClosed)
        assert "EOF" in str(late.close_reason)

    run(main)


def test_replies_to_a_peer_that_does_not_read_wait_in_drain_not_in_memory() -> None:
    """A reply the socket did not take whole is drained before the next one is written
    (`Trunk._write_locked` skips `drain` only when nothing is left buffered): sixteen
    1 MiB replies to a peer that reads none of them leave at most about one buffered,
    and all sixteen arrive once it reads."""
    count, size = 16, 1 << 20

    async def main() -> None:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        plugin = await Trunk.from_socket(a)
        plugin.serve(echo_handler(b""))
        peer = await RawPeer.open(b)
        for i in range(count):
            await peer.request(1, method="Echo", payload=bytes([i]) * size)
        for _ in range(20):  # every handler has run and tried to write
            await asyncio.sleep(0.01)
        buffered = plugin._writer.transport.get_write_buffer_size()
        assert buffered < 3 * size, f"expected about one reply buffered, found {buffered} bytes"
        replies = await peer.replies(1, count=count)
        assert [r.payload for r in replies if isinstance(r, ResponseReceived)] == [
            bytes([i]) * size for i in range(count)
        ]
        await peer.close()
        await plugin.wait_closed()

    run(main)
