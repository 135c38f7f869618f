"""State of one connection to the runtime, and the bounds kept per connection.

Theory of operation
-------------------
Each connection (`nri_api.connection`) has a `Session`: the trunk, what the runtime said
in Configure (`RuntimeInfo`), the subscription mask, the buffered Synchronize chunks and
the outbox of unsolicited updates. It is dropped when the connection closes; the next
connection starts a fresh one.

* **Synchronize chunks.** The runtime may split Synchronize into chunks marked ``more``;
  `Session.buffer_sync` collects them and hands over every pod and container with the
  last one. More than `max_sync_chunks` chunks or `max_sync_bytes` bytes buffered
  before the last chunk drop the buffers and close the connection with one log line
  naming the bound (a hostile or broken runtime cannot make the plugin buffer without
  end); the reconnect resynchronizes.
* **Configure once.** A second Configure on one connection is refused with
  FAILED_PRECONDITION and the first one stays in force (`refuse_second_configure`): the
  runtime configures once, and re-running `configure()` would reset a plugin's state
  under containers that keep their resources.
* **The hook gate.** `HookGate` counts running hooks; the outbox sender transmits only
  while none runs. Whether code runs inside a hook is a context variable (`in_hook()`):
  tasks a hook starts inherit it, and count as "inside" until that hook returns.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from dataclasses import dataclass
from typing import Final, Protocol

from nri_api import api
from nri_api.errors import RPCError, StatusCode
from nri_api.events import NRIVersion
from nri_api.transport import Trunk
from nri_api.version import VersionSource

#: Default bounds on Synchronize chunks (``more: true``) buffered before the last one.
MAX_SYNC_CHUNKS: Final = 64
MAX_SYNC_BYTES: Final = 32 << 20


@dataclass(frozen=True, slots=True)
class RuntimeInfo:
    """What the runtime said about itself in Configure (timeouts in seconds).

    `nri_version` is the runtime's NRI version: as reported (v0.12+), inferred from the
    runtime name and version, or the oldest one (v0.3.0) if unknown;
    `nri_version_source` tells which.
    """

    name: str
    version: str
    nri_version: NRIVersion
    nri_version_source: VersionSource
    registration_timeout: float
    request_timeout: float


class SessionOwner(Protocol):
    """What a session needs of its plugin: its name, its log and the Synchronize bounds."""

    log: logging.Logger
    max_sync_chunks: int
    max_sync_bytes: int

    @property
    def full_name(self) -> str: ...


class _HookScope:
    """Marks code running on behalf of a hook, until that hook returns.

    Tasks a hook starts inherit the context, hence the scope; once the hook has
    returned, `active` is False and their calls count as made outside any hook.
    """

    __slots__ = ("active",)

    def __init__(self) -> None:
        self.active = True


_IN_HOOK: contextvars.ContextVar[_HookScope | None] = contextvars.ContextVar(
    "nri_api_in_hook", default=None
)


def in_hook() -> bool:
    """True in a hook, and in tasks a hook started while that hook has not returned."""
    scope = _IN_HOOK.get()
    return scope is not None and scope.active


class HookGate:
    """Counts running hooks; the outbox sender waits until none runs."""

    __slots__ = ("_idle", "_running")

    def __init__(self) -> None:
        self._idle = asyncio.Event()
        self._idle.set()
        self._running = 0

    def enter(self) -> tuple[_HookScope, contextvars.Token[_HookScope | None]]:
        """A hook starts; pass the result to `leave` when it returns."""
        self._running += 1
        self._idle.clear()
        scope = _HookScope()
        return scope, _IN_HOOK.set(scope)

    def leave(self, entered: tuple[_HookScope, contextvars.Token[_HookScope | None]]) -> None:
        scope, token = entered
        scope.active = False
        _IN_HOOK.reset(token)
        self._running -= 1
        if not self._running:
            self._idle.set()

    async def wait_idle(self) -> None:
        await self._idle.wait()


_Outgoing = tuple[api.UpdateContainersRequest, asyncio.Future[list[api.ContainerUpdate]], float]


class Session:
    """State of one connection: the trunk, the runtime's identity, sync chunks, outbox."""

    def __init__(self, trunk: Trunk, owner: SessionOwner) -> None:
        self.trunk = trunk
        self._owner = owner
        self.runtime: RuntimeInfo | None = None
        self.events = 0
        self.sync_pods: list[api.PodSandbox] = []
        self.sync_containers: list[api.Container] = []
        self.sync_chunks = 0
        self.sync_bytes = 0
        #: chunks were dropped because a bound was exceeded
        self.dropped_chunks = False
        self.outbox: asyncio.Queue[_Outgoing] = asyncio.Queue()
        self.sender: asyncio.Task[None] | None = None
        self.synchronized = False

    def refuse_second_configure(self, request: api.ConfigureRequest) -> None:
        """Raise FAILED_PRECONDITION if this connection was configured already.

        The runtime configures a plugin once, right after registration (Go's stub does not
        guard against a second call at all). Running the hook again would reset the
        plugin's state under containers that keep their resources, so the second
        Configure is refused and the first one stays in force.
        """
        if self.runtime is None:
            return
        full_name = self._owner.full_name
        self._owner.log.warning(
            "plugin %s: second Configure on one connection refused (runtime %s %s)",
            full_name,
            request.runtime_name,
            request.runtime_version,
        )
        raise RPCError(
            StatusCode.FAILED_PRECONDITION,
            f"Configure: expected once per connection, found a second call; plugin "
            f"{full_name} keeps the configuration of the first",
        )

    async def buffer_sync(
        self, request: api.SynchronizeRequest
    ) -> tuple[list[api.PodSandbox], list[api.Container]] | None:
        """Take one Synchronize chunk: None while more follow, else every pod and container.

        Past the bounds, drops the buffers, closes the connection and raises
        RESOURCE_EXHAUSTED (the reconnect starts a fresh Synchronize).
        """
        if request.more:
            chunks = self.sync_chunks + 1
            size = self.sync_bytes + request.ByteSize()
            limit_chunks, limit_bytes = self._owner.max_sync_chunks, self._owner.max_sync_bytes
            if chunks > limit_chunks or size > limit_bytes:
                self.drop_sync()
                self.dropped_chunks = True
                error = RPCError(
                    StatusCode.RESOURCE_EXHAUSTED,
                    f"Synchronize: expected at most {limit_chunks} chunks and "
                    f"{limit_bytes} bytes buffered before the last chunk, found "
                    f"{chunks} chunks and {size} bytes; closing the connection",
                )
                await self.trunk.close(error)
                raise error
            self.sync_chunks, self.sync_bytes = chunks, size
        self.sync_pods.extend(request.pods)
        self.sync_containers.extend(request.containers)
        if request.more:
            return None
        pods, containers = self.sync_pods, self.sync_containers
        self.drop_sync()
        return pods, containers

    def drop_sync(self) -> None:
        """Forget buffered Synchronize chunks (a bound exceeded, or the connection closed)."""
        self.sync_pods = []
        self.sync_containers = []
        self.sync_chunks = self.sync_bytes = 0
