"""Work bounds: how many calls a piece of code makes, not how long it takes.

A test bounding wall-clock time fails on a loaded machine and lets a blow-up pass on a
fast one.  `counting_calls` counts instead the function calls made inside its block,
Python functions and the C functions they call alike (`sys.setprofile`'s ``call`` and
``c_call`` events): a count that is the same on every machine at every load, and that
grows with the work done, so an input that makes a parser loop, recurse or expand
(YAML aliases repeating to millions of values) shows as a count far beyond the bound a
test sets, typically linear in the input's size.  With a ``limit`` the block is stopped
at the first call beyond it by `WorkBoundExceeded`, a `BaseException` so that the
``except Exception`` of the code under test does not swallow it: a blow-up fails the
test at once instead of running for minutes.  Only the calling thread is counted.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType


class WorkBoundExceeded(BaseException):
    """The block made more calls than its limit."""


@dataclass(slots=True)
class Calls:
    """The calls counted so far in a `counting_calls` block."""

    count: int = 0


@contextmanager
def counting_calls(*, limit: int | None = None, what: str = "the block") -> Iterator[Calls]:
    """Count the calls made in the block, stopping it past `limit` (`what` names it in
    the error); the profiler in place before is put back."""
    calls = Calls()
    before = sys.getprofile()

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event in ("call", "c_call"):
            calls.count += 1
            if limit is not None and calls.count > limit:
                sys.setprofile(before)
                raise WorkBoundExceeded(f"{what}: expected at most {limit} calls, made more")

    sys.setprofile(profile)
    try:
        yield calls
    finally:
        sys.setprofile(before)
