"""Waiting for something another process or task makes true: polling, never a timing
assertion.

`wait_for(probe, what=...)` calls `probe` until it returns something truthy and returns
that; a probe that raises `OSError`, `LookupError` or `AssertionError` (a file, a table
entry or a state not there yet) is tried again.  When `timeout` runs out the test fails
with `what` and the last value or error seen.  `wait_until` is the same for a test on
the event loop: it sleeps with `asyncio.sleep`, so the tasks it waits for run meanwhile.
The timeouts bound a wait for something that should happen; they measure nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["RETRIED", "wait_for", "wait_until"]

T = TypeVar("T")

#: what a probe may raise and be tried again for (what it reads is not there yet)
RETRIED: tuple[type[Exception], ...] = (OSError, LookupError, AssertionError)


class _Probe(Generic[T]):
    """One probe, called again and again; remembers the last value or error seen."""

    def __init__(self, probe: Callable[[], T | None]) -> None:
        self.probe = probe
        self.last: object = None

    def truthy(self) -> T | None:
        """The probe's value if truthy, else None (a retried error counts as not yet)."""
        try:
            value = self.probe()
        except RETRIED as exc:
            self.last = exc
            return None
        self.last = value
        return value if value else None

    def timed_out(self, what: str, timeout: float) -> AssertionError:
        return AssertionError(f"timed out after {timeout} s waiting for {what}; last {self.last!r}")


def wait_for(
    probe: Callable[[], T | None], *, what: str, timeout: float = 30.0, interval: float = 0.2
) -> T:
    """Poll `probe()` until it returns something truthy; fail naming `what` otherwise."""
    deadline = time.monotonic() + timeout
    poll = _Probe(probe)
    while (value := poll.truthy()) is None:
        if time.monotonic() > deadline:
            raise poll.timed_out(what, timeout)
        time.sleep(interval)
    return value


async def wait_until(
    probe: Callable[[], T | None], *, what: str, timeout: float = 30.0, interval: float = 0.05
) -> T:
    """`wait_for` on the event loop: the awaited tasks run between the probes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    poll = _Probe(probe)
    while (value := poll.truthy()) is None:
        if loop.time() > deadline:
            raise poll.timed_out(what, timeout)
        await asyncio.sleep(interval)
    return value
