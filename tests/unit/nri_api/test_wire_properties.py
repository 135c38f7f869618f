"""Property tests of the wire decoders: split-invariance and "only ProtocolError" on garbage."""

from __future__ import annotations

import contextlib
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_api._pb import ttrpc_pb2
from nri_api.errors import NEED_DATA, ProtocolError, StatusCode
from nri_api.mux import Multiplexer, MuxClosed, MuxData, MuxEvent, frame_message
from nri_api.ttrpc import (
    HEADER,
    MessageType,
    RequestReceived,
    ResponseReceived,
    Role,
    StreamRejected,
    TtrpcClosed,
    TtrpcConnection,
    TtrpcEvent,
    encode_message,
)

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- helpers -----------------------------------------------------------------------------


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts}) if data else []
    pieces, last = [], 0
    for point in points:
        pieces.append(data[last:point])
        last = point
    pieces.append(data[last:])
    return [p for p in pieces if p]


def mux_events(mux: Multiplexer, chunks: list[bytes], *, eof: bool) -> list[MuxEvent]:
    events: list[MuxEvent] = []
    for chunk in [*chunks, b""] if eof else chunks:
        mux.receive_data(chunk)
        # Bounded: each event consumes at least a header, so a chunk yields few events.
        for _ in range(len(chunk) + 2):
            event = mux.next_event()
            if event is NEED_DATA:
                break
            events.append(event)
            if isinstance(event, MuxClosed):
                return events
        else:
            raise AssertionError("mux kept producing events without consuming input")
    return events


def ttrpc_events(conn: TtrpcConnection, chunks: list[bytes], *, eof: bool) -> list[TtrpcEvent]:
    events: list[TtrpcEvent] = []
    for chunk in [*chunks, b""] if eof else chunks:
        conn.receive_data(chunk)
        for _ in range(len(chunk) + 2):
            event = conn.next_event()
            if event is NEED_DATA:
                break
            events.append(event)
            if isinstance(event, TtrpcClosed):
                return events
        else:
            raise AssertionError("ttrpc kept producing events without consuming input")
    return events


# -- strategies --------------------------------------------------------------------------

frames = st.lists(st.tuples(st.integers(1, 4), st.binary(max_size=300)), min_size=0, max_size=12)
cuts = st.lists(st.integers(0, 10_000), max_size=30)

requests = st.lists(
    st.tuples(
        st.sampled_from(["Configure", "Synchronize", "CreateContainer", ""]),
        st.binary(max_size=200),
        st.integers(0, 2**63 - 1),
        st.lists(st.tuples(st.text(max_size=5), st.text(max_size=5)), max_size=2),
    ),
    max_size=8,
)


def encode_request(
    stream_id: int, method: str, payload: bytes, timeout: int, md: list[tuple[str, str]]
) -> bytes:
    body = ttrpc_pb2.Request(
        service="svc",
        method=method,
        payload=payload,
        timeout_nano=timeout,
        metadata=[ttrpc_pb2.KeyValue(key=k, value=v) for k, v in md],
    ).SerializeToString()
    return encode_message(stream_id=stream_id, type=MessageType.REQUEST, body=body)


# -- split invariance --------------------------------------------------------------------


@PROPERTY
@given(frames=frames, cuts=cuts)
def test_mux_any_split_decodes_to_the_same_events(
    frames: list[tuple[int, bytes]], cuts: list[int]
) -> None:
    wire = b"".join(struct.pack(">II", c, len(p)) + p for c, p in frames)
    expected = [MuxData(c, p) for c, p in frames] + [MuxClosed()]
    assert mux_events(Multiplexer(), [wire], eof=True) == expected
    assert mux_events(Multiplexer(), split_at(wire, cuts), eof=True) == expected
    accepted = [MuxData(c, p) for c, p in frames if c in (1, 2)] + [MuxClosed()]
    assert mux_events(Multiplexer(accept=(1, 2)), split_at(wire, cuts), eof=True) == accepted


@PROPERTY
@given(reqs=requests, gaps=st.lists(st.integers(0, 3), min_size=8, max_size=8), cuts=cuts)
def test_ttrpc_any_split_decodes_to_the_same_events(
    reqs: list[tuple[str, bytes, int, list[tuple[str, str]]]], gaps: list[int], cuts: list[int]
) -> None:
    stream_id, wire, expected = -1, b"", []
    for (method, payload, timeout, md), gap in zip(reqs, gaps, strict=False):
        stream_id += 2 * (gap + 1)
        wire += encode_request(stream_id, method, payload, timeout, md)
        expected.append(RequestReceived(stream_id, "svc", method, payload, timeout, tuple(md)))
    whole = ttrpc_events(TtrpcConnection(Role.SERVER), [wire], eof=True)
    split = ttrpc_events(TtrpcConnection(Role.SERVER), split_at(wire, cuts), eof=True)
    assert whole == split == [*expected, TtrpcClosed()]


@PROPERTY
@given(reqs=requests, cuts=cuts, mux_cuts=cuts)
def test_stack_round_trip_through_mux_and_ttrpc(
    reqs: list[tuple[str, bytes, int, list[tuple[str, str]]]],
    cuts: list[int],
    mux_cuts: list[int],
) -> None:
    """Client messages framed by frame_message, split anywhere, reach the server intact."""
    client, server = TtrpcConnection(Role.CLIENT), TtrpcConnection(Role.SERVER)
    wire, expected = b"", []
    for method, payload, timeout, md in reqs:
        stream_id, message = client.send_request(
            service="svc", method=method, payload=payload, timeout_nano=timeout, metadata=md
        )
        wire += frame_message(1, message)
        expected.append(RequestReceived(stream_id, "svc", method, payload, timeout, tuple(md)))
    events: list[TtrpcEvent] = []
    for mux_event in mux_events(Multiplexer(accept=(1,)), split_at(wire, mux_cuts), eof=False):
        assert isinstance(mux_event, MuxData)
        events += ttrpc_events(server, split_at(mux_event.data, cuts), eof=False)
    assert events == expected
    # And the replies come back the same way.
    replies = b"".join(
        frame_message(1, server.send_response(e.stream_id, payload=e.payload)) for e in expected
    )
    back: list[TtrpcEvent] = []
    for mux_event in mux_events(Multiplexer(), split_at(replies, cuts), eof=False):
        assert isinstance(mux_event, MuxData)
        back += ttrpc_events(client, [mux_event.data], eof=False)
    assert back == [ResponseReceived(e.stream_id, StatusCode.OK, "", e.payload) for e in expected]


# -- garbage in: only ProtocolError, never a hang ----------------------------------------


@PROPERTY
@given(data=st.binary(max_size=2000), cuts=cuts, eof=st.booleans(), limit=st.integers(0, 600))
def test_mux_garbage_raises_only_protocol_errors(
    data: bytes, cuts: list[int], eof: bool, limit: int
) -> None:
    with contextlib.suppress(ProtocolError):
        mux_events(Multiplexer(max_frame_payload=limit), split_at(data, cuts), eof=eof)


@PROPERTY
@given(
    data=st.binary(max_size=2000),
    cuts=cuts,
    eof=st.booleans(),
    role=st.sampled_from([Role.SERVER, Role.CLIENT]),
    pending=st.integers(0, 4),
)
def test_ttrpc_garbage_raises_only_protocol_errors(
    data: bytes, cuts: list[int], eof: bool, role: Role, pending: int
) -> None:
    conn = TtrpcConnection(role)
    if role is Role.CLIENT:
        for _ in range(pending):
            conn.send_request(service="s", method="m", payload=b"")
    try:
        events = ttrpc_events(conn, split_at(data, cuts), eof=eof)
    except ProtocolError:
        return
    for event in events:
        if isinstance(event, StreamRejected):
            # A rejection is itself a well-formed error Response on the offending stream.
            length, stream_id, mtype, flags = HEADER.unpack_from(event.bytes_to_send)
            assert (stream_id, mtype, flags) == (event.stream_id, MessageType.RESPONSE, 0)
            response = ttrpc_pb2.Response()
            response.ParseFromString(event.bytes_to_send[HEADER.size :])
            assert response.status.code != 0
            assert length == len(event.bytes_to_send) - HEADER.size


header_fields = st.tuples(
    st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.integers(0, 255), st.integers(0, 255)
)


@PROPERTY
@given(
    headers=st.lists(st.tuples(header_fields, st.binary(max_size=64)), max_size=6),
    cuts=cuts,
    role=st.sampled_from([Role.SERVER, Role.CLIENT]),
)
def test_ttrpc_random_headers_with_truncated_or_oversized_bodies(
    headers: list[tuple[tuple[int, int, int, int], bytes]], cuts: list[int], role: Role
) -> None:
    """Declared lengths up to 4 GiB with short bodies: no exception but ProtocolError, no hang,
    and never more than the bytes fed are buffered."""
    conn = TtrpcConnection(role)
    if role is Role.CLIENT:
        for _ in range(3):
            conn.send_request(service="s", method="m", payload=b"")
    wire = b"".join(struct.pack(">IIBB", *h) + body for h, body in headers)
    with contextlib.suppress(ProtocolError):
        ttrpc_events(conn, split_at(wire, cuts), eof=True)
    assert len(conn._buffer) <= len(wire)
