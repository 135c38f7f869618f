"""The plugin stub: subclass `Plugin`, override the hooks you need, call `run()`.

Theory of operation
-------------------
A plugin is a `Plugin` subclass whose snake_case hooks are named after the NRI RPCs
(`create_container`, `stop_container`, `run_pod_sandbox`, ...). Hooks may be plain or
`async` functions; an awaitable result is awaited. The stub owns everything else, in
four modules below this one:

* `nri_api.connection`: connect, register, reconnect with backoff, the outbox of
  unsolicited updates, the registration timeout.
* `nri_api.session`: the state of one connection and the bounds kept per connection
  (Synchronize chunks, a second Configure), and the gate that holds unsolicited updates
  back while a hook runs.
* `nri_api.dispatch`: request -> hook -> response, the subscription mask, Synchronize
  chunking hidden from the plugin; every per-RPC fact comes from the table in
  `nri_api.rpc`.

This module has the public `Plugin`: identity, logging, `run` / `serve` / `stop` /
`update_containers` / `main`, and the connection-side hooks (`on_close`,
`connect_failed`, `updates_failed`).

* **Identity.** `name` and `idx` come from the arguments, else `NRI_PLUGIN_NAME` and
  `NRI_PLUGIN_IDX`, else the executable's name ``NN-name`` (a ``.py`` suffix is
  stripped). idx must be two digits and name must use ``[a-zA-Z0-9_.+-]``, as the
  runtime demands; a bad value fails at construction, as do a plugin overriding no event
  hook and a socket path over the Unix limit.
* **Unsolicited updates.** `update_containers()` called from inside a hook returns None
  at once and the updates go out after the hook returns (failures are logged and reach
  `updates_failed()`); called from anywhere else it waits and returns the failed
  updates. Why, and what counts as "inside": `nri_api.connection` and `nri_api.session`.
* **Logging** uses the stdlib `logging` module, logger ``nri_api.stub.<NN-name>`` unless
  `logger` is given. `run()` (which owns the process) sets up logging: to the file
  `log_file` or `$NRI_PLUGIN_LOG` if given, else to stderr (discarded in pre-registered
  mode, so give a log file there). `serve()` leaves logging alone.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import signal
import socket
import sys
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from nri_api import api
from nri_api.builders import Update
from nri_api.connection import (
    DEFAULT_REGISTRATION_TIMEOUT,
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_SOCKET_PATH,
    MAX_SOCKET_PATH,
    STUB_NRI_VERSION,
    Connection,
    NoResult,
    OnClose,
    socket_fd_from_env,
)
from nri_api.dispatch import (
    ConfigureResult,
    CreateResult,
    Dispatcher,
    Hooks,
    Updates,
    ValidateResult,
    build_updates,
    implemented_events,
    subscription_mask,
)
from nri_api.loop import run as run_loop
from nri_api.rpc import HOOK_EVENTS
from nri_api.session import MAX_SYNC_BYTES, MAX_SYNC_CHUNKS, RuntimeInfo, Session, in_hook
from nri_api.transport import MAX_IN_FLIGHT, MAX_REJECTED_PENDING

__all__ = [
    "DEFAULT_REGISTRATION_TIMEOUT",
    "DEFAULT_REQUEST_TIMEOUT",
    "DEFAULT_SOCKET_PATH",
    "DEFAULT_UPDATE_TIMEOUT",
    "HOOK_EVENTS",
    "MAX_SOCKET_PATH",
    "MAX_SYNC_BYTES",
    "MAX_SYNC_CHUNKS",
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

#: How long `update_containers` waits for the runtime's answer by default (seconds).
DEFAULT_UPDATE_TIMEOUT: Final = 30.0

ENV_NAME: Final = "NRI_PLUGIN_NAME"
ENV_IDX: Final = "NRI_PLUGIN_IDX"
ENV_LOG: Final = "NRI_PLUGIN_LOG"
ENV_LOG_LEVEL: Final = "NRI_PLUGIN_LOG_LEVEL"

_IDX = re.compile(r"^[0-9]{2}$")
_NAME = re.compile(r"^[a-zA-Z0-9_.+-]+$")


@dataclass(frozen=True, slots=True)
class Identity:
    """The plugin's registration name and index; `full_name` is ``NN-name``."""

    name: str
    idx: str

    @property
    def full_name(self) -> str:
        return f"{self.idx}-{self.name}"


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


class Plugin(Hooks):
    """Base class of NRI plugins; see the module docstring for the whole picture.

    Override any of the event hooks (each one subscribes the plugin to its event):
    `run_pod_sandbox`, `stop_pod_sandbox`, `remove_pod_sandbox`, `update_pod_sandbox`,
    `post_update_pod_sandbox`, `create_container`, `post_create_container`,
    `start_container`, `post_start_container`, `update_container`,
    `post_update_container`, `stop_container`, `remove_container`,
    `validate_container_adjustment`; and optionally `configure`, `synchronize`,
    `shutdown`, `on_close`, `connect_failed`, `updates_failed`.

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
        self.log = logger or logging.getLogger(f"nri_api.stub.{self.identity.full_name}")
        self.log_file = log_file
        self._link = Connection(
            self,
            socket_path=socket_path or DEFAULT_SOCKET_PATH,
            on_close=OnClose(on_close),
            connection=connection,
            socket_fd=None if connection is not None else socket_fd_from_env(env),
        )
        self._dispatcher = Dispatcher(hooks=self, owner=self, link=self._link)

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
    def socket_path(self) -> str:
        """The socket path of external mode (unused when pre-registered)."""
        return self._link.socket_path

    @property
    def on_close_action(self) -> OnClose:
        return self._link.on_close_action

    @property
    def pre_registered(self) -> bool:
        """True when the runtime started us with the socket on an inherited fd."""
        return self._link.pre_registered

    @property
    def endpoint(self) -> str:
        """What the plugin connects through, for messages: a socket path or an fd."""
        return self._link.endpoint

    @property
    def _session(self) -> Session | None:
        return self._link.session

    @property
    def runtime(self) -> RuntimeInfo | None:
        """The runtime of the current connection, once it has sent Configure."""
        session = self._link.session
        return session.runtime if session else None

    @property
    def ready(self) -> bool:
        """True once the current connection is registered, configured and synchronized."""
        session = self._link.session
        return session is not None and session.synchronized and not session.trunk.closed

    @property
    def writing(self) -> bool:
        """True while a message to the runtime is still being written on the current
        connection (a reply larger than the socket's buffer: `Trunk.writing`)."""
        session = self._link.session
        return session is not None and session.trunk.writing

    async def written(self) -> None:
        """Return once what was written to the runtime before this call has left whole
        (`Trunk.written`); at once without a connection."""
        session = self._link.session
        if session is not None:
            await session.trunk.written()

    @property
    def events(self) -> int:
        """The subscription mask sent on the current connection (0 before Configure)."""
        session = self._link.session
        return session.events if session else 0

    # -- connection hooks to override ------------------------------------------------------

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
        self._link.require_session()
        request = api.UpdateContainersRequest(
            update=build_updates("update_containers", updates), evict=list(evictions)
        )
        future = self._link.enqueue(request, timeout)
        if in_hook():
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

        return run_loop(main())

    def request_stop(self) -> None:
        """Ask `serve()` to stop (synchronous, so usable from a signal handler)."""
        self.log.info("plugin %s: stop requested", self.full_name)
        self._link.request_stop()

    _request_stop = request_stop  # the name used before request_stop() was public

    async def stop(self) -> None:
        """Make `serve()` close the connection and return 0."""
        self.request_stop()
        session = self._link.session
        if session is not None:
            await session.trunk.close()

    async def serve(self) -> int:
        """Connect, register and serve; returns 0 after `stop()`, 1 if the connection is lost.

        With `OnClose.RECONNECT` (external mode only) a lost connection is followed by
        `on_close()` and a reconnect with backoff instead of returning.
        """
        return await self._link.serve(self._dispatch)

    def _dispatch(
        self, service: str, method: str, payload: bytes, deadline: float | None
    ) -> Awaitable[bytes]:
        # the dispatcher's coroutine itself, not one more wrapped around it (the hot path)
        return self._dispatcher.dispatch(service, method, payload, deadline)
