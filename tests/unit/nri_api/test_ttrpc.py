"""Unit tests of the sans-IO ttrpc framing (`nri_api.ttrpc`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from nri_api._pb import ttrpc_pb2
from nri_api.errors import (
    NEED_DATA,
    LocalProtocolError,
    RemoteProtocolError,
    RPCError,
    StatusCode,
)
from nri_api.ttrpc import (
    HEADER,
    MAX_MESSAGE_LENGTH,
    MessageType,
    RequestReceived,
    ResponseReceived,
    Role,
    StreamFailed,
    StreamRejected,
    TtrpcClosed,
    TtrpcConnection,
    TtrpcEvent,
    encode_message,
    oversize_message,
)

SERVICE = "nri.pkg.api.v1alpha1.Plugin"


def drain(conn: TtrpcConnection, limit: int = 10_000) -> list[TtrpcEvent]:
    events: list[TtrpcEvent] = []
    for _ in range(limit):
        event = conn.next_event()
        if event is NEED_DATA:
            return events
        events.append(event)
        if isinstance(event, TtrpcClosed):
            return events
    raise AssertionError(f"ttrpc produced more than {limit} events")


def whole(data: bytes) -> Iterator[bytes]:
    yield data


def bytewise(data: bytes) -> Iterator[bytes]:
    for i in range(len(data)):
        yield data[i : i + 1]


Splitter = Callable[[bytes], Iterator[bytes]]
SPLITTERS = [pytest.param(whole, id="whole"), pytest.param(bytewise, id="bytewise")]


def feed(conn: TtrpcConnection, data: bytes, split: Splitter = whole) -> list[TtrpcEvent]:
    events: list[TtrpcEvent] = []
    for chunk in split(data):
        conn.receive_data(chunk)
        events += drain(conn)
    return events


def request_msg(
    stream_id: int, method: str = "Configure", payload: bytes = b"p", *, timeout_nano: int = 0
) -> bytes:
    body = ttrpc_pb2.Request(
        service=SERVICE, method=method, payload=payload, timeout_nano=timeout_nano
    )
    return encode_message(
        stream_id=stream_id, type=MessageType.REQUEST, body=body.SerializeToString()
    )


def response_msg(
    stream_id: int, *, code: int | None = None, message: str = "", payload: bytes = b""
) -> bytes:
    resp = ttrpc_pb2.Response(payload=payload)
    if code is not None:
        resp.status.code = code
        resp.status.message = message
    return encode_message(
        stream_id=stream_id, type=MessageType.RESPONSE, body=resp.SerializeToString()
    )


def status_of(wire: bytes) -> tuple[int, int, int, StatusCode, str]:
    """(length, stream id, type, code, message) of one encoded Response message."""
    length, stream_id, mtype, flags = HEADER.unpack_from(wire)
    assert flags == 0
    assert len(wire) == HEADER.size + length
    resp = ttrpc_pb2.Response()
    resp.ParseFromString(wire[HEADER.size :])
    return length, stream_id, mtype, StatusCode(resp.status.code), resp.status.message


# -- header vectors ------------------------------------------------------------------------


def test_header_layout_is_big_endian() -> None:
    wire = encode_message(stream_id=0x01020304, type=2, flags=0x05, body=b"xyz")
    assert wire == b"\x00\x00\x00\x03" + b"\x01\x02\x03\x04" + b"\x02" + b"\x05" + b"xyz"


def test_request_vector_matches_go_encoding() -> None:
    client = TtrpcConnection(Role.CLIENT)
    stream_id, wire = client.send_request(
        service="S", method="M", payload=b"\x01", timeout_nano=2, metadata=[("k", "v")]
    )
    body = (
        b"\x0a\x01S" + b"\x12\x01M" + b"\x1a\x01\x01" + b"\x20\x02" + b"\x2a\x06\x0a\x01k\x12\x01v"
    )
    assert stream_id == 1
    assert wire == HEADER.pack(len(body), 1, 1, 0) + body


# -- server --------------------------------------------------------------------------------


@pytest.mark.parametrize("split", SPLITTERS)
def test_server_decodes_requests(split: Splitter) -> None:
    server = TtrpcConnection(Role.SERVER)
    wire = (
        request_msg(1, "Configure", b"cfg", timeout_nano=2_000_000_000)
        + request_msg(3, "Synchronize", b"")
        + encode_message(
            stream_id=5,
            type=MessageType.REQUEST,
            body=ttrpc_pb2.Request(
                service=SERVICE,
                method="Shutdown",
                metadata=[ttrpc_pb2.KeyValue(key="traceparent", value="00-ab")],
            ).SerializeToString(),
        )
    )
    events = feed(server, wire, split)
    assert events == [
        RequestReceived(1, SERVICE, "Configure", b"cfg", 2_000_000_000, ()),
        RequestReceived(3, SERVICE, "Synchronize", b"", 0, ()),
        RequestReceived(5, SERVICE, "Shutdown", b"", 0, (("traceparent", "00-ab"),)),
    ]
    assert server.active == {1, 3, 5}


def test_server_events_with_trailing_partial_message() -> None:
    server = TtrpcConnection(Role.SERVER)
    second = request_msg(3)
    events = feed(server, request_msg(1) + second[:7])
    assert [e.stream_id for e in events if isinstance(e, RequestReceived)] == [1]
    assert server.next_event() is NEED_DATA
    assert [e.stream_id for e in feed(server, second[7:]) if isinstance(e, RequestReceived)] == [3]


def test_empty_ok_response_is_a_bare_header() -> None:
    server = TtrpcConnection(Role.SERVER)
    feed(server, request_msg(1))
    assert server.send_response(1) == b"\x00\x00\x00\x00\x00\x00\x00\x01\x02\x00"
    assert server.active == frozenset()


def test_ok_response_has_no_status_field() -> None:
    server = TtrpcConnection(Role.SERVER)
    feed(server, request_msg(1))
    wire = server.send_response(1, payload=b"\x08\x01")
    resp = ttrpc_pb2.Response()
    resp.ParseFromString(wire[HEADER.size :])
    assert not resp.HasField("status")
    assert resp.payload == b"\x08\x01"


def test_error_response_carries_status() -> None:
    server = TtrpcConnection(Role.SERVER)
    feed(server, request_msg(1))
    wire = server.send_response(1, status=StatusCode.UNIMPLEMENTED, message="method Foo")
    assert status_of(wire)[1:] == (1, 2, StatusCode.UNIMPLEMENTED, "method Foo")


@pytest.mark.parametrize(
    ("wire_ids", "rejected", "reason"),
    [
        pytest.param([2], [2], "StreamID must be odd for client initiated streams", id="even"),
        pytest.param([0], [0], "StreamID must be odd for client initiated streams", id="zero"),
        pytest.param([3, 3], [3], "StreamID cannot be re-used and must increment", id="reused"),
        pytest.param([5, 3], [3], "StreamID cannot be re-used and must increment", id="decreasing"),
    ],
)
def test_server_stream_id_rules(wire_ids: list[int], rejected: list[int], reason: str) -> None:
    server = TtrpcConnection(Role.SERVER)
    events = feed(server, b"".join(request_msg(i) for i in wire_ids))
    rejections = [e for e in events if isinstance(e, StreamRejected)]
    assert [e.stream_id for e in rejections] == rejected
    for event in rejections:
        assert event.reason == reason
        assert status_of(event.bytes_to_send)[1:] == (
            event.stream_id,
            MessageType.RESPONSE,
            StatusCode.INVALID_ARGUMENT,
            reason,
        )


def test_server_accepts_gaps_in_stream_ids() -> None:
    server = TtrpcConnection(Role.SERVER)
    events = feed(server, request_msg(1) + request_msg(7) + request_msg(9))
    assert [e.stream_id for e in events if isinstance(e, RequestReceived)] == [1, 7, 9]


def test_server_rejects_undecodable_request() -> None:
    server = TtrpcConnection(Role.SERVER)
    bad = encode_message(stream_id=1, type=MessageType.REQUEST, body=b"\xff\xff\xff")
    (event,) = feed(server, bad)
    assert isinstance(event, StreamRejected)
    assert event.reason.startswith("unmarshal request error:")
    assert status_of(event.bytes_to_send)[3] == StatusCode.INVALID_ARGUMENT


def test_server_ignores_unknown_types_and_answers_stray_data() -> None:
    server = TtrpcConnection(Role.SERVER)
    wire = (
        encode_message(stream_id=1, type=MessageType.RESPONSE)
        + encode_message(stream_id=1, type=0x7F, body=b"future")
        + encode_message(stream_id=9, type=MessageType.DATA, body=b"d")
        + request_msg(3)
    )
    events = feed(server, wire)
    assert isinstance(events[0], StreamRejected)
    assert events[0].reason == "StreamID is no longer active"
    assert isinstance(events[1], RequestReceived)
    assert len(events) == 2


@pytest.mark.parametrize("split", SPLITTERS)
def test_server_discards_oversized_body_and_answers_resource_exhausted(split: Splitter) -> None:
    server = TtrpcConnection(Role.SERVER)
    length = MAX_MESSAGE_LENGTH + 1
    oversized = HEADER.pack(length, 1, MessageType.REQUEST, 0) + b"\x00" * length
    if split is bytewise:  # 4 MiB one byte at a time is too slow; the header is what matters
        events = feed(server, oversized[:20], bytewise) + feed(server, oversized[20:])
    else:
        events = feed(server, oversized)
    events += feed(server, request_msg(1))
    rejected, accepted = events
    assert isinstance(rejected, StreamRejected)
    assert rejected.reason == f"message length {length} exceed maximum message size of 4194304"
    assert status_of(rejected.bytes_to_send)[3] == StatusCode.RESOURCE_EXHAUSTED
    # The oversized message did not consume stream id 1.
    assert isinstance(accepted, RequestReceived) and accepted.stream_id == 1


def test_oversized_body_is_not_buffered() -> None:
    server = TtrpcConnection(Role.SERVER)
    server.receive_data(HEADER.pack(0xFFFF_FFFF, 1, 1, 0))
    assert server.next_event() is NEED_DATA
    for _ in range(64):
        server.receive_data(b"\x00" * 65536)
        assert server.next_event() is NEED_DATA
    assert len(server._buffer) == 0


def test_body_at_the_limit_is_accepted() -> None:
    server = TtrpcConnection(Role.SERVER)
    overhead = (
        len(
            ttrpc_pb2.Request(
                service="S", method="M", payload=b"\x00" * 4_000_000
            ).SerializeToString()
        )
        - 4_000_000
    )
    body = ttrpc_pb2.Request(
        service="S", method="M", payload=b"\x00" * (MAX_MESSAGE_LENGTH - overhead)
    ).SerializeToString()
    assert len(body) == MAX_MESSAGE_LENGTH
    (event,) = feed(server, encode_message(stream_id=1, type=1, body=body))
    assert isinstance(event, RequestReceived)


def test_server_refuses_to_send_oversized_reply_and_keeps_stream_open() -> None:
    server = TtrpcConnection(Role.SERVER)
    feed(server, request_msg(1))
    with pytest.raises(RPCError) as info:
        server.send_response(1, payload=b"\x00" * MAX_MESSAGE_LENGTH)
    assert info.value.code is StatusCode.RESOURCE_EXHAUSTED
    assert "exceed maximum message size of 4194304" in info.value.message
    wire = server.send_response(1, status=info.value.code, message=info.value.message)
    assert status_of(wire)[3] == StatusCode.RESOURCE_EXHAUSTED


def test_server_cannot_answer_unknown_or_answered_stream() -> None:
    server = TtrpcConnection(Role.SERVER)
    with pytest.raises(LocalProtocolError, match="active request stream"):
        server.send_response(1)
    feed(server, request_msg(1))
    server.send_response(1)
    with pytest.raises(LocalProtocolError):
        server.send_response(1)


def test_roles_are_enforced() -> None:
    with pytest.raises(LocalProtocolError, match="client"):
        TtrpcConnection(Role.SERVER).send_request(service="S", method="M", payload=b"")
    with pytest.raises(LocalProtocolError, match="server"):
        TtrpcConnection(Role.CLIENT).send_response(1)


# -- client --------------------------------------------------------------------------------


def test_client_stream_ids_are_odd_and_increasing() -> None:
    client = TtrpcConnection(Role.CLIENT)
    ids = [client.send_request(service="S", method="M", payload=b"")[0] for _ in range(4)]
    assert ids == [1, 3, 5, 7]
    assert client.pending == {1, 3, 5, 7}


@pytest.mark.parametrize("split", SPLITTERS)
@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        pytest.param(
            b"\x00\x00\x00\x00\x00\x00\x00\x01\x02\x00",
            ResponseReceived(1, StatusCode.OK, "", b""),
            id="bare-header-ok",
        ),
        pytest.param(
            response_msg(1, payload=b"\x08\x01"),
            ResponseReceived(1, StatusCode.OK, "", b"\x08\x01"),
            id="ok-payload",
        ),
        pytest.param(
            response_msg(1, code=0, message="fine"),
            ResponseReceived(1, StatusCode.OK, "fine", b""),
            id="explicit-ok-status",
        ),
        pytest.param(
            response_msg(1, code=12, message="method Foo"),
            ResponseReceived(1, StatusCode.UNIMPLEMENTED, "method Foo", b""),
            id="unimplemented",
        ),
        pytest.param(
            response_msg(1, code=42, message="future"),
            ResponseReceived(1, StatusCode(42), "future", b""),
            id="unknown-code-kept",
        ),
    ],
)
def test_client_decodes_responses(split: Splitter, wire: bytes, expected: TtrpcEvent) -> None:
    client = TtrpcConnection(Role.CLIENT)
    client.send_request(service="S", method="M", payload=b"")
    assert feed(client, wire, split) == [expected]
    assert client.pending == frozenset()


def test_client_drops_responses_for_unknown_or_forgotten_streams() -> None:
    client = TtrpcConnection(Role.CLIENT)
    first, _ = client.send_request(service="S", method="M", payload=b"")
    second, _ = client.send_request(service="S", method="M", payload=b"")
    client.forget(first)
    events = feed(client, response_msg(first) + response_msg(99) + response_msg(second))
    assert events == [ResponseReceived(second, StatusCode.OK, "", b"")]


def test_client_fails_only_the_stream_on_bad_replies() -> None:
    client = TtrpcConnection(Role.CLIENT)
    for _ in range(3):
        client.send_request(service="S", method="M", payload=b"")
    wire = (
        encode_message(stream_id=1, type=MessageType.RESPONSE, body=b"\xff\xff")
        + encode_message(stream_id=3, type=MessageType.DATA, body=b"x")
        + response_msg(5)
    )
    undecodable, unexpected, ok = feed(client, wire)
    assert isinstance(undecodable, StreamFailed) and undecodable.code is None
    assert isinstance(undecodable.to_exception(), RemoteProtocolError)
    assert isinstance(unexpected, StreamFailed) and "data" in unexpected.message
    assert ok == ResponseReceived(5, StatusCode.OK, "", b"")


def test_client_oversized_reply_fails_that_stream() -> None:
    client = TtrpcConnection(Role.CLIENT)
    client.send_request(service="S", method="M", payload=b"")
    length = MAX_MESSAGE_LENGTH + 10
    events = feed(client, HEADER.pack(length, 1, 2, 0) + b"\x00" * length)
    assert events == [StreamFailed(1, oversize_message(length), StatusCode.RESOURCE_EXHAUSTED)]
    exc = events[0].to_exception() if isinstance(events[0], StreamFailed) else None
    assert isinstance(exc, RPCError) and exc.code is StatusCode.RESOURCE_EXHAUSTED


def test_client_refuses_oversized_request_without_using_a_stream_id() -> None:
    client = TtrpcConnection(Role.CLIENT)
    with pytest.raises(RPCError) as info:
        client.send_request(service="S", method="M", payload=b"\x00" * MAX_MESSAGE_LENGTH)
    assert info.value.code is StatusCode.RESOURCE_EXHAUSTED
    assert str(info.value).startswith("rpc error: code = ResourceExhausted desc = message length")
    assert client.send_request(service="S", method="M", payload=b"")[0] == 1


# -- end of stream -------------------------------------------------------------------------


def test_eof_at_boundary_closes() -> None:
    conn = TtrpcConnection(Role.SERVER)
    feed(conn, request_msg(1))
    conn.receive_data(b"")
    assert conn.next_event() == TtrpcClosed()
    assert conn.next_event() == TtrpcClosed()
    with pytest.raises(LocalProtocolError):
        conn.receive_data(b"x")


@pytest.mark.parametrize("cut", [3, 10, 12], ids=["in-header", "after-header", "in-body"])
def test_eof_inside_a_message_is_a_remote_error(cut: int) -> None:
    conn = TtrpcConnection(Role.SERVER)
    conn.receive_data(request_msg(1, payload=b"0123456789")[:cut])
    assert conn.next_event() is NEED_DATA
    conn.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="message boundary"):
        conn.next_event()


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (StatusCode.UNIMPLEMENTED, "rpc error: code = Unimplemented desc = method Foo"),
        (StatusCode.CANCELLED, "rpc error: code = Canceled desc = method Foo"),
        (StatusCode.DEADLINE_EXCEEDED, "rpc error: code = DeadlineExceeded desc = method Foo"),
        (StatusCode(99), "rpc error: code = Code(99) desc = method Foo"),
    ],
)
def test_rpc_error_text_matches_go(code: StatusCode, text: str) -> None:
    assert str(RPCError(code, "method Foo")) == text


def test_status_codes_are_the_seventeen_grpc_codes() -> None:
    assert [c.value for c in StatusCode] == list(range(17))
    assert int(StatusCode.UNAUTHENTICATED) == 16


def test_rpc_error_refuses_ok() -> None:
    with pytest.raises(ValueError, match="non-OK"):
        RPCError(StatusCode.OK, "")
