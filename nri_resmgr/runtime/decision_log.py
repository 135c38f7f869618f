"""The decision log: one structured line per decision, and the consequences it had.

Theory of operation
-------------------
Every event the pipeline commits is told in one info line (`DecisionLog.decision`) with
the same keys: the event, the container (``namespace/pod/container`` and its id), its
CPUs, memory nodes, CPU kind, pool, RDT and block I/O classes, and the policy's reason.
A decision that moves other containers adds one info ``updates`` line with their count
(`DecisionLog.consequences`) and, at debug level, one ``update`` line per moved
container, with the same keys and the reason ``consequence of <cause>: <reason>``.

A decision can move hundreds of containers: one info line each made the log the largest
part of a decision's cost (issue 17), so the per-container detail stays at debug, and is
not even built unless debug lines of the log's component are written (`enabled_for`:
structlog's lazy logger binds its context on every call, filtered or not).  A log handed
in without a component (a test's capture) filters for itself and gets every line.

The log only reads what it is given (the assignments, and the live containers to name
the moved ones); it changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from nri_resmgr.model import Assignment, ContainerID, ContainerInfo
from nri_resmgr.ops.logs import EventLog, enabled_for

__all__ = ["DecisionLog"]


def _name(container: ContainerInfo) -> str:
    return f"{container.pod.namespace}/{container.pod.name}/{container.name}"


class DecisionLog:
    """Writes the decision lines (module docstring) to `log`."""

    def __init__(self, log: EventLog, *, component: str | None = None) -> None:
        self.log = log
        #: the component `log` is bound to, whose level decides whether the debug detail
        #: is built (None: always built; `log` filters)
        self.component = component

    def decision(
        self, event: str, container: ContainerInfo, a: Assignment | None, reason: str
    ) -> None:
        """The one info line of a decision about `container` (`a`: where it is now)."""
        self._line(event, name=_name(container), cid=container.id, a=a, reason=reason)

    def consequences(
        self,
        cause: ContainerInfo,
        updates: Iterable[Assignment],
        reason: str,
        *,
        containers: Mapping[ContainerID, ContainerInfo],
    ) -> None:
        """One info "updates" line with the count; one debug "update" line per moved
        container (named from `containers`, the live ones; by id if unknown)."""
        updates = list(updates)
        if not updates:
            return
        why = f"consequence of {cause.pretty}: {reason}"
        self.log.info("updates", cause=cause.pretty, count=len(updates), reason=reason)
        if self.component is not None and not enabled_for("debug", self.component):
            return
        for u in updates:
            c = containers.get(u.container_id)
            name = _name(c) if c is not None else u.container_id
            self._line("update", name=name, cid=u.container_id, a=u, reason=why, debug=True)

    def _line(
        self,
        event: str,
        *,
        name: str,
        cid: str,
        a: Assignment | None,
        reason: str,
        debug: bool = False,
    ) -> None:
        """The one structured line: container, CPUs, memory, classes, reason (`debug`:
        at debug level, the per-update detail lines)."""
        emit = self.log.debug if debug else self.log.info
        emit(
            event,
            container=name,
            id=cid,
            cpus=str(a.cpus) if a is not None else "",
            mems=str(a.mems) if a is not None else "",
            kind=str(a.kind) if a is not None else "",
            pool=a.pool if a is not None else "",
            rdt=a.rdt_class if a is not None else None,
            blockio=a.blockio_class if a is not None else None,
            reason=reason,
        )
