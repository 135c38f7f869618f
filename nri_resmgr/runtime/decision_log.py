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

A rebuild (Synchronize, a reconfiguration, a container taken in) tells every container
in one line each, the same line as `decision` (`DecisionLog.rebuilt`): a thousand lines
were a tenth of a restart's Synchronize.  Given `defer` (the daemon's event loop's
``call_soon``, as for the placement records: `nri_resmgr.runtime.record_store`), those
lines are queued and written after the step that sends the reply; any other line of
this log writes what is queued first, and `flush` (the pipeline's close or
replacement) writes the rest, so the lines keep their order.  The containers and
assignments are immutable: a line written later says what it would have said then.

The log only reads what it is given (the assignments, and the live containers to name
the moved ones); it changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from nri_resmgr.model import Assignment, ContainerID, ContainerInfo
from nri_resmgr.ops.logs import EventLog, enabled_for
from nri_resmgr.runtime.record_store import Defer

__all__ = ["DecisionLog", "Row"]

#: one container of a rebuild: the container, where it is now, the reason
Row = tuple[ContainerInfo, Assignment | None, str]


def _name(container: ContainerInfo) -> str:
    return f"{container.pod.namespace}/{container.pod.name}/{container.name}"


class DecisionLog:
    """Writes the decision lines (module docstring) to `log`."""

    def __init__(
        self, log: EventLog, *, component: str | None = None, defer: Defer | None = None
    ) -> None:
        self.log = log
        #: the component `log` is bound to, whose level decides whether the debug detail
        #: is built (None: always built; `log` filters)
        self.component = component
        #: puts a rebuild's lines off until the reply is sent, as the records' writes
        #: (`record_store.Defer`; None: written at once)
        self.defer = defer
        #: the rebuilds' lines queued, in order (a flush is put off while any are)
        self._pending: list[tuple[str, list[Row]]] = []

    def decision(
        self, event: str, container: ContainerInfo, a: Assignment | None, reason: str
    ) -> None:
        """The one info line of a decision about `container` (`a`: where it is now)."""
        if self._pending:
            self.flush()
        self._line(event, name=_name(container), cid=container.id, a=a, reason=reason)

    def rebuilt(self, event: str, rows: Iterable[Row]) -> None:
        """`decision`'s line for each container of a rebuild, in order; written now, or
        queued for one write after the reply (module docstring)."""
        batch = list(rows)
        if self.defer is None:
            self._pending.append((event, batch))
            self.flush()
            return
        if not self._pending:
            self.defer(self.flush)
        self._pending.append((event, batch))

    def flush(self) -> None:
        """Write the rebuilds' lines queued (module docstring)."""
        pending, self._pending = self._pending, []
        for event, batch in pending:
            for container, a, reason in batch:
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
        if self._pending:
            self.flush()
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
