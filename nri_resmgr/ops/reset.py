"""Undo the pinning: which containers `nri-resmgr reset` sends back to the full set.

Theory of operation
-------------------
After nri-resmgr is removed from a node its decisions stay in force: exclusive containers
keep their CPUs, shared containers stay on a pool that shrank around them, memory stays
bound to the nodes it was bound to, until each container restarts.  `nri-resmgr reset`
(the shell in `nri_resmgr.commands.reset`) connects to the runtime as a short-lived NRI
plugin, receives Synchronize (every pod and every container), asks this module for a
plan, sends the plan's updates with UpdateContainers, and removes the resctrl groups the
daemon recorded as its own.

This module is the pure part: pods and containers (as the runtime reports them) and the
host's allowed sets (online CPUs and memory nodes, read by the shell) in, a `ResetPlan`
out.  No files, no sockets, no clock.

Which containers are reset: **every live container whose cpuset is narrower than the
allowed set**, in CPUs or in memory nodes.  The runtime does not record which plugin set
a cpuset, so "every container nri-resmgr pinned" cannot be told apart from a cpuset that
someone else set; in Kubernetes nobody else does, with one exception: the kubelet's own
CPU manager (``--cpu-manager-policy=static``), which is not meant to run beside a resource
policy plugin, and which reasserts its cpusets by itself (its reconcile loop calls
UpdateContainerResources every 10 s), so a reset costs it nothing lasting.  A pod spec
cannot set a cpuset.  Containers of other orchestrators (nerdctl ``--cpuset-cpus``) are
the one case where a user-chosen cpuset would be widened; `keep` lets the caller spare
containers by id.

* A container with no cpuset (``cpus`` and ``mems`` empty) runs on its parent cgroup's
  set, the full one: left alone (``already full``).
* A cpuset equal to or wider than the allowed set: left alone.  Wider happens when CPUs
  went offline; widening is not our business and narrowing would be.
* Both fields are always written together, the full CPUs and the full memory nodes, so
  the result does not depend on which of the two the daemon had set.
* Only live containers (created, running, paused) are updated; a stopped container has no
  cgroup to write and the runtime would refuse.
* A cpuset the runtime reports in a form that does not parse is reset too (it is not the
  full set, whatever it is), and the plan says so.

When the Helm chart's DaemonSet pod terminates, its reset container must tell an uninstall
(reset) from a restart (keep: the next daemon takes the containers over where they are).
`termination_verdict` decides from a GET of the DaemonSet at SIGTERM, compared with one
made at start-up:

* 404, a ``deletionTimestamp``, or another UID (deleted and created anew): removed.
  ``helm uninstall`` deletes the DaemonSet with background propagation, so it is already
  gone when the kubelet stops the pods; with foreground propagation it still exists but
  carries a ``deletionTimestamp``.
* the same object, not being deleted: a rolling update, a pod deletion, a drain: keep.
* 401 or 403 although the same request worked at start-up: ``helm uninstall`` deletes the
  release's ServiceAccount and RBAC objects right after the DaemonSet, usually before the
  pod is stopped, so the credentials failing now is itself the sign: removed.
* anything else (no answer, a server error, or credentials that never worked): cannot
  tell, keep, and say so.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nri_api import api
from nri_api.builders import Update
from nri_resmgr.model import ResmgrError
from nri_resmgr.topology.cpuset import CPUSet, IDSetError, NodeSet

__all__ = [
    "ContainerReset",
    "ResetError",
    "ResetPlan",
    "Verdict",
    "plan_reset",
    "termination_verdict",
]


class ResetError(ResmgrError):
    """The reset could not be done; the message says what and where."""


@dataclass(frozen=True, slots=True)
class ContainerReset:
    """One container of the plan: who it is, what it had, and why it is (not) reset."""

    container_id: str
    subject: str
    cpus: str
    mems: str
    reason: str


@dataclass(frozen=True, slots=True)
class ResetPlan:
    """What `plan_reset` decided; `updates` is what to send to the runtime."""

    cpus: CPUSet
    mems: NodeSet
    reset: tuple[ContainerReset, ...]
    kept: tuple[ContainerReset, ...]
    updates: tuple[api.ContainerUpdate, ...]


def _subject(pods: dict[str, api.PodSandbox], container: api.Container) -> str:
    pod = pods.get(container.pod_sandbox_id)
    where = (
        f"pod {pod.namespace}/{pod.name}"
        if pod is not None
        else (f"pod sandbox {container.pod_sandbox_id or '(none)'}")
    )
    return f"{where} container {container.name or container.id}"


def _narrower(text: str, allowed: CPUSet) -> tuple[bool, str]:
    """Whether the cpuset field `text` confines the container below `allowed`, and why."""
    if not text.strip():
        return False, "not set (runs on its parent's set)"
    try:
        current = CPUSet.parse(text)
    except IDSetError as exc:
        return True, f"unreadable ({exc})"
    missing = allowed - current
    if missing:
        return True, f"lacks {missing}"
    return False, "full"


def plan_reset(
    pods: Sequence[api.PodSandbox],
    containers: Sequence[api.Container],
    *,
    cpus: CPUSet,
    mems: NodeSet,
    keep: Collection[str] = (),
) -> ResetPlan:
    """The containers to send back to `cpus` / `mems` (module docstring: which and why).

    `keep` lists container ids to leave alone whatever their cpuset.  Raises ValueError
    for an empty `cpus` or `mems` (a reset to nothing would be a pinning of its own).
    """
    if not cpus:
        raise ValueError("reset: expected the host's online CPUs; found an empty set")
    if not mems:
        raise ValueError("reset: expected the host's memory nodes; found an empty set")
    by_id = {p.id: p for p in pods}
    reset: list[ContainerReset] = []
    kept: list[ContainerReset] = []
    updates: list[api.ContainerUpdate] = []
    for c in sorted(containers, key=lambda c: (c.pod_sandbox_id, c.name, c.id)):
        res = c.linux.resources if c.HasField("linux") and c.linux.HasField("resources") else None
        cur_cpus = res.cpu.cpus if res is not None and res.HasField("cpu") else ""
        cur_mems = res.cpu.mems if res is not None and res.HasField("cpu") else ""
        subject = _subject(by_id, c)
        if c.id in keep:
            kept.append(ContainerReset(c.id, subject, cur_cpus, cur_mems, "kept as asked"))
            continue
        if c.state not in api.LIVE_STATES:
            state = api.ContainerState.Name(c.state)
            kept.append(ContainerReset(c.id, subject, cur_cpus, cur_mems, f"not live ({state})"))
            continue
        cpus_narrow, cpus_why = _narrower(cur_cpus, cpus)
        mems_narrow, mems_why = _narrower(cur_mems, mems)
        reason = f"cpus {cpus_why}, mems {mems_why}"
        entry = ContainerReset(c.id, subject, cur_cpus, cur_mems, reason)
        if not (cpus_narrow or mems_narrow):
            kept.append(entry)
            continue
        reset.append(entry)
        updates.append(Update(c.id).set_cpuset(cpus).set_cpuset_mems(mems).build())
    return ResetPlan(
        cpus=cpus, mems=mems, reset=tuple(reset), kept=tuple(kept), updates=tuple(updates)
    )


class Verdict(enum.StrEnum):
    """What the reset container does at SIGTERM."""

    RESET = "reset"  # the DaemonSet is being removed: un-pin the node
    KEEP = "keep"  # a restart: the next daemon takes the containers over
    UNKNOWN = "unknown"  # cannot tell: touch nothing, and say so


def termination_verdict(
    *, started_uid: str | None, status: int, daemonset: Mapping[str, Any] | None
) -> tuple[Verdict, str]:
    """Reset or keep at SIGTERM, and why (module docstring).

    `started_uid` is the DaemonSet's UID read at start-up (None if that read failed);
    `status` the HTTP status of the read at SIGTERM (0: no answer), `daemonset` its body.
    """
    if status == 404:
        return Verdict.RESET, "the DaemonSet is gone (uninstalled)"
    if status in (401, 403):
        if started_uid is None:
            return Verdict.UNKNOWN, (
                f"cannot tell an uninstall from a restart: the API refused with {status} now "
                "and at start-up (RBAC for get daemonsets missing?)"
            )
        return Verdict.RESET, (
            f"the API refuses the credentials that worked at start-up ({status}): the "
            "release's ServiceAccount or RBAC are deleted (uninstalled)"
        )
    if status != 200 or daemonset is None:
        return (
            Verdict.UNKNOWN,
            f"cannot tell an uninstall from a restart: the API answered {status}",
        )
    meta = daemonset.get("metadata") or {}
    name = f"{meta.get('namespace', '?')}/{meta.get('name', '?')}"
    stamp = meta.get("deletionTimestamp")
    if stamp:
        return Verdict.RESET, f"DaemonSet {name} is being deleted (since {stamp})"
    if started_uid is not None and meta.get("uid") != started_uid:
        return (
            Verdict.RESET,
            f"DaemonSet {name} was deleted and created anew (uid {meta.get('uid')})",
        )
    return Verdict.KEEP, f"DaemonSet {name} still exists: a restart, not an uninstall"
