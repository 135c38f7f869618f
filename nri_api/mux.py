"""Sans-IO NRI connection multiplexer (containerd/nri ``pkg/net/multiplex``).

Theory of operation
-------------------
NRI runs two ttrpc connections over one Unix stream socket (the *trunk*). The trunk carries
mux frames, each an 8-byte big-endian header followed by an opaque payload::

    [0:4] uint32 ConnID     (0 is reserved; 1 = Plugin service, 2 = Runtime service)
    [4:8] uint32 payload length

There is no open/close signalling. A frame carries some bytes of one sub-connection's
byte stream: it need not hold exactly one ttrpc message, so the receiver reassembles a byte
stream per ConnID and parses ttrpc frames from that (see `nri_api.ttrpc`).

Receiving. `Multiplexer.receive_data(data)` appends bytes (``b""`` means EOF);
`Multiplexer.next_event()` returns `MuxData` for every complete frame of an accepted
ConnID, `MuxClosed` at a clean EOF (and on every call after it), or `NEED_DATA`.
Frames for ConnIDs the owner did not accept are skipped without being buffered, as Go
silently drops frames for unopened ConnIDs. A frame is delivered whole, so memory is
bounded by the largest frame accepted (`max_frame_payload`, by default Go's old writer
limit of 16 MiB); a longer declared length, ConnID 0, or EOF inside a frame is a
`RemoteProtocolError`.

Sending. `frame_message(conn_id, message)` frames one whole ttrpc message (10-byte header
plus body). The Go reader on the other side reads through a 4096-byte ``bufio.Reader``, and
its mux ``conn.Read`` fails with ENOMEM when a frame is longer than the buffer it is given.
So a frame that starts at a ttrpc message boundary must be at most 4096 bytes. We send what
Go itself sends: one frame if the message fits in 4096 bytes, else a 4096-byte first frame
(header plus 4086 body bytes) followed by the rest of *that* message only, cut into frames
of at most Go's writer limit (`MAX_WRITE_PAYLOAD` = 4 MiB + 10).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from nri_api.errors import NEED_DATA, LocalProtocolError, NeedData, RemoteProtocolError

__all__ = [
    "BOUNDARY_FRAME_MAX",
    "HEADER",
    "MAX_CONN_ID",
    "MAX_FRAME_PAYLOAD",
    "MAX_WRITE_PAYLOAD",
    "NEED_DATA",
    "PLUGIN_SERVICE_CONN",
    "RUNTIME_SERVICE_CONN",
    "Multiplexer",
    "MuxClosed",
    "MuxData",
    "MuxEvent",
    "frame",
    "frame_message",
]

HEADER: Final = struct.Struct(">II")
"""Mux frame header: ConnID, payload length (big-endian uint32 each)."""

PLUGIN_SERVICE_CONN: Final = 1
"""ConnID of the Plugin service: the plugin serves, the runtime calls."""

RUNTIME_SERVICE_CONN: Final = 2
"""ConnID of the Runtime service: the runtime serves, the plugin calls."""

MAX_CONN_ID: Final = 0xFFFF_FFFF

BOUNDARY_FRAME_MAX: Final = 4096
"""Largest frame (header excluded) a Go peer accepts when it starts at a message boundary."""

MAX_WRITE_PAYLOAD: Final = 10 + (4 << 20)
"""Go's mux writer limit since NRI v0.7.0: one ttrpc header plus the largest ttrpc body."""

MAX_FRAME_PAYLOAD: Final = 1 << 24
"""Default receive limit: the writer limit of NRI v0.3.0-v0.6.1, the largest any Go peer sends."""

_TTRPC_HEADER_LEN: Final = 10


@dataclass(frozen=True, slots=True)
class MuxData:
    """The payload of one complete frame for an accepted ConnID."""

    conn_id: int
    data: bytes


@dataclass(frozen=True, slots=True)
class MuxClosed:
    """The peer closed the trunk at a frame boundary (clean EOF)."""


MuxEvent = MuxData | MuxClosed


def frame(conn_id: int, payload: bytes) -> bytes:
    """One mux frame carrying `payload` on `conn_id` (no splitting; see `frame_message`)."""
    _check_conn_id(conn_id)
    if len(payload) > MAX_WRITE_PAYLOAD:
        raise LocalProtocolError(
            f"mux frame for conn {conn_id}: payload must be at most {MAX_WRITE_PAYLOAD} bytes "
            f"(Go's writer limit), found {len(payload)}"
        )
    return HEADER.pack(conn_id, len(payload)) + payload


def frame_message(conn_id: int, message: bytes) -> bytes:
    """Frame one whole ttrpc message for `conn_id` so that a Go reader accepts it.

    The result is the concatenation of one or more mux frames: the first at most
    `BOUNDARY_FRAME_MAX` payload bytes, the following ones (only the rest of this message)
    at most `MAX_WRITE_PAYLOAD` each. An empty message yields no frame at all.
    """
    _check_conn_id(conn_id)
    if not message:
        return b""
    if 0 < len(message) < _TTRPC_HEADER_LEN:
        raise LocalProtocolError(
            f"mux message for conn {conn_id}: expected a whole ttrpc message "
            f"(at least a {_TTRPC_HEADER_LEN}-byte header), found {len(message)} bytes"
        )
    if len(message) <= BOUNDARY_FRAME_MAX:  # one frame: every reply but a large one
        return HEADER.pack(conn_id, len(message)) + message
    view = memoryview(message)
    parts: list[bytes | memoryview] = [
        HEADER.pack(conn_id, min(len(view), BOUNDARY_FRAME_MAX)),
        view[:BOUNDARY_FRAME_MAX],
    ]
    rest = view[BOUNDARY_FRAME_MAX:]
    while rest:
        chunk = rest[:MAX_WRITE_PAYLOAD]
        parts.append(HEADER.pack(conn_id, len(chunk)))
        parts.append(chunk)
        rest = rest[MAX_WRITE_PAYLOAD:]
    return b"".join(parts)


def _check_conn_id(conn_id: int) -> None:
    if not 0 < conn_id <= MAX_CONN_ID:
        raise LocalProtocolError(
            f"mux conn id: expected 1..{MAX_CONN_ID} (0 is reserved), found {conn_id}"
        )


class Multiplexer:
    """Receiving half of the NRI mux: bytes in, `MuxData` / `MuxClosed` events out.

    `accept` lists the ConnIDs whose frames are delivered (None: all). Frames for other
    ConnIDs are skipped without buffering them. `max_frame_payload` bounds the declared
    length of any frame; a longer one is a `RemoteProtocolError`.
    """

    def __init__(
        self,
        accept: Iterable[int] | None = None,
        *,
        max_frame_payload: int = MAX_FRAME_PAYLOAD,
    ) -> None:
        self._accept: frozenset[int] | None = None if accept is None else frozenset(accept)
        if self._accept is not None:
            for conn_id in self._accept:
                _check_conn_id(conn_id)
        self._max_frame_payload = max_frame_payload
        self._buffer = bytearray()
        self._eof = False
        # Current frame once its header is parsed: (conn_id, remaining length, deliver?).
        self._frame: tuple[int, int, bool] | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as events (bounded by one frame)."""
        return len(self._buffer)

    def receive_data(self, data: bytes) -> None:
        """Feed bytes read from the trunk; ``b""`` signals EOF."""
        if self._eof:
            if data:
                raise LocalProtocolError(
                    f"mux receive_data: expected no data after EOF, found {len(data)} bytes"
                )
            return
        if not data:
            self._eof = True
            return
        self._buffer += data

    def next_event(self) -> MuxEvent | NeedData:
        """The next complete event, or `NEED_DATA`."""
        while True:
            if self._frame is None:
                if len(self._buffer) < HEADER.size:
                    return self._at_end_of_input()
                conn_id, length = HEADER.unpack_from(self._buffer)
                del self._buffer[: HEADER.size]
                if conn_id == 0:
                    raise RemoteProtocolError(
                        f"mux frame: expected a ConnID of 1 or more (0 is reserved), "
                        f"found 0 with a {length}-byte payload"
                    )
                if length > self._max_frame_payload:
                    raise RemoteProtocolError(
                        f"mux frame for conn {conn_id}: expected a payload of at most "
                        f"{self._max_frame_payload} bytes, found a declared length of {length}"
                    )
                deliver = self._accept is None or conn_id in self._accept
                self._frame = (conn_id, length, deliver)
            conn_id, remaining, deliver = self._frame
            if not deliver:
                skipped = min(remaining, len(self._buffer))
                del self._buffer[:skipped]
                remaining -= skipped
                if remaining:
                    self._frame = (conn_id, remaining, deliver)
                    return self._at_end_of_input()
                self._frame = None
                continue
            if len(self._buffer) < remaining:
                return self._at_end_of_input()
            payload = bytes(self._buffer[:remaining])
            del self._buffer[:remaining]
            self._frame = None
            return MuxData(conn_id, payload)

    def _at_end_of_input(self) -> MuxClosed | NeedData:
        if not self._eof:
            return NEED_DATA
        if self._frame is not None or self._buffer:
            where = (
                f"inside a frame for conn {self._frame[0]} ({self._frame[1]} bytes missing)"
                if self._frame is not None
                else f"inside a frame header ({len(self._buffer)} of {HEADER.size} bytes)"
            )
            raise RemoteProtocolError(
                f"mux trunk: expected EOF at a frame boundary, found it {where}"
            )
        return MuxClosed()
