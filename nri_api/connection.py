"""The plugin's connection to the runtime: connect, register, reconnect, the outbox, the bounds.

Theory of operation
-------------------
`Connection` runs the plugin's side of the socket for `nri_api.stub.Plugin`; requests
that arrive go to a handler (the stub's dispatch), everything else is here.

* **Endpoint.** If `NRI_PLUGIN_SOCKET` is set, the runtime started us (pre-registered
  mode: the socket is that fd, stdout/stderr are discarded, the environment is empty) and
  the plugin never reconnects. Otherwise it connects to a socket path (external mode);
  with `OnClose.RECONNECT` it reconnects after a lost connection with capped exponential
  backoff (0.1 s doubling to 5 s), otherwise `serve()` returns 1. Each failed attempt
  calls the owner's `connect_failed(error, attempt)`. A stop request (SIGTERM) is
  honoured at once, also while registration is under way.
* **Registration.** Right after connecting, the Plugin service is served on mux conn 1
  and `RegisterPlugin` is sent on conn 2 under the registration timeout. The runtime may
  call Configure before that reply arrives; both run concurrently.
* **Session.** Each connection has a `nri_api.session.Session` (the trunk, what the
  runtime said in Configure, the Synchronize buffers, the outbox), dropped on close.
* **Unsolicited updates (the outbox).** `enqueue()` queues an UpdateContainers request
  for a background sender that transmits only while no hook is running (`HookGate`). Up
  to NRI v0.12.1 the runtime serves UpdateContainers under the same lock that it holds
  while calling a hook, so sending it from inside a hook and waiting for the answer
  deadlocks until the request timeout, and the runtime then drops the plugin. Whether a
  caller runs inside a hook is a context variable (`in_hook()`): a task started by a hook
  counts as "inside" until that hook returns. A request that times out or fails is not
  resent (a newer decision may have replaced it): the owner's `updates_failed()` hears
  of it. Requests still queued when the connection closes fail with ConnectionClosed.
* **Bounds.** A hostile or broken runtime cannot make the plugin buffer or work without
  end: more than `max_in_flight` requests at once, or `max_rejected_pending` malformed
  requests awaiting their error reply, close the connection (see `nri_api.transport`);
  the Synchronize chunk bounds and the refusal of a second Configure are the session's
  (`nri_api.session`). Each bound closes with one log line naming it. A socket path
  longer than the Unix limit of 108 bytes fails at construction; a RegisterPlugin reply
  that does not come within the registration timeout closes the connection. When a
  session held dropped or unfinished Synchronize chunks, the freed heap is given back to
  the system (glibc's malloc_trim) as it closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import inspect
import os
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Final, Protocol, TypeVar

from nri_api import api
from nri_api.errors import ConnectionClosed, RPCError
from nri_api.session import HookGate, Session, SessionOwner
from nri_api.transport import Handler, Trunk

#: Where runtimes listen for external plugins (NRI v0.3.0 and later).
DEFAULT_SOCKET_PATH: Final = "/var/run/nri/nri.sock"
#: The NRI API level this stub implements, sent in RegisterPluginRequest.NRI_version.
STUB_NRI_VERSION: Final = "v0.12.2"
#: Defaults the runtime uses until Configure tells the real values (seconds).
DEFAULT_REGISTRATION_TIMEOUT: Final = 5.0
DEFAULT_REQUEST_TIMEOUT: Final = 2.0

ENV_SOCKET: Final = "NRI_PLUGIN_SOCKET"

BACKOFF_INITIAL: Final = 0.1
BACKOFF_MAX: Final = 5.0

#: The longest Unix socket path: ``sockaddr_un.sun_path`` holds 108 bytes on Linux.
MAX_SOCKET_PATH: Final = 108

_T = TypeVar("_T")

#: Nothing to return (plain or async hook).
NoResult = Awaitable[None] | None


async def maybe_await(value: Awaitable[_T] | _T) -> _T:
    """The value, awaited if it is awaitable (hooks may be plain or async)."""
    if inspect.isawaitable(value):
        return await value
    return value


def error_text(exc: BaseException, timeout_text: str) -> str:
    """An exception's text for a log line; `timeout_text` for a bare TimeoutError."""
    if isinstance(exc, TimeoutError) and not str(exc):
        return timeout_text
    return str(exc) or type(exc).__name__


def _return_freed_memory() -> None:
    """Give freed heap back to the system (glibc's malloc_trim; elsewhere a no-op).

    Dropped Synchronize chunks are freed at once, but glibc keeps the pages: a daemon that
    buffered 32 MiB of chunks (about 100 MiB in memory) would otherwise keep that RSS."""
    import ctypes

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return
    trim(0)


class OnClose(enum.StrEnum):
    """What an external plugin does when the runtime closes the connection."""

    EXIT = "exit"
    RECONNECT = "reconnect"


class Owner(SessionOwner, Protocol):
    """What the connection needs of its plugin: identity, log, bounds and three hooks."""

    max_in_flight: int
    max_rejected_pending: int

    @property
    def name(self) -> str: ...

    @property
    def idx(self) -> str: ...

    @property
    def full_name(self) -> str: ...

    def on_close(self) -> NoResult: ...

    def updates_failed(
        self, updates: Sequence[api.ContainerUpdate], error: BaseException
    ) -> NoResult: ...

    def connect_failed(self, error: OSError, attempt: int) -> NoResult: ...


def socket_fd_from_env(environ: Mapping[str, str]) -> int | None:
    """The inherited socket fd of a pre-registered plugin (`NRI_PLUGIN_SOCKET`), if any."""
    fd_text = environ.get(ENV_SOCKET, "")
    if not fd_text:
        return None
    try:
        return int(fd_text)
    except ValueError as exc:
        raise ValueError(
            f"${ENV_SOCKET}: expected the number of an inherited socket fd, found {fd_text!r}"
        ) from exc


class Connection:
    """Connects, registers and serves one connection after another (see the module doc)."""

    def __init__(
        self,
        owner: Owner,
        *,
        socket_path: str,
        on_close: OnClose,
        connection: socket.socket | None,
        socket_fd: int | None,
    ) -> None:
        self._owner = owner
        self.on_close_action = on_close
        self.socket_path = socket_path
        self._connection = connection
        self._socket_fd = socket_fd if connection is None else None
        self._fd_used = False
        if self._socket_fd is None and connection is None:
            size = len(os.fsencode(socket_path))
            if size > MAX_SOCKET_PATH:
                raise ValueError(
                    f"NRI socket path: expected at most {MAX_SOCKET_PATH} bytes (the Unix "
                    f"socket path limit), found {size}: {socket_path[:60]!r}..."
                )
        self.session: Session | None = None
        self.gate = HookGate()
        self._stop: asyncio.Event | None = None
        self._stop_requested = False

    @property
    def pre_registered(self) -> bool:
        """True when the runtime started us with the socket on an inherited fd."""
        return self._socket_fd is not None

    @property
    def endpoint(self) -> str:
        """What the plugin connects through, for messages: a socket path or an fd."""
        if self._connection is not None:
            return "the socket given to the plugin"
        if self._socket_fd is not None:
            return f"the inherited socket fd {self._socket_fd} (${ENV_SOCKET})"
        return self.socket_path

    def require_session(self) -> Session:
        """The open session; raises ConnectionClosed if not connected."""
        session = self.session
        if session is None or session.trunk.closed:
            raise ConnectionClosed(f"plugin {self._owner.full_name}: not connected to the runtime")
        return session

    def enqueue(
        self, request: api.UpdateContainersRequest, timeout: float
    ) -> asyncio.Future[list[api.ContainerUpdate]]:
        """Queue `request` for the sender; the future gets the updates that failed."""
        session = self.require_session()
        future: asyncio.Future[list[api.ContainerUpdate]] = (
            asyncio.get_running_loop().create_future()
        )
        session.outbox.put_nowait((request, future, timeout))
        return future

    def request_stop(self) -> None:
        """Ask `serve()` to stop (synchronous, so usable from a signal handler)."""
        self._stop_requested = True
        if self._stop is not None:
            self._stop.set()

    async def serve(self, handler: Handler) -> int:
        """Connect, register and serve with `handler`; 0 after `stop()`, 1 if lost."""
        log, full_name = self._owner.log, self._owner.full_name
        self._stop = asyncio.Event()
        if self._stop_requested:  # stop() came before serve() got to run
            self._stop.set()
        self.gate = HookGate()
        backoff = BACKOFF_INITIAL
        failures = 0
        try:
            while not self._stop.is_set():
                try:
                    trunk = await self._open()
                except OSError as exc:
                    failures += 1
                    await self._call_quietly(
                        "connect_failed",
                        functools.partial(self._owner.connect_failed, exc, failures),
                    )
                    if not self._may_reconnect():
                        log.error(
                            "plugin %s: cannot connect to %s: %s", full_name, self.endpoint, exc
                        )
                        return 1
                    log.info(
                        "plugin %s: cannot connect to %s (%s); retrying in %.1fs",
                        full_name,
                        self.endpoint,
                        exc,
                        backoff,
                    )
                    await self._sleep(backoff)
                    backoff = min(backoff * 2, BACKOFF_MAX)
                    continue
                failures = 0
                registered = await self._run_session(trunk, handler)
                if registered:
                    backoff = BACKOFF_INITIAL
                if self._stop.is_set():
                    return 0
                await self._call_quietly("on_close", self._owner.on_close)
                if not self._may_reconnect():
                    return 1
                log.info(
                    "plugin %s: reconnecting to %s in %.1fs", full_name, self.endpoint, backoff
                )
                await self._sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
            return 0
        finally:
            self.session = None
            self._stop_requested = False

    def _may_reconnect(self) -> bool:
        return (
            self.on_close_action is OnClose.RECONNECT
            and not self.pre_registered
            and self._connection is None
        )

    async def _sleep(self, seconds: float) -> None:
        assert self._stop is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)

    async def _open(self) -> Trunk:
        bounds = {
            "max_in_flight": self._owner.max_in_flight,
            "max_rejected_pending": self._owner.max_rejected_pending,
        }
        if self._connection is not None:
            sock, self._connection = self._connection, None
            return await Trunk.from_socket(sock, **bounds)
        if self._socket_fd is not None:
            if self._fd_used:
                raise ConnectionClosed(
                    f"plugin {self._owner.full_name}: the inherited socket fd "
                    f"{self._socket_fd} was already used and closed"
                )
            self._fd_used = True
            return await Trunk.from_fd(self._socket_fd, **bounds)
        return await Trunk.connect(self.socket_path, **bounds)

    async def _run_session(self, trunk: Trunk, handler: Handler) -> bool:
        """Serve one connection until it closes; True if registration succeeded."""
        assert self._stop is not None
        log, full_name = self._owner.log, self._owner.full_name
        session = Session(trunk, self._owner)
        self.session = session
        session.sender = asyncio.create_task(self._send_updates(session), name="nri-updates")
        trunk.serve(handler)
        registered = False
        stop_wait = asyncio.create_task(self._stop.wait())
        try:
            log.info("plugin %s: registering", full_name)
            request = api.RegisterPluginRequest(
                plugin_name=self._owner.name,
                plugin_idx=self._owner.idx,
                NRI_version=STUB_NRI_VERSION,
            )
            register = asyncio.create_task(
                trunk.call(
                    api.RUNTIME_SERVICE,
                    "RegisterPlugin",
                    request.SerializeToString(),
                    timeout=DEFAULT_REGISTRATION_TIMEOUT,
                )
            )
            # a stop request (SIGTERM) must not wait for the runtime's answer
            await asyncio.wait({register, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            if not register.done():
                register.cancel()
                with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                    await register
            elif (exc := register.exception()) is not None:
                if isinstance(exc, (RPCError, TimeoutError, ConnectionClosed)):
                    log.error(
                        "plugin %s: registration failed: %s",
                        full_name,
                        error_text(
                            exc,
                            f"no reply to RegisterPlugin from {self.endpoint} within "
                            f"{DEFAULT_REGISTRATION_TIMEOUT:g}s (the registration timeout)",
                        ),
                    )
                    await trunk.close()
                else:
                    raise exc
            else:
                registered = True
                log.info("plugin %s: registered", full_name)
            closed = asyncio.create_task(trunk.wait_closed())
            await asyncio.wait({closed, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            closed.cancel()
            if not trunk.closed:
                await trunk.close()
            else:
                await trunk.wait_closed()
            if not self._stop.is_set():
                log.warning(
                    "plugin %s: connection to the runtime lost: %s", full_name, trunk.close_reason
                )
        finally:
            stop_wait.cancel()
            session.sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await session.sender
            self._fail_outbox(session)
            had_chunks = session.sync_chunks > 0 or session.dropped_chunks
            session.drop_sync()
            if had_chunks:
                _return_freed_memory()
            if self.session is session:
                self.session = None
        return registered

    def _fail_outbox(self, session: Session) -> None:
        while not session.outbox.empty():
            _, future, _ = session.outbox.get_nowait()
            if not future.done():
                future.set_exception(
                    ConnectionClosed(
                        f"plugin {self._owner.full_name}: update_containers not sent, "
                        "connection closed"
                    )
                )

    async def _send_updates(self, session: Session) -> None:
        while True:
            request, future, timeout = await session.outbox.get()
            await self.gate.wait_idle()
            try:
                reply = await session.trunk.call(
                    api.RUNTIME_SERVICE,
                    "UpdateContainers",
                    request.SerializeToString(),
                    timeout=timeout,
                )
                failed = list(api.UpdateContainersResponse.FromString(reply).failed)
            except asyncio.CancelledError:
                if not future.done():
                    future.set_exception(
                        ConnectionClosed(f"plugin {self._owner.full_name}: connection closed")
                    )
                raise
            except Exception as exc:
                self._owner.log.warning(
                    "plugin %s: UpdateContainers of %d update(s) failed: %s",
                    self._owner.full_name,
                    len(request.update),
                    error_text(
                        exc, f"no reply within {timeout:g}s (the update_containers timeout)"
                    ),
                )
                if not future.done():
                    future.set_exception(exc)
                    # A deferred (in-hook) caller never awaits: do not warn about that.
                    future.exception()
                if not isinstance(exc, ConnectionClosed):
                    await self._call_quietly(
                        "updates_failed",
                        functools.partial(self._owner.updates_failed, list(request.update), exc),
                    )
                continue
            if failed:
                self._owner.log.warning(
                    "plugin %s: the runtime could not apply %d update(s): %s",
                    self._owner.full_name,
                    len(failed),
                    ", ".join(u.container_id for u in failed),
                )
            if not future.done():
                future.set_result(failed)

    async def _call_quietly(self, what: str, fn: Callable[[], object]) -> None:
        try:
            await maybe_await(fn())
        except Exception:
            self._owner.log.exception("plugin %s: %s() failed", self._owner.full_name, what)
