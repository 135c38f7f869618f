"""Work after a reply does not hold back a reply larger than the socket's buffer.

A Synchronize reply of 10,000 containers (1.5 MB) is not taken whole by the kernel in
the turn it is written; `runtime.after_reply` waits until the trunk has written it
(`Trunk.writing` / `Trunk.written`) before the records and decision lines run.  The
runtime reads in another thread here, slowly, over a real socket pair whose sending
side has a small buffer, so the reply leaves in many small steps; the work after the
reply blocks the plugin's event loop for a while (as half a second of records would).
The reply must have arrived whole before that work ends: were it run in the turn after
the write, or once all but the transport's low-water mark had left (asyncio's 16 KiB),
the rest could only follow it.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

from nri_api.errors import NEED_DATA
from nri_api.mux import Multiplexer, MuxData, frame_message
from nri_api.transport import Trunk
from nri_api.ttrpc import ResponseReceived, Role, TtrpcConnection
from nri_resmgr.runtime.after_reply import AfterReply, Output
from tests.support.trunk import PLUGIN, run

REPLY = b"r" * 1_000_000
#: how long the work after the reply keeps the plugin's loop (the records of a big node)
BLOCK = 0.6


async def _large(service: str, method: str, payload: bytes, deadline: float | None) -> bytes:
    return REPLY


class _Runtime(threading.Thread):
    """Sends one Echo request and reads its reply with blocking calls, slowly (`READ`
    bytes, then a pause), so that the plugin's writes go in steps of a few KiB, each
    a while after the one before; `arrived` is when the reply was complete
    (time.monotonic)."""

    READ = 2048
    PAUSE = 0.001

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(daemon=True)
        self.sock = sock
        self.arrived: float | None = None
        self.reply: ResponseReceived | None = None

    def run(self) -> None:
        conn = TtrpcConnection(Role.CLIENT)
        _, message = conn.send_request(service=PLUGIN, method="Echo", payload=b"", timeout_nano=0)
        self.sock.sendall(frame_message(1, message))
        mux = Multiplexer(accept=(1,))
        while self.reply is None:
            data = self.sock.recv(self.READ)
            time.sleep(self.PAUSE)
            assert data, "the plugin closed before its reply"
            mux.receive_data(data)
            while (event := mux.next_event()) is not NEED_DATA:
                assert isinstance(event, MuxData)
                conn.receive_data(event.data)
                while (ev := conn.next_event()) is not NEED_DATA:
                    assert isinstance(ev, ResponseReceived)
                    self.reply, self.arrived = ev, time.monotonic()


def _reply_then_block(output: Output | None) -> tuple[float, float, float]:
    """(when the reply was complete at the runtime, when the work after it began, ended)."""
    after: list[float] = []

    def block() -> None:
        after.append(time.monotonic())
        time.sleep(BLOCK)
        after.append(time.monotonic())

    async def main() -> tuple[float, float, float]:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)  # many small steps
        plugin = await Trunk.from_socket(ours)
        defer = AfterReply(plugin if output is None else output)

        async def handler(*request: Any) -> bytes:
            defer(block)
            return await _large(*request)

        plugin.serve(handler)
        runtime = _Runtime(theirs)
        runtime.start()
        while runtime.is_alive() or len(after) < 2:
            await asyncio.sleep(0.01)
        await plugin.close()
        theirs.close()
        assert runtime.reply is not None and runtime.reply.payload == REPLY
        assert runtime.arrived is not None
        return runtime.arrived, after[0], after[1]

    return run(main)


class _NeverWriting:
    """An output that says nothing is being written: the turn after the write is taken
    as "after the reply" (`AfterReply`'s behaviour without an output)."""

    writing = False

    async def written(self) -> None:
        return None


def test_the_work_after_a_large_reply_waits_until_the_reply_has_left() -> None:
    arrived, began, ended = _reply_then_block(None)
    assert arrived < ended, (
        f"the reply was complete at the runtime {arrived - began:.3f} s after the work "
        f"after it began, {arrived - ended:.3f} s after it ended: it waited for that work"
    )


def test_without_waiting_the_work_holds_the_reply_back() -> None:
    # the same run with the turn after the write taken as "after the reply": the reply's
    # rest waits in the plugin's buffer for the whole of that work (the test above is not
    # passing by luck of the timing)
    arrived, _, ended = _reply_then_block(_NeverWriting())
    assert arrived >= ended


def test_writing_lasts_until_a_large_reply_has_left() -> None:
    async def main() -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
        plugin = await Trunk.from_socket(ours)
        plugin.serve(_large)
        assert not plugin.writing
        await plugin.written()  # nothing written: at once
        runtime = _Runtime(theirs)
        runtime.start()
        seen = False
        while runtime.reply is None and not seen:
            seen = plugin.writing
            await asyncio.sleep(0)
        assert seen, "1 MB through an 8 KiB buffer was never seen being written"
        await plugin.written()
        assert not plugin.writing
        while runtime.is_alive():
            await asyncio.sleep(0.01)
        assert runtime.reply is not None and runtime.reply.payload == REPLY
        await plugin.close()
        theirs.close()

    run(main)
