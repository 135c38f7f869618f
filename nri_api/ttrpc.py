"""Sans-IO ttrpc framing for one byte stream (containerd/ttrpc ``channel.go``).

Theory of operation
-------------------
ttrpc is gRPC without HTTP/2: each message is a 10-byte big-endian header and a body::

    [0:4] uint32 body length (at most 4 MiB = 4,194,304)
    [4:8] uint32 stream id   (client streams are odd: 1, 3, 5, ...)
    [8]   uint8  type        (1 Request, 2 Response, 3 Data)
    [9]   uint8  flags       (0 for the unary calls NRI makes)

A Request body is a ``ttrpc.Request`` protobuf (service, method, payload, timeout_nano,
metadata); a Response body is a ``ttrpc.Response`` (status, payload). On success the Go
server leaves `status` out, so an empty successful reply is a bare 10-byte header.

One `TtrpcConnection` handles one sub-connection (one mux ConnID) in one role:

* ``Role.SERVER`` turns incoming Requests into `RequestReceived` events and encodes replies
  with `send_response`. Where the Go server answers a bad message with a status instead of
  dropping the connection, we do the same: the event `StreamRejected` carries the
  ready-to-send error Response. That covers an even stream id ("StreamID must be odd for
  client initiated streams"), a Request id not above the last one ("StreamID cannot be
  re-used and must increment"), an undecodable Request (INVALID_ARGUMENT "unmarshal request
  error: ..."), Data for a stream that is not active, and an oversized body
  (RESOURCE_EXHAUSTED). Other message types are ignored for forward compatibility, as Go
  does.
* ``Role.CLIENT`` numbers requests 1, 3, 5, ... (`send_request`) and turns Responses into
  `ResponseReceived`. A message for a stream that is not pending (a late reply after the
  caller gave up and called `forget`) is dropped, as Go logs and drops it. A failure that
  Go confines to one call (an oversized or undecodable Response, a Data message on a
  unary stream) is reported as `StreamFailed` for that stream only.

An oversized body is never buffered: its bytes are counted off as they arrive. Thus the
receive buffer holds at most one incomplete message plus whatever was fed at once. EOF
(``receive_data(b"")``) at a message boundary gives `TtrpcClosed`; inside a message it is a
`RemoteProtocolError`. Refusing to *send* an oversized body raises `RPCError`
RESOURCE_EXHAUSTED, like Go's ``OversizedMessageErr`` (the NRI runtime relies on that error
to split Synchronize into chunks).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Final

from google.protobuf.message import DecodeError

from nri_api._pb import ttrpc_pb2
from nri_api.errors import (
    NEED_DATA,
    LocalProtocolError,
    NeedData,
    RemoteProtocolError,
    RPCError,
    StatusCode,
)

__all__ = [
    "HEADER",
    "MAX_MESSAGE_LENGTH",
    "NEED_DATA",
    "MessageType",
    "RequestReceived",
    "ResponseReceived",
    "Role",
    "StreamFailed",
    "StreamRejected",
    "TtrpcClosed",
    "TtrpcConnection",
    "TtrpcEvent",
    "encode_message",
    "oversize_message",
]

HEADER: Final = struct.Struct(">IIBB")
"""ttrpc header: body length, stream id (uint32), message type, flags (uint8); big-endian."""

MAX_MESSAGE_LENGTH: Final = 4 << 20
"""Largest body either side sends or accepts (Go's ``messageLengthMax``)."""

_MAX_STREAM_ID: Final = 0xFFFF_FFFF


class MessageType(enum.IntEnum):
    REQUEST = 1
    RESPONSE = 2
    DATA = 3


class Role(enum.StrEnum):
    CLIENT = "client"
    SERVER = "server"


@dataclass(frozen=True, slots=True)
class RequestReceived:
    """(server) A unary Request; answer it with `TtrpcConnection.send_response`."""

    stream_id: int
    service: str
    method: str
    payload: bytes
    timeout_nano: int
    metadata: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class ResponseReceived:
    """(client) The Response to a pending request. `status` OK means success."""

    stream_id: int
    status: StatusCode
    message: str
    payload: bytes


@dataclass(frozen=True, slots=True)
class StreamRejected:
    """(server) A message Go answers with an error status; write `bytes_to_send`."""

    stream_id: int
    bytes_to_send: bytes
    reason: str


@dataclass(frozen=True, slots=True)
class StreamFailed:
    """(client) The pending call on `stream_id` failed without a proper Response.

    `code` is set when the failure is a status (an oversized reply: RESOURCE_EXHAUSTED);
    it is None when the peer sent something unusable for this call (`RemoteProtocolError`).
    """

    stream_id: int
    message: str
    code: StatusCode | None = None

    def to_exception(self) -> RPCError | RemoteProtocolError:
        """The exception a caller waiting on this stream should see."""
        if self.code is not None:
            return RPCError(self.code, self.message)
        return RemoteProtocolError(self.message)


@dataclass(frozen=True, slots=True)
class TtrpcClosed:
    """The byte stream ended (EOF) at a message boundary."""


TtrpcEvent = RequestReceived | ResponseReceived | StreamRejected | StreamFailed | TtrpcClosed


def oversize_message(length: int) -> str:
    """Go's text for a body longer than `MAX_MESSAGE_LENGTH`."""
    return f"message length {length} exceed maximum message size of {MAX_MESSAGE_LENGTH}"


def encode_message(*, stream_id: int, type: int, flags: int = 0, body: bytes = b"") -> bytes:
    """One raw ttrpc message (header plus body); no checks beyond the field ranges."""
    if not 0 <= stream_id <= _MAX_STREAM_ID:
        raise LocalProtocolError(
            f"ttrpc stream id: expected 0..{_MAX_STREAM_ID}, found {stream_id}"
        )
    if not (0 <= type <= 0xFF and 0 <= flags <= 0xFF):
        raise LocalProtocolError(
            f"ttrpc header: expected type and flags in 0..255, found {type} and {flags}"
        )
    return HEADER.pack(len(body), stream_id, type, flags) + body


def _status_response(stream_id: int, code: StatusCode, message: str) -> bytes:
    body = ttrpc_pb2.Response(status=ttrpc_pb2.Status(code=int(code), message=message))
    return encode_message(
        stream_id=stream_id, type=MessageType.RESPONSE, body=body.SerializeToString()
    )


class TtrpcConnection:
    """One side (client or server) of one ttrpc byte stream."""

    def __init__(self, role: Role) -> None:
        self.role = Role(role)
        self._buffer = bytearray()
        self._eof = False
        # Header of the message being received: (length, stream id, type, flags).
        self._header: tuple[int, int, int, int] | None = None
        self._discard_left = 0
        # Server: the highest Request stream id seen, and streams awaiting a response.
        self._last_stream_id = 0
        self._active: set[int] = set()
        # Client: the next stream id to use, and streams awaiting a response.
        self._next_stream_id = 1
        self._pending: set[int] = set()

    # -- receiving -------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Feed bytes of this sub-connection's stream; ``b""`` signals EOF."""
        if self._eof:
            if data:
                raise LocalProtocolError(
                    f"ttrpc receive_data: expected no data after EOF, found {len(data)} bytes"
                )
            return
        if not data:
            self._eof = True
            return
        if self._discard_left:
            skipped = min(self._discard_left, len(data))
            self._discard_left -= skipped
            data = data[skipped:]
        self._buffer += data

    def next_event(self) -> TtrpcEvent | NeedData:
        """The next event, or `NEED_DATA`; `TtrpcClosed` at EOF (and every call after it)."""
        while True:
            if self._header is None:
                if len(self._buffer) < HEADER.size:
                    return self._at_end_of_input()
                length, stream_id, mtype, flags = HEADER.unpack_from(self._buffer)
                del self._buffer[: HEADER.size]
                self._header = (length, stream_id, mtype, flags)
                if length > MAX_MESSAGE_LENGTH:
                    skipped = min(length, len(self._buffer))
                    del self._buffer[:skipped]
                    self._discard_left = length - skipped
            length, stream_id, mtype, flags = self._header
            if length > MAX_MESSAGE_LENGTH:
                if self._discard_left:
                    return self._at_end_of_input()
                self._header = None
                event = self._oversized(length, stream_id)
            else:
                if len(self._buffer) < length:
                    return self._at_end_of_input()
                body = bytes(self._buffer[:length])
                del self._buffer[:length]
                self._header = None
                if self.role is Role.SERVER:
                    event = self._server_message(stream_id, mtype, body)
                else:
                    event = self._client_message(stream_id, mtype, body)
            if event is not None:
                return event

    def _at_end_of_input(self) -> TtrpcClosed | NeedData:
        if not self._eof:
            return NEED_DATA
        if self._header is not None or self._buffer:
            if self._header is not None:
                missing = self._discard_left or self._header[0] - len(self._buffer)
                where = f"inside the body of stream {self._header[1]} ({missing} bytes missing)"
            else:
                where = f"inside a header ({len(self._buffer)} of {HEADER.size} bytes)"
            raise RemoteProtocolError(
                f"ttrpc stream: expected EOF at a message boundary, found it {where}"
            )
        return TtrpcClosed()

    def _oversized(self, length: int, stream_id: int) -> TtrpcEvent | None:
        text = oversize_message(length)
        if self.role is Role.SERVER:
            return StreamRejected(
                stream_id,
                _status_response(stream_id, StatusCode.RESOURCE_EXHAUSTED, text),
                text,
            )
        if stream_id in self._pending:
            self._pending.discard(stream_id)
            return StreamFailed(stream_id, text, StatusCode.RESOURCE_EXHAUSTED)
        return None

    def _reject(self, stream_id: int, code: StatusCode, text: str) -> StreamRejected:
        return StreamRejected(stream_id, _status_response(stream_id, code, text), text)

    def _server_message(self, stream_id: int, mtype: int, body: bytes) -> TtrpcEvent | None:
        if stream_id % 2 != 1:
            return self._reject(
                stream_id,
                StatusCode.INVALID_ARGUMENT,
                "StreamID must be odd for client initiated streams",
            )
        if mtype == MessageType.DATA:
            if stream_id in self._active:
                return None  # unary streams take no data; Go's unary handler ignores it
            return self._reject(
                stream_id, StatusCode.INVALID_ARGUMENT, "StreamID is no longer active"
            )
        if mtype != MessageType.REQUEST:
            return None  # unknown to a server: ignored for forward compatibility, as Go does
        if stream_id <= self._last_stream_id:
            return self._reject(
                stream_id,
                StatusCode.INVALID_ARGUMENT,
                "StreamID cannot be re-used and must increment",
            )
        self._last_stream_id = stream_id
        request = ttrpc_pb2.Request()
        try:
            request.ParseFromString(body)
        except (DecodeError, ValueError) as exc:
            return self._reject(
                stream_id, StatusCode.INVALID_ARGUMENT, f"unmarshal request error: {exc}"
            )
        self._active.add(stream_id)
        return RequestReceived(
            stream_id=stream_id,
            service=request.service,
            method=request.method,
            payload=request.payload,
            timeout_nano=request.timeout_nano,
            metadata=tuple((kv.key, kv.value) for kv in request.metadata),
        )

    def _client_message(self, stream_id: int, mtype: int, body: bytes) -> TtrpcEvent | None:
        if stream_id not in self._pending:
            return None  # late or unsolicited: Go logs and drops it
        self._pending.discard(stream_id)
        if mtype != MessageType.RESPONSE:
            kind = MessageType(mtype).name.lower() if mtype in (1, 3) else f"type {mtype}"
            return StreamFailed(
                stream_id, f"ttrpc stream {stream_id}: expected a response, received {kind}"
            )
        response = ttrpc_pb2.Response()
        try:
            response.ParseFromString(body)
        except (DecodeError, ValueError) as exc:
            return StreamFailed(
                stream_id,
                f"ttrpc stream {stream_id}: expected a ttrpc.Response protobuf, "
                f"found {len(body)} undecodable bytes ({exc})",
            )
        if response.HasField("status"):
            status, text = StatusCode(response.status.code), response.status.message
        else:
            status, text = StatusCode.OK, ""
        return ResponseReceived(stream_id, status, text, response.payload)

    # -- sending ---------------------------------------------------------------------------

    def send_request(
        self,
        *,
        service: str,
        method: str,
        payload: bytes,
        timeout_nano: int = 0,
        metadata: tuple[tuple[str, str], ...] | list[tuple[str, str]] = (),
    ) -> tuple[int, bytes]:
        """(client) Encode a unary Request on a new stream; returns (stream id, bytes).

        Raises `RPCError` RESOURCE_EXHAUSTED if the encoded Request is too long to send;
        no stream id is used up then.
        """
        self._require(Role.CLIENT, "send_request")
        stream_id = self._next_stream_id
        if stream_id > _MAX_STREAM_ID:
            raise LocalProtocolError(
                f"ttrpc client: expected a free odd stream id, found all {_MAX_STREAM_ID} used"
            )
        request = ttrpc_pb2.Request(
            service=service,
            method=method,
            payload=payload,
            timeout_nano=timeout_nano,
            metadata=[ttrpc_pb2.KeyValue(key=k, value=v) for k, v in metadata],
        )
        body = request.SerializeToString()
        if len(body) > MAX_MESSAGE_LENGTH:
            raise RPCError(StatusCode.RESOURCE_EXHAUSTED, oversize_message(len(body)))
        self._next_stream_id += 2
        self._pending.add(stream_id)
        return stream_id, encode_message(stream_id=stream_id, type=MessageType.REQUEST, body=body)

    def forget(self, stream_id: int) -> None:
        """(client) Stop waiting for `stream_id` (timeout, cancel): a late reply is dropped."""
        self._pending.discard(stream_id)

    @property
    def pending(self) -> frozenset[int]:
        """(client) Stream ids still awaiting a response."""
        return frozenset(self._pending)

    @property
    def active(self) -> frozenset[int]:
        """(server) Stream ids of requests not yet answered."""
        return frozenset(self._active)

    @property
    def active_count(self) -> int:
        """(server) How many requests are not yet answered (O(1), unlike `active`)."""
        return len(self._active)

    def send_response(
        self,
        stream_id: int,
        *,
        payload: bytes = b"",
        status: StatusCode = StatusCode.OK,
        message: str = "",
    ) -> bytes:
        """(server) Encode the Response that ends `stream_id`.

        On OK the Response has no status field (an empty reply is a bare header). Raises
        `RPCError` RESOURCE_EXHAUSTED, with the stream still open, if the reply is too long:
        answer again with that status.
        """
        self._require(Role.SERVER, "send_response")
        if stream_id not in self._active:
            raise LocalProtocolError(
                f"ttrpc send_response: expected an active request stream, found {stream_id} "
                f"(active: {sorted(self._active)})"
            )
        status = StatusCode(status)
        response = ttrpc_pb2.Response(payload=payload)
        if status is not StatusCode.OK:
            response.status.code = int(status)
            response.status.message = message
        body = response.SerializeToString()
        if len(body) > MAX_MESSAGE_LENGTH:
            raise RPCError(StatusCode.RESOURCE_EXHAUSTED, oversize_message(len(body)))
        self._active.discard(stream_id)
        return encode_message(stream_id=stream_id, type=MessageType.RESPONSE, body=body)

    def _require(self, role: Role, operation: str) -> None:
        if self.role is not role:
            raise LocalProtocolError(
                f"ttrpc {operation}: expected a {role} connection, found a {self.role} one"
            )
