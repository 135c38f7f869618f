"""The transport tests' kit: two `nri_api.transport.Trunk`s on a socket pair, an echo
handler, a raw sans-IO peer, and a guarded run.

`trunk_pair` makes the plugin side and the runtime side of one connection; `echo_handler`
answers ``Echo`` and nothing else; `RawPeer` speaks the multiplexer and ttrpc layers by
hand over a socket, so a test sees and sends exact frames.  `run` runs a test coroutine
within `GUARD` seconds (a hang guard, not a timing assertion) and fails it when a task
is left behind.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from nri_api.errors import NEED_DATA, ConnectionClosed, RPCError, StatusCode
from nri_api.mux import Multiplexer, MuxData, frame_message
from nri_api.transport import Trunk
from nri_api.ttrpc import (
    HEADER,
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
