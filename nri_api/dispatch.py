"""Dispatch: a request from the runtime -> the plugin's hook -> the response.

Theory of operation
-------------------
`Hooks` declares the hooks a plugin overrides, with snake_case names after the NRI RPCs
(`create_container`, `stop_container`, `run_pod_sandbox`, ...). Hooks may be plain or
`async` functions; an awaitable result is awaited. `Dispatcher` serves the Plugin service
for them, with every fact about an RPC (request and response type, event, hook, shape)
taken from the table in `nri_api.rpc`:

* **Dispatch.** Both the v0.12+ dedicated RPCs (RunPodSandbox, StartContainer, ...) and
  the older `StateChange` reach the same hook. An RPC whose hook is not overridden, an
  unknown method or an unknown service gets UNIMPLEMENTED, which makes a v0.12+ runtime
  fall back to StateChange. A request that does not decode gets INTERNAL. A hook
  exception reaches the runtime as an UNKNOWN status with the exception's text (raise
  `RPCError` to pick the code), except for `validate_container_adjustment`, where it
  means "reject, for this reason". While a hook runs, the connection's `HookGate` holds
  back unsolicited updates (see `nri_api.connection`).
* **Shapes.** Pod and container events (`rpc.Shape.POD_EVENT`, `CONTAINER_EVENT`) share
  one handler: ``hook(pod)`` or ``hook(pod, container)`` and an empty response. Lifecycle
  RPCs and events with a reply have a handler each; a table entry without one fails at
  construction.
* **Subscription.** The event mask is derived from the overridden event hooks
  (`implemented_events`). `configure()` may narrow it by returning a mask (or events);
  asking for an event without a hook is an error. The mask is then clipped to what the
  runtime's NRI version accepts (an older runtime rejects unknown bits and drops the
  plugin); dropped events are logged. The runtime's NRI version is
  `ConfigureRequest.NRI_version`, else inferred from runtime name and version.
* **Synchronize chunking** is hidden: chunks marked ``more`` are buffered by the session
  (within its bounds) and answered ``{more: true}``; `synchronize()` is called once with
  every pod and container.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol

from google.protobuf.message import DecodeError, Message

from nri_api import api
from nri_api.builders import Adjustment, Update
from nri_api.connection import (
    DEFAULT_REGISTRATION_TIMEOUT,
    DEFAULT_REQUEST_TIMEOUT,
    Connection,
    NoResult,
    maybe_await,
)
from nri_api.errors import RPCError, StatusCode
from nri_api.events import Event, event_mask, events_in_mask, valid_events_mask
from nri_api.rpc import (
    EVENT_HOOKS,
    HOOK_EVENTS,
    PLUGIN_RPCS,
    POD_EVENTS,
    RPC,
    SIMPLE_EVENTS,
    Shape,
)
from nri_api.session import RuntimeInfo, Session
from nri_api.version import infer_runtime_nri_version

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

_Handler = Callable[[Any], Awaitable[Message]]


class Hooks:
    """The hooks a plugin overrides; each event hook it overrides subscribes its event."""

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


class Plugged(Protocol):
    """What dispatch needs of the plugin besides its hooks (the `Plugin` is both)."""

    log: logging.Logger
    implemented_events: int

    @property
    def full_name(self) -> str: ...


def implemented_events(plugin_type: type[Hooks]) -> int:
    """The subscription mask of the event hooks `plugin_type` overrides."""
    mask = 0
    for hook, event in HOOK_EVENTS.items():
        if getattr(plugin_type, hook) is not getattr(Hooks, hook):
            mask |= event.bit
    return mask


def describe_mask(mask: int) -> str:
    """The event names of `mask`, for messages."""
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
            f"event subscription: configure() asked for {describe_mask(extra)} "
            f"({extra:#x}), which have no hook; expected a subset of the implemented events "
            f"{describe_mask(implemented)} ({implemented:#x})"
        )
    mask = wanted & valid
    dropped = wanted & ~valid
    if not mask:
        raise ValueError(
            f"event subscription: the runtime accepts none of the subscribed events "
            f"{describe_mask(wanted)} ({wanted:#x}); it accepts only {valid:#x}"
        )
    return mask, dropped


def build_updates(
    what: str, items: Iterable[api.ContainerUpdate | Update] | None
) -> list[api.ContainerUpdate]:
    """`items` as messages (builders built); `what` names the source in errors."""
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


class Dispatcher:
    """Serves the Plugin service: decodes a request, calls the hook, encodes the response."""

    def __init__(self, *, hooks: Hooks, owner: Plugged, link: Connection) -> None:
        self._plugin = hooks
        self._plugged = owner
        self._link = link
        own: dict[str, _Handler] = {
            "Configure": self._on_configure,
            "Synchronize": self._on_synchronize,
            "Shutdown": self._on_shutdown,
            "StateChange": self._on_state_change,
            "CreateContainer": self._on_create_container,
            "UpdateContainer": self._on_update_container,
            "StopContainer": self._on_stop_container,
            "UpdatePodSandbox": self._on_update_pod_sandbox,
            "ValidateContainerAdjustment": self._on_validate,
        }
        shared = (Shape.POD_EVENT, Shape.CONTAINER_EVENT)
        needed = {r.method for r in PLUGIN_RPCS if r.shape not in shared}
        if set(own) != needed:
            raise RuntimeError(
                f"nri_api dispatch: expected a handler for each of {sorted(needed)}, "
                f"found handlers for {sorted(own)}"
            )
        # with each method its event's subscription bit (0: none), worked out once
        # (`Event.bit` is an enum property: 0.5 us a request)
        self._methods: dict[str, tuple[RPC, _Handler, int]] = {
            r.method: (
                r,
                self._simple_handler(r) if r.shape in shared else own[r.method],
                0 if r.event is None else r.event.bit,
            )
            for r in PLUGIN_RPCS
        }

    def _session(self) -> Session:
        session = self._link.session
        assert session is not None
        return session

    async def dispatch(
        self, service: str, method: str, payload: bytes, deadline: float | None
    ) -> bytes:
        """Answer one request (a `nri_api.transport.Handler`)."""
        if service != api.PLUGIN_SERVICE:
            raise RPCError(StatusCode.UNIMPLEMENTED, f"service {service}")
        entry = self._methods.get(method)
        if entry is None:
            raise RPCError(StatusCode.UNIMPLEMENTED, f"method {method}")
        rpc, handler, bit = entry
        if bit and not self._plugged.implemented_events & bit:
            raise RPCError(
                StatusCode.UNIMPLEMENTED,
                f"method {method}: plugin {self._plugged.full_name} has no {rpc.hook}() hook",
            )
        try:
            request = rpc.request.FromString(payload)
        except DecodeError as exc:
            raise RPCError(
                StatusCode.INTERNAL,
                f"method {method}: cannot decode {rpc.request.__name__}: {exc}",
            ) from exc
        gate = self._link.gate
        entered = gate.enter()
        try:
            reply = await handler(request)
        except RPCError:
            raise
        except Exception as exc:
            self._plugged.log.exception("plugin %s: %s failed", self._plugged.full_name, method)
            raise RPCError(StatusCode.UNKNOWN, str(exc) or type(exc).__name__) from exc
        finally:
            gate.leave(entered)
        return reply.SerializeToString()

    async def _on_configure(self, request: api.ConfigureRequest) -> api.ConfigureResponse:
        session = self._session()
        session.refuse_second_configure(request)
        log, full_name = self._plugged.log, self._plugged.full_name
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
        log.info(
            "plugin %s: configuring for %s %s (%s)",
            full_name,
            runtime.name,
            runtime.version,
            inferred.detail,
        )
        requested = await maybe_await(self._plugin.configure(request.config, runtime))
        if requested is not None and not isinstance(requested, int):
            requested = event_mask(requested)
        valid = valid_events_mask(nri_version)
        mask, dropped = subscription_mask(
            implemented=self._plugged.implemented_events, requested=requested, valid=valid
        )
        if dropped:
            log.warning(
                "plugin %s: runtime %s %s (NRI %s) does not know the events %s; not subscribed",
                full_name,
                runtime.name,
                runtime.version,
                nri_version,
                describe_mask(dropped),
            )
        session.events = mask
        log.info("plugin %s: subscribing to %s (%#x)", full_name, describe_mask(mask), mask)
        return api.ConfigureResponse(events=mask)

    async def _on_synchronize(self, request: api.SynchronizeRequest) -> api.SynchronizeResponse:
        session = self._session()
        complete = await session.buffer_sync(request)
        if complete is None:
            return api.SynchronizeResponse(more=True)
        updates = await maybe_await(self._plugin.synchronize(*complete))
        reply = api.SynchronizeResponse(update=build_updates("synchronize result", updates))
        session.synchronized = True
        return reply

    async def _on_shutdown(self, request: api.Empty) -> api.Empty:
        await maybe_await(self._plugin.shutdown())
        return api.Empty()

    async def _on_state_change(self, request: api.StateChangeEvent) -> api.Empty:
        log, full_name = self._plugged.log, self._plugged.full_name
        try:
            event = Event(request.event)
        except ValueError:
            log.debug("plugin %s: ignoring unknown StateChange event %d", full_name, request.event)
            return api.Empty()
        if event not in SIMPLE_EVENTS:
            log.debug("plugin %s: ignoring StateChange for %s", full_name, event.name)
            return api.Empty()
        if not self._plugged.implemented_events & event.bit:
            log.debug("plugin %s: no hook for StateChange %s", full_name, event.name)
            return api.Empty()
        await self._call_simple(event, request.pod, request.container)
        return api.Empty()

    async def _call_simple(
        self, event: Event, pod: api.PodSandbox, container: api.Container | None
    ) -> None:
        hook = getattr(self._plugin, EVENT_HOOKS[event])
        if event in POD_EVENTS:
            await maybe_await(hook(pod))
        else:
            await maybe_await(hook(pod, container))

    def _simple_handler(self, rpc: RPC) -> _Handler:
        """The handler of a pod or container event: the hook, then an empty response."""
        event, response_type = rpc.event, rpc.response
        assert event is not None
        with_container = rpc.shape is Shape.CONTAINER_EVENT

        async def handle(request: Any) -> Message:
            await self._call_simple(
                event, request.pod, request.container if with_container else None
            )
            return response_type()

        return handle

    async def _on_create_container(
        self, request: api.CreateContainerRequest
    ) -> api.CreateContainerResponse:
        result = await maybe_await(self._plugin.create_container(request.pod, request.container))
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
                adjust=_adjustment(adjust),
                update=build_updates("create_container updates", updates),
            )
        return api.CreateContainerResponse(adjust=_adjustment(result))

    async def _on_update_container(
        self, request: api.UpdateContainerRequest
    ) -> api.UpdateContainerResponse:
        result = await maybe_await(
            self._plugin.update_container(request.pod, request.container, request.linux_resources)
        )
        if isinstance(result, api.UpdateContainerResponse):
            return result
        return api.UpdateContainerResponse(update=build_updates("update_container result", result))

    async def _on_stop_container(
        self, request: api.StopContainerRequest
    ) -> api.StopContainerResponse:
        result = await maybe_await(self._plugin.stop_container(request.pod, request.container))
        if isinstance(result, api.StopContainerResponse):
            return result
        return api.StopContainerResponse(update=build_updates("stop_container result", result))

    async def _on_update_pod_sandbox(
        self, request: api.UpdatePodSandboxRequest
    ) -> api.UpdatePodSandboxResponse:
        await maybe_await(
            self._plugin.update_pod_sandbox(
                request.pod, request.overhead_linux_resources, request.linux_resources
            )
        )
        return api.UpdatePodSandboxResponse()

    async def _on_validate(
        self, request: api.ValidateContainerAdjustmentRequest
    ) -> api.ValidateContainerAdjustmentResponse:
        try:
            result = await maybe_await(self._plugin.validate_container_adjustment(request))
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
