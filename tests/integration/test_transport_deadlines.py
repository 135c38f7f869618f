"""The asyncio `Trunk` over real Unix sockets: deadlines (``timeout_nano`` both ways, the
server's cut-off after its grace, a late reply dropped).
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from nri_api.errors import StatusCode
from nri_api.transport import Trunk
from nri_api.ttrpc import (
    ResponseReceived,
)
from tests.support.trunk import PLUGIN, RawPeer, close_all, run, trunk_pair


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


def test_requests_in_flight_are_cut_off_each_at_its_own_deadline() -> None:
    """The trunk's cut-offs share one timer (`_Cutoffs`): a request due sooner than the one
    the timer waits for moves it earlier, and after going off it is armed again for the
    next one due.  Three stuck handlers, due in 60 s, 50 ms and 100 ms: the last two are
    answered DEADLINE_EXCEEDED, in that order, while the first still runs; it answers once
    released."""
    release = asyncio.Event()

    async def stuck(service: str, method: str, payload: bytes, deadline: float | None) -> bytes:
        if method == "Long":
            await release.wait()
            return b"done"
        await asyncio.Event().wait()
        return b""

    async def main() -> None:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        plugin = await Trunk.from_socket(a, deadline_grace=0.0)
        plugin.serve(stuck)
        peer = await RawPeer.open(b)
        long_id = await peer.request(1, method="Long", timeout_nano=60_000_000_000)
        soon = await peer.request(1, method="Soon", timeout_nano=50_000_000)
        later = await peer.request(1, method="Later", timeout_nano=100_000_000)
        cut = await peer.replies(1, count=2)
        assert [(r.stream_id, r.status) for r in cut if isinstance(r, ResponseReceived)] == [
            (soon, StatusCode.DEADLINE_EXCEEDED),
            (later, StatusCode.DEADLINE_EXCEEDED),
        ]
        release.set()
        last = (await peer.replies(1, count=3))[2]
        assert isinstance(last, ResponseReceived) and last.stream_id == long_id
        assert (last.status, last.payload) == (StatusCode.OK, b"done")
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
