"""Writes that wait until an event's reply has been sent.

Theory of operation: the daemon answers an event by returning from its handler; the stub
sends the reply in the same turn of the event loop, so a callable given to ``call_soon``
during the handler runs in the next turn, after the send.  What the runtime does not need
before the reply goes there: the placement records (`record_store`), the decision lines
(`decision_log`), the issue-27 decision note, and the collector's return
(`ops.collector.handling`).  A creation queues four; they share one ``call_soon`` and run
in the order queued (issue 25, create-1000: each ``call_soon`` is a handle the loop
allocates and runs).  One that fails goes to the loop's exception handler, as it would
from its own ``call_soon``, and the rest still run.  A write queued by a write runs a
turn later.  Outside a running loop (a synchronous caller, such as the Kubernetes side
adopting a configuration before the loop serves) a write runs at once: nothing would
ever run a deferred one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["AfterReply"]


class AfterReply:
    """Called with a write; runs it after the reply (see the module docstring)."""

    __slots__ = ("_waiting",)

    def __init__(self) -> None:
        self._waiting: list[Callable[[], None]] = []

    def __call__(self, write: Callable[[], None]) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            write()
            return
        if not self._waiting:
            loop.call_soon(self._run, loop)
        self._waiting.append(write)

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        waiting, self._waiting = self._waiting, []
        for write in waiting:
            try:
                write()
            except Exception as exc:
                failed = f"nri-resmgr: a write after the reply failed: {write!r}"
                loop.call_exception_handler({"message": failed, "exception": exc})
