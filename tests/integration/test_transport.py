"""The asyncio `Trunk` over real Unix sockets: two trunks (plugin side and runtime side)
talking to each other, and a raw sans-IO peer that checks what goes on the wire."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from nri_api.errors import NEED_DATA, ConnectionClosed, RemoteProtocolError, RPCError, StatusCode
from nri_api.mux import BOUNDARY_FRAME_MAX, Multiplexer, MuxData, frame_message
from nri_api.transport import Trunk
from nri_api.ttrpc import (
    HEADER,
    MAX_MESSAGE_LENGTH,
    ResponseReceived,
    Role,
    TtrpcConnection,
    TtrpcEvent,
)

T = TypeVar("T")
PLUGIN = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME = "nri.pkg.api.v1alpha1.Runtime"
GUARD = 30.0  # a hang guard, not a timing assertion


def run(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    async def guarded() -> T:
        async with asyncio.timeout(GUARD):
            result = await main()
        leftovers = asyncio.all_tasks() - {asyncio.current_task()}
        assert not leftovers, f"tasks leaked: {leftovers}"
        return result

    return asyncio.run(guarded())


async def trunk_pair() -> tuple[Trunk, Trunk]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    plugin = await Trunk.from_socket(a)
    runtime = await Trunk.from_socket(b, server_conn=2, client_conn=1)
    return plugin, runtime


async def close_all(*trunks: Trunk) -> None:
    for trunk in trunks:
        await trunk.close()


Handler = Callable[[str, str, bytes, float | None], Awaitable[bytes]]


def echo_handler(prefix: bytes) -> Handler:
    async def handler(service: str, method: str, payload: bytes, deadline: float | None) -> bytes:
        if method == "Echo":
            return prefix + payload
        raise RPCError(StatusCode.UNIMPLEMENTED, f"method {method}")

    return handler


# -- calls both ways ---------------------------------------------------------------------------


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


# -- deadlines -----------------------------------------------------------------------------


def test_server_enforces_the_deadline_from_timeout_nano() -> None:
    """A raw client sends timeout_nano=50ms and never gives up itself: the trunk must answer
    DEADLINE_EXCEEDED on its own, and hand the handler the deadline."""
    seen: list[float | None] = []

    async def stuck(service: str, method: str, payload: bytes, deadline: float | None) -> bytes:
        seen.append(deadline)
        await asyncio.Event().wait()
        return b""

    async def main() -> None:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        plugin = await Trunk.from_socket(a)
        plugin.serve(stuck)
        peer = await RawPeer.open(b)
        before = asyncio.get_running_loop().time()
        stream_id = await peer.request(1, method="Slow", timeout_nano=50_000_000)
        (reply,) = await peer.replies(1, count=1)
        assert isinstance(reply, ResponseReceived) and reply.stream_id == stream_id
        assert reply.status is StatusCode.DEADLINE_EXCEEDED
        assert seen[0] is not None and seen[0] > before
        await peer.close()
        await plugin.wait_closed()

    run(main)


@pytest.mark.parametrize(
    ("grace", "expected"), [(1.0, StatusCode.OK), (0.0, StatusCode.DEADLINE_EXCEEDED)]
)
def test_a_late_handler_is_cut_off_only_after_the_grace(grace: float, expected: StatusCode) -> None:
    """The peer's timer must win, as against a Go server: a handler 100 ms past a 50 ms
    deadline still answers (the runtime has dropped it by then), unless grace is 0."""

    async def late(service: str, method: str, payload: bytes, deadline: float | None) -> bytes:
        await asyncio.sleep(0.15)
        return b"late"

    async def main() -> None:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        plugin = await Trunk.from_socket(a, deadline_grace=grace)
        plugin.serve(late)
        peer = await RawPeer.open(b)
        await peer.request(1, method="Late", timeout_nano=50_000_000)
        (reply,) = await peer.replies(1, count=1)
        assert isinstance(reply, ResponseReceived)
        assert reply.status is expected
        await peer.close()
        await plugin.wait_closed()

    run(main)


def test_call_timeout_travels_as_timeout_nano() -> None:
    left: list[float | None] = []

    async def record(service: str, method: str, payload: bytes, deadline: float | None) -> bytes:
        left.append(None if deadline is None else deadline - asyncio.get_running_loop().time())
        return b""

    async def main() -> None:
        plugin, runtime = await trunk_pair()
        plugin.serve(record)
        await runtime.call(PLUGIN, "Timed", b"", timeout=5)
        await runtime.call(PLUGIN, "Untimed", b"", timeout=None)
        timed, untimed = left
        assert timed is not None and 0 < timed <= 5
        assert untimed is None
        await close_all(plugin, runtime)

    run(main)


def test_caller_timeout_raises_and_the_late_reply_is_dropped() -> None:
    async def main() -> None:
        gate = asyncio.Event()

        async def slow(service: str, method: str, payload: bytes, deadline: float | None) -> bytes:
            if method == "Slow":
                await gate.wait()
            return payload

        plugin, runtime = await trunk_pair()
        plugin.serve(slow)
        with pytest.raises(TimeoutError):
            await runtime.call(PLUGIN, "Slow", b"late", timeout=0.05)
        gate.set()
        # The late reply must not be taken for the next call's reply.
        assert await runtime.call(PLUGIN, "Fast", b"fresh", timeout=5) == b"fresh"
        await close_all(plugin, runtime)

    run(main)


# -- closing -------------------------------------------------------------------------------


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


# -- what goes on the wire -----------------------------------------------------------------


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


# -- bytes go from the socket's callback to the trunk, no reader task ------------------------


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


# -- a raw sans-IO peer ----------------------------------------------------------------------


class RawPeer:
    """The runtime side built from the sans-IO layers directly, recording frame sizes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.mux = Multiplexer()
        self.conns = {1: TtrpcConnection(Role.CLIENT), 2: TtrpcConnection(Role.SERVER)}
        self.offsets = {1: 0, 2: 0}
        self.boundaries = {1: {0}, 2: {0}}
        self.boundary_frames: list[int] = []
        self.raw = {1: bytearray(), 2: bytearray()}
        self.message_end = {1: 0, 2: 0}
        self.events: dict[int, list[TtrpcEvent]] = {1: [], 2: []}

    @classmethod
    async def open(cls, sock: socket.socket) -> RawPeer:
        reader, writer = await asyncio.open_unix_connection(sock=sock)
        return cls(reader, writer)

    async def request(
        self,
        conn_id: int,
        *,
        method: str,
        payload: bytes = b"",
        timeout_nano: int = 0,
        stream_id: int | None = None,
    ) -> int:
        sid, message = self.conns[conn_id].send_request(
            service=PLUGIN, method=method, payload=payload, timeout_nano=timeout_nano
        )
        if stream_id is not None:  # forge a bad id
            self.conns[conn_id].forget(sid)
            message = message[:4] + struct.pack(">I", stream_id) + message[8:]
            self.conns[conn_id]._pending.add(stream_id)
            sid = stream_id
        self.writer.write(frame_message(conn_id, message))
        await self.writer.drain()
        return sid

    async def _pump(self) -> None:
        data = await self.reader.read(65536)
        self.mux.receive_data(data)
        while (event := self.mux.next_event()) is not NEED_DATA:
            if not isinstance(event, MuxData):
                raise ConnectionClosed("raw peer saw EOF")
            conn_id = event.conn_id
            if self.offsets[conn_id] in self.boundaries[conn_id]:
                self.boundary_frames.append(len(event.data))
            self.offsets[conn_id] += len(event.data)
            stream = self.conns[conn_id]
            stream.receive_data(event.data)
            self._track_boundaries(conn_id, event.data)
            while (ev := stream.next_event()) is not NEED_DATA:
                self.events[conn_id].append(ev)

    def _track_boundaries(self, conn_id: int, data: bytes) -> None:
        # Walk ttrpc headers through this conn's byte stream to know where messages start.
        buf = self.raw[conn_id]
        buf += data
        while len(buf) >= HEADER.size:
            length = HEADER.unpack_from(buf)[0]
            if len(buf) < HEADER.size + length:
                break
            del buf[: HEADER.size + length]
            self.message_end[conn_id] += HEADER.size + length
            self.boundaries[conn_id].add(self.message_end[conn_id])

    async def replies(self, conn_id: int, *, count: int) -> list[TtrpcEvent]:
        while len(self.events[conn_id]) < count:
            await self._pump()
        return self.events[conn_id][:count]

    async def expect_request(self, conn_id: int) -> TtrpcEvent:
        return (await self.replies(conn_id, count=1))[0]

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()
