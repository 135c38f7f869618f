"""The runtime's side of a plugin connection, up to the events: accept, register,
configure, synchronize, call.

Theory of operation
-------------------
`RuntimeEndpoint` serves the Runtime service (RegisterPlugin, UpdateContainers) on mux
conn 2 and calls the Plugin service on conn 1, using the same `Trunk` as the plugin side
with the roles swapped. Plugins reach it over a real Unix socket, either by path
(`await rt.listen(path)`, external mode) or through a socket pair (`await
rt.socketpair()` returns the plugin's end, as a runtime hands fd 3 to a pre-registered
plugin).

When a plugin registers, the endpoint behaves like a real runtime: it checks name and
index, replies, then (concurrently, so Configure may overtake the reply) sends Configure
with `config` and its timeouts, checks the returned mask against what its NRI version
accepts, and sends Synchronize with `pods` and `containers`, split into chunks of
`sync_chunk` objects if asked. `await rt.wait_ready()` returns the `Handshake` once that
is done. `configure_before_reply=True` holds the RegisterPlugin reply until Configure has
been answered, the ordering a plugin must survive. With `auto_start=False` the test drives
these steps itself (`wait_registered`, `configure`, `synchronize`).

Up to v0.12.1 a real runtime handles UpdateContainers under the lock it holds while
calling a plugin; the endpoint does the same, so a plugin that waits for
UpdateContainers inside a hook deadlocks here as it would there, until the request
timeout, after which the runtime drops it.  UpdateContainers requests are recorded
(`update_requests`, `await rt.next_update()`); `update_result` decides which updates
"failed"; the next `unanswered_updates` requests get no answer at all (the plugin's call
times out).  `failing_sync_updates` names containers whose update in a Synchronize reply
fails when applied; one not marked ``ignore_failure`` fails the handshake as CRI-O 1.36
does (`syncPlugin` returns the error, the adaptation never adds the plugin to those that
get events and leaves its connection open): `wait_ready` raises `SyncUpdateFailed`.

The events themselves (pods and containers) are `nri_api.testing.runtime.FakeRuntime`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Final, Self, TypeVar

from google.protobuf.message import Message

from nri_api import api
from nri_api.errors import ConnectionClosed, RPCError, StatusCode
from nri_api.events import (
    V0_12_0,
    Event,
    NRIVersion,
    valid_events_mask,
)
from nri_api.mux import PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN
from nri_api.transport import Trunk

__all__ = ["Handshake", "PluginRejected", "RuntimeEndpoint", "SyncUpdateFailed"]

_M = TypeVar("_M", bound=Message)

#: First NRI release with Synchronize chunking and the timeouts in ConfigureRequest.
V0_7_0: Final = NRIVersion(0, 7, 0)
#: First NRI release whose UpdateContainers does not take the runtime's global lock.
V0_12_2: Final = NRIVersion(0, 12, 2)

# A containerd release that vendors each NRI release, so that a plugin which infers the
# NRI version from runtime name and version (runtimes before v0.12) gets it right.
_CONTAINERD_FOR_NRI: Final = {
    "v0.3.0": "1.7.0",
    "v0.4.0": "1.7.7",
    "v0.6.0": "1.7.14",
    "v0.6.1": "1.7.16",
    "v0.8.0": "2.1.0",
    "v0.10.0": "2.2.0",
    "v0.11.0": "2.2.1",
    "v0.12.0": "2.3.0",
    "v0.12.1": "2.4.0-beta.0",
    "v0.12.2": "2.4.0",
}

_NAME: Final = re.compile(r"^[a-zA-Z0-9_.+-]+$")


class PluginRejected(Exception):
    """The fake runtime refused the plugin, as the real one would (and closed it)."""


class SyncUpdateFailed(PluginRejected):
    """An update of the Synchronize reply failed and was not marked ``ignore_failure``:
    the plugin is never sent an event, its connection is left open (CRI-O 1.36)."""


@dataclass(frozen=True, slots=True)
class Handshake:
    """The outcome of registration, Configure and Synchronize for one connection."""

    registration: api.RegisterPluginRequest
    events: int
    sync_updates: tuple[api.ContainerUpdate, ...]


@dataclass(slots=True)
class _Peer:
    """One plugin connection, runtime side."""

    trunk: Trunk
    writer: asyncio.StreamWriter | None = None
    registration: api.RegisterPluginRequest | None = None
    events: int = 0
    handshake: asyncio.Task[None] | None = None
    configured: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


class RuntimeEndpoint:
    """The runtime's side of plugin connections, up to the events (module docstring)."""

    def __init__(
        self,
        *,
        nri_version: str | None = "v0.12.2",
        runtime_name: str | None = None,
        runtime_version: str | None = None,
        config: str = "",
        registration_timeout: float = 5.0,
        request_timeout: float = 2.0,
        pods: Sequence[api.PodSandbox] = (),
        containers: Sequence[api.Container] = (),
        sync_chunk: int | None = None,
        auto_start: bool = True,
        configure_before_reply: bool = False,
        update_result: Callable[[api.UpdateContainersRequest], Iterable[api.ContainerUpdate]]
        | None = None,
        unanswered_updates: int = 0,
        failing_sync_updates: Iterable[str] = (),
    ) -> None:
        self.nri_version = NRIVersion.parse(nri_version) if nri_version else None
        default_name, default_version = "fake-runtime", "0.0.0"
        if nri_version is not None and str(self.nri_version) in _CONTAINERD_FOR_NRI:
            default_name = "containerd"
            default_version = _CONTAINERD_FOR_NRI[str(self.nri_version)]
        self.runtime_name = runtime_name if runtime_name is not None else default_name
        self.runtime_version = runtime_version if runtime_version is not None else default_version
        self.config = config
        self.registration_timeout = registration_timeout
        self.request_timeout = request_timeout
        self.pods = list(pods)
        self.containers = list(containers)
        if sync_chunk is not None and sync_chunk < 1:
            raise ValueError(f"sync_chunk: expected a positive object count, found {sync_chunk}")
        self.sync_chunk = sync_chunk
        self.auto_start = auto_start
        self.configure_before_reply = configure_before_reply
        self.update_result = update_result
        #: how many of the next UpdateContainers requests are recorded but never answered
        self.unanswered_updates = unanswered_updates
        #: containers whose update in a Synchronize reply fails (CRI-O's rule, module doc)
        self.failing_sync_updates = frozenset(failing_sync_updates)
        self.valid_events = valid_events_mask(self.nri_version)
        #: Every UpdateContainers request received, in order.
        self.update_requests: list[api.UpdateContainersRequest] = []
        #: Every RegisterPlugin request received, in order.
        self.registrations: list[api.RegisterPluginRequest] = []
        #: Every Plugin method called, in order (e.g. "Configure", "StateChange").
        self.calls: list[str] = []
        #: Why the runtime refused or dropped a plugin (texts, in order).
        self.failures: list[str] = []
        self._updates: asyncio.Queue[api.UpdateContainersRequest] = asyncio.Queue()
        self._registered: asyncio.Queue[_Peer] = asyncio.Queue()
        self._ready: asyncio.Queue[Handshake | BaseException] = asyncio.Queue()
        self._peers: list[_Peer] = []
        self._current: _Peer | None = None
        self._server: asyncio.AbstractServer | None = None
        # Held while calling the plugin; UpdateContainers takes it too before v0.12.2.
        self._lock = asyncio.Lock()

    # -- connection ------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def listen(self, path: str) -> None:
        """Accept plugin connections on the Unix socket `path` (external plugins)."""

        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self._attach(
                Trunk(
                    reader,
                    writer,
                    server_conn=RUNTIME_SERVICE_CONN,
                    client_conn=PLUGIN_SERVICE_CONN,
                ),
                writer,
            )

        self._server = await asyncio.start_unix_server(accepted, path=path)

    async def socketpair(self) -> socket.socket:
        """Connect a socket pair and return the plugin's end (pre-registered plugins).

        Pass it to the plugin as `Plugin(connection=...)`, or to a child process (e.g.
        `pass_fds`, with `NRI_PLUGIN_SOCKET` set to its number).
        """
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        trunk = await Trunk.from_socket(
            ours, server_conn=RUNTIME_SERVICE_CONN, client_conn=PLUGIN_SERVICE_CONN
        )
        self._attach(trunk)
        return theirs

    def _attach(self, trunk: Trunk, writer: asyncio.StreamWriter | None = None) -> None:
        peer = _Peer(trunk=trunk, writer=writer)
        self._peers.append(peer)

        async def handle(
            service: str, method: str, payload: bytes, deadline: float | None
        ) -> bytes:
            return await self._serve(peer, service, method, payload)

        trunk.serve(handle)

    @property
    def connected(self) -> bool:
        """True while the current plugin connection is open."""
        return self._current is not None and not self._current.trunk.closed

    async def send_raw(self, data: bytes) -> None:
        """Write `data` as is on the current connection (accepted by `listen`), bypassing
        the mux and ttrpc framing: for protocol fuzzing.  Whole messages the trunk writes
        are never split by it (both write in one call on the same event loop)."""
        peer = self._peer()
        if peer.writer is None:
            raise ConnectionClosed("FakeRuntime.send_raw: only for connections from listen()")
        if peer.trunk.closed:
            raise ConnectionClosed("FakeRuntime.send_raw: the connection is closed")
        try:
            peer.writer.write(data)
            await peer.writer.drain()
        except (OSError, RuntimeError) as exc:
            raise ConnectionClosed(f"FakeRuntime.send_raw: {exc}") from exc

    async def disconnect(self) -> None:
        """Close the current plugin connection (as a runtime restart would)."""
        peer = self._peer()
        await peer.trunk.close()

    async def close(self) -> None:
        """Stop listening and close every plugin connection."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None
        for peer in self._peers:
            if peer.handshake is not None:
                peer.handshake.cancel()
            await peer.trunk.close()

    def _peer(self) -> _Peer:
        if self._current is None:
            raise ConnectionClosed("FakeRuntime: no plugin has registered yet")
        return self._current

    @property
    def events(self) -> int:
        """The current plugin's effective subscription (0 from it means all valid events)."""
        return self._peer().events

    def subscribed(self, event: Event) -> bool:
        return bool(self._peer().events & event.bit)

    # -- the Runtime service ---------------------------------------------------------------

    async def _serve(self, peer: _Peer, service: str, method: str, payload: bytes) -> bytes:
        if service != api.RUNTIME_SERVICE:
            raise RPCError(StatusCode.UNIMPLEMENTED, f"service {service}")
        if method == "RegisterPlugin":
            reply = self._on_register(peer, api.RegisterPluginRequest.FromString(payload))
            if self.configure_before_reply and peer.handshake is not None:
                # Hold the RegisterPlugin reply until Configure has been answered: the
                # plugin must serve conn 1 while it still waits on conn 2.
                await peer.configured.wait()
            return reply
        if method == "UpdateContainers":
            request = api.UpdateContainersRequest.FromString(payload)
            if self.unanswered_updates > 0:
                self.unanswered_updates -= 1
                self.update_requests.append(request)
                self._updates.put_nowait(request)
                await asyncio.Event().wait()  # until the connection closes
            if self.nri_version is None or self.nri_version < V0_12_2:
                async with self._lock:
                    return self._on_update(request)
            return self._on_update(request)
        raise RPCError(StatusCode.UNIMPLEMENTED, f"method {method}")

    def _on_register(self, peer: _Peer, request: api.RegisterPluginRequest) -> bytes:
        if not re.fullmatch(r"[0-9]{2}", request.plugin_idx):
            raise RPCError(
                StatusCode.UNKNOWN, f"invalid plugin index {request.plugin_idx!r}: expected NN"
            )
        if not request.plugin_name:
            raise RPCError(StatusCode.UNKNOWN, "invalid (empty) plugin name")
        emulated = self.nri_version
        if emulated is not None and emulated >= V0_12_0 and not _NAME.match(request.plugin_name):
            raise RPCError(StatusCode.UNKNOWN, f"invalid plugin name {request.plugin_name!r}")
        peer.registration = request
        self.registrations.append(request)
        self._current = peer
        self._registered.put_nowait(peer)
        if self.auto_start:
            peer.handshake = asyncio.get_running_loop().create_task(self._handshake(peer))
        return b""

    def _on_update(self, request: api.UpdateContainersRequest) -> bytes:
        self.update_requests.append(request)
        self._updates.put_nowait(request)
        failed = list(self.update_result(request)) if self.update_result else []
        return api.UpdateContainersResponse(failed=failed).SerializeToString()

    async def _handshake(self, peer: _Peer) -> None:
        try:
            assert peer.registration is not None
            try:
                events = await self._configure(peer, self.config)
            finally:
                peer.configured.set()
            updates = await self._synchronize(peer, self.pods, self.containers)
            self._apply_sync_updates(updates)
        except SyncUpdateFailed as exc:
            self.failures.append(str(exc))
            self._ready.put_nowait(exc)  # the connection stays open, as in CRI-O
            return
        except (RPCError, TimeoutError, ConnectionClosed, PluginRejected) as exc:
            self.failures.append(f"plugin handshake failed: {exc}")
            await peer.trunk.close()
            self._ready.put_nowait(exc)
            return
        self._ready.put_nowait(
            Handshake(registration=peer.registration, events=events, sync_updates=tuple(updates))
        )

    def _apply_sync_updates(self, updates: Sequence[api.ContainerUpdate]) -> None:
        """Fail the handshake if an update of `failing_sync_updates` is not marked
        ``ignore_failure`` (CRI-O's `domainTable.updateContainers` inside `syncPlugin`)."""
        failed = [
            u.container_id
            for u in updates
            if u.container_id in self.failing_sync_updates and not u.ignore_failure
        ]
        if failed:
            raise SyncUpdateFailed(
                "failed to synchronize plugin: NRI update of containers failed: "
                + ", ".join(failed)
            )

    # -- waiting ---------------------------------------------------------------------------

    async def wait_registered(self, timeout: float = 10.0) -> api.RegisterPluginRequest:
        """Wait for the next RegisterPlugin and return it."""
        async with asyncio.timeout(timeout):
            peer = await self._registered.get()
        assert peer.registration is not None
        return peer.registration

    async def wait_ready(self, timeout: float = 10.0) -> Handshake:
        """Wait until the next plugin has registered, been configured and synchronized.

        Raises the error that made the runtime drop the plugin, if one did.
        """
        async with asyncio.timeout(timeout):
            outcome = await self._ready.get()
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def next_update(self, timeout: float = 10.0) -> api.UpdateContainersRequest:
        """Wait for the next UpdateContainers request from the plugin."""
        async with asyncio.timeout(timeout):
            return await self._updates.get()

    # -- calling the plugin ----------------------------------------------------------------

    async def call(
        self,
        method: str,
        request: Message,
        response_type: type[_M],
        *,
        timeout: float | None = None,
    ) -> _M:
        """Call Plugin/`method` on the current plugin, whatever its subscription.

        A timeout closes the connection, as the runtime does.
        """
        return await self._call(self._peer(), method, request, response_type, timeout=timeout)

    async def _call(
        self,
        peer: _Peer,
        method: str,
        request: Message,
        response_type: type[_M],
        *,
        timeout: float | None = None,
    ) -> _M:
        wait = self.request_timeout if timeout is None else timeout
        self.calls.append(method)
        async with self._lock:
            try:
                reply = await peer.trunk.call(
                    api.PLUGIN_SERVICE, method, request.SerializeToString(), timeout=wait
                )
            except TimeoutError:
                self.failures.append(f"plugin {method} timed out after {wait}s; closing it")
                await peer.trunk.close()
                raise
        return response_type.FromString(reply)

    async def configure(self, config: str | None = None) -> int:
        """Send Configure; returns the effective mask (a 0 reply means all valid events)."""
        return await self._configure(self._peer(), self.config if config is None else config)

    async def _configure(self, peer: _Peer, config: str) -> int:
        request = api.ConfigureRequest(
            config=config, runtime_name=self.runtime_name, runtime_version=self.runtime_version
        )
        emulated = self.nri_version
        if emulated is None or emulated >= V0_7_0:
            request.registration_timeout = int(self.registration_timeout * 1000)
            request.request_timeout = int(self.request_timeout * 1000)
        if emulated is not None and emulated >= V0_12_0:
            request.NRI_version = str(emulated)
        reply = await self._call(peer, "Configure", request, api.ConfigureResponse)
        events = reply.events & 0xFFFFFFFF
        if events & ~self.valid_events:
            text = f"invalid plugin events: {events:#x}"
            self.failures.append(text)
            await peer.trunk.close()
            raise PluginRejected(text)
        peer.events = events or self.valid_events
        return peer.events

    async def synchronize(
        self,
        pods: Sequence[api.PodSandbox] | None = None,
        containers: Sequence[api.Container] | None = None,
        *,
        chunk: int | None = None,
    ) -> list[api.ContainerUpdate]:
        """Send Synchronize (in chunks of `chunk` objects if given); returns the updates."""
        return await self._synchronize(
            self._peer(),
            self.pods if pods is None else pods,
            self.containers if containers is None else containers,
            chunk=chunk,
        )

    async def _synchronize(
        self,
        peer: _Peer,
        pods: Sequence[api.PodSandbox],
        containers: Sequence[api.Container],
        *,
        chunk: int | None = None,
    ) -> list[api.ContainerUpdate]:
        size = chunk if chunk is not None else self.sync_chunk
        objects: list[api.PodSandbox | api.Container] = [*pods, *containers]
        if size is None or len(objects) <= size:
            reply = await self._call(
                peer,
                "Synchronize",
                api.SynchronizeRequest(pods=pods, containers=containers),
                api.SynchronizeResponse,
            )
            return list(reply.update)
        if self.nri_version is not None and self.nri_version < V0_7_0:
            raise ValueError(
                f"sync chunking: NRI {self.nri_version} has no split Synchronize (v0.7.0+)"
            )
        for start in range(0, len(objects), size):
            part = objects[start : start + size]
            more = start + size < len(objects)
            request = api.SynchronizeRequest(
                pods=[o for o in part if isinstance(o, api.PodSandbox)],
                containers=[o for o in part if isinstance(o, api.Container)],
                more=more,
            )
            reply = await self._call(peer, "Synchronize", request, api.SynchronizeResponse)
            if more and (not reply.more or reply.update):
                text = "plugin does not handle split sync requests"
                self.failures.append(text)
                await peer.trunk.close()
                raise PluginRejected(text)
        return list(reply.update)
