"""The asyncio shell over the sans-IO wire layers: one `Trunk` per NRI socket.

Theory of operation
-------------------
A `Trunk` owns one connected Unix stream socket. The bytes the event loop receives are
fed to the `Multiplexer` from the transport's `data_received` callback (`_Feed`, no reader
task: waking one per read cost an event-loop iteration per request, 7-12 % of a no-op
plugin's CPU, docs/benchmarks.md); each frame's payload goes to the `TtrpcConnection` of
that ConnID, and the trunk acts on the ttrpc events:

* on the *server* conn (1 for a plugin), a `RequestReceived` starts a task that awaits the
  handler given to `serve` under the request's deadline (cut off by the trunk's one
  timer for all requests, `_Cutoffs`) and writes the Response; a
  `StreamRejected` is written back as is;
* on the *client* conn (2 for a plugin), a `ResponseReceived` or `StreamFailed` completes
  the future of the `call` waiting on that stream.

Writes are whole ttrpc messages framed by `frame_message`, serialized by one lock and
drained. A call allocates its stream id and writes its Request under that same lock, so ids
reach the peer in increasing order, as the Go server demands. The lock is held until the
kernel has taken every byte of the message (the transport's write buffer limits are 0): a
message the socket took at once releases it in the same step, a larger one (a Synchronize
reply with 10,000 updates, about 1.5 MB against the socket's 208 KiB) only when its last
byte has left. So `writing` and `written` tell a plugin when what it wrote is on its way:
work that must not hold a reply back waits for them (`nri_resmgr.runtime.after_reply`;
with asyncio's default limits a reply's last 16 KiB could wait in the buffer for it).

Memory and work stay bounded against a misbehaving peer: the mux skips frames for other
ConnIDs unbuffered and caps frame length, ttrpc discards oversized bodies unbuffered, more
than `max_in_flight` unanswered requests (Go's mux would overflow its 256-frame queue long
before) is a `RemoteProtocolError`, and so is more than `max_rejected_pending` rejected
streams whose error reply is not written yet (each costs a write task: 100,000 bad headers,
1 MB of input, would otherwise cost 154 MiB and 47 s of CPU before anything else is served).

EOF, an OS error or a `RemoteProtocolError` from the peer closes the trunk: pending calls
fail with `ConnectionClosed`, handler tasks are cancelled, the socket is closed, and
`wait_closed` returns (a teardown task waits for the handlers and the socket);
`close_reason` tells why. The roles are parameters, so the same
class plays the runtime side in tests (server on conn 2, client on conn 1).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
from collections.abc import Awaitable, Callable
from typing import Final

from nri_api.errors import (
    NEED_DATA,
    ConnectionClosed,
    ProtocolError,
    RemoteProtocolError,
    RPCError,
    StatusCode,
)
from nri_api.mux import PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, Multiplexer, MuxClosed
from nri_api.mux import frame_message as _frame_message
from nri_api.ttrpc import (
    RequestReceived,
    ResponseReceived,
    Role,
    StreamFailed,
    StreamRejected,
    TtrpcClosed,
    TtrpcConnection,
)

__all__ = ["Handler", "Trunk"]

Handler = Callable[[str, str, bytes, float | None], Awaitable[bytes]]
"""(service, method, payload, deadline as loop.time() or None) -> reply payload."""

#: seconds a handler may run past the request's deadline before it is cut off
DEADLINE_GRACE = 1.0
#: default bound on requests being handled at once
MAX_IN_FLIGHT: Final = 1024
#: default bound on rejected streams whose error reply is not written yet
MAX_REJECTED_PENDING: Final = 256

_READ_SIZE: Final = 256 * 1024


class _Feed(asyncio.Protocol):
    """The socket's protocol once a `Trunk` owns it: received bytes, EOF and loss go to the
    trunk at once; flow control and the loss go on to the stream protocol the writer uses
    (its `drain` and `wait_closed` keep working)."""

    def __init__(self, trunk: Trunk, inner: asyncio.BaseProtocol) -> None:
        self._trunk = trunk
        self._inner = inner

    def data_received(self, data: bytes) -> None:
        self._trunk._received(data)

    def eof_received(self) -> bool:
        self._trunk._received(b"")
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._inner.connection_lost(exc)
        self._trunk._lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


class _Cutoffs:
    """The cut-offs of the requests a trunk is handling, on one timer: a handler task still
    running at its time is cancelled.  What `asyncio.timeout_at` did per request, whose
    timer handle cost 4.1 us of CPU a request under uvloop (one `call_at` alone 1.9):
    requests one after another, each due seconds later, find the timer armed for an
    earlier one and only add and remove a dict entry; the timer, when it goes off, cuts
    off what is due and is armed again for the earliest left (`_sweep`)."""

    __slots__ = ("_cut", "_due", "_loop", "_timer", "_timer_at")

    #: a timer may go off this much before its time (uvloop counts milliseconds)
    _EARLY: Final = 0.001

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._due: dict[asyncio.Task[None], float] = {}
        self._cut: set[asyncio.Task[None]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    def add(self, task: asyncio.Task[None], when: float) -> None:
        """Cancel `task` at `when` (loop time) unless `remove` comes first."""
        self._due[task] = when
        if when < self._timer_at:
            self._arm(when)

    def remove(self, task: asyncio.Task[None]) -> bool:
        """Forget `task`'s cut-off; True if it went off and its cancellation was the only
        one (which is then taken back, as `asyncio.Timeout` does on leaving)."""
        del self._due[task]
        if task in self._cut:
            self._cut.discard(task)
            return task.uncancel() == 0
        return False

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer, self._timer_at = None, math.inf

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = self._loop.call_at(when, self._sweep), when

    def _sweep(self) -> None:
        self._timer, self._timer_at = None, math.inf
        now = self._loop.time() + self._EARLY
        following = math.inf
        for task, when in self._due.items():
            if task in self._cut:
                continue
            if when <= now:
                self._cut.add(task)
                task.cancel()
            elif when < following:
                following = when
        if following < math.inf:
            self._arm(following)


def _take_buffered(reader: asyncio.StreamReader) -> tuple[bytes, bool]:
    """What `reader` received before its socket's protocol was replaced (usually nothing),
    and whether EOF came with it. asyncio offers no way to take a reader's buffer without
    awaiting, so its `_buffer` and `_eof` (unchanged since Python 3.4) are read here, once;
    `test_bytes_received_before_the_trunk_took_the_stream_are_served` guards them."""
    state = vars(reader)
    buffer: bytearray = state["_buffer"]
    data = bytes(buffer)
    buffer.clear()
    return data, bool(state["_eof"])


class Trunk:
    """One NRI connection: a ttrpc server and a ttrpc client over the mux."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        server_conn: int = PLUGIN_SERVICE_CONN,
        client_conn: int = RUNTIME_SERVICE_CONN,
        max_in_flight: int = MAX_IN_FLIGHT,
        max_rejected_pending: int = MAX_REJECTED_PENDING,
        deadline_grace: float = DEADLINE_GRACE,
    ) -> None:
        self._deadline_grace = deadline_grace
        if server_conn == client_conn:
            raise ValueError(
                f"Trunk conn ids: expected distinct server and client conns, "
                f"found both {server_conn}"
            )
        self._writer = writer
        self._server_conn = server_conn
        self._client_conn = client_conn
        self._mux = Multiplexer(accept=(server_conn, client_conn))
        self._server = TtrpcConnection(Role.SERVER)
        self._client = TtrpcConnection(Role.CLIENT)
        self._loop = asyncio.get_running_loop()
        self._write_lock = asyncio.Lock()
        self._handler: Handler | None = None
        self._handler_set = asyncio.Event()
        self._pending: dict[int, asyncio.Future[bytes]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._max_in_flight = max_in_flight
        self._max_rejected_pending = max_rejected_pending
        self._rejected_pending = 0
        self._closed = False
        self._close_reason: BaseException | None = None
        self._done = asyncio.Event()
        self._teardown: asyncio.Task[None] | None = None
        self._cutoffs = _Cutoffs(self._loop)
        # From now on the socket's bytes come to `_received`; what the stream reader got
        # before (nothing, unless the peer spoke first) is handled first.
        transport = writer.transport
        transport.set_protocol(_Feed(self, transport.get_protocol()))
        # any byte left in the buffer pauses writing until the buffer is empty, so a
        # drained write has left whole (`writing`, module docstring)
        transport.set_write_buffer_limits(high=0)
        early, eof = _take_buffered(reader)
        if early:
            self._received(early)
        if eof:
            self._received(b"")
        elif transport.is_closing():
            self._lost(None)

    # -- construction ----------------------------------------------------------------------

    @classmethod
    async def connect(
        cls,
        path: str,
        *,
        server_conn: int = PLUGIN_SERVICE_CONN,
        client_conn: int = RUNTIME_SERVICE_CONN,
        max_in_flight: int = MAX_IN_FLIGHT,
        max_rejected_pending: int = MAX_REJECTED_PENDING,
        deadline_grace: float = DEADLINE_GRACE,
    ) -> Trunk:
        """Connect to the NRI socket at `path` (e.g. /var/run/nri/nri.sock)."""
        reader, writer = await asyncio.open_unix_connection(path, limit=_READ_SIZE)
        return cls(
            reader,
            writer,
            server_conn=server_conn,
            client_conn=client_conn,
            max_in_flight=max_in_flight,
            max_rejected_pending=max_rejected_pending,
            deadline_grace=deadline_grace,
        )

    @classmethod
    async def from_socket(
        cls,
        sock: socket.socket,
        *,
        server_conn: int = PLUGIN_SERVICE_CONN,
        client_conn: int = RUNTIME_SERVICE_CONN,
        max_in_flight: int = MAX_IN_FLIGHT,
        max_rejected_pending: int = MAX_REJECTED_PENDING,
        deadline_grace: float = DEADLINE_GRACE,
    ) -> Trunk:
        """Wrap an already connected Unix stream socket (the trunk takes ownership)."""
        reader, writer = await asyncio.open_unix_connection(sock=sock, limit=_READ_SIZE)
        return cls(
            reader,
            writer,
            server_conn=server_conn,
            client_conn=client_conn,
            max_in_flight=max_in_flight,
            max_rejected_pending=max_rejected_pending,
            deadline_grace=deadline_grace,
        )

    @classmethod
    async def from_fd(
        cls,
        fd: int,
        *,
        max_in_flight: int = MAX_IN_FLIGHT,
        max_rejected_pending: int = MAX_REJECTED_PENDING,
    ) -> Trunk:
        """Wrap an inherited socket fd (pre-registered plugins get fd 3), plugin side."""
        return await cls.from_socket(
            socket.socket(fileno=fd),
            max_in_flight=max_in_flight,
            max_rejected_pending=max_rejected_pending,
        )

    # -- public API ------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def close_reason(self) -> BaseException | None:
        """Why the trunk closed: ConnectionClosed (EOF, local close) or the error seen."""
        return self._close_reason

    @property
    def writing(self) -> bool:
        """True while a message is being written: queued behind another, or not yet
        taken whole by the kernel (a reply larger than the socket's buffer)."""
        return self._write_lock.locked()

    async def written(self) -> None:
        """Return once every message whose write began before this call has left whole
        for the kernel, or failed (the trunk closed)."""
        async with self._write_lock:
            pass

    def serve(self, handler: Handler) -> None:
        """Answer requests on the server conn with `handler` (once; requests wait for it)."""
        if self._handler is not None:
            raise RuntimeError("Trunk.serve: expected a single call, found a handler already set")
        self._handler = handler
        self._handler_set.set()

    async def call(
        self, service: str, method: str, payload: bytes, *, timeout: float | None
    ) -> bytes:
        """Call `service`/`method` on the client conn and return the reply payload.

        Raises `RPCError` on a non-OK status, `ConnectionClosed` if the trunk closes first,
        `TimeoutError` after `timeout` seconds (also sent to the peer as timeout_nano).
        """
        if self._closed:
            raise ConnectionClosed(f"call {service}/{method}: the trunk is already closed")
        future: asyncio.Future[bytes] = self._loop.create_future()
        deadline = None if timeout is None else self._loop.time() + timeout
        stream_id: int | None = None
        try:
            async with asyncio.timeout_at(deadline):
                async with self._write_lock:
                    if self._closed:
                        raise ConnectionClosed(
                            f"call {service}/{method}: the trunk closed before sending"
                        )
                    # Like Go: the time left when the request is sent, 0 for no deadline.
                    timeout_nano = (
                        0 if deadline is None else max(1, int((deadline - self._loop.time()) * 1e9))
                    )
                    stream_id, message = self._client.send_request(
                        service=service, method=method, payload=payload, timeout_nano=timeout_nano
                    )
                    self._pending[stream_id] = future
                    await self._write_locked(self._client_conn, message)
                return await future
        finally:
            if stream_id is not None:
                self._pending.pop(stream_id, None)
                self._client.forget(stream_id)

    async def close(self, reason: BaseException | None = None) -> None:
        """Close the trunk and wait until every task of it has finished.

        `reason` becomes `close_reason` (default: a `ConnectionClosed` "closed locally").
        Called from inside a handler, it closes without waiting (the handler's own task is
        one of those to finish).
        """
        self._shutdown(reason or ConnectionClosed("the trunk was closed locally"))
        if asyncio.current_task() not in self._tasks:
            await self.wait_closed()

    async def wait_closed(self) -> None:
        """Wait until the trunk is closed (by either side) and fully torn down."""
        await self._done.wait()

    # -- internals -------------------------------------------------------------------------

    async def _write_locked(self, conn_id: int, message: bytes) -> None:
        writer = self._writer
        try:
            writer.write(_frame_message(conn_id, message))
            # What the socket took at once leaves nothing to wait for: `drain` would
            # return without suspending (its own checks: a closing transport, paused
            # writing, which a buffer left over implies), so it is skipped, coroutine
            # and all, for the usual small reply the kernel takes whole.
            if writer.transport.get_write_buffer_size() or writer.transport.is_closing():
                await writer.drain()
        except (OSError, RuntimeError) as exc:  # RuntimeError: transport already closing
            self._shutdown(exc)
            raise ConnectionClosed(f"the NRI trunk closed while writing: {exc}") from exc

    async def _write(self, conn_id: int, message: bytes) -> None:
        async with self._write_lock:
            if not self._closed:
                await self._write_locked(conn_id, message)

    def _received(self, data: bytes) -> None:
        """Bytes from the socket (b"": EOF), from the transport's callback."""
        if self._closed:
            return
        try:
            self._mux.receive_data(data)
            if self._process():
                self._shutdown(ConnectionClosed("the peer closed the trunk (EOF)"))
        except (ProtocolError, OSError) as exc:
            self._shutdown(exc)

    def _lost(self, exc: Exception | None) -> None:
        """The socket is gone (after EOF, an error or a local close)."""
        self._shutdown(exc or ConnectionClosed("the peer closed the trunk (EOF)"))

    async def _finish(self) -> None:
        """After `_shutdown`: wait for the handlers and the socket, then `wait_closed`."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(OSError, ConnectionError):
            await self._writer.wait_closed()
        self._done.set()

    def _process(self) -> bool:
        """Act on every buffered event; True once the peer closed the trunk (EOF)."""
        while True:
            event = self._mux.next_event()
            if event is NEED_DATA:
                return False
            if isinstance(event, MuxClosed):
                return True
            conn = self._server if event.conn_id == self._server_conn else self._client
            conn.receive_data(event.data)
            self._drain_ttrpc(conn)

    def _drain_ttrpc(self, conn: TtrpcConnection) -> None:
        while True:
            event = conn.next_event()
            if event is NEED_DATA or isinstance(event, TtrpcClosed):
                return
            if isinstance(event, RequestReceived):
                if self._server.active_count > self._max_in_flight:
                    raise RemoteProtocolError(
                        f"conn {self._server_conn}: expected at most {self._max_in_flight} "
                        f"unanswered requests, found {len(self._server.active)}"
                    )
                self._track(self._loop.create_task(self._handle(event)))
            elif isinstance(event, StreamRejected):
                if self._rejected_pending >= self._max_rejected_pending:
                    raise RemoteProtocolError(
                        f"conn {self._server_conn}: expected at most "
                        f"{self._max_rejected_pending} rejected requests awaiting their error "
                        f"reply, found {self._rejected_pending + 1} (last: stream "
                        f"{event.stream_id}: {event.reason})"
                    )
                self._rejected_pending += 1
                self._track(self._loop.create_task(self._write_rejection(event.bytes_to_send)))
            elif isinstance(event, ResponseReceived):
                future = self._pending.get(event.stream_id)
                if future is not None and not future.done():
                    if event.status is StatusCode.OK:
                        future.set_result(event.payload)
                    else:
                        future.set_exception(RPCError(event.status, event.message))
            elif isinstance(event, StreamFailed):
                future = self._pending.get(event.stream_id)
                if future is not None and not future.done():
                    future.set_exception(event.to_exception())

    async def _write_rejection(self, message: bytes) -> None:
        try:
            await self._write(self._server_conn, message)
        finally:
            self._rejected_pending -= 1

    def _track(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self, request: RequestReceived) -> None:
        deadline: float | None = None
        if request.timeout_nano:
            deadline = self._loop.time() + request.timeout_nano / 1e9
        code, text, reply = StatusCode.OK, "", b""
        # The handler is told the real deadline, but cut off only `deadline_grace` later:
        # the peer's own timer must win, as it does against a Go server (whose handlers
        # run past their context). Answering DEADLINE_EXCEEDED first would turn the NRI
        # runtime's fail-open timeout into an error that fails the CRI request, at random.
        task = asyncio.current_task()
        assert task is not None
        if deadline is not None:
            self._cutoffs.add(task, deadline + self._deadline_grace)
        expired = False  # cut off, and no other cancellation is pending
        try:
            try:
                if self._handler is None:
                    await self._handler_set.wait()
                    assert self._handler is not None
                reply = await self._handler(
                    request.service, request.method, request.payload, deadline
                )
            finally:
                if deadline is not None:
                    expired = self._cutoffs.remove(task)
        except RPCError as exc:
            code, text = exc.code, exc.message
        except asyncio.CancelledError:
            if expired and not self._closed:
                code, text = StatusCode.DEADLINE_EXCEEDED, "context deadline exceeded"
            elif self._closed or task.cancelling():
                raise  # the trunk is closing: nothing to answer on
            else:
                code, text = StatusCode.CANCELLED, "context canceled"  # the handler's own doing
        except Exception as exc:
            code, text = StatusCode.UNKNOWN, str(exc) or type(exc).__name__
        try:
            message = self._server.send_response(
                request.stream_id, payload=reply, status=code, message=text
            )
        except RPCError as exc:  # the reply is too long to send: say so instead
            message = self._server.send_response(
                request.stream_id, status=exc.code, message=exc.message
            )
        with contextlib.suppress(ConnectionClosed):
            await self._write(self._server_conn, message)

    def _shutdown(self, reason: BaseException) -> None:
        if self._closed:
            return
        self._closed = True
        self._close_reason = reason
        closed = ConnectionClosed(f"the NRI trunk closed: {reason}")
        if not isinstance(reason, ConnectionClosed):
            closed.__cause__ = reason
        for future in self._pending.values():
            if not future.done():
                future.set_exception(closed)
        for task in list(self._tasks):
            if task is not asyncio.current_task():
                task.cancel()
        self._writer.close()
        self._cutoffs.close()
        self._teardown = self._loop.create_task(self._finish(), name="nri-trunk-teardown")
