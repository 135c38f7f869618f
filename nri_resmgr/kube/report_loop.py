"""The node report's task: soon after every decision, never in the way of one.

Theory of operation: `ReportLoop.run` looks at the daemon every `poll` seconds through
`seen()`, a tuple of cheap identities (the pipeline object, its state value, its pods):
a decision replaces the state value, a reconfiguration the pipeline, a new or removed
pod sandbox the pods.  When one changed, or `interval` seconds passed, it waits until
the `ReportManager` may write again (`due_in`: writes are at least `min_interval` apart,
and whatever changes meanwhile is taken in by the write that follows), captures what the
report needs with `capture()` on the event loop, between events (the pipeline's frozen
state value and a list of its containers and pods: the pipeline is only ever changed
there, so the capture is consistent, and it costs a list copy), and then, in a thread,
reads the policy's `NodeUse` from the capture and builds, compares and writes the object
(`ReportManager.cycle`: one request at most, none when the object is unchanged).  A
decision is therefore in the report within ``poll + min_interval`` seconds (plus the API
request), and a burst of decisions makes one write.  A failed write is retried after a
second, or `interval` if shorter.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from nri_resmgr.kube.client import KubeError
from nri_resmgr.kube.nrt import NodeUse
from nri_resmgr.kube.policy_view import read_node_use
from nri_resmgr.kube.report import ReportManager

__all__ = ["DEFAULT_POLL", "ReportLoop", "capture_plugin_use", "plugin_seen"]

#: seconds between two looks at the daemon's pipeline
DEFAULT_POLL = 0.2

Seen = tuple[object, object, frozenset[object]]


def capture_plugin_use(plugin: Any) -> Callable[[], NodeUse]:
    """What the `NodeUse` of the daemon `plugin` (a `ResmgrPlugin`) is read from, taken
    now (on the event loop): call the result in any thread to read it."""
    p = plugin.pipeline
    topology, policy, state = plugin.topology, p.policy, p.state
    containers, pods = p.snapshot(), list(p.pods.values())
    return partial(read_node_use, topology, policy, state, containers, pods=pods)


def plugin_seen(plugin: Any) -> Seen:
    """What tells that the daemon `plugin` decided something: its pipeline, the pipeline's
    state value and the pods it knows."""
    p = plugin.pipeline
    return (p, p.state, frozenset(p.pods))


def _changed(now: Seen, before: Seen | None) -> bool:
    if before is None:
        return True
    return now[0] is not before[0] or now[1] is not before[1] or now[2] != before[2]


class ReportLoop:
    """The report task (module docstring)."""

    def __init__(
        self,
        *,
        capture: Callable[[], Callable[[], NodeUse]],
        seen: Callable[[], Seen],
        interval: float,
        poll: float = DEFAULT_POLL,
        log: Any,
    ) -> None:
        self.capture = capture
        self.seen = seen
        self.interval = interval
        self.poll = poll
        self.log = log
        self._use: NodeUse | None = None
        #: reports written (requests made), for tests and the log
        self.writes = 0

    def current_use(self) -> NodeUse:
        """The `NodeUse` read for the report being built (the reporters' source)."""
        if self._use is None:
            raise RuntimeError("node report: no NodeUse read yet; expected ReportLoop.run")
        return self._use

    def _cycle(self, manager: ReportManager, read: Callable[[], NodeUse]) -> bool:
        self._use = read()
        return manager.cycle()

    async def run(self, manager: ReportManager, stop: threading.Event) -> None:
        loop = asyncio.get_running_loop()
        before: Seen | None = None
        refresh = 0.0
        while not stop.is_set():
            now = self.seen()
            if _changed(now, before) or loop.time() >= refresh:
                wait = manager.due_in()
                if wait > 0:
                    await asyncio.sleep(wait)  # look again: later changes join this write
                    continue
                before, refresh = now, loop.time() + self.interval
                read = self.capture()
                try:
                    if await asyncio.to_thread(self._cycle, manager, read):
                        self.writes += 1
                except KubeError as exc:
                    self.log.warning("node report not written", error=str(exc))
                    refresh = loop.time() + min(self.interval, 1.0)
            await asyncio.sleep(self.poll)
