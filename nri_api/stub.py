"""The plugin stub: subclass `Plugin`, override the hooks you need, call `run()`.

Theory of operation
-------------------
A plugin is a `Plugin` subclass whose snake_case hooks are named after the NRI RPCs
(`create_container`, `stop_container`, `run_pod_sandbox`, ...). Hooks may be plain or
`async` functions; an awaitable result is awaited. The stub owns everything else:

* **Identity.** `name` and `idx` come from the arguments, else `NRI_PLUGIN_NAME` and
  `NRI_PLUGIN_IDX`, else the executable's name ``NN-name`` (a ``.py`` suffix is
  stripped). idx must be two digits and name must use ``[a-zA-Z0-9_.+-]``, as the
  runtime demands; a bad value fails at construction.
* **Connection.** If `NRI_PLUGIN_SOCKET` is set, the runtime started us (pre-registered
  mode: the socket is that fd, stdout/stderr are discarded, the environment is empty) and
  the plugin never reconnects. Otherwise the stub connects to `socket_path` (external
  mode, default ``/var/run/nri/nri.sock``); with `OnClose.RECONNECT` it reconnects after
  a lost connection with capped exponential backoff (0.1 s doubling to 5 s), otherwise
  `run()` returns 1. Each failed attempt calls `connect_failed(error, attempt)`.
  A stop request (SIGTERM) is honoured at once, also while registration is under way.
* **Registration.** Right after connecting the stub serves the Plugin service on mux
  conn 1 and sends `RegisterPlugin` on conn 2 under the registration timeout. The runtime
  may call Configure before that reply arrives; both run concurrently.
* **Subscription.** The event mask is derived from the overridden event hooks (a plugin
  overriding none is rejected at construction). `configure()` may narrow it by returning
  a mask (or events); asking for an event without a hook is an error. The mask is then
  clipped to what the runtime's NRI version accepts (an older runtime rejects unknown
  bits and drops the plugin); dropped events are logged. The runtime's NRI version is
  `ConfigureRequest.NRI_version`, else inferred from runtime name and version.
* **Dispatch.** Both the v0.12+ dedicated RPCs (RunPodSandbox, StartContainer, ...) and
  the older `StateChange` reach the same hook. An RPC whose hook is not overridden, an
  unknown method or an unknown service gets UNIMPLEMENTED, which makes a v0.12+ runtime
  fall back to StateChange. A hook exception reaches the runtime as an UNKNOWN status
  with the exception's text (raise `RPCError` to pick the code), except for
  `validate_container_adjustment`, where it means "reject, for this reason".
* **Synchronize chunking** is hidden: chunks marked ``more`` are buffered and answered
  ``{more: true}``; `synchronize()` is called once with every pod and container.
* **Unsolicited updates.** `update_containers()` queues the request for a background
  sender that transmits only while no hook is running. Up to NRI v0.12.1 the runtime
  serves UpdateContainers under the same lock that it holds while calling a hook, so
  sending it from inside a hook and waiting for the answer deadlocks until the request
  timeout, and the runtime then drops the plugin. Called from inside a hook, the call
  therefore returns None at once and the updates go out after the hook returns (failures
  are logged); called from anywhere else it waits and returns the failed updates. A task
  started by a hook counts as "inside" until that hook returns (a context variable).
  A request that times out or fails is not resent (a newer decision may have replaced
  it): the `updates_failed()` hook hears of it, so the plugin can re-assert what holds.
* **Bounds.** A hostile or broken runtime cannot make the stub buffer or work without
  end: more than `max_in_flight` requests at once, or `max_rejected_pending` malformed
  requests awaiting their error reply, close the connection (see `nri_api.transport`);
  so do more than `max_sync_chunks` Synchronize chunks or `max_sync_bytes` bytes
  buffered before the last chunk (the buffers are dropped; the reconnect resynchronizes).
  Each of these closes with one log line naming the bound. A second Configure on one
  connection is refused with FAILED_PRECONDITION and the first one stays in force (the
  runtime configures once; re-running `configure()` would reset a plugin's state under
  containers that keep their resources). A socket path longer than the Unix limit of
  108 bytes fails at construction.
* **Logging** uses the stdlib `logging` module, logger ``nri_api.stub.<NN-name>`` unless
  `logger` is given. `run()` (which owns the process) sets up logging: to the file
  `log_file` or `$NRI_PLUGIN_LOG` if given, else to stderr (discarded in pre-registered
  mode, so give a log file there). `serve()` leaves logging alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import enum
import functools
import inspect
import logging
import os
import re
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from google.protobuf.message import DecodeError, Message

from nri_api import api
from nri_api.builders import Adjustment, Update
from nri_api.errors import ConnectionClosed, RPCError, StatusCode
from nri_api.events import Event, NRIVersion, event_mask, events_in_mask, valid_events_mask
from nri_api.transport import MAX_IN_FLIGHT, MAX_REJECTED_PENDING, Trunk
from nri_api.version import VersionSource, infer_runtime_nri_version

__all__ = [
    "DEFAULT_SOCKET_PATH",
    "HOOK_EVENTS",
    "STUB_NRI_VERSION",
    "ConfigureResult",
    "CreateResult",
    "Identity",
    "NoResult",
    "OnClose",
    "Plugin",
    "RuntimeInfo",
    "Updates",
    "ValidateResult",
    "implemented_events",
    "resolve_identity",
    "setup_logging",
    "subscription_mask",
]

#: Where runtimes listen for external plugins (NRI v0.3.0 and later).
DEFAULT_SOCKET_PATH: Final = "/var/run/nri/nri.sock"
#: The NRI API level this stub implements, sent in RegisterPluginRequest.NRI_version.
STUB_NRI_VERSION: Final = "v0.12.2"
#: Defaults the runtime uses until Configure tells the real values (seconds).
DEFAULT_REGISTRATION_TIMEOUT: Final = 5.0
DEFAULT_REQUEST_TIMEOUT: Final = 2.0
#: How long `update_containers` waits for the runtime's answer by default (seconds).
DEFAULT_UPDATE_TIMEOUT: Final = 30.0

ENV_NAME: Final = "NRI_PLUGIN_NAME"
ENV_IDX: Final = "NRI_PLUGIN_IDX"
ENV_SOCKET: Final = "NRI_PLUGIN_SOCKET"
ENV_LOG: Final = "NRI_PLUGIN_LOG"
ENV_LOG_LEVEL: Final = "NRI_PLUGIN_LOG_LEVEL"

BACKOFF_INITIAL: Final = 0.1
BACKOFF_MAX: Final = 5.0

#: Default bounds on Synchronize chunks (``more: true``) buffered before the last one.
MAX_SYNC_CHUNKS: Final = 64
MAX_SYNC_BYTES: Final = 32 << 20
#: The longest Unix socket path: ``sockaddr_un.sun_path`` holds 108 bytes on Linux.
MAX_SOCKET_PATH: Final = 108

#: Event hooks and the event each subscribes to.
HOOK_EVENTS: Final[Mapping[str, Event]] = {
    "run_pod_sandbox": Event.RUN_POD_SANDBOX,
    "stop_pod_sandbox": Event.STOP_POD_SANDBOX,
    "remove_pod_sandbox": Event.REMOVE_POD_SANDBOX,
    "create_container": Event.CREATE_CONTAINER,
    "post_create_container": Event.POST_CREATE_CONTAINER,
    "start_container": Event.START_CONTAINER,
    "post_start_container": Event.POST_START_CONTAINER,
    "update_container": Event.UPDATE_CONTAINER,
    "post_update_container": Event.POST_UPDATE_CONTAINER,
    "stop_container": Event.STOP_CONTAINER,
    "remove_container": Event.REMOVE_CONTAINER,
    "update_pod_sandbox": Event.UPDATE_POD_SANDBOX,
    "post_update_pod_sandbox": Event.POST_UPDATE_POD_SANDBOX,
    "validate_container_adjustment": Event.VALIDATE_CONTAINER_ADJUSTMENT,
}
_EVENT_HOOKS: Final[Mapping[Event, str]] = {event: hook for hook, event in HOOK_EVENTS.items()}

# Events the runtime delivers with (pod) or (pod, container) and nothing to return.
_POD_EVENTS: Final = frozenset(
    {
        Event.RUN_POD_SANDBOX,
        Event.STOP_POD_SANDBOX,
        Event.REMOVE_POD_SANDBOX,
        Event.POST_UPDATE_POD_SANDBOX,
    }
)
_CONTAINER_EVENTS: Final = frozenset(
    {
        Event.POST_CREATE_CONTAINER,
        Event.START_CONTAINER,
        Event.POST_START_CONTAINER,
        Event.POST_UPDATE_CONTAINER,
        Event.REMOVE_CONTAINER,
    }
)

_IDX = re.compile(r"^[0-9]{2}$")
_NAME = re.compile(r"^[a-zA-Z0-9_.+-]+$")


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

_T = TypeVar("_T")

#: What update-returning hooks may return: updates (messages or builders) or None.
Updates = Iterable[api.ContainerUpdate | Update] | None
#: What `create_container` may return.
CreateResult = (
    api.ContainerAdjustment
    | Adjustment
    | api.CreateContainerResponse
    | tuple[api.ContainerAdjustment | Adjustment | None, Iterable[api.ContainerUpdate | Update]]
    | None
)
#: What `validate_container_adjustment` may return (a reason rejects).
ValidateResult = str | api.ValidateContainerAdjustmentResponse | None
#: What `configure` may return: a mask, events, or None for "all implemented".
ConfigureResult = int | Iterable[Event] | None
#: Nothing to return (plain or async hook).
NoResult = Awaitable[None] | None


class OnClose(enum.StrEnum):
    """What an external plugin does when the runtime closes the connection."""

    EXIT = "exit"
    RECONNECT = "reconnect"


@dataclass(frozen=True, slots=True)
class Identity:
    """The plugin's registration name and index; `full_name` is ``NN-name``."""

    name: str
    idx: str

    @property
    def full_name(self) -> str:
        return f"{self.idx}-{self.name}"


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


def resolve_identity(
    *,
    name: str | None,
    idx: str | None,
    environ: Mapping[str, str],
    argv0: str,
) -> Identity:
    """Work out (and validate) the plugin's name and index.

    Precedence: the arguments, then `NRI_PLUGIN_NAME` / `NRI_PLUGIN_IDX`, then the
    executable's base name as ``NN-name`` (``.py`` stripped). A name that still carries
    its ``NN-`` prefix (NRI v0.3.0 launched plugins that way) loses it.
    """
    name = name if name else environ.get(ENV_NAME) or None
    idx = idx if idx else environ.get(ENV_IDX) or None
    base = os.path.basename(argv0).removesuffix(".py")
    if idx is None:
        head, sep, tail = base.partition("-")
        if not (sep and _IDX.match(head) and tail):
            raise ValueError(
                f"plugin index: not given (idx=, --idx or ${ENV_IDX}) and the executable "
                f"name {base!r} is not of the form NN-name"
            )
        idx = head
        name = name or tail
    if name is None:
        name = base
    if name.startswith(f"{idx}-") and len(name) > len(idx) + 1:
        name = name[len(idx) + 1 :]
    if not _IDX.match(idx):
        raise ValueError(f"plugin index: expected exactly two digits such as '10', found {idx!r}")
    if not _NAME.match(name):
        raise ValueError(
            f"plugin name: expected a non-empty name of letters, digits and '_.+-', found {name!r}"
        )
    return Identity(name=name, idx=idx)


def implemented_events(plugin_type: type[Plugin]) -> int:
    """The subscription mask of the event hooks `plugin_type` overrides."""
    mask = 0
    for hook, event in HOOK_EVENTS.items():
        if getattr(plugin_type, hook) is not getattr(Plugin, hook):
            mask |= event.bit
    return mask


def _describe(mask: int) -> str:
    known = mask & ((1 << max(Event)) - 1)
    names = [e.name for e in sorted(events_in_mask(known))]
    if mask & ~known:
        names.append(f"unknown bits {mask & ~known:#x}")
    return ", ".join(names) if names else "none"


def subscription_mask(*, implemented: int, requested: int | None, valid: int) -> tuple[int, int]:
    """The mask to send and the bits dropped because the runtime does not know them.

    `requested` (from `configure`) of None or 0 means "every implemented event"; bits
    beyond `implemented` are an error. The result never has bits outside `valid`, and is
    never 0 (which the runtime would read as "everything").
    """
    wanted = requested if requested else implemented
    extra = wanted & ~implemented
    if extra:
        raise ValueError(
            f"event subscription: configure() asked for {_describe(extra)} "
            f"({extra:#x}), which have no hook; expected a subset of the implemented events "
            f"{_describe(implemented)} ({implemented:#x})"
        )
    mask = wanted & valid
    dropped = wanted & ~valid
    if not mask:
        raise ValueError(
            f"event subscription: the runtime accepts none of the subscribed events "
            f"{_describe(wanted)} ({wanted:#x}); it accepts only {valid:#x}"
        )
    return mask, dropped


def setup_logging(*, log_file: str | None = None, level: str | int | None = None) -> None:
    """Send log records to `log_file` (or `$NRI_PLUGIN_LOG`), else to stderr.

    Does nothing if the root logger already has handlers (the host program set logging
    up). `level` defaults to `$NRI_PLUGIN_LOG_LEVEL`, else INFO.
    """
    root = logging.getLogger()
    if root.handlers:
        return
    target = log_file or os.environ.get(ENV_LOG) or None
    resolved = level if level is not None else os.environ.get(ENV_LOG_LEVEL, "INFO")
    if isinstance(resolved, str):
        resolved = resolved.upper()
    handler: logging.Handler = (
        logging.FileHandler(target) if target else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(resolved)


async def _maybe_await(value: Awaitable[_T] | _T) -> _T:
    if inspect.isawaitable(value):
        return await value
    return value


def _updates(
    what: str, items: Iterable[api.ContainerUpdate | Update] | None
) -> list[api.ContainerUpdate]:
    out: list[api.ContainerUpdate] = []
    for item in items or ():
        if isinstance(item, Update):
            out.append(item.build())
        elif isinstance(item, api.ContainerUpdate):
            out.append(item)
        else:
            raise TypeError(
                f"{what}: expected api.ContainerUpdate or Update items, found {type(item).__name__}"
            )
    return out


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


def _error_text(exc: BaseException, timeout_text: str) -> str:
    """An exception's text for a log line; `timeout_text` for a bare TimeoutError."""
    if isinstance(exc, TimeoutError) and not str(exc):
        return timeout_text
    return str(exc) or type(exc).__name__


def _adjustment(value: object) -> api.ContainerAdjustment | None:
    if value is None:
        return None
    if isinstance(value, Adjustment):
        return value.build()
    if isinstance(value, api.ContainerAdjustment):
        return value
    raise TypeError(
        f"create_container result: expected api.ContainerAdjustment or Adjustment, "
        f"found {type(value).__name__}"
    )


class _Session:
    """State of one connection: the trunk, the runtime's identity, sync chunks, sender."""

    def __init__(self, trunk: Trunk) -> None:
        self.trunk = trunk
        self.runtime: RuntimeInfo | None = None
        self.events = 0
        self.sync_pods: list[api.PodSandbox] = []
        self.sync_containers: list[api.Container] = []
        self.sync_chunks = 0
        self.sync_bytes = 0
        #: chunks were dropped because a bound was exceeded
        self.dropped_chunks = False
        self.outbox: asyncio.Queue[
            tuple[api.UpdateContainersRequest, asyncio.Future[list[api.ContainerUpdate]], float]
        ] = asyncio.Queue()
        self.sender: asyncio.Task[None] | None = None
        self.synchronized = False

    def drop_sync(self) -> None:
        """Forget buffered Synchronize chunks (a bound exceeded, or the connection closed)."""
        self.sync_pods = []
        self.sync_containers = []
        self.sync_chunks = self.sync_bytes = 0


class Plugin:
    """Base class of NRI plugins; see the module docstring for the whole picture.

    Override any of the event hooks (each one subscribes the plugin to its event):
    `run_pod_sandbox`, `stop_pod_sandbox`, `remove_pod_sandbox`, `update_pod_sandbox`,
    `post_update_pod_sandbox`, `create_container`, `post_create_container`,
    `start_container`, `post_start_container`, `update_container`,
    `post_update_container`, `stop_container`, `remove_container`,
    `validate_container_adjustment`; and optionally `configure`, `synchronize`,
    `shutdown`, `on_close`.

    A subclass that overrides `__init__` must accept `**kwargs` and pass them on, so that
    `main()` can hand over the command-line options.
    """

    def __init__(
        self,
        *,
        name: str | None = None,
        idx: str | None = None,
        socket_path: str | None = None,
        on_close: OnClose | str = OnClose.EXIT,
        logger: logging.Logger | None = None,
        log_file: str | None = None,
        connection: socket.socket | None = None,
        environ: Mapping[str, str] | None = None,
        argv0: str | None = None,
        max_in_flight: int = MAX_IN_FLIGHT,
        max_rejected_pending: int = MAX_REJECTED_PENDING,
        max_sync_chunks: int = MAX_SYNC_CHUNKS,
        max_sync_bytes: int = MAX_SYNC_BYTES,
    ) -> None:
        env = os.environ if environ is None else environ
        self.max_in_flight = max_in_flight
        self.max_rejected_pending = max_rejected_pending
        self.max_sync_chunks = max_sync_chunks
        self.max_sync_bytes = max_sync_bytes
        self.identity = resolve_identity(
            name=name, idx=idx, environ=env, argv0=sys.argv[0] if argv0 is None else argv0
        )
        self.implemented_events = implemented_events(type(self))
        if not self.implemented_events:
            raise TypeError(
                f"plugin {type(self).__qualname__}: expected at least one event hook "
                f"({', '.join(HOOK_EVENTS)}) to be overridden, found none"
            )
        self.on_close_action = OnClose(on_close)
        self.log = logger or logging.getLogger(f"nri_api.stub.{self.identity.full_name}")
        self.log_file = log_file
        self._connection = connection
        self._socket_fd: int | None = None
        self._fd_used = False
        fd_text = env.get(ENV_SOCKET, "")
        if connection is None and fd_text:
            try:
                self._socket_fd = int(fd_text)
            except ValueError as exc:
                raise ValueError(
                    f"${ENV_SOCKET}: expected the number of an inherited socket fd, "
                    f"found {fd_text!r}"
                ) from exc
        self.socket_path = socket_path or DEFAULT_SOCKET_PATH
        if self._socket_fd is None and connection is None:
            size = len(os.fsencode(self.socket_path))
            if size > MAX_SOCKET_PATH:
                raise ValueError(
                    f"NRI socket path: expected at most {MAX_SOCKET_PATH} bytes (the Unix "
                    f"socket path limit), found {size}: {self.socket_path[:60]!r}..."
                )
        self._session: _Session | None = None
        self._stop: asyncio.Event | None = None
        self._stop_requested = False
        self._idle: asyncio.Event | None = None
        self._in_flight = 0
        self._methods: dict[str, tuple[type[Message], Callable[[Any], Awaitable[Message]]]] = {
            "Configure": (api.ConfigureRequest, self._on_configure),
            "Synchronize": (api.SynchronizeRequest, self._on_synchronize),
            "Shutdown": (api.Empty, self._on_shutdown),
            "StateChange": (api.StateChangeEvent, self._on_state_change),
            "CreateContainer": (api.CreateContainerRequest, self._on_create_container),
            "UpdateContainer": (api.UpdateContainerRequest, self._on_update_container),
            "StopContainer": (api.StopContainerRequest, self._on_stop_container),
            "UpdatePodSandbox": (api.UpdatePodSandboxRequest, self._on_update_pod_sandbox),
            "ValidateContainerAdjustment": (
                api.ValidateContainerAdjustmentRequest,
                self._on_validate,
            ),
        }
        simple: dict[str, tuple[type[Message], Event]] = {
            "RunPodSandbox": (api.RunPodSandboxRequest, Event.RUN_POD_SANDBOX),
            "StopPodSandbox": (api.StopPodSandboxRequest, Event.STOP_POD_SANDBOX),
            "RemovePodSandbox": (api.RemovePodSandboxRequest, Event.REMOVE_POD_SANDBOX),
            "PostUpdatePodSandbox": (
                api.PostUpdatePodSandboxRequest,
                Event.POST_UPDATE_POD_SANDBOX,
            ),
            "PostCreateContainer": (api.PostCreateContainerRequest, Event.POST_CREATE_CONTAINER),
            "StartContainer": (api.StartContainerRequest, Event.START_CONTAINER),
            "PostStartContainer": (api.PostStartContainerRequest, Event.POST_START_CONTAINER),
            "PostUpdateContainer": (api.PostUpdateContainerRequest, Event.POST_UPDATE_CONTAINER),
            "RemoveContainer": (api.RemoveContainerRequest, Event.REMOVE_CONTAINER),
        }
        for method, (request_type, event) in simple.items():
            self._methods[method] = (request_type, self._simple_event_handler(event))
        self._method_events: dict[str, Event] = {
            "CreateContainer": Event.CREATE_CONTAINER,
            "UpdateContainer": Event.UPDATE_CONTAINER,
            "StopContainer": Event.STOP_CONTAINER,
            "UpdatePodSandbox": Event.UPDATE_POD_SANDBOX,
            "ValidateContainerAdjustment": Event.VALIDATE_CONTAINER_ADJUSTMENT,
            **{method: event for method, (_, event) in simple.items()},
        }

    # -- identity and state ----------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.identity.name

    @property
    def idx(self) -> str:
        return self.identity.idx

    @property
    def full_name(self) -> str:
        return self.identity.full_name

    @property
    def pre_registered(self) -> bool:
        """True when the runtime started us with the socket on an inherited fd."""
        return self._socket_fd is not None

    @property
    def runtime(self) -> RuntimeInfo | None:
        """The runtime of the current connection, once it has sent Configure."""
        return self._session.runtime if self._session else None

    @property
    def ready(self) -> bool:
        """True once the current connection is registered, configured and synchronized."""
        session = self._session
        return session is not None and session.synchronized and not session.trunk.closed

    @property
    def events(self) -> int:
        """The subscription mask sent on the current connection (0 before Configure)."""
        return self._session.events if self._session else 0

    # -- hooks to override -----------------------------------------------------------------

    def configure(
        self, config: str, runtime: RuntimeInfo
    ) -> ConfigureResult | Awaitable[ConfigureResult]:
        """Take the configuration (`config` is "" for external plugins).

        Return None for every implemented event, or a mask / events to narrow it.
        """
        return None

    def synchronize(
        self, pods: Sequence[api.PodSandbox], containers: Sequence[api.Container]
    ) -> Updates | Awaitable[Updates]:
        """See every existing pod and container; return updates for any of them."""
        return None

    def shutdown(self) -> NoResult:
        """Called on a Shutdown request (no runtime released so far sends one)."""
        return None

    def on_close(self) -> NoResult:
        """Called after the connection to the runtime was lost (not after `stop()`)."""
        return None

    def updates_failed(
        self, updates: Sequence[api.ContainerUpdate], error: BaseException
    ) -> NoResult:
        """Called when an `update_containers` request got no answer or an error (not when
        the connection closed: the next Synchronize covers that).  The stub does not
        resend it, as a newer decision may have replaced it; re-assert what holds now."""
        return None

    def connect_failed(self, error: OSError, attempt: int) -> NoResult:
        """Called after each failed connection attempt (`attempt` counts from 1 and
        restarts after a success), before the stub logs it and retries or gives up."""
        return None

    def run_pod_sandbox(self, pod: api.PodSandbox) -> NoResult:
        raise NotImplementedError

    def stop_pod_sandbox(self, pod: api.PodSandbox) -> NoResult:
        raise NotImplementedError

    def remove_pod_sandbox(self, pod: api.PodSandbox) -> NoResult:
        raise NotImplementedError

    def update_pod_sandbox(
        self,
        pod: api.PodSandbox,
        overhead: api.LinuxResources,
        resources: api.LinuxResources,
    ) -> NoResult:
        raise NotImplementedError

    def post_update_pod_sandbox(self, pod: api.PodSandbox) -> NoResult:
        raise NotImplementedError

    def create_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> CreateResult | Awaitable[CreateResult]:
        """Return an adjustment, a full response, (adjustment, updates), or None."""
        raise NotImplementedError

    def post_create_container(self, pod: api.PodSandbox, container: api.Container) -> NoResult:
        raise NotImplementedError

    def start_container(self, pod: api.PodSandbox, container: api.Container) -> NoResult:
        raise NotImplementedError

    def post_start_container(self, pod: api.PodSandbox, container: api.Container) -> NoResult:
        raise NotImplementedError

    def update_container(
        self, pod: api.PodSandbox, container: api.Container, resources: api.LinuxResources
    ) -> Updates | Awaitable[Updates]:
        raise NotImplementedError

    def post_update_container(self, pod: api.PodSandbox, container: api.Container) -> NoResult:
        raise NotImplementedError

    def stop_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> Updates | Awaitable[Updates]:
        raise NotImplementedError

    def remove_container(self, pod: api.PodSandbox, container: api.Container) -> NoResult:
        raise NotImplementedError

    def validate_container_adjustment(
        self, request: api.ValidateContainerAdjustmentRequest
    ) -> ValidateResult | Awaitable[ValidateResult]:
        """Return None to accept; return or raise a reason to reject."""
        raise NotImplementedError

    # -- unsolicited updates ---------------------------------------------------------------

    async def update_containers(
        self,
        updates: Iterable[api.ContainerUpdate | Update],
        evictions: Iterable[api.ContainerEviction] = (),
        *,
        timeout: float = DEFAULT_UPDATE_TIMEOUT,
    ) -> list[api.ContainerUpdate] | None:
        """Ask the runtime to update containers outside of any event.

        Outside a hook: waits until no hook is running, sends, and returns the updates
        the runtime could not apply. Inside a hook (or in a task the hook started, while
        the hook still runs): queues the request, returns None at once, and the request
        goes out after the hook returns (a synchronous call would deadlock runtimes up
        to NRI v0.12.1). Raises ConnectionClosed if not connected.
        Note: runtimes ignore `evictions`.
        """
        session = self._session
        if session is None or session.trunk.closed:
            raise ConnectionClosed(f"plugin {self.full_name}: not connected to the runtime")
        request = api.UpdateContainersRequest(
            update=_updates("update_containers", updates), evict=list(evictions)
        )
        future: asyncio.Future[list[api.ContainerUpdate]] = (
            asyncio.get_running_loop().create_future()
        )
        session.outbox.put_nowait((request, future, timeout))
        scope = _IN_HOOK.get()
        if scope is not None and scope.active:
            self.log.debug(
                "update_containers called inside a hook: deferred until it returns (%d updates)",
                len(request.update),
            )
            return None
        return await future

    # -- running ---------------------------------------------------------------------------

    @classmethod
    def main(cls, argv: Sequence[str] | None = None, **kwargs: Any) -> int:
        """Parse ``--name --idx --socket --log-file --log-level --reconnect`` and run."""
        parser = argparse.ArgumentParser(description=cls.__doc__)
        parser.add_argument("--name", help=f"plugin name (default ${ENV_NAME} or argv[0])")
        parser.add_argument("--idx", help=f"plugin index, two digits (default ${ENV_IDX})")
        parser.add_argument("--socket", help=f"NRI socket path (default {DEFAULT_SOCKET_PATH})")
        parser.add_argument("--log-file", help=f"log to this file (default ${ENV_LOG} or stderr)")
        parser.add_argument("--log-level", help="DEBUG, INFO, WARNING, ... (default INFO)")
        parser.add_argument(
            "--reconnect", action="store_true", help="reconnect instead of exiting on close"
        )
        args = parser.parse_args(argv)
        setup_logging(log_file=args.log_file, level=args.log_level)
        try:
            plugin = cls(
                name=args.name,
                idx=args.idx,
                socket_path=args.socket,
                on_close=OnClose.RECONNECT if args.reconnect else OnClose.EXIT,
                log_file=args.log_file,
                **kwargs,
            )
        except (TypeError, ValueError) as exc:
            logging.getLogger("nri_api.stub").error("%s", exc)
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return plugin.run()

    def run(self) -> int:
        """Serve until stopped (SIGTERM/SIGINT: 0) or the connection is lost for good (1)."""
        setup_logging(log_file=self.log_file)

        async def main() -> int:
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, self.request_stop)
            try:
                return await self.serve()
            finally:
                for signum in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(signum)

        return asyncio.run(main())

    def request_stop(self) -> None:
        """Ask `serve()` to stop (synchronous, so usable from a signal handler)."""
        self.log.info("plugin %s: stop requested", self.full_name)
        self._stop_requested = True
        if self._stop is not None:
            self._stop.set()

    _request_stop = request_stop  # the name used before request_stop() was public

    async def stop(self) -> None:
        """Make `serve()` close the connection and return 0."""
        self.request_stop()
        session = self._session
        if session is not None:
            await session.trunk.close()

    async def serve(self) -> int:
        """Connect, register and serve; returns 0 after `stop()`, 1 if the connection is lost.

        With `OnClose.RECONNECT` (external mode only) a lost connection is followed by
        `on_close()` and a reconnect with backoff instead of returning.
        """
        self._stop = asyncio.Event()
        if self._stop_requested:  # stop() came before serve() got to run
            self._stop.set()
        self._idle = asyncio.Event()
        self._idle.set()
        backoff = BACKOFF_INITIAL
        failures = 0
        try:
            while not self._stop.is_set():
                try:
                    trunk = await self._open()
                except OSError as exc:
                    failures += 1
                    await self._call_quietly(
                        "connect_failed", functools.partial(self.connect_failed, exc, failures)
                    )
                    if not self._may_reconnect():
                        self.log.error(
                            "plugin %s: cannot connect to %s: %s",
                            self.full_name,
                            self.endpoint,
                            exc,
                        )
                        return 1
                    self.log.info(
                        "plugin %s: cannot connect to %s (%s); retrying in %.1fs",
                        self.full_name,
                        self.endpoint,
                        exc,
                        backoff,
                    )
                    await self._sleep(backoff)
                    backoff = min(backoff * 2, BACKOFF_MAX)
                    continue
                failures = 0
                registered = await self._run_session(trunk)
                if registered:
                    backoff = BACKOFF_INITIAL
                if self._stop.is_set():
                    return 0
                await self._call_quietly("on_close", self.on_close)
                if not self._may_reconnect():
                    return 1
                self.log.info(
                    "plugin %s: reconnecting to %s in %.1fs",
                    self.full_name,
                    self.endpoint,
                    backoff,
                )
                await self._sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
            return 0
        finally:
            self._session = None
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

    @property
    def endpoint(self) -> str:
        """What the plugin connects through, for messages: a socket path or an fd."""
        if self._connection is not None:
            return "the socket given to the plugin"
        if self._socket_fd is not None:
            return f"the inherited socket fd {self._socket_fd} (${ENV_SOCKET})"
        return self.socket_path

    async def _open(self) -> Trunk:
        bounds = {
            "max_in_flight": self.max_in_flight,
            "max_rejected_pending": self.max_rejected_pending,
        }
        if self._connection is not None:
            sock, self._connection = self._connection, None
            return await Trunk.from_socket(sock, **bounds)
        if self._socket_fd is not None:
            if self._fd_used:
                raise ConnectionClosed(
                    f"plugin {self.full_name}: the inherited socket fd {self._socket_fd} "
                    "was already used and closed"
                )
            self._fd_used = True
            return await Trunk.from_fd(self._socket_fd, **bounds)
        return await Trunk.connect(self.socket_path, **bounds)

    async def _run_session(self, trunk: Trunk) -> bool:
        """Serve one connection until it closes; True if registration succeeded."""
        assert self._stop is not None
        session = _Session(trunk)
        self._session = session
        session.sender = asyncio.create_task(self._send_updates(session), name="nri-updates")
        trunk.serve(self._dispatch)
        registered = False
        stop_wait = asyncio.create_task(self._stop.wait())
        try:
            self.log.info("plugin %s: registering", self.full_name)
            request = api.RegisterPluginRequest(
                plugin_name=self.name, plugin_idx=self.idx, NRI_version=STUB_NRI_VERSION
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
                    self.log.error(
                        "plugin %s: registration failed: %s",
                        self.full_name,
                        _error_text(
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
                self.log.info("plugin %s: registered", self.full_name)
            closed = asyncio.create_task(trunk.wait_closed())
            await asyncio.wait({closed, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            closed.cancel()
            if not trunk.closed:
                await trunk.close()
            else:
                await trunk.wait_closed()
            if not self._stop.is_set():
                self.log.warning(
                    "plugin %s: connection to the runtime lost: %s",
                    self.full_name,
                    trunk.close_reason,
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
            if self._session is session:
                self._session = None
        return registered

    def _fail_outbox(self, session: _Session) -> None:
        while not session.outbox.empty():
            _, future, _ = session.outbox.get_nowait()
            if not future.done():
                future.set_exception(
                    ConnectionClosed(
                        f"plugin {self.full_name}: update_containers not sent, connection closed"
                    )
                )

    async def _send_updates(self, session: _Session) -> None:
        assert self._idle is not None
        while True:
            request, future, timeout = await session.outbox.get()
            await self._idle.wait()
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
                        ConnectionClosed(f"plugin {self.full_name}: connection closed")
                    )
                raise
            except Exception as exc:
                self.log.warning(
                    "plugin %s: UpdateContainers of %d update(s) failed: %s",
                    self.full_name,
                    len(request.update),
                    _error_text(
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
                        functools.partial(self.updates_failed, list(request.update), exc),
                    )
                continue
            if failed:
                self.log.warning(
                    "plugin %s: the runtime could not apply %d update(s): %s",
                    self.full_name,
                    len(failed),
                    ", ".join(u.container_id for u in failed),
                )
            if not future.done():
                future.set_result(failed)

    async def _call_quietly(self, what: str, fn: Callable[[], object]) -> None:
        try:
            await _maybe_await(fn())
        except Exception:
            self.log.exception("plugin %s: %s() failed", self.full_name, what)

    # -- dispatch --------------------------------------------------------------------------

    async def _dispatch(
        self, service: str, method: str, payload: bytes, deadline: float | None
    ) -> bytes:
        if service != api.PLUGIN_SERVICE:
            raise RPCError(StatusCode.UNIMPLEMENTED, f"service {service}")
        entry = self._methods.get(method)
        if entry is None:
            raise RPCError(StatusCode.UNIMPLEMENTED, f"method {method}")
        event = self._method_events.get(method)
        if event is not None and not self.implemented_events & event.bit:
            raise RPCError(
                StatusCode.UNIMPLEMENTED,
                f"method {method}: plugin {self.full_name} has no {_EVENT_HOOKS[event]}() hook",
            )
        request_type, handler = entry
        try:
            request = request_type.FromString(payload)
        except DecodeError as exc:
            raise RPCError(
                StatusCode.INTERNAL,
                f"method {method}: cannot decode {request_type.__name__}: {exc}",
            ) from exc
        assert self._idle is not None
        self._in_flight += 1
        self._idle.clear()
        scope = _HookScope()
        token = _IN_HOOK.set(scope)
        try:
            reply = await handler(request)
        except RPCError:
            raise
        except Exception as exc:
            self.log.exception("plugin %s: %s failed", self.full_name, method)
            raise RPCError(StatusCode.UNKNOWN, str(exc) or type(exc).__name__) from exc
        finally:
            scope.active = False
            _IN_HOOK.reset(token)
            self._in_flight -= 1
            if not self._in_flight:
                self._idle.set()
        return reply.SerializeToString()

    async def _on_configure(self, request: api.ConfigureRequest) -> api.ConfigureResponse:
        session = self._session
        assert session is not None
        if session.runtime is not None:
            # The runtime configures a plugin once, right after registration (Go's stub
            # does not guard against a second call at all).  Running the hook again would
            # reset the plugin's state under containers that keep their resources, so the
            # second Configure is refused and the first one stays in force.
            self.log.warning(
                "plugin %s: second Configure on one connection refused (runtime %s %s)",
                self.full_name,
                request.runtime_name,
                request.runtime_version,
            )
            raise RPCError(
                StatusCode.FAILED_PRECONDITION,
                f"Configure: expected once per connection, found a second call; plugin "
                f"{self.full_name} keeps the configuration of the first",
            )
        inferred = infer_runtime_nri_version(
            nri_version=request.NRI_version,
            runtime_name=request.runtime_name,
            runtime_version=request.runtime_version,
        )
        nri_version = inferred.version
        runtime = RuntimeInfo(
            name=request.runtime_name,
            version=request.runtime_version,
            nri_version=nri_version,
            nri_version_source=inferred.source,
            registration_timeout=(
                request.registration_timeout / 1000
                if request.registration_timeout > 0
                else DEFAULT_REGISTRATION_TIMEOUT
            ),
            request_timeout=(
                request.request_timeout / 1000
                if request.request_timeout > 0
                else DEFAULT_REQUEST_TIMEOUT
            ),
        )
        session.runtime = runtime
        self.log.info(
            "plugin %s: configuring for %s %s (%s)",
            self.full_name,
            runtime.name,
            runtime.version,
            inferred.detail,
        )
        requested = await _maybe_await(self.configure(request.config, runtime))
        if requested is not None and not isinstance(requested, int):
            requested = event_mask(requested)
        valid = valid_events_mask(nri_version)
        mask, dropped = subscription_mask(
            implemented=self.implemented_events, requested=requested, valid=valid
        )
        if dropped:
            self.log.warning(
                "plugin %s: runtime %s %s (NRI %s) does not know the events %s; not subscribed",
                self.full_name,
                runtime.name,
                runtime.version,
                nri_version,
                _describe(dropped),
            )
        session.events = mask
        self.log.info("plugin %s: subscribing to %s (%#x)", self.full_name, _describe(mask), mask)
        return api.ConfigureResponse(events=mask)

    async def _on_synchronize(self, request: api.SynchronizeRequest) -> api.SynchronizeResponse:
        session = self._session
        assert session is not None
        if request.more:
            chunks = session.sync_chunks + 1
            size = session.sync_bytes + request.ByteSize()
            if chunks > self.max_sync_chunks or size > self.max_sync_bytes:
                # the runtime must not make us buffer without end: drop the connection
                # (and the chunks); the reconnect starts a fresh Synchronize
                session.drop_sync()
                session.dropped_chunks = True
                error = RPCError(
                    StatusCode.RESOURCE_EXHAUSTED,
                    f"Synchronize: expected at most {self.max_sync_chunks} chunks and "
                    f"{self.max_sync_bytes} bytes buffered before the last chunk, found "
                    f"{chunks} chunks and {size} bytes; closing the connection",
                )
                await session.trunk.close(error)
                raise error
            session.sync_chunks, session.sync_bytes = chunks, size
        session.sync_pods.extend(request.pods)
        session.sync_containers.extend(request.containers)
        if request.more:
            return api.SynchronizeResponse(more=True)
        pods, containers = session.sync_pods, session.sync_containers
        session.drop_sync()
        updates = await _maybe_await(self.synchronize(pods, containers))
        reply = api.SynchronizeResponse(update=_updates("synchronize result", updates))
        session.synchronized = True
        return reply

    async def _on_shutdown(self, request: api.Empty) -> api.Empty:
        await _maybe_await(self.shutdown())
        return api.Empty()

    async def _on_state_change(self, request: api.StateChangeEvent) -> api.Empty:
        try:
            event = Event(request.event)
        except ValueError:
            self.log.debug(
                "plugin %s: ignoring unknown StateChange event %d", self.full_name, request.event
            )
            return api.Empty()
        if event not in _POD_EVENTS and event not in _CONTAINER_EVENTS:
            self.log.debug("plugin %s: ignoring StateChange for %s", self.full_name, event.name)
            return api.Empty()
        if not self.implemented_events & event.bit:
            self.log.debug("plugin %s: no hook for StateChange %s", self.full_name, event.name)
            return api.Empty()
        await self._call_simple(event, request.pod, request.container)
        return api.Empty()

    async def _call_simple(
        self, event: Event, pod: api.PodSandbox, container: api.Container
    ) -> None:
        hook = getattr(self, _EVENT_HOOKS[event])
        if event in _POD_EVENTS:
            await _maybe_await(hook(pod))
        else:
            await _maybe_await(hook(pod, container))

    def _simple_event_handler(self, event: Event) -> Callable[[Any], Awaitable[Message]]:
        response_type: type[Message] = {
            Event.RUN_POD_SANDBOX: api.RunPodSandboxResponse,
            Event.STOP_POD_SANDBOX: api.StopPodSandboxResponse,
            Event.REMOVE_POD_SANDBOX: api.RemovePodSandboxResponse,
            Event.POST_UPDATE_POD_SANDBOX: api.PostUpdatePodSandboxResponse,
            Event.POST_CREATE_CONTAINER: api.PostCreateContainerResponse,
            Event.START_CONTAINER: api.StartContainerResponse,
            Event.POST_START_CONTAINER: api.PostStartContainerResponse,
            Event.POST_UPDATE_CONTAINER: api.PostUpdateContainerResponse,
            Event.REMOVE_CONTAINER: api.RemoveContainerResponse,
        }[event]

        async def handle(request: Any) -> Message:
            container = request.container if event in _CONTAINER_EVENTS else api.Container()
            await self._call_simple(event, request.pod, container)
            return response_type()

        return handle

    async def _on_create_container(
        self, request: api.CreateContainerRequest
    ) -> api.CreateContainerResponse:
        result = await _maybe_await(self.create_container(request.pod, request.container))
        if isinstance(result, api.CreateContainerResponse):
            return result
        if isinstance(result, tuple):
            if len(result) != 2:
                raise TypeError(
                    f"create_container result: expected (adjustment, updates), "
                    f"found a tuple of {len(result)}"
                )
            adjust, updates = result
            return api.CreateContainerResponse(
                adjust=_adjustment(adjust), update=_updates("create_container updates", updates)
            )
        return api.CreateContainerResponse(adjust=_adjustment(result))

    async def _on_update_container(
        self, request: api.UpdateContainerRequest
    ) -> api.UpdateContainerResponse:
        result = await _maybe_await(
            self.update_container(request.pod, request.container, request.linux_resources)
        )
        if isinstance(result, api.UpdateContainerResponse):
            return result
        return api.UpdateContainerResponse(update=_updates("update_container result", result))

    async def _on_stop_container(
        self, request: api.StopContainerRequest
    ) -> api.StopContainerResponse:
        result = await _maybe_await(self.stop_container(request.pod, request.container))
        if isinstance(result, api.StopContainerResponse):
            return result
        return api.StopContainerResponse(update=_updates("stop_container result", result))

    async def _on_update_pod_sandbox(
        self, request: api.UpdatePodSandboxRequest
    ) -> api.UpdatePodSandboxResponse:
        await _maybe_await(
            self.update_pod_sandbox(
                request.pod, request.overhead_linux_resources, request.linux_resources
            )
        )
        return api.UpdatePodSandboxResponse()

    async def _on_validate(
        self, request: api.ValidateContainerAdjustmentRequest
    ) -> api.ValidateContainerAdjustmentResponse:
        try:
            result = await _maybe_await(self.validate_container_adjustment(request))
        except RPCError:
            raise
        except Exception as exc:
            return api.ValidateContainerAdjustmentResponse(
                reject=True, reason=str(exc) or type(exc).__name__
            )
        if isinstance(result, api.ValidateContainerAdjustmentResponse):
            return result
        if result:
            return api.ValidateContainerAdjustmentResponse(reject=True, reason=str(result))
        return api.ValidateContainerAdjustmentResponse()
