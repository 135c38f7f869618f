"""Unit tests of the sans-IO NRI connection multiplexer (`nri_api.mux`)."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator

import pytest

from nri_api.errors import NEED_DATA, LocalProtocolError, RemoteProtocolError
from nri_api.mux import (
    BOUNDARY_FRAME_MAX,
    MAX_WRITE_PAYLOAD,
    Multiplexer,
    MuxClosed,
    MuxData,
    MuxEvent,
    frame,
    frame_message,
)
from nri_api.ttrpc import HEADER as TTRPC_HEADER


def hdr(conn_id: int, length: int) -> bytes:
    return struct.pack(">II", conn_id, length)


def drain(mux: Multiplexer, limit: int = 10_000) -> list[MuxEvent]:
    """Every event until NEED_DATA or MuxClosed (bounded, so a bug cannot hang the test)."""
    events: list[MuxEvent] = []
    for _ in range(limit):
        event = mux.next_event()
        if event is NEED_DATA:
            return events
        events.append(event)
        if isinstance(event, MuxClosed):
            return events
    raise AssertionError(f"mux produced more than {limit} events")


def feed(mux: Multiplexer, chunks: Iterable[bytes]) -> list[MuxEvent]:
    events: list[MuxEvent] = []
    for chunk in chunks:
        mux.receive_data(chunk)
        events += drain(mux)
    return events


def whole(data: bytes) -> Iterator[bytes]:
    yield data


def bytewise(data: bytes) -> Iterator[bytes]:
    for i in range(len(data)):
        yield data[i : i + 1]


SPLITTERS = [pytest.param(whole, id="whole"), pytest.param(bytewise, id="bytewise")]

# (id, wire bytes, accepted conns, expected events before EOF)
VECTORS: list[tuple[str, bytes, tuple[int, ...] | None, list[MuxEvent]]] = [
    ("empty-frame", hdr(1, 0), None, [MuxData(1, b"")]),
    ("one-frame", hdr(2, 3) + b"abc", None, [MuxData(2, b"abc")]),
    (
        "two-conns-interleaved",
        hdr(1, 2) + b"p1" + hdr(2, 2) + b"r1" + hdr(1, 1) + b"!",
        None,
        [MuxData(1, b"p1"), MuxData(2, b"r1"), MuxData(1, b"!")],
    ),
    (
        "unaccepted-conn-skipped",
        hdr(7, 5) + b"xxxxx" + hdr(1, 2) + b"ok",
        (1, 2),
        [MuxData(1, b"ok")],
    ),
    ("big-conn-id", hdr(0xFFFFFFFF, 1) + b"z", None, [MuxData(0xFFFFFFFF, b"z")]),
]

CASES = [pytest.param(*v[1:], id=v[0]) for v in VECTORS]


@pytest.mark.parametrize("split", SPLITTERS)
@pytest.mark.parametrize(("wire", "accept", "expected"), CASES)
def test_receive_vectors(
    split: Callable[[bytes], Iterator[bytes]],
    wire: bytes,
    accept: tuple[int, ...] | None,
    expected: list[MuxEvent],
) -> None:
    mux = Multiplexer(accept)
    events = feed(mux, split(wire))
    assert events == expected
    mux.receive_data(b"")
    assert drain(mux) == [MuxClosed()]


@pytest.mark.parametrize(("wire", "accept", "expected"), CASES)
def test_receive_vectors_with_trailing_partial_frame(
    wire: bytes, accept: tuple[int, ...] | None, expected: list[MuxEvent]
) -> None:
    mux = Multiplexer(accept)
    trailing = hdr(1, 12) + b"part"
    assert feed(mux, [wire + trailing]) == expected
    assert mux.next_event() is NEED_DATA
    mux.receive_data(b"ial-done")
    assert drain(mux) == [MuxData(1, b"partial-done")]


def test_unaccepted_frame_is_not_buffered() -> None:
    mux = Multiplexer(accept=(1,))
    mux.receive_data(hdr(5, 1_000_000) + b"x" * 1000)
    assert mux.next_event() is NEED_DATA
    assert mux.buffered == 0


def test_conn_id_zero_is_a_remote_error() -> None:
    mux = Multiplexer()
    mux.receive_data(hdr(0, 1) + b"x")
    with pytest.raises(RemoteProtocolError, match="ConnID"):
        mux.next_event()


def test_declared_length_over_limit_is_a_remote_error() -> None:
    mux = Multiplexer(max_frame_payload=100)
    mux.receive_data(hdr(1, 101))
    with pytest.raises(RemoteProtocolError, match="at most 100 bytes"):
        mux.next_event()


def test_declared_length_at_limit_is_accepted() -> None:
    mux = Multiplexer(max_frame_payload=100)
    mux.receive_data(hdr(1, 100) + b"y" * 100)
    assert mux.next_event() == MuxData(1, b"y" * 100)


@pytest.mark.parametrize("tail", [b"\x00\x00\x00", hdr(1, 4) + b"ab"], ids=["in-header", "in-body"])
def test_eof_inside_a_frame_is_a_remote_error(tail: bytes) -> None:
    mux = Multiplexer()
    mux.receive_data(hdr(1, 1) + b"a" + tail)
    assert mux.next_event() == MuxData(1, b"a")
    mux.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="frame boundary"):
        mux.next_event()


def test_clean_eof_reports_closed_repeatedly_and_refuses_more_data() -> None:
    mux = Multiplexer()
    mux.receive_data(b"")
    assert mux.next_event() == MuxClosed()
    assert mux.next_event() == MuxClosed()
    mux.receive_data(b"")
    with pytest.raises(LocalProtocolError):
        mux.receive_data(b"more")


def parse_frames(wire: bytes) -> list[tuple[int, bytes]]:
    frames: list[tuple[int, bytes]] = []
    while wire:
        conn_id, length = struct.unpack_from(">II", wire)
        frames.append((conn_id, wire[8 : 8 + length]))
        wire = wire[8 + length :]
    return frames


def ttrpc_message(body_len: int) -> bytes:
    return TTRPC_HEADER.pack(body_len, 1, 1, 0) + bytes(i % 251 for i in range(body_len))


@pytest.mark.parametrize("body_len", [0, 1, 4086, 4087, 10_000, 4 << 20])
def test_frame_message_obeys_the_go_boundary_rule(body_len: int) -> None:
    message = ttrpc_message(body_len)
    frames = parse_frames(frame_message(2, message))
    # The payloads reassemble to the message, all on the right conn.
    assert b"".join(p for _, p in frames) == message
    assert {c for c, _ in frames} == {2}
    # The frame that starts at the message boundary fits Go's 4096-byte read buffer ...
    assert len(frames[0][1]) <= BOUNDARY_FRAME_MAX
    # ... and exactly mimics Go: one frame when it fits, else 4096 + the rest.
    total = 10 + body_len
    if total <= BOUNDARY_FRAME_MAX:
        assert [len(p) for _, p in frames] == [total]
    else:
        assert [len(p) for _, p in frames] == [BOUNDARY_FRAME_MAX, total - BOUNDARY_FRAME_MAX]
    assert all(len(p) <= MAX_WRITE_PAYLOAD for _, p in frames)


def test_frame_message_of_consecutive_messages_keeps_boundaries_small() -> None:
    """Every frame that begins at a message boundary is <= 4096, across several messages."""
    sizes = [0, 5000, 1, 4086, 4087]
    wire = b"".join(frame_message(1, ttrpc_message(n)) for n in sizes)
    boundary = 0
    offset = 0
    boundaries = set()
    for n in sizes:
        boundaries.add(boundary)
        boundary += 10 + n
    for _, payload in parse_frames(wire):
        if offset in boundaries:
            assert len(payload) <= BOUNDARY_FRAME_MAX
        offset += len(payload)
    assert offset == boundary


def test_frame_message_splits_past_the_go_writer_limit() -> None:
    message = b"\x00" * (2 * MAX_WRITE_PAYLOAD + 5000)
    frames = parse_frames(frame_message(1, message))
    assert [len(p) for _, p in frames] == [4096, MAX_WRITE_PAYLOAD, MAX_WRITE_PAYLOAD, 904]


def test_frame_message_round_trips_through_the_receiver() -> None:
    message = ttrpc_message(10_000)
    mux = Multiplexer()
    events = feed(mux, [frame_message(1, message)])
    assert b"".join(e.data for e in events if isinstance(e, MuxData)) == message


@pytest.mark.parametrize("conn_id", [0, -1, 1 << 32])
def test_sending_on_a_bad_conn_id_is_a_local_error(conn_id: int) -> None:
    with pytest.raises(LocalProtocolError, match="conn id"):
        frame_message(conn_id, ttrpc_message(0))
    with pytest.raises(LocalProtocolError, match="conn id"):
        frame(conn_id, b"")


def test_frame_message_rejects_a_fragment() -> None:
    with pytest.raises(LocalProtocolError, match="whole ttrpc message"):
        frame_message(1, b"abc")
    assert frame_message(1, b"") == b""


def test_single_frame_limit() -> None:
    assert frame(1, b"ab") == hdr(1, 2) + b"ab"
    with pytest.raises(LocalProtocolError, match="at most"):
        frame(1, b"\x00" * (MAX_WRITE_PAYLOAD + 1))


def test_accept_rejects_reserved_conn() -> None:
    with pytest.raises(LocalProtocolError):
        Multiplexer(accept=(0, 1))
