"""Writes that wait until an event's reply has been sent.

Theory of operation: the daemon answers an event by returning from its handler; the stub
writes the reply in the same turn of the event loop, so a callable given to ``call_soon``
during the handler runs in the next turn, after the write began.  What the runtime does
not need before the reply goes there: the placement records (`record_store`), the
decision lines (`decision_log`), the issue-27 decision note, and the collector's return
(`ops.collector.handling`).  A creation queues four; they share one ``call_soon`` and run
in the order queued (issue 25, create-1000: each ``call_soon`` is a handle the loop
allocates and runs).  One that fails goes to the loop's exception handler, as it would
from its own ``call_soon``, and the rest still run.  A write queued by a write runs a
turn later.  Outside a running loop (a synchronous caller, such as the Kubernetes side
adopting a configuration before the loop serves) a write runs at once: nothing would
ever run a deferred one.

A reply the socket does not take whole in that turn is not sent yet: a Synchronize's
reply with an update per container is about 150 bytes a container, so at 10,000
containers 1.5 MB against the socket's 208 KiB, and the rest leaves only as the runtime
reads it, in later turns of the loop.  Writes run in the next turn would hold that rest
back for as long as they take (the records and decision lines of 10,000 containers,
about half a second), and the runtime waits for it: that was a fifth of a 10,000
Synchronize's wall clock in the Go runtime, and why it grew 13x for 10x the containers
(issue 25, `bench.scale`).  So when the turn comes and the `Output` (the stub: the
connection's trunk) is still writing, the writes wait until it has written everything
begun before (`Output.written`), in a task made only then; a small reply, which the
kernel takes at once, leaves nothing to wait for and costs no task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

__all__ = ["AfterReply", "Output"]


class Output(Protocol):
    """Where replies are written (`nri_api.stub.Plugin`, `nri_api.transport.Trunk`)."""

    @property
    def writing(self) -> bool:
        """True while a message is not yet taken whole by the kernel."""
        ...

    async def written(self) -> None:
        """Return once every message begun before has left whole, or failed."""
        ...


class AfterReply:
    """Called with a write; runs it after the reply (see the module docstring).  Without
    an `output`, the next turn of the loop is taken as "after the reply"."""

    __slots__ = ("_output", "_sending", "_waiting")

    def __init__(self, output: Output | None = None) -> None:
        self._output = output
        self._waiting: list[Callable[[], None]] = []
        #: the task waiting for a large reply to leave, while there is one
        self._sending: asyncio.Task[None] | None = None

    def __call__(self, write: Callable[[], None]) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            write()
            return
        if not self._waiting and self._sending is None:
            loop.call_soon(self._run, loop)
        self._waiting.append(write)

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._output is not None and self._output.writing:
            self._sending = loop.create_task(self._when_written(loop, self._output))
            return
        waiting, self._waiting = self._waiting, []
        for write in waiting:
            try:
                write()
            except Exception as exc:
                failed = f"nri-resmgr: a write after the reply failed: {write!r}"
                loop.call_exception_handler({"message": failed, "exception": exc})

    async def _when_written(self, loop: asyncio.AbstractEventLoop, output: Output) -> None:
        try:
            await output.written()
        finally:
            self._sending = None
        self._run(loop)
