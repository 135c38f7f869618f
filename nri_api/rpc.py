"""The Plugin service's RPCs: one record per RPC, and every mapping derived from them.

Theory of operation
-------------------
The runtime calls a plugin through the ttrpc service ``nri.pkg.api.v1alpha1.Plugin``.
Each of its RPCs is one `RPC` record in `PLUGIN_RPCS`: the method name, the request and
response message types, the lifecycle event it delivers (if any), the plugin hook it
reaches and its `Shape`, which says how the stub's dispatch calls that hook:

* `Shape.LIFECYCLE`: not an event (Configure, Synchronize, Shutdown, and StateChange,
  the pre-v0.12 carrier of the simple events); always served, each by its own handler.
* `Shape.POD_EVENT`: ``hook(pod)``, nothing to return, an empty response.
* `Shape.CONTAINER_EVENT`: ``hook(pod, container)``, nothing to return, an empty response.
  Pod and container events are the "simple" events StateChange can also carry.
* `Shape.REPLY_EVENT`: an event whose hook takes other arguments or whose result makes
  up the response (CreateContainer, UpdateContainer, ...); each has its own handler.

Everything else (`BY_METHOD`, `HOOK_EVENTS`, `EVENT_HOOKS`, `POD_EVENTS`,
`CONTAINER_EVENTS`, ...) is computed from the table once, at import, and the table is
checked then (unique methods, events and hooks; an event exactly when the shape is not
lifecycle). A test compares the table with the service in the protobuf descriptor, so an
RPC added to the schema without a record fails it.

Everything here is pure: no I/O, no state.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from google.protobuf.message import Message

from nri_api import api
from nri_api.events import Event

__all__ = [
    "BY_METHOD",
    "CONTAINER_EVENTS",
    "EVENT_HOOKS",
    "EVENT_RPCS",
    "HOOK_EVENTS",
    "PLUGIN_RPCS",
    "POD_EVENTS",
    "RPC",
    "SIMPLE_EVENTS",
    "Shape",
    "check_table",
]


class Shape(enum.StrEnum):
    """How dispatch calls an RPC's hook and builds its response (see the module docstring)."""

    LIFECYCLE = "lifecycle"
    POD_EVENT = "pod event"
    CONTAINER_EVENT = "container event"
    REPLY_EVENT = "event with its own handler"


@dataclass(frozen=True, slots=True)
class RPC:
    """One RPC of the Plugin service."""

    method: str
    request: type[Message]
    response: type[Message]
    shape: Shape
    #: The hook it reaches; None for StateChange, which reaches the hook of its event.
    hook: str | None
    #: The lifecycle event it delivers (its subscription bit); None for lifecycle RPCs.
    event: Event | None = None


_L, _P, _C, _R = Shape.LIFECYCLE, Shape.POD_EVENT, Shape.CONTAINER_EVENT, Shape.REPLY_EVENT

#: Every RPC of the Plugin service, in the order of the schema.
PLUGIN_RPCS: Final[Sequence[RPC]] = (
    RPC("Configure", api.ConfigureRequest, api.ConfigureResponse, _L, "configure"),
    RPC("Synchronize", api.SynchronizeRequest, api.SynchronizeResponse, _L, "synchronize"),
    RPC("Shutdown", api.Empty, api.Empty, _L, "shutdown"),
    RPC(
        "RunPodSandbox",
        api.RunPodSandboxRequest,
        api.RunPodSandboxResponse,
        _P,
        "run_pod_sandbox",
        Event.RUN_POD_SANDBOX,
    ),
    RPC(
        "UpdatePodSandbox",
        api.UpdatePodSandboxRequest,
        api.UpdatePodSandboxResponse,
        _R,
        "update_pod_sandbox",
        Event.UPDATE_POD_SANDBOX,
    ),
    RPC(
        "PostUpdatePodSandbox",
        api.PostUpdatePodSandboxRequest,
        api.PostUpdatePodSandboxResponse,
        _P,
        "post_update_pod_sandbox",
        Event.POST_UPDATE_POD_SANDBOX,
    ),
    RPC(
        "StopPodSandbox",
        api.StopPodSandboxRequest,
        api.StopPodSandboxResponse,
        _P,
        "stop_pod_sandbox",
        Event.STOP_POD_SANDBOX,
    ),
    RPC(
        "RemovePodSandbox",
        api.RemovePodSandboxRequest,
        api.RemovePodSandboxResponse,
        _P,
        "remove_pod_sandbox",
        Event.REMOVE_POD_SANDBOX,
    ),
    RPC(
        "CreateContainer",
        api.CreateContainerRequest,
        api.CreateContainerResponse,
        _R,
        "create_container",
        Event.CREATE_CONTAINER,
    ),
    RPC(
        "PostCreateContainer",
        api.PostCreateContainerRequest,
        api.PostCreateContainerResponse,
        _C,
        "post_create_container",
        Event.POST_CREATE_CONTAINER,
    ),
    RPC(
        "StartContainer",
        api.StartContainerRequest,
        api.StartContainerResponse,
        _C,
        "start_container",
        Event.START_CONTAINER,
    ),
    RPC(
        "PostStartContainer",
        api.PostStartContainerRequest,
        api.PostStartContainerResponse,
        _C,
        "post_start_container",
        Event.POST_START_CONTAINER,
    ),
    RPC(
        "UpdateContainer",
        api.UpdateContainerRequest,
        api.UpdateContainerResponse,
        _R,
        "update_container",
        Event.UPDATE_CONTAINER,
    ),
    RPC(
        "PostUpdateContainer",
        api.PostUpdateContainerRequest,
        api.PostUpdateContainerResponse,
        _C,
        "post_update_container",
        Event.POST_UPDATE_CONTAINER,
    ),
    RPC(
        "StopContainer",
        api.StopContainerRequest,
        api.StopContainerResponse,
        _R,
        "stop_container",
        Event.STOP_CONTAINER,
    ),
    RPC(
        "RemoveContainer",
        api.RemoveContainerRequest,
        api.RemoveContainerResponse,
        _C,
        "remove_container",
        Event.REMOVE_CONTAINER,
    ),
    RPC("StateChange", api.StateChangeEvent, api.Empty, _L, None),
    RPC(
        "ValidateContainerAdjustment",
        api.ValidateContainerAdjustmentRequest,
        api.ValidateContainerAdjustmentResponse,
        _R,
        "validate_container_adjustment",
        Event.VALIDATE_CONTAINER_ADJUSTMENT,
    ),
)


def check_table(rpcs: Sequence[RPC]) -> None:
    """Raise ValueError unless methods, hooks and events are unique and events match shapes."""
    for field in ("method", "hook", "event"):
        values = [getattr(r, field) for r in rpcs if getattr(r, field) is not None]
        if dups := sorted({str(v) for v in values if values.count(v) > 1}):
            raise ValueError(f"Plugin RPC table: expected unique {field}s, found {dups} twice")
    for r in rpcs:
        if (r.event is None) != (r.shape is Shape.LIFECYCLE):
            raise ValueError(
                f"Plugin RPC {r.method}: expected an event exactly when the shape is not "
                f"{Shape.LIFECYCLE}, found shape {r.shape} with event {r.event!r}"
            )


check_table(PLUGIN_RPCS)

#: The RPCs by method name.
BY_METHOD: Final[Mapping[str, RPC]] = MappingProxyType({r.method: r for r in PLUGIN_RPCS})
#: The event RPCs by the event they deliver.
EVENT_RPCS: Final[Mapping[Event, RPC]] = MappingProxyType(
    {r.event: r for r in sorted(PLUGIN_RPCS, key=lambda r: r.event or 0) if r.event is not None}
)
#: Event hooks and the event each subscribes to, in event order.
HOOK_EVENTS: Final[Mapping[str, Event]] = MappingProxyType(
    {r.hook: event for event, r in EVENT_RPCS.items() if r.hook is not None}
)
#: The hook of each event.
EVENT_HOOKS: Final[Mapping[Event, str]] = MappingProxyType(
    {event: hook for hook, event in HOOK_EVENTS.items()}
)
#: Events delivered as ``hook(pod)``, and as ``hook(pod, container)``; nothing to return.
POD_EVENTS: Final = frozenset(e for e, r in EVENT_RPCS.items() if r.shape is Shape.POD_EVENT)
CONTAINER_EVENTS: Final = frozenset(
    e for e, r in EVENT_RPCS.items() if r.shape is Shape.CONTAINER_EVENT
)
#: The events StateChange can carry (pod and container events).
SIMPLE_EVENTS: Final = POD_EVENTS | CONTAINER_EVENTS
