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
were a tenth of a restart's Synchronize.

Given `defer` (the daemon's event loop's ``call_soon``, as for the placement records:
`nri_resmgr.runtime.record_store`), every line of this log is queued and written after
the step that sends the reply, by one `flush`: a decision's line, its consequences' and
a rebuild's.  The decision line was 6 % of the daemon's busy time in a creation (issue
25, ``create-1000``), spent before the reply.  The queue keeps the lines in the order
they were made, so each container's lines stay in order; `flush` (the pipeline's close
or replacement) writes what is queued.  The containers and assignments are immutable
and the moved containers are named when the line is queued: a line written later says
what it would have said then.  Without `defer` (tests, the simulator) each line is
written at once.  Lines of other logs (the daemon's, the pipeline's own warnings) are
not queued: one written before the flush comes before the lines queued then.

The log only reads what it is given (the assignments, and the live containers to name
the moved ones); it changes nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping

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
        #: puts every line off until the reply is sent, as the records' writes
        #: (`record_store.Defer`; None: written at once)
        self.defer = defer
        #: the writes queued, in order (one flush is put off while any are)
        self._pending: list[Callable[[], None]] = []

    def _write(self, write: Callable[[], None]) -> None:
        """`write` now (no `defer`), or queued behind the writes queued before it."""
        if self.defer is None:
            write()
            return
        self._pending.append(write)
        if len(self._pending) == 1:
            # queued before the flush is put off: a `defer` that runs it at once (the
            # daemon's outside a running loop, e.g. a configuration adopted at start-up)
            # must find it, or the queue stays non-empty and no flush is put off again
            self.defer(self.flush)

    def decision(
        self, event: str, container: ContainerInfo, a: Assignment | None, reason: str
    ) -> None:
        """The one info line of a decision about `container` (`a`: where it is now)."""
        self._write(functools.partial(self._rows, event, ((container, a, reason),)))

    def rebuilt(self, event: str, rows: Iterable[Row]) -> None:
        """`decision`'s line for each container of a rebuild, in order (module docstring:
        written now, or queued)."""
        self._write(functools.partial(self._rows, event, list(rows)))

    def flush(self) -> None:
        """Write the lines queued, in order (module docstring)."""
        pending, self._pending = self._pending, []
        for write in pending:
            write()

    def consequences(
        self,
        cause: ContainerInfo,
        updates: Iterable[Assignment],
        reason: str,
        *,
        containers: Mapping[ContainerID, ContainerInfo],
    ) -> None:
        """One info "updates" line with the count; one debug "update" line per moved
        container (named from `containers`, the live ones, now; by id if unknown)."""
        updates = list(updates)
        if not updates:
            return
        detail: list[tuple[str, Assignment]] = []
        if self.component is None or enabled_for("debug", self.component):
            for u in updates:
                c = containers.get(u.container_id)
                detail.append((_name(c) if c is not None else u.container_id, u))
        self._write(functools.partial(self._moved, cause, len(updates), reason, detail))

    def _rows(self, event: str, rows: Iterable[Row]) -> None:
        for container, a, reason in rows:
            self._line(event, name=_name(container), cid=container.id, a=a, reason=reason)

    def _moved(
        self, cause: ContainerInfo, count: int, reason: str, detail: list[tuple[str, Assignment]]
    ) -> None:
        self.log.info("updates", cause=cause.pretty, count=count, reason=reason)
        why = f"consequence of {cause.pretty}: {reason}"
        for name, u in detail:
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
