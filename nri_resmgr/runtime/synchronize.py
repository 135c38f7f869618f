"""Synchronize repair: the runtime's report of pods and containers, read into a view that
a rebuild can place, whatever the report holds.

Theory of operation
-------------------
At Synchronize (a fresh start or a reconnect) the runtime lists every pod sandbox and
container it has.  The pipeline throws its own view away and rebuilds from this list, so
the list must be read with one aim: **every running container is accounted for**.  The
rules, each of which a real report has needed:

* only containers that hold resources count (CREATED, PAUSED, RUNNING); a container
  listed twice counts once (the first is kept);
* a container of a pod that is not listed is skipped (it has no pod to be placed in);
* a pod whose sandbox cannot be read is read again from its first container's
  resources (its QoS class estimated from them), not dropped with its containers;
* a container whose init-container markers are unreadable is taken as an app container;
  one whose current cpuset cannot be read (ids past the largest accepted) as one whose
  CPUs are unknown, so that the policy places it and moves it off CPUs it gives others
  (`account_for`); only what no placement can do without (no id, no linux part) skips it;
* a container whose classes cannot be chosen keeps none;
* one container's input never fails the whole Synchronize: even an internal error is
  logged and that container skipped (the runtime would drop us, and every reconnect
  would fail the same way).

Each skip and each fallback is logged as a warning naming the container.  The result,
a `RuntimeView`, is what `Pipeline` rebuilds from; reading it changes nothing.  A live
reconfiguration, and a container that started unseen, rebuild instead from the
pipeline's own view (`as_placed`: every container where it is placed, with its classes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nri_api import api
from nri_resmgr.control.hooks import ClassChoice, ClassSelector
from nri_resmgr.limits import Limits
from nri_resmgr.model import (
    AnnotationError,
    Assignment,
    ContainerID,
    ContainerInfo,
    ContainerKind,
    CPUKind,
    Pod,
    PodID,
    ResmgrError,
)
from nri_resmgr.runtime import adapter

if TYPE_CHECKING:
    from nri_resmgr.ops.logs import EventLog

__all__ = ["RuntimeView", "account_for", "as_placed", "read_runtime_view"]


@dataclass(frozen=True, slots=True)
class RuntimeView:
    """The runtime's report as a rebuild takes it (module docstring)."""

    #: the pods, by id (those of accounted containers included)
    pods: dict[PodID, Pod]
    #: the accounted containers, in the report's order
    containers: list[ContainerInfo]
    #: the classes chosen for each accounted container
    choices: dict[ContainerID, ClassChoice]
    #: the containers reported as created but not started yet
    unstarted: frozenset[ContainerID]


def read_runtime_view(
    sandboxes: Sequence[api.PodSandbox],
    containers: Sequence[api.Container],
    *,
    select: ClassSelector,
    limits: Limits,
    log: EventLog,
) -> RuntimeView:
    """Read a Synchronize's pods and containers (module docstring: the rules)."""
    pods: dict[PodID, Pod] = {}
    by_id = {s.id: s for s in sandboxes}
    for s in sandboxes:
        try:
            pods[PodID(s.id)] = adapter.pod_from_nri(s)
        except ResmgrError as exc:
            log.warning("synchronize: pod skipped", pod=s.id, error=str(exc))
    infos: list[ContainerInfo] = []
    choices: dict[ContainerID, ClassChoice] = {}
    for c in containers:
        if c.state not in api.LIVE_STATES:
            continue
        if ContainerID(c.id) in choices:
            log.warning("synchronize: container listed twice; first kept", id=c.id)
            continue
        sandbox = by_id.get(c.pod_sandbox_id)
        if sandbox is None:
            log.warning(
                "synchronize: container of an unknown pod skipped",
                id=c.id,
                pod=c.pod_sandbox_id,
            )
            continue
        try:
            # the pod as the loop above made it; a pod of many containers (or of a
            # listed sandbox) is not parsed again per container
            pod = pods.get(PodID(sandbox.id)) or adapter.pod_from_nri(
                sandbox,
                fallback_resources=c.linux.resources if c.HasField("linux") else None,
            )
            pods.setdefault(pod.id, pod)
            info = account_for(pods[pod.id], c, limits=limits, log=log)
        except ResmgrError as exc:
            log.warning("synchronize: container skipped", id=c.id, error=str(exc))
            continue
        except Exception:
            # one container's input must never fail the whole Synchronize (the
            # runtime would drop us and every reconnect would fail the same way)
            log.exception("synchronize: container skipped: internal error", id=c.id)
            continue
        try:
            choices[info.id] = select(info)
        except ResmgrError as exc:
            log.warning("synchronize: classes not chosen", id=c.id, error=str(exc))
            choices[info.id] = ClassChoice()
        except Exception:
            log.exception("synchronize: classes not chosen: internal error", id=c.id)
            choices[info.id] = ClassChoice()
        infos.append(info)
    # (the enum's value looked up once: through protobuf's wrapper it is a Python call)
    created_state = api.ContainerState.CONTAINER_CREATED
    created = frozenset(ContainerID(c.id) for c in containers if c.state == created_state)
    return RuntimeView(pods=pods, containers=infos, choices=choices, unstarted=created)


def account_for(pod: Pod, c: api.Container, *, limits: Limits, log: EventLog) -> ContainerInfo:
    """The domain value of a running container reported at Synchronize.

    A running container must be accounted for whatever else its report says: with
    unreadable init-container annotations it is taken as an app container, and with
    an unreadable current cpuset (ids past the largest accepted) as one whose CPUs are
    unknown, so that the policy places it (and moves it off CPUs it gives others).
    Raises `ResmgrError` for what no placement can do without (no id, no linux part).
    """
    try:
        return adapter.container_from_nri(pod, c, limits=limits)
    except AnnotationError as exc:
        log.warning("synchronize: init marker unreadable", id=c.id, error=str(exc))
        return adapter.container_from_nri(pod, c, kind=ContainerKind.APP, limits=limits)
    except ResmgrError as exc:
        cpu = c.linux.resources.cpu if c.HasField("linux") else None
        if cpu is None or not (cpu.cpus or cpu.mems):
            raise
        log.warning(
            "synchronize: current cpuset unreadable; taken as unknown", id=c.id, error=str(exc)
        )
        blank = api.Container()
        blank.CopyFrom(c)
        blank.linux.resources.cpu.cpus = ""
        blank.linux.resources.cpu.mems = ""
        return account_for(pod, blank, limits=limits, log=log)


def as_placed(
    containers: Mapping[ContainerID, ContainerInfo], assignments: Mapping[ContainerID, Assignment]
) -> tuple[list[ContainerInfo], dict[ContainerID, ClassChoice]]:
    """Every known container as a rebuild sees it: where it is placed (its assignment's
    CPUs and memory as its current ones), with the classes it has (a running container's
    classes cannot change).  For a live reconfiguration and a container taken in."""
    infos: list[ContainerInfo] = []
    choices: dict[ContainerID, ClassChoice] = {}
    for cid, info in containers.items():
        a = assignments.get(cid)
        if a is not None and a.kind is not CPUKind.NONE and a.cpus:
            info = dataclasses.replace(
                info, current_cpus=a.cpus, current_mems=a.mems or info.current_mems
            )
        infos.append(info)
        choices[cid] = ClassChoice(a.rdt_class, a.blockio_class) if a is not None else ClassChoice()
    return infos, choices
