"""Errors and shared sentinels of the NRI wire layers.

Theory of operation
-------------------
The wire is three stacked protocols (mux, ttrpc, protobuf payloads), each a sans-IO object
in the style of h11. They share one small vocabulary, defined here so that every layer and
the asyncio shell agree on it:

* `ProtocolError` is raised by the sans-IO layers. Following h11 it has exactly two
  flavours: `LocalProtocolError` means *we* misused the API (sent an oversized frame, replied
  to a stream that was never opened, used ConnID 0), and `RemoteProtocolError` means *the
  peer* broke the protocol (a truncated frame at EOF, ConnID 0 on the wire, a frame length
  past every limit). A remote protocol error poisons the connection: the shell closes it.
* `StatusCode` and `RPCError` are the gRPC status model that ttrpc carries in
  `Response.status`. A handler raises `RPCError` to answer with a status; a caller receives
  `RPCError` when the peer answered with a non-zero code. `str()` matches Go's
  `status.Error`: ``rpc error: code = Unimplemented desc = method Foo``.
* `ConnectionClosed` is raised to callers whose call cannot complete because the trunk
  closed (locally, by EOF, or after a protocol error).
* `NEED_DATA` is the sentinel every `next_event()` returns when it needs more bytes.
"""

from __future__ import annotations

import enum
from typing import Final, Literal

__all__ = [
    "NEED_DATA",
    "ConnectionClosed",
    "LocalProtocolError",
    "NeedData",
    "ProtocolError",
    "RPCError",
    "RemoteProtocolError",
    "StatusCode",
]


class NeedData(enum.Enum):
    """Type of the `NEED_DATA` sentinel (an enum so `is` checks narrow under mypy)."""

    NEED_DATA = "NEED_DATA"

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final[Literal[NeedData.NEED_DATA]] = NeedData.NEED_DATA


class ProtocolError(Exception):
    """Base of every error the sans-IO wire layers raise."""


class LocalProtocolError(ProtocolError):
    """We misused the API: the operation would put an invalid message on the wire."""


class RemoteProtocolError(ProtocolError):
    """The peer misbehaved: what it sent breaks the protocol, and the connection is unusable."""


class ConnectionClosed(Exception):
    """The trunk closed (locally, by the peer, or after a protocol error) before completion."""


class StatusCode(enum.IntEnum):
    """The 17 gRPC status codes, as carried in `google.rpc.Status.code`.

    A code outside 0..16 received from a peer is kept (as a pseudo-member named
    ``CODE_<n>``) rather than rejected, like Go's `codes.Code(n)`.
    """

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16

    @classmethod
    def _missing_(cls, value: object) -> StatusCode | None:
        if isinstance(value, int) and not isinstance(value, bool):
            pseudo = int.__new__(cls, value)
            pseudo._name_ = f"CODE_{value}"
            pseudo._value_ = value
            return pseudo
        return None

    @property
    def go_name(self) -> str:
        """The name Go's `codes.Code.String()` prints, e.g. ``Unimplemented``."""
        if self.name.startswith("CODE_"):
            return f"Code({int(self)})"
        special = {"OK": "OK", "CANCELLED": "Canceled"}
        if self.name in special:
            return special[self.name]
        return "".join(part.capitalize() for part in self.name.split("_"))


class RPCError(Exception):
    """An RPC answered with a non-OK status (raise it in a handler to send one)."""

    code: StatusCode
    message: str

    def __init__(self, code: StatusCode | int, message: str = "") -> None:
        code = StatusCode(code)
        if code is StatusCode.OK:
            raise ValueError(
                f"RPCError code: expected a non-OK status code, found {code.go_name} (0)"
            )
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"rpc error: code = {self.code.go_name} desc = {self.message}"

    def __repr__(self) -> str:
        return f"RPCError({self.code.name}, {self.message!r})"
